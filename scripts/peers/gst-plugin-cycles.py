#!/usr/bin/python3
"""A GStreamer application of our plugin's users: builds pcastsink and pcastsrc pipelines again
and again, takes them through their states and tears them down, and reports what the process
holds (threads, descriptors, resident memory) after a warm-up (cycle 20), at the start of the last 100 cycles and at the end, as one JSON line.

Every `full_every`-th cycle publishes for real (waits for pcast-stream-published) and plays the
stream back with pcastsrc (waits for its first video buffer); the others go to PLAYING and
straight back, so teardown also meets a session still connecting.

Usage: gst-plugin-cycles.py SERVER AUTH PUBLISH_TOKEN STREAM_TOKEN [CYCLES] [FULL_EVERY]
(python3-gi imports only in Debian's /usr/bin/python3.)
"""
import gc
import json
import os
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402


def holdings():
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {"threads": len(os.listdir("/proc/self/task")), "fds": len(os.listdir("/proc/self/fd")), "rssKB": rss}


def wait_for(bus, predicate, seconds):
    """Pops messages until one satisfies `predicate`; an error message ends the wait as a failure."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = bus.timed_pop(int(0.05 * Gst.SECOND))
        if message is None:
            continue
        if message.type == Gst.MessageType.ERROR:
            return "error: " + message.parse_error()[0].message
        if predicate(message):
            return True
    return False


def main():
    server, auth, publish, stream = sys.argv[1:5]
    cycles = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    full_every = int(sys.argv[6]) if len(sys.argv) > 6 else 10
    Gst.init(None)
    report = {"cycles": cycles, "published": 0, "played": 0, "failures": []}
    for cycle in range(cycles):
        full = cycle % full_every == 0
        sender = Gst.parse_launch(
            "videotestsrc is-live=true ! video/x-raw,width=160,height=120,framerate=15/1 ! pcastsink name=p "
            f"server={server} auth-token={auth} token={publish} tags=channelAlias:cycles")
        sender_bus = sender.get_bus()
        for state in (Gst.State.READY, Gst.State.PAUSED, Gst.State.PLAYING):
            sender.set_state(state)
        receiver = None
        if full:
            published = wait_for(sender_bus, lambda m: m.type == Gst.MessageType.ELEMENT
                                 and m.get_structure().get_name() == "pcast-stream-published", 15)
            if published is True:
                report["published"] += 1
                receiver = Gst.parse_launch(
                    f"pcastsrc name=s server={server} auth-token={auth} token={stream} "
                    "s.video ! fakesink name=v signal-handoffs=true")
                frames = []
                receiver.get_by_name("v").connect("handoff", lambda *args: frames.append(1))
                receiver.set_state(Gst.State.PLAYING)
                deadline = time.monotonic() + 15
                while not frames and time.monotonic() < deadline:
                    time.sleep(0.02)
                if frames:
                    report["played"] += 1
                else:
                    report["failures"].append(f"cycle {cycle}: pcastsrc showed no frame")
            else:
                report["failures"].append(f"cycle {cycle}: not published ({published})")
        else:
            time.sleep(0.03)
        # Back down through every state, receiver first.
        for pipeline in (receiver, sender):
            if pipeline is None:
                continue
            for state in (Gst.State.PAUSED, Gst.State.READY, Gst.State.NULL):
                pipeline.set_state(state)
        del sender, sender_bus, receiver
        gc.collect()
        if cycle == min(19, cycles - 1):
            report["warm"] = holdings()
        # The last 100 cycles are measured: before them the allocator is still settling (over 600
        # cycles: +9.6 MB by cycle 300, +0.5 MB over the 300 after).
        if cycle == max(0, cycles - 101):
            report["middle"] = holdings()
    report["end"] = holdings()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

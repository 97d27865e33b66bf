#!/usr/bin/python3
"""Glass-to-glass through our GStreamer elements, as a GStreamer application sees it: 1280×720
I420 frames stamped with a counter (the FrameStamp layout PCastKit's Swift benchmarks use: 8 × 4
blocks of 16 px at the top left, 24 bits of value and 8 of checksum in the luma) are pushed from an
appsrc into pcastsink, published through the platform, played by pcastsrc in the same process and
read back at an appsink (as it comes) and at a synchronised fakesink (after its clock wait: where a
display would show it). Latency: the stamp's arrival there minus its push, one clock.
Prints one JSON line: frames sent, frames read, latency percentiles in milliseconds.

Usage: gst-plugin-latency.py SERVER AUTH PUBLISH_TOKEN STREAM_TOKEN ALIAS SECONDS
(python3-gi imports only in Debian's /usr/bin/python3.)
"""
import json
import sys
import threading
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

WIDTH, HEIGHT, FPS = 1280, 720, 30
BLOCK, COLUMNS, ROWS = 16, 8, 4


def word(value):
    v = value & 0xFFFFFF
    check = ((v & 0xFF) + ((v >> 8) & 0xFF) + ((v >> 16) & 0xFF) + 0x5A) & 0xFF
    return v << 8 | check


def paint(frame, value):
    bits = word(value)
    for bit in range(32):
        level = 235 if (bits >> (31 - bit)) & 1 else 16
        x0, y0 = (bit % COLUMNS) * BLOCK, (bit // COLUMNS) * BLOCK
        for y in range(y0, y0 + BLOCK):
            start = y * WIDTH + x0
            frame[start:start + BLOCK] = bytes([level]) * BLOCK


def read(data, stride):
    bits = 0
    for bit in range(32):
        x0, y0 = (bit % COLUMNS) * BLOCK, (bit // COLUMNS) * BLOCK
        total = 0
        for y in range(y0 + 4, y0 + 12):
            start = y * stride + x0 + 4
            total += sum(data[start:start + 8])
        bits = bits << 1 | (1 if total // 64 > 125 else 0)
    value = bits >> 8
    return value if word(value) == bits else None


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


def main():
    server, auth, publish, stream, alias, seconds = sys.argv[1:7]
    seconds = float(seconds)
    Gst.init(None)
    sender = Gst.parse_launch(
        f"appsrc name=in is-live=true do-timestamp=true format=time "
        f"caps=video/x-raw,format=I420,width={WIDTH},height={HEIGHT},framerate={FPS}/1 "
        f"! pcastsink name=p server={server} auth-token={auth} token={publish} tags=channelAlias:{alias} video-bitrate=2500")
    pushed = {}
    arrived = {}
    shown = {}
    lock = threading.Lock()

    def note(buffer, caps, into):
        now = time.monotonic_ns()
        stride = (caps.get_value("width") + 3) // 4 * 4
        ok, info = buffer.map(Gst.MapFlags.READ)
        if ok:
            value = read(info.data, stride)
            buffer.unmap(info)
            if value is not None:
                with lock:
                    into.setdefault(value, now)

    def on_sample(sink):
        sample = sink.emit("pull-sample")
        note(sample.get_buffer(), sample.get_caps().get_structure(0), arrived)
        return Gst.FlowReturn.OK

    def on_handoff(sink, buffer, pad):
        # A synchronised sink hands a frame off after its clock wait: when a display would show it.
        caps = pad.get_current_caps()
        if caps is not None:
            note(buffer, caps.get_structure(0), shown)

    sender.set_state(Gst.State.PLAYING)
    bus = sender.get_bus()
    deadline = time.monotonic() + 15
    published = False
    source = sender.get_by_name("in")
    template = bytearray([128]) * (WIDTH * HEIGHT * 3 // 2)
    counter = 0
    interval = 1.0 / FPS
    next_push = time.monotonic()
    # Frames flow while the publish is set up (pcastsink drops them until it is published).
    while time.monotonic() < deadline and not published:
        message = bus.timed_pop(int(0.005 * Gst.SECOND))
        if message is not None and message.type == Gst.MessageType.ELEMENT and message.get_structure().get_name() == "pcast-stream-published":
            published = True
        if message is not None and message.type == Gst.MessageType.ERROR:
            print(json.dumps({"error": message.parse_error()[0].message}))
            return 2
        if time.monotonic() >= next_push:
            source.emit("push-buffer", Gst.Buffer.new_wrapped(bytes(template)))
            next_push += interval
    if not published:
        print(json.dumps({"error": "pcastsink did not publish"}))
        return 2
    receiver = Gst.parse_launch(
        f"pcastsrc name=s server={server} auth-token={auth} token={stream} "
        "s.video ! tee name=t "
        "t. ! queue ! appsink name=out sync=false emit-signals=true max-buffers=4 drop=true "
        "t. ! queue ! fakesink name=screen sync=true signal-handoffs=true")
    receiver.get_by_name("out").connect("new-sample", on_sample)
    receiver.get_by_name("screen").connect("handoff", on_handoff)
    receiver.set_state(Gst.State.PLAYING)
    start = time.monotonic()
    while time.monotonic() - start < seconds + 2:
        now = time.monotonic()
        if now < next_push:
            time.sleep(next_push - now)
        frame = bytearray(template)
        counter += 1
        paint(frame, counter)
        with lock:
            pushed[counter] = time.monotonic_ns()
        source.emit("push-buffer", Gst.Buffer.new_wrapped(bytes(frame)))
        next_push += interval
    receiver.set_state(Gst.State.NULL)
    sender.set_state(Gst.State.NULL)
    with lock:
        # The first second is the viewer's start (it waits for a keyframe): measured after it.
        first = min(arrived) if arrived else 0
        window = [value for value in pushed if value >= first + FPS and pushed[value] <= pushed[max(pushed)] - 2e9]
        latencies = [(arrived[value] - pushed[value]) / 1e6 for value in window if value in arrived]
        missing = len([value for value in window if value not in arrived])
        screen = [(shown[value] - pushed[value]) / 1e6 for value in window if value in shown]
    print(json.dumps({
        "frames": len(window), "read": len(latencies), "missing": missing,
        "p50": percentile(latencies, 0.5), "p90": percentile(latencies, 0.9), "p99": percentile(latencies, 0.99),
        "screenRead": len(screen), "screenP50": percentile(screen, 0.5), "screenP90": percentile(screen, 0.9),
        "screenP99": percentile(screen, 0.99),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

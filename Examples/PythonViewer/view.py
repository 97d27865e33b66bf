#!/usr/bin/python3
"""A Python GStreamer application that watches a PCast stream with our pcastsrc element.

pcastsrc subscribes with a stream token and hands the decoded video and audio to the rest of the
pipeline on its `video` and `audio` pads; here the video goes to an appsink that counts the frames
and reads their size, the audio to a fake sink. It stops after the frames asked for, when the
stream ends (EOS, after a pcast-stream-ended message) or on an error.

    GST_PLUGIN_PATH=/path/to/.build/release PCAST_SERVER=ws://127.0.0.1:8080/ws \\
    PCAST_AUTH_TOKEN=... PCAST_STREAM_TOKEN=... /usr/bin/python3 view.py [frames]

Exits 0 when it received the frames asked for (default 60), 1 otherwise.
Debian's python3-gi imports only in /usr/bin/python3.
"""
import os
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402


def main() -> int:
    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    try:
        server = os.environ["PCAST_SERVER"]
        auth = os.environ["PCAST_AUTH_TOKEN"]
        token = os.environ["PCAST_STREAM_TOKEN"]
    except KeyError as missing:
        print(f"error: set {missing.args[0]}", file=sys.stderr)
        return 2

    Gst.init(None)
    if Gst.ElementFactory.find("pcastsrc") is None:
        print("error: no pcastsrc element: set GST_PLUGIN_PATH to the folder of libgstpcast.so", file=sys.stderr)
        return 1
    pipeline = Gst.parse_launch(
        "pcastsrc name=source "
        "source.video ! videoconvert ! video/x-raw,format=I420 ! appsink name=frames emit-signals=true sync=false "
        "source.audio ! audioconvert ! fakesink sync=false"
    )
    source = pipeline.get_by_name("source")
    source.set_property("server", server)
    source.set_property("auth-token", auth)
    source.set_property("token", token)

    loop = GLib.MainLoop()
    seen = {"frames": 0, "size": None, "error": None}

    def on_sample(sink):
        sample = sink.emit("pull-sample")
        structure = sample.get_caps().get_structure(0)
        seen["size"] = (structure.get_value("width"), structure.get_value("height"))
        seen["frames"] += 1
        if seen["frames"] == wanted:
            GLib.idle_add(loop.quit)
        return Gst.FlowReturn.OK

    def on_message(_bus, message):
        if message.type == Gst.MessageType.ERROR:
            error, _debug = message.parse_error()
            seen["error"] = error.message
            loop.quit()
        elif message.type == Gst.MessageType.EOS:
            loop.quit()
        elif message.type == Gst.MessageType.ELEMENT and message.get_structure() is not None:
            # pcastsrc posts pcast-stream-ended (with the reason) before EOS.
            structure = message.get_structure()
            if structure.get_name().startswith("pcast-"):
                print(structure.to_string(), flush=True)

    pipeline.get_by_name("frames").connect("new-sample", on_sample)
    bus = pipeline.get_bus()
    bus.add_signal_watch()
    bus.connect("message", on_message)
    pipeline.set_state(Gst.State.PLAYING)
    try:
        loop.run()
    finally:
        pipeline.set_state(Gst.State.NULL)

    if seen["error"]:
        print(f"error: {seen['error']}", file=sys.stderr)
    width, height = seen["size"] or (0, 0)
    print(f"{seen['frames']} frames of {width}x{height}", flush=True)
    return 0 if seen["frames"] >= wanted else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""An RTMP encoder of another make: pushes synthetic video and AAC audio to an rtmp:// URL in
real time with PyAV's FFmpeg (PyPI `av`, installed with aiortc). FFmpeg 6.1 and later write
H.265 as enhanced RTMP ('hvc1' FourCC, ExVideoTagHeader); Debian 12's ffmpeg 5.1 cannot.

    rtmp-push.py URL SECONDS [ENCODER] [WIDTHxHEIGHT]
    rtmp-push.py rtmp://127.0.0.1:1935/live/TOKEN?name=show&type=record 10 libx265 640x360

30 fps, a keyframe a second, no B-frames; each frame's luma carries a moving bar so that the
encoder has motion to code. Prints "rtmp-push: sent N frames" and exits 0 once every frame was
sent; exits 1 when the connection or the publish fails (FFmpeg connects at the first frame; a
server's refusal is on stderr as "Server error: <its reason>"). PUSH_DEBUG=1 logs all of FFmpeg.
"""
import logging
import os
import sys
import time
import math
from array import array
from fractions import Fraction

import av


def main() -> int:
    url, seconds = sys.argv[1], float(sys.argv[2])
    encoder = sys.argv[3] if len(sys.argv) > 3 else "libx265"
    width, height = (int(v) for v in (sys.argv[4] if len(sys.argv) > 4 else "640x360").split("x"))
    rate = 30
    # FFmpeg's own messages ("Server error: <the server's reason>") to stderr; all of them with
    # PUSH_DEBUG set.
    level = av.logging.VERBOSE if "PUSH_DEBUG" in os.environ else av.logging.ERROR
    logging.basicConfig(level=logging.DEBUG if "PUSH_DEBUG" in os.environ else logging.ERROR, format="%(name)s: %(message)s")
    av.logging.set_level(level)
    av.logging.set_libav_level(level)
    try:
        output = av.open(url, mode="w", format="flv")
    except Exception as error:  # a URL FFmpeg cannot open
        print(f"rtmp-push: {error}", file=sys.stderr)
        return 1
    video = output.add_stream(encoder, rate=rate)
    video.width, video.height, video.pix_fmt = width, height, "yuv420p"
    video.bit_rate = 1_000_000
    if encoder == "libx265":
        video.options = {"preset": "ultrafast", "tune": "zerolatency", "x265-params": f"keyint={rate}:min-keyint={rate}:bframes=0:log-level=error"}
    elif encoder == "libsvtav1":
        video.options = {"preset": "12", "g": str(rate)}
    else:
        video.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(rate), "bf": "0"}
    audio = output.add_stream("aac", rate=44100)
    audio.layout = "stereo"
    start = time.monotonic()
    frames = int(seconds * rate)
    try:
        send(output, video, audio, frames, rate, width, height, start)
    except Exception as error:  # no connection, or the server ended the publish (its reason logged above)
        print(f"rtmp-push: {error}", file=sys.stderr)
        return 1
    print(f"rtmp-push: sent {frames} frames", flush=True)
    return 0


def send(output, video, audio, frames, rate, width, height, start):
    """The frames and their audio, paced to real time (no NumPy: plain bytes and arrays)."""
    samples_per_frame = 1024
    audio_pts = 0
    # A second of a 440 Hz tone, as 32-bit floats (the AAC encoder's planar float input).
    tone = array("f", (0.2 * math.sin(2 * math.pi * 440 * n / 44100) for n in range(44100)))
    for index in range(frames):
        frame = av.VideoFrame(width, height, "yuv420p")
        luma, blue, red = frame.planes
        bar = (index * 8) % (width - 16)
        row = b"\x3c" * bar + b"\xdc" * 16 + b"\x3c" * (luma.line_size - bar - 16)
        luma.update(row * luma.height)
        for chroma in (blue, red):
            chroma.update(b"\x80" * (chroma.line_size * chroma.height))
        frame.pts = index
        frame.time_base = Fraction(1, rate)
        for packet in video.encode(frame):
            output.mux(packet)
        # Audio up to this frame's time.
        while audio_pts < (index + 1) * 44100 // rate:
            sound = av.AudioFrame(format="fltp", layout="stereo", samples=samples_per_frame)
            offset = audio_pts % 44100
            chunk = (tone[offset:offset + samples_per_frame] + tone[:max(0, offset + samples_per_frame - 44100)]).tobytes()
            for plane in sound.planes:
                plane.update(chunk)
            sound.sample_rate = 44100
            sound.pts = audio_pts
            audio_pts += samples_per_frame
            for packet in audio.encode(sound):
                output.mux(packet)
        delay = start + (index + 1) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if index == 0:
            print("rtmp-push: sending", flush=True)
    for stream in (video, audio):
        for packet in stream.encode():
            output.mux(packet)
    output.close()


if __name__ == "__main__":
    sys.exit(main())

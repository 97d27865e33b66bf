#!/usr/bin/env python3
"""A WHIP publisher or WHEP viewer made of aiortc (PyPI): a third WebRTC stack that is not ours
(aioice for ICE, pyOpenSSL for DTLS, libsrtp through pylibsrtp, PyAV's x264 and Opus), for the
interop tests. Same interface and result file as webrtcbin-peer.py:

  aiortc-peer.py whip|whep URL TOKEN SECONDS RESULT.json

whip: sends 320x240 video (a moving bar) and a tone (Opus) for SECONDS, in the codec the relay keeps
     from aiortc's default offer (VP8 first, then H.264).
whep: receives for SECONDS, decodes, and counts the frames and audio frames decoded.
Then DELETEs the session's resource and writes RESULT.json:
  {"status": HTTP status of the POST, "location": ..., "answer": SDP, "error": text or null,
   "video_frames": n, "audio_buffers": n, "width": w, "height": h, "delete_status": n,
   "ice_state": ..., "connection_state": ..., "video_codec": ..., "srtp_profile": ...}
Exit status 3: aiortc is not installed (scripts/setup.sh installs it from PyPI).
"""
import asyncio
import fractions
import json
import math
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    import aioice.ice
    import av
    import numpy
    from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
    from aiortc.mediastreams import MediaStreamError
except Exception as error:  # noqa: BLE001 - any import failure means the peer is missing
    sys.stderr.write('cannot import aiortc (python3 -m pip install aiortc): %r\n' % (error,))
    sys.exit(3)

mode, url, token, seconds, result_path = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
result = {'status': 0, 'location': None, 'answer': None, 'error': None, 'video_frames': 0, 'audio_buffers': 0,
          'width': 0, 'height': 0, 'delete_status': 0, 'ice_state': None, 'connection_state': None,
          'video_codec': None, 'srtp_profile': None}

# aioice leaves 127.0.0.1 out of its host candidates; the tests talk to 127.0.0.0/8 alone, so
# gather on loopback only.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ['127.0.0.1']


def finish(code):
    with open(result_path + '.tmp', 'w') as f:
        json.dump(result, f)
    os.replace(result_path + '.tmp', result_path)
    sys.exit(code)


class MovingBar(MediaStreamTrack):
    """320x240 at 30 fps: a white bar crossing a grey picture, so every frame differs."""
    kind = 'video'

    def __init__(self):
        super().__init__()
        self.start = None
        self.count = 0

    async def recv(self):
        if self.start is None:
            self.start = time.time()
        target = self.start + self.count / 30
        delay = target - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        picture = numpy.full((240, 320, 3), 96, dtype=numpy.uint8)
        x = (self.count * 4) % 320
        picture[:, x:x + 16, :] = 255
        frame = av.VideoFrame.from_ndarray(picture, format='rgb24')
        frame.pts = self.count * 3000
        frame.time_base = fractions.Fraction(1, 90000)
        self.count += 1
        return frame


class Tone(MediaStreamTrack):
    """A 440 Hz tone in 20 ms frames at 48 kHz."""
    kind = 'audio'

    def __init__(self):
        super().__init__()
        self.start = None
        self.samples = 0

    async def recv(self):
        if self.start is None:
            self.start = time.time()
        target = self.start + self.samples / 48000
        delay = target - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        t = (numpy.arange(960) + self.samples) / 48000
        samples = (numpy.sin(2 * math.pi * 440 * t) * 8000).astype(numpy.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format='s16', layout='mono')
        frame.sample_rate = 48000
        frame.pts = self.samples
        frame.time_base = fractions.Fraction(1, 48000)
        self.samples += 960
        return frame


async def consume(track):
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if track.kind == 'video':
            result['video_frames'] += 1
            result['width'], result['height'] = frame.width, frame.height
        else:
            result['audio_buffers'] += 1


def http(request):
    """(status, headers, body) of a request; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode(errors='replace')


async def main():
    pc = RTCPeerConnection()
    consumers = []
    if mode == 'whip':
        pc.addTrack(MovingBar())
        pc.addTrack(Tone())
    else:
        pc.addTransceiver('video', direction='recvonly')
        pc.addTransceiver('audio', direction='recvonly')

        @pc.on('track')
        def on_track(track):
            consumers.append(asyncio.ensure_future(consume(track)))

    # aiortc gathers every candidate before it sets the local description: a WHIP offer without trickle.
    await pc.setLocalDescription(await pc.createOffer())
    request = urllib.request.Request(url, data=pc.localDescription.sdp.encode(), method='POST',
                                     headers={'Content-Type': 'application/sdp', 'Authorization': 'Bearer ' + token})
    try:
        status, headers, body = await asyncio.get_running_loop().run_in_executor(None, http, request)
    except Exception as error:  # noqa: BLE001
        result['error'] = 'POST failed: %r' % (error,)
        await pc.close()
        return 5
    result['status'] = status
    if status != 201:
        result['error'] = body
        await pc.close()
        return 0
    result['location'] = headers.get('Location')
    result['answer'] = body
    try:
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type='answer'))
    except Exception as error:  # noqa: BLE001 - aiortc refusing our answer is the finding
        result['error'] = 'aiortc refused the answer: %r' % (error,)

    await asyncio.sleep(seconds)
    result['ice_state'] = pc.iceConnectionState
    result['connection_state'] = pc.connectionState
    for transceiver in pc.getTransceivers():
        codecs = getattr(transceiver, '_codecs', None) or []
        if transceiver.kind == 'video' and codecs:
            result['video_codec'] = codecs[0].mimeType
        dtls = transceiver.receiver.transport if transceiver.receiver else None
        ssl = getattr(dtls, '_ssl', None) if dtls is not None else None
        if ssl is not None and result['srtp_profile'] is None:
            result['srtp_profile'] = ssl.get_selected_srtp_profile().decode() or None

    location = urllib.parse.urljoin(url, result['location'])
    delete = urllib.request.Request(location, method='DELETE', headers={'Authorization': 'Bearer ' + token})
    try:
        result['delete_status'], _, _ = await asyncio.get_running_loop().run_in_executor(None, http, delete)
    except Exception as error:  # noqa: BLE001
        result['error'] = (result['error'] or '') + ' DELETE failed: %r' % (error,)
    for consumer in consumers:
        consumer.cancel()
    await pc.close()
    return 0


finish(asyncio.run(main()))

#!/usr/bin/python3
"""A WHIP publisher or WHEP viewer made of GStreamer's webrtcbin: a WebRTC stack that is not ours,
for the interop tests. Run with Debian's /usr/bin/python3 (python3-gi imports only there); needs
gstreamer1.0-nice for webrtcbin's ICE and gir1.2-nice-0.1 to reach its agent.

  webrtcbin-peer.py whip|whep URL TOKEN SECONDS RESULT.json

whip: sends 320x240 H.264 constrained baseline (x264) and Opus from test sources for SECONDS.
whep: receives for SECONDS, decodes, and counts the frames and audio buffers decoded.
Then DELETEs the session's resource and writes RESULT.json:
  {"status": HTTP status of the POST, "location": ..., "answer": SDP, "error": text or null,
   "video_frames": n, "audio_buffers": n, "width": w, "height": h, "delete_status": n,
   "ice_state": ..., "connection_state": ...}
PCAST_PEER_FORGE_FINGERPRINT=1 in the environment: the offer announces a certificate fingerprint
that is not webrtcbin's (an attacker's offer).
Exit status 3: GStreamer's Python bindings or webrtcbin/libnice are missing.
"""
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    import gi
    gi.require_version('Gst', '1.0')
    gi.require_version('GstWebRTC', '1.0')
    gi.require_version('GstSdp', '1.0')
    gi.require_version('Nice', '0.1')
    from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice
except Exception as error:  # noqa: BLE001 - any import failure means the peer is missing
    sys.stderr.write('cannot import GStreamer or libnice through python3-gi (python3-gi, gir1.2-nice-0.1): %r\n' % (error,))
    sys.exit(3)

Gst.init(None)
if Gst.ElementFactory.find('webrtcbin') is None or Gst.ElementFactory.find('nicesrc') is None:
    sys.stderr.write('webrtcbin or libnice elements are missing (gstreamer1.0-plugins-bad, gstreamer1.0-nice)\n')
    sys.exit(3)

mode, url, token, seconds, result_path = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
result = {'status': 0, 'location': None, 'answer': None, 'error': None, 'video_frames': 0, 'audio_buffers': 0,
          'width': 0, 'height': 0, 'delete_status': 0, 'ice_state': None, 'connection_state': None}
lock = threading.Lock()


def finish(code):
    with open(result_path + '.tmp', 'w') as f:
        json.dump(result, f)
    os.replace(result_path + '.tmp', result_path)
    sys.exit(code)


def wait(promise):
    promise.wait()
    return promise.get_reply()


if mode == 'whip':
    pipe = Gst.parse_launch(
        'webrtcbin name=w bundle-policy=max-bundle '
        'videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 ! '
        'x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 ! video/x-h264,profile=constrained-baseline ! '
        'rtph264pay config-interval=-1 aggregate-mode=zero-latency ! '
        'application/x-rtp,media=video,encoding-name=H264,payload=102 ! w. '
        'audiotestsrc is-live=true wave=ticks ! opusenc ! rtpopuspay ! '
        'application/x-rtp,media=audio,encoding-name=OPUS,payload=111 ! w.')
    w = pipe.get_by_name('w')
else:
    pipe = Gst.Pipeline.new('viewer')
    w = Gst.ElementFactory.make('webrtcbin', 'w')
    w.set_property('bundle-policy', GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
    pipe.add(w)
    recv = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
    w.emit('add-transceiver', recv, Gst.Caps.from_string(
        'application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,'
        'packetization-mode=(string)1,profile-level-id=(string)42e01f'))
    w.emit('add-transceiver', recv, Gst.Caps.from_string(
        'application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,encoding-params=(string)2'))

    def on_decoded_pad(decodebin, pad):
        caps = pad.get_current_caps() or pad.query_caps(None)
        name = caps.get_structure(0).get_name()
        sink = Gst.ElementFactory.make('fakesink')
        sink.set_property('sync', False)
        pipe.add(sink)
        sink.sync_state_with_parent()
        pad.link(sink.get_static_pad('sink'))
        video = name.startswith('video')

        def count(pad, info):
            with lock:
                if video:
                    result['video_frames'] += 1
                    current = pad.get_current_caps()
                    if current is not None:
                        s = current.get_structure(0)
                        result['width'] = s.get_value('width')
                        result['height'] = s.get_value('height')
                else:
                    result['audio_buffers'] += 1
            return Gst.PadProbeReturn.OK
        sink.get_static_pad('sink').add_probe(Gst.PadProbeType.BUFFER, count)

    def on_incoming(element, pad):
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        decodebin = Gst.ElementFactory.make('decodebin')
        decodebin.connect('pad-added', on_decoded_pad)
        pipe.add(decodebin)
        decodebin.sync_state_with_parent()
        pad.link(decodebin.get_static_pad('sink'))
    w.connect('pad-added', on_incoming)

# libnice leaves the loopback interface out of its host candidates and pins each socket to its
# interface (IP_UNICAST_IF), so a check from eth0's address never reaches a relay bound to
# 127.0.0.1: gather on loopback only, as the tests talk to 127.0.0.0/8 alone. The agent is taken
# from webrtcbin's nicesrc when it appears (before gathering): webrtcbin 1.22's `ice-agent`
# property hands out a reference it does not own.
loopback = Nice.Address.new()
loopback.set_from_string('127.0.0.1')
agents = []


def on_element(_bin, _sub, element):
    factory = element.get_factory()
    if factory is not None and factory.get_name() in ('nicesrc', 'nicesink'):
        agent = element.get_property('agent')
        if agent is not None and all(a is not agent for a in agents):
            agents.append(agent)
            agent.add_local_address(loopback)
pipe.connect('deep-element-added', on_element)

loop = GLib.MainLoop()
bus = pipe.get_bus()
bus.add_signal_watch()


def on_error(_, message):
    error, debug = message.parse_error()
    result['error'] = '%s (%s)' % (error.message, debug)
    loop.quit()
bus.connect('message::error', on_error)

pipe.set_state(Gst.State.PLAYING)
if mode == 'whip':
    # The offer describes the caps on webrtcbin's pads: wait until the payloader has put the
    # profile and SSRC in them.
    deadline = time.time() + 10
    while time.time() < deadline:
        caps = w.get_static_pad('sink_0').get_current_caps()
        if caps is not None and caps.get_structure(0).has_field('profile-level-id'):
            break
        time.sleep(0.05)

p = Gst.Promise.new()
w.emit('create-offer', None, p)
reply = wait(p)
offer = reply.get_value('offer') if reply is not None and reply.has_field('offer') else None
if offer is None:
    result['error'] = 'webrtcbin made no offer'
    pipe.set_state(Gst.State.NULL)
    finish(4)
p = Gst.Promise.new()
w.emit('set-local-description', offer, p)
wait(p)

offer_text = offer.sdp.as_text()
if os.environ.get('PCAST_PEER_FORGE_FINGERPRINT'):
    # An attacker's offer: the certificate webrtcbin will present does not match this digest.
    offer_text = re.sub(r'a=fingerprint:sha-256 [0-9A-Fa-f:]+', 'a=fingerprint:sha-256 ' + ':'.join(['AB'] * 32), offer_text)
request = urllib.request.Request(url, data=offer_text.encode(), method='POST',
                                 headers={'Content-Type': 'application/sdp', 'Authorization': 'Bearer ' + token})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        result['status'] = response.status
        result['location'] = response.headers.get('Location')
        result['answer'] = response.read().decode()
except urllib.error.HTTPError as error:
    result['status'] = error.code
    result['error'] = error.read().decode(errors='replace')
    pipe.set_state(Gst.State.NULL)
    finish(0)
except Exception as error:  # noqa: BLE001
    result['error'] = 'POST failed: %r' % (error,)
    pipe.set_state(Gst.State.NULL)
    finish(5)

res, message = GstSdp.SDPMessage.new_from_text(result['answer'])
answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, message)
p = Gst.Promise.new()
w.emit('set-remote-description', answer, p)
reply = wait(p)
if reply is not None and reply.has_field('error'):
    result['error'] = 'webrtcbin refused the answer: %s' % reply.get_value('error')

GLib.timeout_add(int(seconds * 1000), loop.quit)
loop.run()
result['ice_state'] = w.get_property('ice-connection-state').value_nick
result['connection_state'] = w.get_property('connection-state').value_nick

if result['location']:
    location = urllib.parse.urljoin(url, result['location'])
    delete = urllib.request.Request(location, method='DELETE', headers={'Authorization': 'Bearer ' + token})
    try:
        with urllib.request.urlopen(delete, timeout=10) as response:
            result['delete_status'] = response.status
    except urllib.error.HTTPError as error:
        result['delete_status'] = error.code
    except Exception as error:  # noqa: BLE001
        result['error'] = (result['error'] or '') + ' DELETE failed: %r' % (error,)
pipe.set_state(Gst.State.NULL)
finish(0)

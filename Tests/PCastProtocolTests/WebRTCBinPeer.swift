import Foundation

/// GStreamer's `webrtcbin` (another WebRTC stack, driven from Python through GObject
/// introspection) as an independent peer for offers and answers. python3-gi imports only in
/// Debian's `/usr/bin/python3`; it and `gstreamer1.0-nice` missing fail the test.
enum WebRTCBinPeer {
    struct Case: Encodable {
        /// `offer`: make an offer; `apply`: make the same offer again, then apply `answer` to it.
        var mode: String
        /// `send` (a publisher: H.264 + Opus from test sources) or `recv` (a viewer: receive-only
        /// transceivers).
        var direction: String
        var answer: String?
    }

    struct Outcome: Decodable {
        var offer: String
        /// For `apply`: whether webrtcbin accepted the answer, why not, its signaling state, and
        /// the answer as webrtcbin's own SDP parser reads it back.
        var ok: Bool?
        var error: String?
        var state: String?
        var remote: String?
    }

    static let script = #"""
import sys, json
try:
    import gi
    gi.require_version('Gst', '1.0'); gi.require_version('GstWebRTC', '1.0'); gi.require_version('GstSdp', '1.0')
    from gi.repository import Gst, GstWebRTC, GstSdp, GLib
except Exception as e:
    sys.stderr.write("cannot import GStreamer through python3-gi: %r\n" % (e,))
    sys.exit(3)
Gst.init(None)
if Gst.ElementFactory.find('webrtcbin') is None or Gst.ElementFactory.find('nicesrc') is None:
    sys.stderr.write("webrtcbin or libnice's GStreamer elements are missing (gstreamer1.0-plugins-bad, gstreamer1.0-nice)\n")
    sys.exit(3)

def run(case):
    if case['direction'] == 'send':
        pipe = Gst.parse_launch(
            'webrtcbin name=w bundle-policy=max-bundle '
            'videotestsrc is-live=true ! video/x-raw,width=320,height=240 ! x264enc tune=zerolatency ! '
            'video/x-h264,profile=constrained-baseline ! rtph264pay config-interval=-1 ! '
            'application/x-rtp,media=video,encoding-name=H264,payload=102 ! w. '
            'audiotestsrc is-live=true ! opusenc ! rtpopuspay ! application/x-rtp,media=audio,encoding-name=OPUS,payload=111 ! w.')
        w = pipe.get_by_name('w')
    else:
        pipe = Gst.Pipeline.new('p')
        w = Gst.ElementFactory.make('webrtcbin', 'w')
        w.set_property('bundle-policy', GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        pipe.add(w)
        recv = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
        w.emit('add-transceiver', recv, Gst.Caps.from_string(
            'application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,packetization-mode=(string)1,profile-level-id=(string)42e01f'))
        w.emit('add-transceiver', recv, Gst.Caps.from_string(
            'application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000'))
    pipe.set_state(Gst.State.PLAYING)
    pipe.get_state(5 * Gst.SECOND)
    if case['direction'] == 'send':
        # The offer describes the caps on webrtcbin's pads: wait until the payloader has seen the
        # stream and put its profile in them (as on-negotiation-needed would).
        import time
        deadline = time.time() + 10
        while time.time() < deadline:
            caps = w.get_static_pad('sink_0').get_current_caps()
            if caps is not None and caps.get_structure(0).has_field('profile-level-id'):
                break
            time.sleep(0.05)
    def wait(promise):
        promise.wait()
        return promise.get_reply()
    p = Gst.Promise.new()
    w.emit('create-offer', None, p)
    reply = wait(p)
    offer = reply.get_value('offer') if reply is not None and reply.has_field('offer') else None
    if offer is None:
        sys.stderr.write('webrtcbin made no offer: %s\n' % (reply.to_string() if reply is not None else 'no reply'))
        sys.exit(4)
    p = Gst.Promise.new()
    w.emit('set-local-description', offer, p)
    wait(p)
    out = {'offer': offer.sdp.as_text()}
    if case['mode'] == 'apply':
        res, message = GstSdp.SDPMessage.new_from_text(case['answer'])
        if res != GstSdp.SDPResult.OK:
            out.update(ok=False, error='webrtcbin cannot parse the answer: %s' % res)
        else:
            answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, message)
            p = Gst.Promise.new()
            w.emit('set-remote-description', answer, p)
            reply = wait(p)
            error = reply.get_value('error') if reply is not None and reply.has_field('error') else None
            remote = w.get_property('current-remote-description')
            out.update(ok=error is None, error=str(error) if error is not None else None,
                       state=w.get_property('signaling-state').value_nick,
                       remote=remote.sdp.as_text() if remote is not None else None)
    pipe.set_state(Gst.State.NULL)
    return out

cases = json.load(sys.stdin)['cases']
json.dump([run(c) for c in cases], sys.stdout)
"""#

    private struct Request: Encodable { var cases: [Case] }

    static func run(_ cases: [Case]) throws -> [Outcome] {
        try PythonOracle.runScript(script, Request(cases: cases), package: "python3-gi, gstreamer1.0-nice", count: cases.count,
                                   python: "/usr/bin/python3")
    }

    static func offer(sending: Bool) throws -> String {
        try run([Case(mode: "offer", direction: sending ? "send" : "recv")])[0].offer
    }
}

import Foundation
import PCastProtocol
import Testing

/// Session descriptions and the relay's answers, against offers made by GStreamer's webrtcbin (an
/// independent WebRTC stack) and against offers the relay must refuse.
@Suite("SDP offers and the relay's answers (WHIP / WHEP negotiation)")
struct WebRTCNegotiationTests {
    static let local = ICECredentials(ufrag: "relayUfr", password: "relayPasswordRelayPassw0")
    static let fingerprint = (0..<32).map { String(format: "%02X", $0 * 7 % 256) }.joined(separator: ":")
    static let relay = STUNAddress(ipv4: "127.0.0.1", port: 7_000)!

    /// A browser-style offer, small enough to edit per test.
    static let browserOffer = """
        v=0\r
        o=- 4611731400430051336 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1\r
        a=extmap-allow-mixed\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111 0\r
        c=IN IP4 0.0.0.0\r
        a=ice-ufrag:Fq3x\r
        a=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N\r
        a=fingerprint:sha-256 \(fingerprint)\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r
        a=sendonly\r
        a=rtcp-mux\r
        a=rtpmap:111 opus/48000/2\r
        a=rtcp-fb:111 transport-cc\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        a=rtpmap:0 PCMU/8000\r
        a=ssrc:1001 cname:browser\r
        m=video 9 UDP/TLS/RTP/SAVPF 96 97 102\r
        c=IN IP4 0.0.0.0\r
        a=ice-ufrag:Fq3x\r
        a=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N\r
        a=fingerprint:sha-256 \(fingerprint)\r
        a=setup:actpass\r
        a=mid:1\r
        a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
        a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
        a=sendonly\r
        a=rtcp-mux\r
        a=rtcp-rsize\r
        a=rtpmap:96 VP8/90000\r
        a=rtpmap:97 rtx/90000\r
        a=fmtp:97 apt=96\r
        a=rtpmap:102 H264/90000\r
        a=rtcp-fb:102 goog-remb\r
        a=rtcp-fb:102 transport-cc\r
        a=rtcp-fb:102 ccm fir\r
        a=rtcp-fb:102 nack\r
        a=rtcp-fb:102 nack pli\r
        a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
        a=ssrc:2002 cname:browser\r

        """

    static func answer(_ text: String, as role: WebRTCNegotiation.Role = .publisher) throws(NegotiationError) -> WebRTCNegotiation.Result {
        let offer: SessionDescription
        do { offer = try SessionDescription(parsing: text) } catch { throw .malformed(error) }
        return try WebRTCNegotiation.answer(offer, as: role, local: local, fingerprint: fingerprint, candidates: [relay], sessionID: 1)
    }

    @Test("a browser-style publish offer: H.264 42e01f and Opus chosen by payload type, VP8 / RTX / PCMU / transport-cc left out, the answer ICE-lite, passive, receive-only, bundled")
    func browserPublish() throws {
        let result = try Self.answer(Self.browserOffer)
        #expect(result.media.map(\.mid) == ["0", "1"])
        #expect(result.media.map(\.codec.payloadType) == [111, 102])
        #expect(result.media[1].codec.feedback == ["nack", "nack pli", "ccm fir", "goog-remb"])
        #expect(result.media[0].remoteSSRCs == [1001] && result.media[1].remoteSSRCs == [2002])
        #expect(result.media[0].headerExtensions == [4: WebRTCNegotiation.sdesMid])
        #expect(result.media[1].headerExtensions == [2: WebRTCNegotiation.absSendTime])
        #expect(result.remote.iceUfrag == "Fq3x" && result.remote.fingerprint?.digest == Self.fingerprint)
        let text = result.answer.text
        #expect(text.hasPrefix("v=0\r\n") && text.hasSuffix("\r\n") && !text.contains("\n\n"))
        let answer = try SessionDescription(parsing: text)
        #expect(answer == result.answer, "the answer parses back to itself")
        #expect(answer.value("ice-lite") == nil && answer.attributes.contains(SDPAttribute("ice-lite")))
        #expect(answer.bundle == ["0", "1"])
        for section in answer.media {
            #expect(section.direction == .recvonly && section.value("setup") == "passive" && section.has("rtcp-mux"))
            #expect(section.value("ice-ufrag") == "relayUfr" && section.value("fingerprint") == "sha-256 \(Self.fingerprint)")
            #expect(section.values("candidate") == ["1 1 udp 2130706431 127.0.0.1 7000 typ host"])
            #expect(!section.values("rtcp-fb").contains { $0.contains("transport-cc") })
            #expect(!section.values("extmap").contains { $0.contains("transport-wide") })
        }
        #expect(answer.media[1].formats == ["102"] && answer.media[1].value("fmtp") == "102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f")
        #expect(answer.media[0].formats == ["111"] && answer.media[0].value("rtpmap") == "111 opus/48000/2")
    }

    @Test("a relay with an IPv4 and an IPv6 address announces both as host candidates, IPv4 first, the IPv6 one in hex groups")
    func dualStackCandidates() throws {
        var offer: SessionDescription
        do { offer = try SessionDescription(parsing: Self.browserOffer) } catch { throw NegotiationError.malformed(error) }
        let v6 = STUNAddress(address: [0xFD, 0x00, 0x50, 0x43, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], port: 7_000)
        let result = try WebRTCNegotiation.answer(offer, as: .publisher, local: Self.local, fingerprint: Self.fingerprint,
                                                  candidates: [Self.relay, v6], sessionID: 1)
        let answer = try SessionDescription(parsing: result.answer.text)
        let candidates = try #require(answer.media.first).values("candidate")
        #expect(candidates.count == 2)
        #expect(candidates.first == "1 1 udp 2130706431 127.0.0.1 7000 typ host")
        #expect(candidates.last?.hasSuffix(" fd00:5043:40:0:0:0:0:1 7000 typ host") == true, "\(candidates)")
        #expect(v6.description == "[fd00:5043:40:0:0:0:0:1]:7000")
    }

    @Test("passive TCP candidates (RFC 6544) follow every UDP candidate, with a lower priority and tcptype passive")
    func tcpCandidates() throws {
        var offer: SessionDescription
        do { offer = try SessionDescription(parsing: Self.browserOffer) } catch { throw NegotiationError.malformed(error) }
        let tcp = STUNAddress(ipv4: "127.0.0.1", port: 7_001)!
        let result = try WebRTCNegotiation.answer(offer, as: .publisher, local: Self.local, fingerprint: Self.fingerprint,
                                                  candidates: [Self.relay], tcpCandidates: [tcp], sessionID: 1)
        let answer = try SessionDescription(parsing: result.answer.text)
        let candidates = try #require(answer.media.first).values("candidate")
        #expect(candidates == ["1 1 udp 2130706431 127.0.0.1 7000 typ host", "2 1 tcp 2122317823 127.0.0.1 7001 typ host tcptype passive"])
    }

    /// The browser offer's video as Chromium 156 writes it for `sendEncodings` with three RIDs:
    /// no `a=ssrc`, the RIDs in `a=rid` and `a=simulcast`, `rtp-stream-id` among the extensions.
    static func simulcastOffer(rids: [String] = ["l", "m", "h"], ridLines: [String]? = nil, simulcast: String? = nil) -> String {
        var offer = browserOffer.replacingOccurrences(of: "a=ssrc:2002 cname:browser\r\n", with: "")
        let lines = (ridLines ?? rids.map { "a=rid:\($0) send" }) + ["a=simulcast:\(simulcast ?? "send " + rids.joined(separator: ";"))"]
        offer = offer.replacingOccurrences(of: "a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n",
                                           with: "a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n" +
                                               "a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\n" +
                                               "a=extmap:11 urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id\r\n")
        return offer + lines.map { $0 + "\r\n" }.joined()
    }

    @Test("Chromium's simulcast offer (three RIDs, no video SSRC): the answer receives each RID (a=rid recv, a=simulcast:recv in the same order) and keeps rtp-stream-id, not its repaired twin; the layers are best first at nominal bitrates")
    func simulcastPublish() throws {
        let result = try Self.answer(Self.simulcastOffer())
        let video = try #require(result.media.first { $0.kind == "video" })
        #expect(video.rids.map(\.id) == ["l", "m", "h"] && video.remoteSSRCs.isEmpty)
        #expect(video.headerExtensions == [2: WebRTCNegotiation.absSendTime, 10: WebRTCNegotiation.sdesRTPStreamID])
        #expect(result.media[0].rids.isEmpty, "audio is no simulcast")
        let answer = try SessionDescription(parsing: result.answer.text)
        #expect(answer.media[1].values("rid") == ["l recv", "m recv", "h recv"])
        #expect(answer.media[1].value("simulcast") == "recv l;m;h")
        #expect(answer.media[1].values("extmap").contains("10 \(WebRTCNegotiation.sdesRTPStreamID)"))
        #expect(!answer.media[1].values("extmap").contains { $0.contains("repaired") })
        #expect(answer.media[0].values("rid").isEmpty && answer.media[0].value("simulcast") == nil)
        // Offered lowest first: the best layer is the last RID, each step down a quarter of the bitrate.
        #expect(video.simulcastLayers == [SimulcastLayer(rid: "h", width: 0, height: 0, bitrate: 2_500_000),
                                          SimulcastLayer(rid: "m", width: 0, height: 0, bitrate: 625_000),
                                          SimulcastLayer(rid: "l", width: 0, height: 0, bitrate: 156_250)])
    }

    @Test("simulcast RIDs: restrictions order the layers and give their sizes and bitrates; paused and undescribed RIDs are left out; more than four are declined; one RID, or no rtp-stream-id extension, is no simulcast")
    func simulcastRIDs() throws {
        // Stated restrictions win over the offer's order.
        let stated = try Self.answer(Self.simulcastOffer(ridLines: ["a=rid:hi send max-width=1280;max-height=720;max-br=2000000",
                                                                    "a=rid:lo send max-width=320;max-height=180;max-br=100000",
                                                                    "a=rid:mid send max-width=640;max-height=360;max-br=500000;max-fps=30"],
                                                         simulcast: "send hi;lo;mid"))
        #expect(stated.media[1].simulcastLayers == [SimulcastLayer(rid: "hi", width: 1280, height: 720, bitrate: 2_000_000),
                                                    SimulcastLayer(rid: "mid", width: 640, height: 360, bitrate: 500_000),
                                                    SimulcastLayer(rid: "lo", width: 320, height: 180, bitrate: 100_000)])
        // Alternatives take their first; a paused stream and one without its a=rid line are skipped.
        let alternatives = try Self.answer(Self.simulcastOffer(ridLines: ["a=rid:a send", "a=rid:b send", "a=rid:c send", "a=rid:d recv"],
                                                               simulcast: "send a,b;~c;d;b"))
        #expect(alternatives.media[1].rids.map(\.id) == ["a", "b"])
        let five = try Self.answer(Self.simulcastOffer(rids: ["1", "2", "3", "4", "5"]))
        #expect(five.media[1].rids.map(\.id) == ["1", "2", "3", "4"])
        #expect(try SessionDescription(parsing: five.answer.text).media[1].value("simulcast") == "recv 1;2;3;4")
        // One RID is a single stream without an SSRC: refused later for want of one, not answered as simulcast.
        let one = try Self.answer(Self.simulcastOffer(rids: ["only"]))
        #expect(one.media[1].rids.isEmpty && !one.answer.text.contains("a=simulcast"))
        let noExtension = try Self.answer(Self.simulcastOffer().replacingOccurrences(of: "a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\n", with: ""))
        #expect(noExtension.media[1].rids.isEmpty && !noExtension.answer.text.contains("a=rid"))
        // A viewer's offer with a simulcast line is answered as a plain viewer.
        let viewer = try Self.answer(Self.simulcastOffer().replacingOccurrences(of: "a=sendonly", with: "a=recvonly"),
                                     as: .viewer(videoSSRC: 7, audioSSRC: 8, cname: "relay"))
        #expect(viewer.media.allSatisfy(\.rids.isEmpty) && !viewer.answer.text.contains("a=simulcast"))
    }

    @Test("webrtcbin's publish offer is answered, and webrtcbin accepts the answer (its signaling state becomes stable)")
    func webrtcbinPublisher() throws {
        let offer = try WebRTCBinPeer.offer(sending: true)
        let result = try Self.answer(offer)
        #expect(result.media.map(\.kind) == ["video", "audio"], "\(offer)")
        #expect(result.media[0].codec.isConstrainedBaselineH264ModeOne)
        // webrtcbin's SDP parser sprop-parameter-sets describe its sender only: not echoed.
        #expect(result.media[0].codec.parameters["sprop-parameter-sets"] == nil)
        let applied = try WebRTCBinPeer.run([.init(mode: "apply", direction: "send", answer: result.answer.text)])[0]
        #expect(applied.ok == true, "\(applied.error ?? "")")
        #expect(applied.state == "stable")
        #expect(applied.remote?.contains("a=ice-lite") == true && applied.remote?.contains("a=recvonly") == true)
    }

    @Test("webrtcbin's receive-only offer is answered as a viewer: send-only, the relay's SSRCs, and webrtcbin accepts it")
    func webrtcbinViewer() throws {
        let offer = try WebRTCBinPeer.offer(sending: false)
        let role = WebRTCNegotiation.Role.viewer(videoSSRC: 0xAABB_CCDD, audioSSRC: 0x1122_3344, cname: "pcast-relay")
        let result = try Self.answer(offer, as: role)
        #expect(result.media.map(\.localSSRC) == [0xAABB_CCDD, 0x1122_3344])
        #expect(result.answer.media.allSatisfy { $0.direction == .sendonly })
        #expect(result.answer.media[0].values("ssrc") == ["\(0xAABB_CCDD) cname:pcast-relay"])
        let applied = try WebRTCBinPeer.run([.init(mode: "apply", direction: "recv", answer: result.answer.text)])[0]
        #expect(applied.ok == true, "\(applied.error ?? "")")
        #expect(applied.state == "stable")
    }

    @Test("offers the relay cannot take are refused with the status WHIP gives and a reason: codecs, directions, transports, garbage")
    func refusals() {
        func refusal(_ text: String, as role: WebRTCNegotiation.Role = .publisher) -> NegotiationError? {
            do { _ = try Self.answer(text, as: role); return nil } catch { return error }
        }
        let noH264 = Self.browserOffer.replacingOccurrences(of: "a=rtpmap:102 H264/90000", with: "a=rtpmap:102 H265/90000")
        #expect(refusal(noH264)?.httpStatus == 422)
        let modeZero = Self.browserOffer.replacingOccurrences(of: "packetization-mode=1", with: "packetization-mode=0")
        #expect(refusal(modeZero) == .unsupportedCodec("video section 1 offers no constrained-baseline H.264 with packetization-mode=1 (offered: VP8, rtx, H264 42e01f)"))
        let main = Self.browserOffer.replacingOccurrences(of: "profile-level-id=42e01f", with: "profile-level-id=4d001f")
        #expect(refusal(main)?.httpStatus == 422)
        let noOpus = Self.browserOffer.replacingOccurrences(of: "a=rtpmap:111 opus/48000/2", with: "a=rtpmap:111 G722/8000")
        #expect(refusal(noOpus)?.description.contains("no Opus") == true)
        let receiving = Self.browserOffer.replacingOccurrences(of: "a=sendonly", with: "a=recvonly")
        #expect(refusal(receiving)?.httpStatus == 422)
        #expect(refusal(Self.browserOffer, as: .viewer(videoSSRC: 1, audioSSRC: 2, cname: "c"))?.httpStatus == 422, "a viewer's offer that sends")
        let noFingerprint = Self.browserOffer.replacingOccurrences(of: "a=fingerprint:sha-256 \(Self.fingerprint)\r\n", with: "")
        #expect(refusal(noFingerprint) == .transport("no SHA-256 fingerprint"))
        let passive = Self.browserOffer.replacingOccurrences(of: "a=setup:actpass", with: "a=setup:passive")
        #expect(refusal(passive)?.httpStatus == 400)
        let unbundled = Self.browserOffer.replacingOccurrences(of: "a=group:BUNDLE 0 1\r\n", with: "")
        #expect(refusal(unbundled)?.description.contains("bundled") == true)
        #expect(refusal("hello")?.httpStatus == 400)
        #expect(refusal("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n") == .malformed(.notASessionDescription("no media section")))
    }

    @Test("SDP text: LF or CRLF, unknown lines and attributes kept, garbage lines refused with their number, a size limit")
    func parsing() throws {
        let lf = Self.browserOffer.replacingOccurrences(of: "\r\n", with: "\n")
        let parsed = try SessionDescription(parsing: lf)
        #expect(parsed == (try SessionDescription(parsing: Self.browserOffer)))
        #expect(parsed.attributes.contains(SDPAttribute("extmap-allow-mixed")))
        #expect(parsed.media[1].codecs.map(\.name) == ["VP8", "rtx", "H264"])
        #expect(try SessionDescription(parsing: parsed.text) == parsed)
        #expect(throws: SDPError.malformedLine(number: 3, "not <type>=<value>")) {
            try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\nthis is not sdp\r\n")
        }
        #expect(throws: SDPError.malformedLine(number: 5, "m= needs <media> <port> <proto> <formats>")) {
            try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 99999 RTP/AVP 96\r\n")
        }
        #expect(throws: SDPError.tooLarge(70_000)) { try SessionDescription(parsing: String(repeating: "a", count: 70_000)) }
        // Found by the sdp fuzz harness: a port or an extmap id that is only a slash trapped.
        #expect(throws: SDPError.malformedLine(number: 5, "m= needs <media> <port> <proto> <formats>")) {
            try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video / RTP/AVP 96\r\n")
        }
        let slash = try SessionDescription(parsing: "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 RTP/AVP 96\r\na=extmap:/ x\r\n")
        #expect(slash.media[0].headerExtensions.isEmpty)
    }
}

import PCastProtocol
import Testing

/// The relay's answer in a stream's own video codec (a WHEP viewer of a VP8 or VP9 stream).
@Suite("SDP answers in VP8 and VP9")
struct VideoCodecNegotiationTests {
    /// A viewer's offer listing H.264, VP9 profile 2, VP9 profile 0 and VP8 (in that order).
    static let viewerOffer = WebRTCNegotiationTests.browserOffer
        .replacingOccurrences(of: "a=sendonly", with: "a=recvonly")
        .replacingOccurrences(of: "a=ssrc:1001 cname:browser\r\n", with: "")
        .replacingOccurrences(of: "a=ssrc:2002 cname:browser\r\n", with: "")
        .replacingOccurrences(of: "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102", with: "m=video 9 UDP/TLS/RTP/SAVPF 102 100 98 96 97")
        .replacingOccurrences(of: "a=rtpmap:96 VP8/90000\r\n", with: """
            a=rtpmap:100 VP9/90000\r
            a=fmtp:100 profile-id=2\r
            a=rtpmap:98 VP9/90000\r
            a=fmtp:98 profile-id=0\r
            a=rtcp-fb:98 nack\r
            a=rtcp-fb:98 nack pli\r
            a=rtpmap:96 VP8/90000\r
            a=rtcp-fb:96 nack\r

            """)

    static func answer(_ codecs: [String]) throws -> WebRTCNegotiation.Result {
        let offer = try SessionDescription(parsing: viewerOffer)
        return try WebRTCNegotiation.answer(offer, as: .viewer(videoSSRC: 5, audioSSRC: 6, cname: "c"), local: WebRTCNegotiationTests.local,
                                            fingerprint: WebRTCNegotiationTests.fingerprint, candidates: [WebRTCNegotiationTests.relay],
                                            videoCodecs: codecs, sessionID: 1)
    }

    @Test("a viewer is answered in its stream's codec from those its offer lists: VP9 profile 0 (not profile 2) with the offer's payload type and feedback, VP8, or H.264 42e01f; the answer's video section names that payload type alone")
    func answeredInTheStreamsCodec() throws {
        for (codec, payloadType, name) in [("VP9", UInt8(98), "VP9"), ("VP8", 96, "VP8"), ("H264", 102, "H264")] {
            let result = try Self.answer([codec])
            let video = try #require(result.media.first { $0.kind == "video" })
            #expect(video.codec.name == name && video.codec.payloadType == payloadType, "\(codec): \(video.codec)")
            let section = try #require(result.answer.media.first { $0.kind == "video" })
            #expect(section.formats == ["\(payloadType)"], "\(codec): \(section.formats)")
            if codec == "VP9" { #expect(video.codec.feedback.contains("nack pli") && video.codec.parameters["profile-id"] == "0") }
        }
    }

    @Test("an offer without the stream's codec is refused as an unsupported codec naming what was wanted and what was offered; VP9 profile 2 alone does not count as VP9")
    func refusedWithoutIt() throws {
        let onlyProfile2 = Self.viewerOffer
            .replacingOccurrences(of: "m=video 9 UDP/TLS/RTP/SAVPF 102 100 98 96 97", with: "m=video 9 UDP/TLS/RTP/SAVPF 100 97")
        let offer = try SessionDescription(parsing: onlyProfile2)
        do {
            _ = try WebRTCNegotiation.answer(offer, as: .viewer(videoSSRC: 5, audioSSRC: 6, cname: "c"), local: WebRTCNegotiationTests.local,
                                             fingerprint: WebRTCNegotiationTests.fingerprint, candidates: [WebRTCNegotiationTests.relay],
                                             videoCodecs: ["VP9"], sessionID: 1)
            Issue.record("answered an offer with VP9 profile 2 only")
        } catch {
            guard case .unsupportedCodec(let why) = error else { Issue.record("\(error)"); return }
            #expect(why.contains("VP9 profile 0") && why.contains("offered: VP9"), "\(why)")
        }
    }

    @Test("an AV1 publisher's dependency descriptor extension is kept in the answer, with extmap-allow-mixed (a keyframe's structure needs the two-byte form), and named among the negotiated extensions; a VP8 publisher's offer of it is answered without it")
    func dependencyDescriptorKeptForAV1() throws {
        let offer = WebRTCNegotiationTests.browserOffer
            .replacingOccurrences(of: "a=rtpmap:96 VP8/90000\r\n", with: "a=rtpmap:96 VP8/90000\r\na=rtpmap:45 AV1/90000\r\na=rtcp-fb:45 nack pli\r\n")
            .replacingOccurrences(of: "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102", with: "m=video 9 UDP/TLS/RTP/SAVPF 45 96 97 102")
            .replacingOccurrences(of: "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n",
                                  with: "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\na=extmap:12 \(WebRTCNegotiation.dependencyDescriptor)\r\n")
        #expect(offer.contains("extmap:12") && offer.contains("AV1/90000"))
        for (codecs, kept) in [(["AV1"], true), (["VP8"], false)] {
            let result = try WebRTCNegotiation.answer(try SessionDescription(parsing: offer), as: .publisher, local: WebRTCNegotiationTests.local,
                                                      fingerprint: WebRTCNegotiationTests.fingerprint, candidates: [WebRTCNegotiationTests.relay],
                                                      videoCodecs: codecs, sessionID: 1)
            let video = try #require(result.media.first { $0.kind == "video" })
            #expect(video.codec.name.uppercased() == codecs[0])
            #expect((video.headerExtensions[12] == WebRTCNegotiation.dependencyDescriptor) == kept, "\(codecs): \(video.headerExtensions)")
            let text = result.answer.text
            #expect(text.contains("a=extmap:12 \(WebRTCNegotiation.dependencyDescriptor)") == kept && text.contains("a=extmap-allow-mixed") == kept, "\(text)")
        }
    }
}

/// Why an offer cannot be answered; each maps to the HTTP status WHIP/WHEP give it.
public enum NegotiationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Not SDP (400).
    case malformed(SDPError)
    /// ICE credentials, a SHA-256 fingerprint or a usable DTLS role missing, several transports
    /// without BUNDLE (400).
    case transport(String)
    /// A video section without constrained-baseline H.264 in packetization mode 1, or an audio
    /// section without Opus (422: the relay forwards, it does not transcode).
    case unsupportedCodec(String)
    /// A direction the request cannot have (a WHIP offer that only receives, a WHEP offer that
    /// sends), or no audio or video section at all (422).
    case unsupportedMedia(String)

    /// The HTTP status WHIP and WHEP answer with.
    public var httpStatus: Int {
        switch self {
        case .malformed, .transport: return 400
        case .unsupportedCodec, .unsupportedMedia: return 422
        }
    }

    public var description: String {
        switch self {
        case .malformed(let error): return error.description
        case .transport(let why): return "transport: \(why)"
        case .unsupportedCodec(let why): return "unsupported codec: \(why)"
        case .unsupportedMedia(let why): return "unsupported media: \(why)"
        }
    }
}

/// One media section the relay accepted: what flows on it.
public struct NegotiatedMedia: Sendable, Hashable {
    public var mid: String
    /// `video` or `audio`.
    public var kind: String
    /// The payload format chosen, with the offerer's payload type.
    public var codec: RTPCodec
    /// Header extensions both sides use: id → URI (the mid and abs-send-time; a simulcast
    /// publisher's RID; an AV1 publisher's dependency descriptor).
    public var headerExtensions: [UInt8: String]
    /// The SSRCs the offerer announced for its media (repair streams left out; may be empty:
    /// a simulcast sender names its streams by RID instead).
    public var remoteSSRCs: [UInt32]
    /// A WHIP simulcast: the RTP stream ids the offerer sends, in its order (lowest first by the
    /// convention of the W3C's and mediasoup's examples), each packet naming its own in the
    /// `rtp-stream-id` header extension until its SSRC is acknowledged; empty otherwise.
    public var rids: [RTPStreamID] = []
    /// For a viewer: the SSRC the relay sends this section's media with.
    public var localSSRC: UInt32?
}

extension NegotiatedMedia {
    /// A WHIP simulcast's layers, best first: ordered by the `max-br` (else `max-width`) every
    /// RID states, else taken as offered lowest first. A layer's bitrate is its `max-br`, else a
    /// nominal figure: 2.5 Mbit/s for the best, a quarter of that for each step down (each is
    /// half the width and height of the one above, as a browser's `scaleResolutionDownBy: 2`
    /// makes it). Width and height are the RID's `max-width` / `max-height`, else 0 (unknown).
    public var simulcastLayers: [SimulcastLayer] {
        var ordered: [RTPStreamID]
        if rids.allSatisfy({ $0.maxBitrate != nil }) {
            ordered = rids.sorted { $0.maxBitrate! > $1.maxBitrate! }
        } else if rids.allSatisfy({ $0.maxWidth != nil }) {
            ordered = rids.sorted { $0.maxWidth! > $1.maxWidth! }
        } else {
            ordered = rids.reversed()
        }
        return ordered.enumerated().map { step, rid in
            SimulcastLayer(rid: rid.id, width: rid.maxWidth ?? 0, height: rid.maxHeight ?? 0,
                           bitrate: rid.maxBitrate ?? WebRTCNegotiation.nominalBestBitrate >> (2 * step))
        }
    }
}

/// Answers a browser's (or any WebRTC client's) offer as the relay: ICE-lite, DTLS server
/// (`setup:passive`), everything bundled on one transport, H.264 constrained baseline and Opus
/// only, and nothing the relay does not do (no RTX, no transport-cc). A publisher's video may be
/// a simulcast of 2 to 4 RTP streams named by RID (RFC 8853; more are declined in the answer).
///
/// ```swift
/// let result = try WebRTCNegotiation.answer(offer, as: .publisher, local: credentials,
///                                           fingerprint: certificate.sha256, candidates: [relayAddress])
/// // 201 Created, body result.answer.text; media arrives as result.media describes.
/// ```
public enum WebRTCNegotiation {
    /// Who the offerer is to the relay.
    public enum Role: Sendable, Hashable {
        /// WHIP: the offerer sends, the relay receives.
        case publisher
        /// WHEP: the relay sends, the offerer receives; the SSRCs the relay sends with, by kind.
        case viewer(videoSSRC: UInt32, audioSSRC: UInt32, cname: String)
    }

    public struct Result: Sendable {
        public var answer: SessionDescription
        public var media: [NegotiatedMedia]
        /// The offerer's ICE and DTLS parameters (one transport: everything is bundled).
        public var remote: TransportParameters
    }

    /// The header extensions the relay keeps.
    public static let absSendTime = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
    public static let sdesMid = "urn:ietf:params:rtp-hdrext:sdes:mid"
    public static let sdesRTPStreamID = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"
    /// AV1's dependency descriptor (``DependencyDescriptor``): kept for an AV1 publisher, whose
    /// scalable layers the relay reads from it.
    public static let dependencyDescriptor = "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension"
    /// The most RTP streams of one simulcast the relay takes (more are declined in the answer).
    public static let maximumRIDs = 4
    /// What a browser's best simulcast layer is taken to send when its RID states no `max-br`.
    public static let nominalBestBitrate = 2_500_000

    /// The feedback the relay honours for video (NACK, PLI, FIR, REMB) and audio (none).
    static let videoFeedback = ["nack", "nack pli", "ccm fir", "goog-remb"]

    /// The answer to `offer`. Video is sent or taken in one of `videoCodecs` (encoding names, see
    /// ``RTPCodec/isForwardable(as:)``): the offer's first video codec that is one of them (the
    /// offer lists its preferred first). A viewer is answered in its stream's codec.
    public static func answer(_ offer: SessionDescription, as role: Role, local: ICECredentials,
                              fingerprint: String, candidates: [STUNAddress], tcpCandidates: [STUNAddress] = [],
                              videoCodecs: [String] = ["H264"],
                              sessionID: UInt64 = UInt64.random(in: 1...(1 << 62))) throws(NegotiationError) -> Result {
        let usable = offer.media.filter { !$0.isRejected && ($0.kind == "audio" || $0.kind == "video") }
        guard !usable.isEmpty else { throw .unsupportedMedia("no audio or video section") }
        guard let first = usable.first, let remote = offer.transport(of: first) else {
            throw .transport("no ice-ufrag / ice-pwd")
        }
        guard let offered = remote.fingerprint, offered.algorithm == "sha-256", offered.digest.split(separator: ":").count == 32 else {
            throw .transport("no SHA-256 fingerprint")
        }
        guard remote.setup == nil || remote.setup == "actpass" || remote.setup == "active" else {
            throw .transport("setup:\(remote.setup ?? "") asks the relay to be the DTLS client; it is the server")
        }
        let bundled = Set(offer.bundle)
        if usable.count > 1 {
            for section in usable {
                guard let mid = section.mid, bundled.contains(mid), offer.transport(of: section) == remote else {
                    throw .transport("media sections on separate transports: the relay needs them bundled (a=group:BUNDLE)")
                }
            }
        }

        var answerSections: [MediaDescription] = []
        var negotiated: [NegotiatedMedia] = []
        for section in offer.media {
            guard usable.contains(section), let mid = section.mid else {
                // Rejected in the answer: port 0, the same kind and formats (RFC 8843 §7.3.3).
                var rejected = MediaDescription(kind: section.kind, port: 0, proto: section.proto, formats: section.formats)
                if let mid = section.mid { rejected.attributes.append(SDPAttribute("mid", mid)) }
                answerSections.append(rejected)
                continue
            }
            guard section.proto.hasPrefix("UDP/TLS/RTP/SAVP") else {
                throw .unsupportedMedia("\(section.kind) section \(mid) uses \(section.proto), not UDP/TLS/RTP/SAVPF")
            }
            let direction: MediaDirection
            switch (role, section.direction) {
            case (.publisher, .sendonly), (.publisher, .sendrecv): direction = .recvonly
            case (.viewer, .recvonly), (.viewer, .sendrecv): direction = .sendonly
            default:
                throw .unsupportedMedia("the \(section.kind) section \(mid) is \(section.direction.rawValue): a \(role.name) offer must \(role.offerMust)")
            }
            let chosen: RTPCodec
            if section.kind == "video" {
                guard let video = section.codecs.first(where: { codec in videoCodecs.contains { codec.isForwardable(as: $0) } }) else {
                    let wanted = videoCodecs.map { $0.uppercased() == "H264" ? "constrained-baseline H.264 with packetization-mode=1" : $0.uppercased() == "VP9" ? "VP9 profile 0" : $0.uppercased() == "AV1" ? "AV1 main profile" : $0 }
                    throw .unsupportedCodec("video section \(mid) offers no \(wanted.joined(separator: " or ")) (offered: \(section.codecs.map { codec in codec.parameters["profile-level-id"].map { "\(codec.name) \($0)" } ?? codec.name }.joined(separator: ", ")))")
                }
                chosen = video
            } else {
                guard let opus = section.codecs.first(where: { $0.isNamed("opus") && $0.clockRate == 48_000 }) else {
                    throw .unsupportedCodec("audio section \(mid) offers no Opus/48000 (offered: \(section.codecs.map(\.name).joined(separator: ", ")))")
                }
                chosen = opus
            }
            // A publisher's simulcast: its streams are told apart by the RID in each packet.
            var rids: [RTPStreamID] = []
            if role == .publisher, section.kind == "video", section.headerExtensions.values.contains(sdesRTPStreamID) {
                rids = Array(section.sentRIDs.prefix(maximumRIDs))
                if rids.count < 2 { rids = [] }
            }
            let layered = role == .publisher && chosen.isNamed("AV1")
            let extensions = section.headerExtensions.filter {
                $0.value == absSendTime || $0.value == sdesMid || (!rids.isEmpty && $0.value == sdesRTPStreamID)
                    || (layered && $0.value == dependencyDescriptor)
            }
            var codec = chosen
            codec.feedback = section.kind == "video" ? videoFeedback.filter { chosen.feedback.contains($0) } : []
            // The parameters the answer states: the offer's, less what only describes its sender.
            codec.parameters.removeValue(forKey: "sprop-parameter-sets")
            var localSSRC: UInt32?
            if case .viewer(let video, let audio, _) = role { localSSRC = section.kind == "video" ? video : audio }
            negotiated.append(NegotiatedMedia(mid: mid, kind: section.kind, codec: codec, headerExtensions: extensions,
                                              remoteSSRCs: role == .publisher ? section.mediaSSRCs : [], rids: rids, localSSRC: localSSRC))

            var attributes: [SDPAttribute] = [
                SDPAttribute("mid", mid),
                SDPAttribute("ice-ufrag", local.ufrag),
                SDPAttribute("ice-pwd", local.password),
                SDPAttribute("fingerprint", "sha-256 \(fingerprint)"),
                SDPAttribute("setup", "passive"),
                SDPAttribute(direction.rawValue),
                SDPAttribute("rtcp-mux"),
            ]
            if section.has("rtcp-rsize") { attributes.append(SDPAttribute("rtcp-rsize")) }
            // The dependency descriptor of a keyframe carries its structure, longer than the
            // 16 bytes of RFC 8285's one-byte form: a sender needs leave to mix in the two-byte form.
            if extensions.values.contains(dependencyDescriptor), section.has("extmap-allow-mixed") || offer.attributes.contains(where: { $0.name == "extmap-allow-mixed" }) {
                attributes.append(SDPAttribute("extmap-allow-mixed"))
            }
            let channels = codec.channels.map { "/\($0)" } ?? ""
            attributes.append(SDPAttribute("rtpmap", "\(codec.payloadType) \(codec.name)/\(codec.clockRate)\(channels)"))
            if let parameters = codec.formatParameters { attributes.append(SDPAttribute("fmtp", "\(codec.payloadType) \(parameters)")) }
            for feedback in codec.feedback { attributes.append(SDPAttribute("rtcp-fb", "\(codec.payloadType) \(feedback)")) }
            for (id, uri) in extensions.sorted(by: { $0.key < $1.key }) { attributes.append(SDPAttribute("extmap", "\(id) \(uri)")) }
            if !rids.isEmpty {
                for rid in rids { attributes.append(SDPAttribute("rid", "\(rid.id) recv")) }
                attributes.append(SDPAttribute("simulcast", "recv " + rids.map(\.id).joined(separator: ";")))
            }
            if let localSSRC, case .viewer(_, _, let cname) = role {
                attributes.append(SDPAttribute("msid", "pcast \(section.kind)"))
                attributes.append(SDPAttribute("ssrc", "\(localSSRC) cname:\(cname)"))
            }
            for (index, candidate) in candidates.enumerated() where candidate.address.count == 4 || candidate.address.count == 16 {
                let address = candidate.host
                // Host candidates only (the relay has public addresses): type preference 126,
                // local preference by order, component 1 (RTP and RTCP are muxed).
                let priority = (126 << 24) | ((65_535 - index) << 8) | 255
                attributes.append(SDPAttribute("candidate", "\(index + 1) 1 udp \(priority) \(address) \(candidate.port) typ host"))
            }
            // ICE over TCP (RFC 6544): passive candidates, after every UDP one (a lower local
            // preference), for peers whose networks drop UDP.
            for (index, candidate) in tcpCandidates.enumerated() where candidate.address.count == 4 || candidate.address.count == 16 {
                let priority = (126 << 24) | ((32_767 - index) << 8) | 255
                attributes.append(SDPAttribute("candidate", "\(candidates.count + index + 1) 1 tcp \(priority) \(candidate.host) \(candidate.port) typ host tcptype passive"))
            }
            attributes.append(SDPAttribute("end-of-candidates"))
            answerSections.append(MediaDescription(kind: section.kind, port: 9, proto: "UDP/TLS/RTP/SAVPF", formats: ["\(codec.payloadType)"],
                                                   connection: "IN IP4 0.0.0.0", attributes: attributes))
        }
        var answer = SessionDescription(origin: "- \(sessionID) 2 IN IP4 127.0.0.1")
        answer.attributes = [SDPAttribute("ice-lite"), SDPAttribute("group", (["BUNDLE"] + negotiated.map(\.mid)).joined(separator: " "))]
        answer.media = answerSections
        return Result(answer: answer, media: negotiated, remote: remote)
    }
}

extension WebRTCNegotiation.Role {
    var name: String { self == .publisher ? "WHIP (publish)" : "WHEP (view)" }
    var offerMust: String { self == .publisher ? "send (sendonly or sendrecv)" : "receive (recvonly or sendrecv)" }
}

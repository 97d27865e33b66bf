/// Why text is not a session description the platform accepts.
public enum SDPError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A line that is not `<letter>=<value>`, or a required line missing or malformed.
    case malformedLine(number: Int, String)
    /// No `v=0` first, or no media section.
    case notASessionDescription(String)
    /// Larger than the platform reads (an offer is a few kilobytes).
    case tooLarge(Int)

    public var description: String {
        switch self {
        case .malformedLine(let number, let why): return "SDP line \(number): \(why)"
        case .notASessionDescription(let why): return "not a session description: \(why)"
        case .tooLarge(let bytes): return "session description of \(bytes) bytes (at most \(SessionDescription.maximumSize))"
        }
    }
}

/// An SDP attribute line, `a=<name>[:<value>]`.
public struct SDPAttribute: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var value: String?

    public init(_ name: String, _ value: String? = nil) {
        self.name = name
        self.value = value
    }

    public var description: String { value.map { "a=\(name):\($0)" } ?? "a=\(name)" }
}

/// The direction of a media section (RFC 8866 §6.7).
public enum MediaDirection: String, Sendable, Hashable {
    case sendrecv, sendonly, recvonly, inactive

    /// The direction an answer takes for this offered one, from the answerer's side.
    public var reversed: MediaDirection {
        switch self {
        case .sendonly: return .recvonly
        case .recvonly: return .sendonly
        default: return self
        }
    }
}

/// One RTP payload format of a media section: `rtpmap`, `fmtp` and `rtcp-fb` gathered.
public struct RTPCodec: Sendable, Hashable {
    public var payloadType: UInt8
    /// As written (`H264`, `opus`, `OPUS`); compare with ``isNamed(_:)``.
    public var name: String
    public var clockRate: Int
    public var channels: Int?
    /// The `fmtp` parameters, names lowercased.
    public var parameters: [String: String]
    /// The `rtcp-fb` values (`nack`, `nack pli`, `ccm fir`, `goog-remb`, `transport-cc`).
    public var feedback: [String]

    public init(payloadType: UInt8, name: String, clockRate: Int, channels: Int? = nil, parameters: [String: String] = [:], feedback: [String] = []) {
        self.payloadType = payloadType
        self.name = name
        self.clockRate = clockRate
        self.channels = channels
        self.parameters = parameters
        self.feedback = feedback
    }

    public func isNamed(_ name: String) -> Bool { self.name.lowercased() == name.lowercased() }

    /// Whether this is the video codec `encodingName` (`H264`, `VP8`, `VP9`, `AV1`) in the form the
    /// relay forwards: H.264 constrained baseline in packetization mode 1
    /// (``isConstrainedBaselineH264ModeOne``), VP8, VP9 profile 0 (8-bit 4:2:0, the profile every
    /// decoder takes; `profile-id` absent means 0), AV1 main profile (`profile` absent means 0),
    /// each at 90 kHz.
    public func isForwardable(as encodingName: String) -> Bool {
        switch encodingName.uppercased() {
        case "H264": return isConstrainedBaselineH264ModeOne
        case "VP8": return isNamed("VP8") && clockRate == 90_000
        case "VP9": return isNamed("VP9") && clockRate == 90_000 && (parameters["profile-id"] ?? "0") == "0"
        case "AV1": return isNamed("AV1") && clockRate == 90_000 && (parameters["profile"] ?? "0") == "0"
        default: return false
        }
    }

    /// H.264 that a constrained-baseline decoder plays, packetized in mode 1 (FU-A / STAP-A): what
    /// the relay forwards without transcoding. `profile-level-id` absent means baseline 42000a
    /// (RFC 6184 §8.1), which is not constrained.
    public var isConstrainedBaselineH264ModeOne: Bool {
        guard isNamed("H264"), clockRate == 90_000, parameters["packetization-mode"] == "1",
              let profile = parameters["profile-level-id"], profile.count == 6,
              let value = UInt32(profile, radix: 16) else { return false }
        let profileIDC = value >> 16, constraints = (value >> 8) & 0xFF
        // Constrained baseline: profile_idc 66 with constraint_set1, or 77/88 with constraint_set0
        // and 1 set as well (RFC 6184 §8.1, table 5).
        switch profileIDC {
        case 0x42: return constraints & 0x40 != 0
        case 0x4D, 0x58: return constraints & 0xC0 == 0xC0
        default: return false
        }
    }

    /// The `fmtp` value as written back (`a=fmtp:<pt> <this>`), parameters in name order.
    public var formatParameters: String? {
        parameters.isEmpty ? nil : parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
    }
}

/// A media section (`m=` and the lines under it).
public struct MediaDescription: Sendable, Hashable {
    /// `audio`, `video`, `application`.
    public var kind: String
    public var port: Int
    /// `UDP/TLS/RTP/SAVPF` for WebRTC media.
    public var proto: String
    /// The payload types (or formats) listed on the `m=` line, in preference order.
    public var formats: [String]
    /// The section's `c=` value (`IN IP4 0.0.0.0`).
    public var connection: String?
    public var attributes: [SDPAttribute]

    public init(kind: String, port: Int, proto: String, formats: [String], connection: String? = nil, attributes: [SDPAttribute] = []) {
        self.kind = kind
        self.port = port
        self.proto = proto
        self.formats = formats
        self.connection = connection
        self.attributes = attributes
    }

    public func values(_ name: String) -> [String] { attributes.filter { $0.name == name }.compactMap(\.value) }
    public func value(_ name: String) -> String? { values(name).first }
    public func has(_ name: String) -> Bool { attributes.contains { $0.name == name } }

    public var mid: String? { value("mid") }

    public var direction: MediaDirection {
        attributes.lazy.compactMap { MediaDirection(rawValue: $0.name) }.first ?? .sendrecv
    }

    /// The section is rejected or unused (port 0 without `bundle-only`).
    public var isRejected: Bool { port == 0 && !has("bundle-only") }

    /// The RTP payload formats offered, in the `m=` line's order; payload types without an
    /// `rtpmap` (static ones) are left out.
    public var codecs: [RTPCodec] {
        var byType: [UInt8: RTPCodec] = [:]
        for map in values("rtpmap") {
            let parts = map.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let type = UInt8(parts[0]), type < 128 else { continue }
            let encoding = parts[1].split(separator: "/")
            guard encoding.count >= 2, let rate = Int(encoding[1]), rate > 0 else { continue }
            byType[type] = RTPCodec(payloadType: type, name: String(encoding[0]), clockRate: rate,
                                    channels: encoding.count > 2 ? Int(encoding[2]) : nil)
        }
        for fmtp in values("fmtp") {
            let parts = fmtp.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let type = UInt8(parts[0]), byType[type] != nil else { continue }
            for parameter in parts[1].split(separator: ";") {
                let pair = parameter.split(separator: "=", maxSplits: 1)
                guard let name = pair.first?.trimmingSpaces, !name.isEmpty else { continue }
                byType[type]?.parameters[name.lowercased()] = pair.count > 1 ? pair[1].trimmingSpaces : ""
            }
        }
        for feedback in values("rtcp-fb") {
            let parts = feedback.split(separator: " ", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let value = String(parts[1])
            if parts[0] == "*" {
                for type in byType.keys { byType[type]?.feedback.append(value) }
            } else if let type = UInt8(parts[0]), byType[type] != nil {
                byType[type]?.feedback.append(value)
            }
        }
        return formats.compactMap { UInt8($0).flatMap { byType[$0] } }
    }

    /// RTP header extensions offered: id → URI (`a=extmap:<id>[/direction] <uri>`).
    public var headerExtensions: [UInt8: String] {
        var out: [UInt8: String] = [:]
        for map in values("extmap") {
            let parts = map.split(separator: " ")
            guard parts.count >= 2, let id = UInt8(parts[0].split(separator: "/", omittingEmptySubsequences: false)[0]), (1...14).contains(id) else { continue }
            out[id] = String(parts[1])
        }
        return out
    }

    /// The RTP stream ids a simulcast sender offers (RFC 8853 `a=simulcast:send`, each with its
    /// RFC 8851 `a=rid:<id> send` line), in the offer's order, the first of each group of
    /// alternatives; paused streams (`~id`) and ids without a matching `a=rid` are left out.
    public var sentRIDs: [RTPStreamID] {
        guard let line = values("simulcast").first(where: { $0.hasPrefix("send ") }) else { return [] }
        var described: [String: RTPStreamID] = [:]
        for rid in values("rid") {
            let parts = rid.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[1] == "send" else { continue }
            var stream = RTPStreamID(id: String(parts[0]))
            if parts.count == 3 {
                for restriction in parts[2].split(separator: ";") {
                    let pair = restriction.split(separator: "=", maxSplits: 1)
                    guard pair.count == 2, let value = Int(pair[1]), value > 0 else { continue }
                    switch pair[0] {
                    case "max-width": stream.maxWidth = value
                    case "max-height": stream.maxHeight = value
                    case "max-br": stream.maxBitrate = value
                    default: break
                    }
                }
            }
            described[stream.id] = stream
        }
        // `send l;m;h` (possibly followed by ` recv …`): `;` separates streams, `,` alternatives.
        let list = line.dropFirst("send ".count).split(separator: " ").first ?? ""
        var out: [RTPStreamID] = []
        for group in list.split(separator: ";") {
            guard let first = group.split(separator: ",").first, !first.hasPrefix("~"),
                  let stream = described[String(first)], !out.contains(where: { $0.id == stream.id }) else { continue }
            out.append(stream)
        }
        return out
    }

    /// The SSRCs of the media itself: ``ssrcs`` less those an `a=ssrc-group` names after its
    /// first (the repair streams of `FID` retransmission and `FEC-FR`).
    public var mediaSSRCs: [UInt32] {
        var repair: Set<UInt32> = []
        for group in values("ssrc-group") {
            let members = group.split(separator: " ").dropFirst().compactMap { UInt32($0) }
            repair.formUnion(members.dropFirst())
        }
        return ssrcs.filter { !repair.contains($0) }
    }

    /// The SSRCs the sender announces (`a=ssrc:<id> …`), in order of first mention.
    public var ssrcs: [UInt32] {
        var seen: [UInt32] = []
        for line in values("ssrc") {
            guard let id = line.split(separator: " ").first.flatMap({ UInt32($0) }), !seen.contains(id) else { continue }
            seen.append(id)
        }
        return seen
    }
}

/// One RTP stream id a simulcast sender offers (RFC 8851), with the restrictions it states.
public struct RTPStreamID: Sendable, Hashable {
    public var id: String
    public var maxWidth: Int?
    public var maxHeight: Int?
    /// Bits per second (`max-br`).
    public var maxBitrate: Int?

    public init(id: String, maxWidth: Int? = nil, maxHeight: Int? = nil, maxBitrate: Int? = nil) {
        self.id = id
        self.maxWidth = maxWidth
        self.maxHeight = maxHeight
        self.maxBitrate = maxBitrate
    }
}

/// ICE and DTLS parameters of a transport (RFC 8839, RFC 8842).
public struct TransportParameters: Sendable, Hashable {
    public var iceUfrag: String
    public var icePassword: String
    /// `sha-256` and the colon-separated hex digest.
    public var fingerprint: (algorithm: String, digest: String)?
    /// `actpass`, `active`, `passive`.
    public var setup: String?

    public static func == (lhs: TransportParameters, rhs: TransportParameters) -> Bool {
        lhs.iceUfrag == rhs.iceUfrag && lhs.icePassword == rhs.icePassword && lhs.setup == rhs.setup
            && lhs.fingerprint?.algorithm == rhs.fingerprint?.algorithm && lhs.fingerprint?.digest == rhs.fingerprint?.digest
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(iceUfrag)
        hasher.combine(icePassword)
        hasher.combine(fingerprint?.digest)
    }
}

/// A session description (RFC 8866) as WebRTC uses it: parsed strictly enough to refuse garbage,
/// leniently enough for every browser's dialect (unknown lines and attributes are kept, not
/// refused), and serialised back with CRLF line ends.
///
/// ```swift
/// let offer = try SessionDescription(parsing: body)
/// guard let video = offer.media.first(where: { $0.kind == "video" }),
///       let h264 = video.codecs.first(where: \.isConstrainedBaselineH264ModeOne) else { return .unprocessable }
/// ```
public struct SessionDescription: Sendable, Hashable {
    /// What the platform reads at most (browser offers are 3–8 KB).
    public static let maximumSize = 64 * 1024

    /// The `o=` line's value.
    public var origin: String
    public var sessionName: String
    /// Session-level `a=` lines.
    public var attributes: [SDPAttribute]
    /// Session-level lines other than `v o s t a` (`c=`, `b=`…), kept as written.
    public var otherLines: [String]
    public var media: [MediaDescription]

    public init(origin: String, sessionName: String = "-", attributes: [SDPAttribute] = [], media: [MediaDescription] = []) {
        self.origin = origin
        self.sessionName = sessionName
        self.attributes = attributes
        self.otherLines = []
        self.media = media
    }

    public init(parsing text: String) throws(SDPError) {
        guard text.utf8.count <= Self.maximumSize else { throw .tooLarge(text.utf8.count) }
        var lines = text.split(omittingEmptySubsequences: true) { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }.map(String.init)
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard lines.first == "v=0" else { throw .notASessionDescription("the first line is not v=0") }
        var origin: String?
        var name = "-"
        var sessionAttributes: [SDPAttribute] = []
        var other: [String] = []
        var media: [MediaDescription] = []
        for (index, line) in lines.enumerated().dropFirst() {
            let number = index + 1
            let bytes = Array(line.utf8)
            guard bytes.count >= 2, bytes[1] == UInt8(ascii: "="), (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[0]) else {
                throw .malformedLine(number: number, "not <type>=<value>")
            }
            let type = Character(UnicodeScalar(bytes[0]))
            let value = String(line.dropFirst(2))
            switch type {
            case "m":
                let fields = value.split(separator: " ")
                guard fields.count >= 4, let port = Int(fields[1].split(separator: "/", omittingEmptySubsequences: false)[0]), (0...65_535).contains(port) else {
                    throw .malformedLine(number: number, "m= needs <media> <port> <proto> <formats>")
                }
                media.append(MediaDescription(kind: String(fields[0]), port: port, proto: String(fields[2]),
                                              formats: fields[3...].map(String.init)))
            case "a":
                let attribute: SDPAttribute
                if let colon = value.firstIndex(of: ":") {
                    attribute = SDPAttribute(String(value[..<colon]), String(value[value.index(after: colon)...]))
                } else {
                    attribute = SDPAttribute(value)
                }
                guard !attribute.name.isEmpty else { throw .malformedLine(number: number, "an attribute without a name") }
                if media.isEmpty { sessionAttributes.append(attribute) } else { media[media.count - 1].attributes.append(attribute) }
            case "o" where media.isEmpty: origin = value
            case "s" where media.isEmpty: name = value
            case "t" where media.isEmpty: continue
            case "c" where !media.isEmpty: media[media.count - 1].connection = value
            default:
                // c=, b=, i= …: kept at session level, ignored inside media sections.
                if media.isEmpty { other.append(line) }
            }
        }
        guard let origin else { throw .notASessionDescription("no o= line") }
        guard !media.isEmpty else { throw .notASessionDescription("no media section") }
        self.origin = origin
        self.sessionName = name
        self.attributes = sessionAttributes
        self.otherLines = other
        self.media = media
    }

    public func value(_ name: String) -> String? { attributes.first { $0.name == name }?.value }

    /// The mids of `a=group:BUNDLE`, in order; empty when nothing is bundled.
    public var bundle: [String] {
        guard let group = attributes.first(where: { $0.name == "group" && $0.value?.hasPrefix("BUNDLE") == true })?.value else { return [] }
        return group.split(separator: " ").dropFirst().map(String.init)
    }

    /// A media section's ICE and DTLS parameters: its own lines first, the session's otherwise.
    public func transport(of section: MediaDescription) -> TransportParameters? {
        func lookup(_ name: String) -> String? { section.value(name) ?? value(name) }
        guard let ufrag = lookup("ice-ufrag"), let password = lookup("ice-pwd") else { return nil }
        var fingerprint: (String, String)?
        if let line = lookup("fingerprint") {
            let parts = line.split(separator: " ", maxSplits: 1)
            if parts.count == 2 { fingerprint = (parts[0].lowercased(), parts[1].trimmingSpaces.uppercased()) }
        }
        return TransportParameters(iceUfrag: ufrag, icePassword: password, fingerprint: fingerprint, setup: lookup("setup"))
    }

    /// The text, CRLF line ends (RFC 8866 §5), ready for an HTTP body.
    public var text: String {
        var lines = ["v=0", "o=\(origin)", "s=\(sessionName)", "t=0 0"]
        lines += otherLines
        lines += attributes.map(\.description)
        for section in media {
            lines.append("m=\(section.kind) \(section.port) \(section.proto) \(section.formats.joined(separator: " "))")
            if let connection = section.connection { lines.append("c=\(connection)") }
            lines += section.attributes.map(\.description)
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }
}

extension Substring {
    var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}

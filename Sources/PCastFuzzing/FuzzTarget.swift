import Foundation
import PCastProtocol
import PCastRecording

/// The parsers that take bytes from the network or from a file a crash may have torn, each with a
/// harness that feeds it one input and checks what must hold of any input: no trap (the Swift
/// runtime's bounds and overflow checks turn a memory bug into a crash the fuzzer sees), and for
/// what is accepted, the parser's own contract (a packet rebuilt parses back to itself, a scan's
/// safe end is a clean file). A broken contract is a ``Finding``.
///
/// `make fuzz` runs each under libFuzzer (`pcast-fuzz`, built with `-sanitize=fuzzer`); the test
/// suite replays every committed input through the same harness, so what the fuzzer found once
/// stays fixed.
///
/// ```swift
/// try FuzzTarget.rtcp.run(bytes)   // throws a Finding if a contract is broken
/// ```
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// RTP packets: the allocation-free layout and the packet parser agree; rebuild → same packet.
    case rtp
    /// RTCP compound packets: rebuild → same packets.
    case rtcp
    /// An RTMP server session (handshake, chunk stream, AMF0 commands, publish) and the chunk
    /// demuxer fed the same bytes whole and split: the same messages either way; the bytes as a
    /// video message (legacy or enhanced RTMP): an AVC one's legacy form reads the same.
    case rtmp
    /// AMF0 values: encode → decode → encode gives the same bytes.
    case amf0
    /// Signaling messages, as the platform (client messages) and the SDK (server messages) decode
    /// them: encode → decode → encode gives the same bytes.
    case signaling
    /// Digest tokens: decoded and verified without a trap; a forged one never verifies.
    case token
    /// The fragmented-MP4 recovery scanner: the safe end it reports lies within the file, and the
    /// file cut there scans clean with the same fragments.
    case fmp4
    /// Video payload inspection: H.264 (keyframe detection on RTP payloads, Annex-B NAL
    /// splitting), and the VP8 and VP9 payload descriptors (a descriptor's length never runs past
    /// the payload).
    case h264
    /// AV1 RTP payloads (AOMedia's format): an input taken as a temporal unit that packetizes
    /// does so within its payload limit and reassembles to exactly the decoder's form of it; taken
    /// as a run of payloads, the depacketizer hands on only units that parse as OBUs.
    case av1
    /// STUN connectivity checks, the ICE-lite agent answering them, and the first-byte
    /// demultiplexer: decode → encode →
    /// decode gives the same message; the integrity and fingerprint checks never trap, and an
    /// input's own re-encoding with a fingerprint verifies.
    case stun
    /// Session descriptions (a WHIP / WHEP body) and the relay's answer to them: parse → text →
    /// parse gives the same description; answering never traps, and an answer parses back.
    case sdp
    /// Where a scalable stream's packets say their layers: a VP9 payload descriptor (its length
    /// lies within the payload, and it agrees with the keyframe reader), and dependency
    /// descriptors (the first byte's worth carrying a structure, the rest naming it: a frame's
    /// layers are one of the structure's templates', one indication per decode target).
    case scalable

    /// A broken contract: what the harness expected and what it found.
    public struct Finding: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Feeds one input to the parser; throws a ``Finding`` when a contract is broken. Inputs the
    /// parser refuses with its typed error are fine.
    public func run(_ bytes: [UInt8]) throws(Finding) {
        switch self {
        case .rtp: try Self.rtp(bytes)
        case .rtcp: try Self.rtcp(bytes)
        case .rtmp: try Self.rtmp(bytes)
        case .amf0: try Self.amf0(bytes)
        case .signaling: try Self.signaling(bytes)
        case .token: try Self.token(bytes)
        case .fmp4: try Self.fmp4(bytes)
        case .h264: try Self.h264(bytes)
        case .av1: try Self.av1(bytes)
        case .stun: try Self.stun(bytes)
        case .sdp: try Self.sdp(bytes)
        case .scalable: try Self.scalable(bytes)
        }
    }

    // MARK: Harnesses

    private static func rtp(_ bytes: [UInt8]) throws(Finding) {
        let layout = try? RTPPacketLayout(parsing: bytes)
        guard let packet = try? RTPPacket(parsing: bytes) else {
            if layout != nil { throw Finding(description: "the RTP layout accepted what the packet parser refused") }
            return
        }
        guard layout != nil else { throw Finding(description: "the RTP layout refused an accepted packet") }
        guard let rebuilt = try? packet.serialized() else { throw Finding(description: "an accepted RTP packet could not be rebuilt") }
        guard (try? RTPPacket(parsing: rebuilt)) == packet else { throw Finding(description: "RTP parse → build → parse changed the packet") }
    }

    private static func stun(_ bytes: [UInt8]) throws(Finding) {
        if let first = bytes.first { _ = DatagramKind(firstByte: first) }
        // The ICE-lite agent answers whatever arrives on the relay's port without a trap.
        var agent = ICELiteAgent(local: ICECredentials(ufrag: "fuzz", password: "fuzz-password-fuzz-password"), remoteUfrag: "peer", now: .now)
        _ = agent.handle(.request(bytes, from: STUNAddress(address: [127, 0, 0, 1], port: 9), at: .now))
        _ = ICELiteAgent.localUfrag(of: bytes)
        _ = STUNMessage.fingerprintIsValid(bytes)
        _ = STUNMessage.integrityIsValid(bytes, key: Array("fuzz-password".utf8))
        guard let message = try? STUNMessage(decoding: bytes) else { return }
        let signed = message.encoded(integrityKey: Array("fuzz-password".utf8))
        guard let again = try? STUNMessage(decoding: signed) else { throw Finding(description: "a re-encoded STUN message does not decode") }
        let own: (STUNAttribute) -> Bool = { $0.type != STUNAttribute.messageIntegrity && $0.type != STUNAttribute.fingerprint }
        guard again.kind == message.kind, again.method == message.method, again.transactionID == message.transactionID,
              again.attributes.filter(own) == message.attributes.filter(own) else {
            throw Finding(description: "STUN decode → encode → decode changed the message")
        }
        guard STUNMessage.fingerprintIsValid(signed), STUNMessage.integrityIsValid(signed, key: Array("fuzz-password".utf8)) else {
            throw Finding(description: "a STUN message encoded with integrity and fingerprint does not verify")
        }
    }

    private static func sdp(_ bytes: [UInt8]) throws(Finding) {
        guard let text = String(validating: bytes, as: UTF8.self), let offer = try? SessionDescription(parsing: text) else { return }
        guard (try? SessionDescription(parsing: offer.text)) == offer else { throw Finding(description: "SDP parse → text → parse changed the description") }
        let credentials = ICECredentials(ufrag: "fuzz", password: "fuzz-password-fuzz-password")
        let fingerprint = [String](repeating: "AB", count: 32).joined(separator: ":")
        for role in [WebRTCNegotiation.Role.publisher, .viewer(videoSSRC: 1, audioSSRC: 2, cname: "fuzz")] {
            guard let result = try? WebRTCNegotiation.answer(offer, as: role, local: credentials, fingerprint: fingerprint,
                                                              candidates: [STUNAddress(address: [127, 0, 0, 1], port: 9)], sessionID: 1) else { continue }
            guard (try? SessionDescription(parsing: result.answer.text)) == result.answer else {
                throw Finding(description: "the relay's answer does not parse back to itself")
            }
        }
    }

    private static func rtcp(_ bytes: [UInt8]) throws(Finding) {
        _ = RTPPacket.isRTCP(bytes)
        guard let compound = try? RTCPCompoundPacket(parsing: bytes) else { return }
        guard let rebuilt = try? compound.serialized() else { throw Finding(description: "an accepted RTCP packet could not be rebuilt") }
        guard (try? RTCPCompoundPacket(parsing: rebuilt)) == compound else {
            throw Finding(description: "RTCP parse → build → parse changed the packets")
        }
    }

    private static func rtmp(_ bytes: [UInt8]) throws(Finding) {
        // A whole session: the handshake first, then commands; a publish request is accepted so
        // that media messages are reached too.
        var generator = FixedRandom()
        var session = RTMPServerSession(configuration: .init(maxHeldBytes: 1 << 16), using: &generator)
        let cuts = [0, 1537, 3073, bytes.count / 2, bytes.count].filter { $0 <= bytes.count }.sorted()
        feeding: for (start, end) in zip(cuts, cuts.dropFirst()) where start < end {
            do {
                for action in try session.receive(bytes[start..<end]) {
                    if case .publishRequested = action { _ = try session.accept() }
                }
            } catch {
                break feeding
            }
        }
        _ = session.connectionClosed()

        // The chunk demuxer alone, after a handshake: split anywhere, the same messages.
        let limits = RTMPChunkDemuxer.Limits()
        var whole = RTMPChunkDemuxer(limits: limits), split = RTMPChunkDemuxer(limits: limits)
        let wholeEvents = try? whole.feed(bytes)
        let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
        var splitEvents: [RTMPChunkDemuxer.Event]? = nil
        if let first = try? split.feed(bytes[..<cut]), let second = try? split.feed(bytes[cut...]) { splitEvents = first + second }
        if let wholeEvents, let splitEvents, wholeEvents != splitEvents {
            throw Finding(description: "the chunk demuxer gave other messages for the same bytes split at \(cut)")
        }

        // The bytes as a video message's body: its header alone names the codec the whole reading
        // does; AVC in the legacy form FLV demuxers read says the same.
        if let tag = try? FLVVideoTag(parsing: bytes), let named = FLVVideoTag.codec(of: bytes),
           named.codec != tag.codec || named.isEnhanced != tag.isEnhanced {
            throw Finding(description: "a video message's header names another codec than its reading")
        }
        if let tag = try? FLVVideoTag(parsing: bytes), let legacy = tag.legacyAVCBody {
            guard let again = try? FLVVideoTag(parsing: legacy), !again.isEnhanced, again.codec == tag.codec,
                  again.content == tag.content, again.isKeyframe == tag.isKeyframe else {
                throw Finding(description: "an AVC video message's legacy form reads otherwise")
            }
        }
    }

    private static func amf0(_ bytes: [UInt8]) throws(Finding) {
        guard let values = try? AMF0.decode(bytes), let encoded = try? AMF0.encode(values) else { return }
        guard let again = try? AMF0.decode(encoded) else { throw Finding(description: "AMF0 refused its own encoding of accepted values") }
        guard (try? AMF0.encode(again)) == encoded else { throw Finding(description: "AMF0 encode → decode → encode changed the bytes") }
    }

    private static func signaling(_ bytes: [UInt8]) throws(Finding) {
        let data = Data(bytes)
        if let envelope = try? SignalingCodec.decodeClientMessage(data), let encoded = try? SignalingCodec.encode(envelope) {
            guard let again = try? SignalingCodec.decodeClientMessage(encoded) else {
                throw Finding(description: "the platform refused its own encoding of an accepted client message")
            }
            guard (try? SignalingCodec.encode(again)) == encoded else { throw Finding(description: "client message encode → decode → encode changed the bytes") }
        }
        if let envelope = try? SignalingCodec.decodeServerMessage(data), let encoded = try? SignalingCodec.encode(envelope) {
            guard let again = try? SignalingCodec.decodeServerMessage(encoded) else {
                throw Finding(description: "the SDK refused its own encoding of an accepted server message")
            }
            guard (try? SignalingCodec.encode(again)) == encoded else { throw Finding(description: "server message encode → decode → encode changed the bytes") }
        }
    }

    /// The secret the token harness verifies with; its seeds are signed with another one.
    public static let tokenSecret = "fuzz-secret-never-used-to-sign"

    private static func token(_ bytes: [UInt8]) throws(Finding) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = DigestToken.isDigestToken(text)
        _ = try? DigestToken.decode(text)
        if case .verified = DigestToken.verify(text, applicationId: "fuzz-app", secret: tokenSecret) {
            throw Finding(description: "a token not signed with the secret verified")
        }
        _ = DigestToken.verify(text, secret: tokenSecret)
    }

    private static func fmp4(_ bytes: [UInt8]) throws(Finding) {
        guard let scan = try? FMP4.scan(bytes) else { return }
        guard scan.completeEnd <= UInt64(bytes.count), scan.movieEnd <= scan.completeEnd else {
            throw Finding(description: "the scan's safe end \(scan.completeEnd) (movie end \(scan.movieEnd)) is outside a file of \(bytes.count) bytes")
        }
        guard scan.hasMovie else { return }
        // What recovery does: cut at the safe end. The cut file must scan clean, with the same fragments.
        guard let cut = try? FMP4.scan(Array(bytes[..<Int(scan.completeEnd)])) else {
            throw Finding(description: "the file cut at its safe end \(scan.completeEnd) no longer scans")
        }
        guard cut.tail == .none, cut.fragmentCount == scan.fragmentCount, cut.completeEnd == scan.completeEnd else {
            throw Finding(description: "the file cut at \(scan.completeEnd) scans as \(cut.fragmentCount) fragments, tail \(cut.tail); was \(scan.fragmentCount)")
        }
    }

    private static func av1(_ bytes: [UInt8]) throws(Finding) {
        guard let first = bytes.first else { return }
        // As a temporal unit, packetized at a limit the first byte chooses.
        let limit = 8 + Int(first) * 5
        let unit = Array(bytes.dropFirst())
        if let packets = try? AV1Payload.packetize(temporalUnit: unit, maximumPayloadSize: limit) {
            if let long = packets.first(where: { $0.payload.count > limit }) {
                throw Finding(description: "an AV1 payload of \(long.payload.count) bytes over the limit of \(limit)")
            }
            guard let obus = try? AV1Payload.obus(lowOverhead: unit) else { throw Finding(description: "a unit packetized that does not parse") }
            let sent = obus.filter { ![AV1OBU.temporalDelimiter, AV1OBU.tileList, AV1OBU.padding].contains($0.type) }
            let expected: [AV1Depacketizer.Output] = sent.isEmpty ? []
                : [.temporalUnit([0x12, 0x00] + sent.flatMap(\.withSize), keyframe: AV1Payload.startsCodedVideoSequence(sent))]
            var depacketizer = AV1Depacketizer(waitsForKeyframe: false)
            var outputs: [AV1Depacketizer.Output] = []
            for (index, packet) in packets.enumerated() {
                outputs += depacketizer.take(payload: packet.payload, sequenceNumber: UInt16(truncatingIfNeeded: index), timestamp: 0, marker: packet.marker)
            }
            guard outputs == expected else {
                throw Finding(description: "a unit of \(sent.count) OBUs in \(packets.count) packets came back as \(outputs.count) outputs, not itself")
            }
        }
        // As a run of payloads: each byte of the first 16 ends one at that many bytes on (the
        // marker on odd ones); whatever is handed on must be a delimiter and OBUs that parse.
        var depacketizer = AV1Depacketizer(waitsForKeyframe: first & 1 == 0)
        var rest = unit[...]
        var sequence: UInt16 = 0
        var timestamp: UInt32 = 0
        while !rest.isEmpty {
            let length = max(1, Int(rest.first! & 0x3F))
            let payload = Array(rest.prefix(length))
            rest = rest.dropFirst(length)
            let marker = payload[0] & 0x01 != 0
            for output in depacketizer.take(payload: payload, sequenceNumber: sequence, timestamp: timestamp, marker: marker) {
                guard case .temporalUnit(let handed, _) = output else { continue }
                guard handed.starts(with: [0x12, 0x00]), (try? AV1Payload.obus(lowOverhead: handed)) != nil else {
                    throw Finding(description: "the depacketizer handed on \(handed.count) bytes that do not parse as a temporal unit")
                }
            }
            sequence &+= payload.count % 7 == 0 ? 2 : 1  // now and then a gap
            if marker { timestamp &+= 3_000 }
        }
    }

    private static func scalable(_ bytes: [UInt8]) throws(Finding) {
        let vp9: VP9Descriptor? = bytes.withUnsafeBytes { try? VP9Descriptor(parsing: $0) }
        if let vp9 {
            guard vp9.length <= bytes.count else {
                throw Finding(description: "a VP9 descriptor of \(vp9.length) bytes in a payload of \(bytes.count)")
            }
            let keyframe = vp9.startsFrame && !vp9.interPicturePredicted && (vp9.layers?.spatial ?? 0) == 0
            guard keyframe == bytes.withUnsafeBytes({ VP9Payload.startsKeyframe($0) }) else {
                throw Finding(description: "the VP9 descriptor and the keyframe reader disagree on whether \(vp9) starts a keyframe")
            }
        }
        guard let first = bytes.first else { return }
        let split = min(bytes.count, 1 + Int(first & 0x3F))
        let head = Array(bytes[1..<split]), tail = Array(bytes[split...])
        let structure = (try? DependencyDescriptor(parsing: head, structure: nil))?.structure
        for part in [head, tail] {
            guard let descriptor = try? DependencyDescriptor(parsing: part, structure: structure) else { continue }
            guard let used = descriptor.structure ?? structure else { throw Finding(description: "a descriptor read without a structure") }
            guard descriptor.indications.count == used.decodeTargetCount,
                  used.templates.contains(where: { $0.spatial == descriptor.spatial && $0.temporal == descriptor.temporal }) else {
                throw Finding(description: "a frame of S\(descriptor.spatial)T\(descriptor.temporal) with \(descriptor.indications.count) indications, not one of its structure's \(used.templates.count) templates")
            }
        }
    }

    private static func h264(_ bytes: [UInt8]) throws(Finding) {
        if let length = bytes.withUnsafeBytes({ VP8Payload.descriptorLength($0) }), length > bytes.count {
            throw Finding(description: "a VP8 descriptor of \(length) bytes in a payload of \(bytes.count)")
        }
        bytes.withUnsafeBytes { raw in
            _ = H264Payload.startsKeyframe(raw)
            _ = H264Payload.packetStartsKeyframe(raw)
            _ = VP8Payload.startsKeyframe(raw)
            _ = VP8Payload.packetStartsKeyframe(raw)
            _ = VP9Payload.startsKeyframe(raw)
            _ = VP9Payload.packetStartsKeyframe(raw)
            _ = H265Payload.startsKeyframe(raw)
            _ = H265Payload.startsWithParameterSets(raw)
            _ = H265Payload.packetStartsKeyframe(raw)
        }
        _ = try? H265Configuration(vps: [0x40, 0x01], sps: bytes, pps: [0x44, 0x01])
        _ = H264.nalUnits(annexB: bytes)
        _ = H264.parameterSets(annexB: bytes)
        _ = H264.containsIDR(annexB: bytes)
        _ = H264.lengthPrefixed(annexB: bytes)
    }
}

/// A fixed "random" source, so that a session's handshake bytes are the same on every run of an input.
struct FixedRandom: RandomNumberGenerator {
    private var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

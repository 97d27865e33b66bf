import PCastProtocol
import Testing

/// The AV1 RTP payload format (AOMedia v1.0), both halves, by hand and by seeded round trips.
@Suite("AV1 RTP payload format: packetizing and reassembling temporal units")
struct AV1PayloadTests {
    /// A temporal unit as av1enc writes it: a temporal delimiter, then OBUs with `obu_size`.
    static func unit(_ obus: [AV1OBU]) -> [UInt8] {
        [0x12, 0x00] + obus.flatMap(\.withSize)
    }

    /// A sequence header (not reduced) and a key frame's frame OBU (show_existing_frame 0, KEY_FRAME).
    static func keyframeOBUs(frameSize: Int) -> [AV1OBU] {
        [AV1OBU(type: AV1OBU.sequenceHeader, payload: [0x00, 0x00, 0x00, 0x0C, 0xC4]),
         AV1OBU(type: AV1OBU.frame, payload: [0x10] + (0..<frameSize).map { UInt8(truncatingIfNeeded: $0 &* 7) })]
    }

    /// An inter frame (frame_type INTER_FRAME = 1 in bits 6–5 of its first byte).
    static func interOBUs(frameSize: Int, seed: Int = 0) -> [AV1OBU] {
        [AV1OBU(type: AV1OBU.frame, payload: [0x30] + (0..<frameSize).map { UInt8(truncatingIfNeeded: $0 &+ seed) })]
    }

    /// Feeds `packets` (of one unit each) through a depacketizer with consecutive sequence numbers.
    static func reassemble(_ units: [[AV1Payload.Packet]], into depacketizer: inout AV1Depacketizer, skipping: Set<Int> = []) -> [AV1Depacketizer.Output] {
        var outputs: [AV1Depacketizer.Output] = []
        var sequence: UInt16 = 65_530  // wraps
        for (index, packets) in units.enumerated() {
            for packet in packets {
                defer { sequence &+= 1 }
                if skipping.contains(Int(sequence &- 65_530)) { continue }
                outputs += depacketizer.take(payload: packet.payload, sequenceNumber: sequence, timestamp: UInt32(index) * 3_000, marker: packet.marker)
            }
        }
        return outputs
    }

    @Test("a small key unit is one packet: the temporal delimiter left out, OBUs without obu_size, W = 2 with the last element unprefixed, N and the marker set; reassembled it is the unit again")
    func smallKeyUnit() throws {
        let obus = Self.keyframeOBUs(frameSize: 20)
        let packets = try AV1Payload.packetize(temporalUnit: Self.unit(obus), maximumPayloadSize: 1_200)
        #expect(packets.count == 1)
        let payload = try #require(packets.first).payload
        #expect(payload[0] == 0x28, "Z 0, Y 0, W 2, N 1: \(payload[0])")
        #expect(payload[1] == 6 && payload[2] == AV1OBU.sequenceHeader << 3, "the sequence header, 6 bytes, no size field")
        #expect(payload[8] == AV1OBU.frame << 3 && payload.count == 1 + 1 + 6 + 22)
        #expect(packets[0].marker)
        #expect(payload.withUnsafeBytes { AV1Payload.startsKeyframe($0) })
        var depacketizer = AV1Depacketizer()
        #expect(Self.reassemble([packets], into: &depacketizer) == [.temporalUnit(Self.unit(obus), keyframe: true)])
    }

    @Test("an OBU larger than a packet is fragmented: every payload within the limit, Y on all but the last fragment's packet, Z on all but the first, N on the first packet only, the marker on the last; the unit comes back whole")
    func fragmentation() throws {
        let obus = Self.keyframeOBUs(frameSize: 5_000)
        let packets = try AV1Payload.packetize(temporalUnit: Self.unit(obus), maximumPayloadSize: 1_200)
        #expect(packets.count == 5, "\(packets.map(\.payload.count))")
        for (index, packet) in packets.enumerated() {
            let header = packet.payload[0]
            #expect(packet.payload.count <= 1_200)
            #expect((header & 0x80 != 0) == (index > 0), "Z of packet \(index)")
            #expect((header & 0x40 != 0) == (index < packets.count - 1), "Y of packet \(index)")
            #expect((header & 0x08 != 0) == (index == 0), "N of packet \(index)")
            #expect(packet.marker == (index == packets.count - 1))
        }
        #expect(packets.filter { $0.payload.withUnsafeBytes { AV1Payload.startsKeyframe($0) } }.count == 1)
        var depacketizer = AV1Depacketizer()
        #expect(Self.reassemble([packets], into: &depacketizer) == [.temporalUnit(Self.unit(obus), keyframe: true)])
    }

    @Test("seeded round trips: 300 units of 1 to 12 OBUs (0 to 4,000 bytes, some with extension bytes) at payload limits of 8 to 1,400 bytes come back exactly as the decoder's format, with no payload over its limit")
    func roundTrips() throws {
        var random = SeededGenerator(seed: 43)
        var units: [[AV1Payload.Packet]] = []
        var expected: [AV1Depacketizer.Output] = []
        for index in 0..<300 {
            var obus = index % 10 == 0 ? Self.keyframeOBUs(frameSize: Int.random(in: 0...3_000, using: &random)) : []
            for _ in 0..<Int.random(in: 1...12, using: &random) {
                let size = Int.random(in: 0...4_000, using: &random)
                let extensionByte: UInt8? = Bool.random(using: &random) ? UInt8.random(in: 0...255, using: &random) & 0xF8 : nil
                obus.append(AV1OBU(type: [3, 4, 5, 6].randomElement(using: &random)!, extensionByte: extensionByte,
                                   payload: [0x30] + (0..<size).map { _ in UInt8.random(in: 0...255, using: &random) }))
            }
            let limit = Int.random(in: 8...1_400, using: &random)
            let packets = try AV1Payload.packetize(temporalUnit: Self.unit(obus), maximumPayloadSize: limit)
            #expect(packets.allSatisfy { $0.payload.count <= limit }, "unit \(index) at \(limit)")
            units.append(packets)
            expected.append(.temporalUnit(Self.unit(obus), keyframe: index % 10 == 0))
        }
        var depacketizer = AV1Depacketizer()
        let outputs = Self.reassemble(units, into: &depacketizer)
        #expect(outputs.count == expected.count)
        for (index, pair) in zip(outputs, expected).enumerated() where pair.0 != pair.1 {
            Issue.record("unit \(index) came back different")
            break
        }
    }

    @Test("a lost fragment drops its whole unit (reported once), the inter units after it are skipped without another report, and the next key unit is handed on; a unit whose first packets were lost is dropped unless it starts with N")
    func lossDropsUnits() throws {
        let key = try AV1Payload.packetize(temporalUnit: Self.unit(Self.keyframeOBUs(frameSize: 2_000)), maximumPayloadSize: 500)
        let inter = try (0..<3).map { try AV1Payload.packetize(temporalUnit: Self.unit(Self.interOBUs(frameSize: 1_500, seed: $0)), maximumPayloadSize: 500) }
        let stream = [key, inter[0], inter[1], key, inter[2]]
        let firstInter = key.count  // the index of unit 1's first packet
        var depacketizer = AV1Depacketizer()
        let outputs = Self.reassemble(stream, into: &depacketizer, skipping: [firstInter + 1])
        #expect(outputs.count == 4, "\(outputs.map(\.summary))")
        #expect(outputs.first?.summary == "unit key")
        if case .dropped(let why)? = outputs.dropFirst().first { #expect(why.contains("lost"), "\(why)") } else { Issue.record("no drop reported: \(outputs.map(\.summary))") }
        #expect(outputs.dropFirst(2).map(\.summary) == ["unit key", "unit"])

        // The head of an inter unit lost: dropped; the head of a key unit lost before its N packet: fine.
        var other = AV1Depacketizer()
        let headLost = Self.reassemble([key, inter[0], key], into: &other, skipping: [firstInter])
        #expect(headLost.map(\.summary) == ["unit key", "dropped", "unit key"], "\(headLost.map(\.summary))")
    }

    @Test("waiting for a keyframe: inter units before the first key unit are skipped, the keyframe asked for at the first and again every 10 skipped; without waiting they are handed on")
    func waitsForKeyframe() throws {
        let key = try AV1Payload.packetize(temporalUnit: Self.unit(Self.keyframeOBUs(frameSize: 100)), maximumPayloadSize: 1_200)
        let inter = try AV1Payload.packetize(temporalUnit: Self.unit(Self.interOBUs(frameSize: 100)), maximumPayloadSize: 1_200)
        var waiting = AV1Depacketizer(waitsForKeyframe: true)
        #expect(Self.reassemble([inter, inter, key, inter], into: &waiting).map(\.summary) == ["dropped", "unit key", "unit"])
        var patient = AV1Depacketizer(waitsForKeyframe: true)
        let long = Self.reassemble(Array(repeating: inter, count: 2 * AV1Depacketizer.repeatRequestAfter + 1) + [key], into: &patient)
        #expect(long.map(\.summary) == ["dropped", "dropped", "dropped", "unit key"], "asked again every \(AV1Depacketizer.repeatRequestAfter) units: \(long.map(\.summary))")
        var eager = AV1Depacketizer(waitsForKeyframe: false)
        #expect(Self.reassemble([inter, key], into: &eager).map(\.summary) == ["unit", "unit key"])
    }

    @Test("malformed payloads are dropped, never handed on cut: an empty payload, Z on a unit's first packet, W counting more elements than there are, an element length past the end, an OBU with its forbidden bit, Y with the marker, a unit whose marker never came")
    func malformed() {
        let cases: [(String, [[UInt8]], [Bool])] = [
            ("empty", [[]], [true]),
            ("Z first", [[0x90, 0x30, 0x01]], [true]),
            ("W too many", [[0x30, 0x02, 0x30, 0x01]], [true]),
            ("length past end", [[0x00, 0x09, 0x30, 0x01]], [true]),
            ("forbidden bit", [[0x10, 0xB0, 0x01]], [true]),
            ("Y with marker", [[0x50, 0x30, 0x01]], [true]),
        ]
        for (what, payloads, markers) in cases {
            var depacketizer = AV1Depacketizer(waitsForKeyframe: false)
            var outputs: [AV1Depacketizer.Output] = []
            for (index, payload) in payloads.enumerated() {
                outputs += depacketizer.take(payload: payload, sequenceNumber: UInt16(index), timestamp: 0, marker: markers[index])
            }
            #expect(outputs.map(\.summary) == ["dropped"], "\(what): \(outputs)")
        }
        var unfinished = AV1Depacketizer(waitsForKeyframe: false)
        #expect(unfinished.take(payload: [0x10, 0x30, 0x01], sequenceNumber: 1, timestamp: 0, marker: false).isEmpty)
        #expect(unfinished.take(payload: [0x10, 0x30, 0x02], sequenceNumber: 2, timestamp: 3_000, marker: true).map(\.summary) == ["dropped", "unit"])
    }

    @Test("units that do not parse are refused with a typed error: an obu_size past the end, a LEB128 over 8 bytes, a forbidden bit; a limit under 8 bytes; a unit of a delimiter and padding makes no packet; obu_size written in 1, 2 and 3 LEB128 bytes at their edges")
    func refusals() throws {
        #expect(throws: AV1PayloadError.self) { try AV1Payload.packetize(temporalUnit: [0x32, 0x05, 0x00], maximumPayloadSize: 1_200) }
        #expect(throws: AV1PayloadError.self) { try AV1Payload.packetize(temporalUnit: [0x32] + [UInt8](repeating: 0xFF, count: 9), maximumPayloadSize: 1_200) }
        #expect(throws: AV1PayloadError.self) { try AV1Payload.packetize(temporalUnit: [0xB2, 0x00], maximumPayloadSize: 1_200) }
        #expect(throws: AV1PayloadError.payloadSizeTooSmall(7)) { try AV1Payload.packetize(temporalUnit: [0x12, 0x00], maximumPayloadSize: 7) }
        #expect(try AV1Payload.packetize(temporalUnit: [0x12, 0x00, 0x7A, 0x01, 0x00], maximumPayloadSize: 100).isEmpty, "a delimiter and padding: nothing to send")
        for (value, size) in [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3)] {
            let bytes = AV1OBU(type: 4, payload: [UInt8](repeating: 0, count: value)).withSize
            #expect(bytes.count == 1 + size + value && bytes[0] == 0x22, "obu_size \(value) in \(size) bytes")
        }
    }
}

extension AV1Depacketizer.Output {
    var summary: String {
        switch self {
        case .temporalUnit(_, let keyframe): keyframe ? "unit key" : "unit"
        case .dropped: "dropped"
        }
    }
}

/// SplitMix64: reproducible random units.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

import PCastProtocol
@testable import PCastRelay
import Testing

/// Scalable video through the relay's router: each viewer is sent the layers its budget allows,
/// renumbered without a gap, with the marker bit on the last packet it gets of each picture.
@Suite("Relay router: scalable video (VP9 layers, AV1 dependency descriptors)")
struct ScalableRouterTests {
    static let ssrc: UInt32 = 0x5000
    static let ms: UInt64 = 1_000_000

    /// What one viewer was sent of one packet.
    struct Sent: Equatable {
        var sequence: UInt16
        var marker: Bool
        var picture: Int
        var spatial: Int
        var temporal: Int
    }

    /// A VP9 stream in L3T3_KEY, as Chromium sends it: temporal pattern 0 2 1 2 (switching-up
    /// points on the second and third picture), a keyframe every `keyEvery` pictures (every
    /// spatial layer free of earlier pictures, the upper ones predicted from the layer below),
    /// and between keyframes each spatial layer on its own (Z set below the top). Each layer frame
    /// is two packets; the last of the top layer carries the marker bit.
    static func vp9Picture(_ picture: Int, firstSequence: UInt16, keyEvery: Int = 60) throws -> [(packet: [UInt8], spatial: Int, temporal: Int)] {
        let key = picture % keyEvery == 0
        let temporal = [0, 2, 1, 2][picture % 4]
        let switchingUp = [false, true, true, false][picture % 4]
        var packets: [(packet: [UInt8], spatial: Int, temporal: Int)] = []
        var sequence = firstSequence
        for spatial in 0..<3 {
            for part in 0..<2 {
                var flags: UInt8 = 0x80 | 0x20
                if !key { flags |= 0x40 }
                if part == 0 { flags |= 0x08 }
                if part == 1 { flags |= 0x04 }
                if !key || spatial == 2 { flags |= 0x01 }
                let layers = UInt8(temporal << 5) | (switchingUp ? 0x10 : 0) | UInt8(spatial << 1) | (key && spatial > 0 ? 1 : 0)
                let payload = [flags, UInt8(picture & 0x7F), layers, UInt8(picture / 4 & 0xFF)] + [UInt8](repeating: 0x11, count: [100, 300, 900][spatial])
                let packet = try RTPPacket(marker: spatial == 2 && part == 1, payloadType: 98, sequenceNumber: sequence,
                                           timestamp: UInt32(picture * 3000), ssrc: ssrc, payload: payload[...]).serialized()
                packets.append((packet, spatial, temporal))
                sequence &+= 1
            }
        }
        return packets
    }

    /// A router with one VP9 or AV1 stream and the given viewers, all reachable.
    static func router(codec: String, viewers: [String]) throws -> (RelayRouter<Int>, StreamHandle) {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        router.addStream(id: "s", tracks: [MediaTrackDescription(kind: .video, codec: codec, payloadType: 98, clockRate: 90_000, ssrc: ssrc)],
                         publisher: 1)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: RelayAddress(ipv4: 1, port: 1))
        for (index, viewer) in viewers.enumerated() {
            let rtcpSSRC = UInt32(500 + index)
            _ = router.addSubscriber(streamId: "s", subscriberId: viewer, rtcpSSRC: rtcpSSRC, context: 100 + index, now: 0)
            router.authenticated(.subscriber(stream: stream, rtcpSSRC: rtcpSSRC), from: RelayAddress(ipv4: 2, port: UInt16(10 + index)), now: 0)
        }
        return (router, stream)
    }

    /// Takes a publisher packet in as the relay does, and what each viewer is sent of it.
    static func deliver(_ packet: [UInt8], descriptor: [UInt8]? = nil, picture: Int, spatial: Int, temporal: Int,
                        to router: inout RelayRouter<Int>, _ stream: StreamHandle, now: UInt64, into sent: inout [[Sent]]) throws {
        let layout = try RTPPacketLayout(parsing: packet)
        _ = router.publisherRTP(stream: stream, track: 0, packet: packet, sequenceNumber: layout.sequenceNumber, timestamp: layout.timestamp, now: now)
        let layers = router.withStream(stream) { stream, state in stream.readLayers(track: 0, packet: packet, descriptor: descriptor, now: now, &state) } ?? nil
        for slot in sent.indices {
            switch router.forwardVideo(stream: stream, track: 0, slot: slot, packet: packet, layers: layers, now: now) {
            case .layered(let sequence, let marker):
                sent[slot].append(Sent(sequence: sequence, marker: marker, picture: picture, spatial: spatial, temporal: temporal))
            case .dropped: break
            case let other: Issue.record("a layered stream's packet went as \(other)")
            }
        }
    }

    /// Whether `sent` is numbered without a gap and every picture it has ends on a marker.
    static func continuous(_ sent: [Sent]) -> Bool {
        zip(sent, sent.dropFirst()).allSatisfy { $1.sequence == $0.sequence &+ 1 && ($0.picture == $1.picture || $0.marker) }
    }

    @Test("VP9 L3T3_KEY: a viewer with room gets every layer of a keyframe and the top layer alone between them; one capped at 300 kbit/s moves down at the next picture to the layer that fits (S1, every frame), numbered on without a gap with the marker on its layer's last packet; its cap lifted, it climbs after a second with room, a keyframe asked for, and is on the top layer from the next keyframe")
    func vp9SpatialLayers() throws {
        var (router, stream) = try Self.router(codec: "VP9", viewers: ["top", "capped"])
        var sent: [[Sent]] = [[], []]
        var sequence: UInt16 = 65_000
        var picture = 0
        var actions: [RelayAction<Int>] = []
        func run(until end: Int) throws {
            while picture < end {
                let now = UInt64(picture) * 33 * Self.ms
                for (packet, spatial, temporal) in try Self.vp9Picture(picture, firstSequence: sequence) {
                    try Self.deliver(packet, picture: picture, spatial: spatial, temporal: temporal, to: &router, stream, now: now, into: &sent)
                }
                sequence &+= 6
                actions += router.tick(now: now)
                picture += 1
            }
        }
        try run(until: 90)
        #expect(sent[0].count == sent[1].count && Self.continuous(sent[0]))
        let keyframe = sent[0].filter { $0.picture == 60 }.map(\.spatial)
        let between = Set(sent[0].filter { $0.picture == 61 }.map(\.spatial))
        #expect(keyframe == [0, 0, 1, 1, 2, 2] && between == [2], "keyframe: \(keyframe), between: \(between)")
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "top")?.current == "S2T2")

        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "capped", bitsPerSecond: 300_000, now: 90 * 33 * Self.ms)
        let capStart = sent[1].count
        try run(until: 150)
        let capped = Array(sent[1][capStart...])
        // Its layer alone between keyframes; at a keyframe the base layer too (the one above refers to it).
        #expect(capped.filter { $0.picture % 60 != 0 }.allSatisfy { $0.spatial == 1 }, "\(Set(capped.map(\.spatial)))")
        #expect(capped.filter { $0.picture == 120 }.map(\.spatial) == [0, 0, 1, 1])
        #expect(Set(capped.map(\.picture)).count == 60, "every picture: \(Set(capped.map(\.picture)).count)")
        #expect(Self.continuous(sent[1]), "numbered on without a gap across the move")
        #expect(capped.filter(\.marker).count == 60 && capped.filter(\.marker).allSatisfy { $0.spatial == 1 })
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "capped")?.current == "S1T2")
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "capped")?.reduced == false, "its own limit, not its link")

        // Lifted: it climbs once the better layer has had room for a second (its estimate, here
        // none, has to allow it), asking for the keyframe k-SVC's upper layer starts at.
        actions = []
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "capped", bitsPerSecond: nil, now: 150 * 33 * Self.ms)
        let liftStart = sent[1].count
        try run(until: 250)
        let keyframeRequests = try actions.filter { action in
            guard case .toPublisher(_, _, let rtcp) = action else { return false }
            return try RTCPCompoundPacket(parsing: rtcp).packets.contains { if case .pictureLossIndication = $0 { true } else { false } }
        }
        #expect(!keyframeRequests.isEmpty, "a keyframe asked for the move up")
        let back = Array(sent[1][liftStart...])
        #expect(back.filter { $0.picture < 240 && $0.picture % 60 != 0 }.allSatisfy { $0.spatial == 1 }, "S1 until the keyframe")
        #expect(back.filter { $0.picture > 240 }.allSatisfy { $0.spatial == 2 } && back.contains { $0.picture > 240 }, "the top layer from it")
        #expect(Self.continuous(sent[1]) && Self.continuous(sent[0]))
        #expect(router.counters.layerSwitches >= 2)
    }

    /// AV1 in L1T3 with the dependency descriptor: the keyframe carries libwebrtc's L1T3
    /// structure (as PCastProtocolTests' ScalableDescriptorTests reads it), later frames a
    /// template per the 0 2 1 2 pattern.
    static let l1t3Structure: [UInt8] = [0x80, 0x02, 0x14, 0xEA, 0xA8, 0x60, 0x41, 0x4D, 0x14, 0x12, 0x20, 0x84, 0x27, 0x02, 0x7F, 0x01, 0xDF]

    static func av1Frame(_ frame: Int, sequence: UInt16) throws -> (packet: [UInt8], descriptor: [UInt8], temporal: Int) {
        let key = frame == 0
        let template = key ? 0 : [1, 3, 2, 4][frame % 4]
        let temporal = [0, 0, 1, 2, 2][template]
        var descriptor: [UInt8]
        if key {
            descriptor = [0xC0, 0x00, 0x00] + Self.l1t3Structure
        } else {
            descriptor = [0xC0 | UInt8(template), UInt8(frame >> 8), UInt8(frame & 0xFF)]
        }
        let payload: [UInt8] = [key ? 0x18 : 0x10, 0x0A, 0x0B, 0x00, 0x00] + [UInt8](repeating: 0x22, count: [1_000, 600, 400][temporal])
        let packet = try RTPPacket(marker: true, payloadType: 98, sequenceNumber: sequence, timestamp: UInt32(frame * 3000), ssrc: ssrc,
                                   payload: payload[...]).serialized()
        return (packet, descriptor, temporal)
    }

    @Test("AV1 L1T3 by its dependency descriptor: a viewer capped below the middle layer's rate gets the base layer alone (a quarter of the frames) without a gap; its cap raised, it is back on every frame from the next frame whose indication for the full rate is switch (a T1 frame, -DS), and not at a T2 frame before it")
    func av1TemporalLayers() throws {
        var (router, stream) = try Self.router(codec: "AV1", viewers: ["top", "capped"])
        var sent: [[Sent]] = [[], []]
        var frame = 0
        func run(until end: Int) throws {
            while frame < end {
                let now = UInt64(frame) * 33 * Self.ms
                let (packet, descriptor, temporal) = try Self.av1Frame(frame, sequence: UInt16(frame))
                try Self.deliver(packet, descriptor: descriptor, picture: frame, spatial: 0, temporal: temporal, to: &router, stream, now: now, into: &sent)
                _ = router.tick(now: now)
                frame += 1
            }
        }
        try run(until: 90)
        #expect(sent[0].count == 90 && sent[1].count == 90)
        // The base layer alone: one packet of 1,017 bytes every 133 ms, 61 kbit/s; with the
        // middle layer 98 kbit/s; all three 148 kbit/s.
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "capped", bitsPerSecond: 80_000, now: 90 * 33 * Self.ms)
        let capStart = sent[1].count
        try run(until: 149)
        let capped = Array(sent[1][capStart...])
        #expect(capped.count == 15 && capped.allSatisfy { $0.temporal == 0 }, "\(capped.map(\.temporal))")
        #expect(Self.continuous(sent[1]))
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "capped")?.current == "S0T0")
        // A limit the viewer raises itself is followed at once.
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "capped", bitsPerSecond: 10_000_000, now: 149 * 33 * Self.ms)
        try run(until: 150)   // a T2 frame ("--D"): no switch point for the full rate
        #expect(sent[1].count == capStart + 15)
        try run(until: 160)
        let back = Array(sent[1][(capStart + 15)...])
        #expect(back.map(\.picture) == Array(150..<160), "from frame 150 (T1, \"-DS\") on: \(back.map(\.picture))")
        #expect(Self.continuous(sent[1]) && sent[0].count == 160)
    }

    @Test("renumbering: a viewer's numbers skip what it is not sent; a packet that came late is numbered by the drops before it only; a NACK of its numbers maps back to the packet and marker it was sent; a late packet of a dropped layer leaves its place empty")
    func renumbering() {
        var numbering = SequenceRenumbering()
        #expect(numbering.forward(100, marker: false) == 100)
        numbering.drop(101)
        numbering.drop(102)
        #expect(numbering.forward(104, marker: true) == 102, "103 not here yet: its place kept")
        #expect(numbering.forward(103, marker: false) == 101, "late, after two drops before it")
        numbering.drop(105)
        #expect(numbering.forward(106, marker: false) == 103)
        #expect(numbering.original(ofSent: 102)?.original == 104 && numbering.original(ofSent: 102)?.marker == true)
        #expect(numbering.original(ofSent: 101)?.original == 103)
        #expect(numbering.original(ofSent: 104) == nil, "nothing sent as 104 yet")
        numbering.drop(107)
        #expect(numbering.forward(109, marker: false) == 105)
        numbering.drop(108)   // late and dropped: 104 stays empty
        #expect(numbering.original(ofSent: 104) == nil)
        var wrapping = SequenceRenumbering()
        #expect(wrapping.forward(65_534, marker: false) == 65_534)
        wrapping.drop(65_535)
        #expect(wrapping.forward(0, marker: false) == 65_535 && wrapping.forward(1, marker: false) == 0, "across the wrap")
        #expect(wrapping.original(ofSent: 0)?.original == 1)
    }

    @Test("a NACK of a capped viewer's numbers is answered from the cache: the packet it was sent, under its number and with its marker bit")
    func nackAnsweredInViewersNumbering() throws {
        var (router, stream) = try Self.router(codec: "VP9", viewers: ["capped"])
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "capped", bitsPerSecond: 1, now: 0)
        var sent: [[Sent]] = [[]]
        var packets: [UInt16: [UInt8]] = [:]
        for picture in 0..<70 {
            let now = UInt64(picture) * 33 * Self.ms
            for (index, (packet, spatial, temporal)) in try Self.vp9Picture(picture, firstSequence: UInt16(picture * 6)).enumerated() {
                packets[UInt16(picture * 6 + index)] = packet
                try Self.deliver(packet, picture: picture, spatial: spatial, temporal: temporal, to: &router, stream, now: now, into: &sent)
            }
            _ = router.tick(now: now)
        }
        let last = try #require(sent[0].last)
        #expect(last.marker && last.spatial == 0, "the base layer's last packet ends each of its pictures")
        let nack = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.ssrc, lostSequenceNumbers: [last.sequence]))
        let answers = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [nack], now: 40 * 33 * Self.ms)
        guard case .retransmit(_, _, let rtp)? = answers.first else {
            Issue.record("no retransmission: \(answers)")
            return
        }
        let layout = try RTPPacketLayout(parsing: rtp)
        #expect(layout.sequenceNumber == last.sequence && layout.marker, "sent as \(layout.sequenceNumber), marker \(layout.marker)")
        let original = try #require(packets[UInt16((last.picture) * 6 + 1)])
        #expect(Array(rtp[12...]) == Array(original[12...]), "the base layer's second packet of its last picture")
    }

    @Test("a scalable video's viewers' losses choose their layers and are left out of the report to the publisher (its one encoding serves every viewer), as a simulcast viewer's are")
    func viewersLossesStayOutOfThePublishersReport() throws {
        var (router, stream) = try Self.router(codec: "VP9", viewers: ["lossy"])
        var sent: [[Sent]] = [[]]
        for picture in 0..<40 {
            let now = UInt64(picture) * 33 * Self.ms
            for (packet, spatial, temporal) in try Self.vp9Picture(picture, firstSequence: UInt16(picture * 6)) {
                try Self.deliver(packet, picture: picture, spatial: spatial, temporal: temporal, to: &router, stream, now: now, into: &sent)
            }
        }
        let lossy = RTCPReportBlock(ssrc: Self.ssrc, fractionLost: 128, cumulativeLost: 50, extendedHighestSequenceNumber: 200)
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [.receiverReport(RTCPReceiverReport(ssrc: 500, reportBlocks: [lossy]))],
                                  now: 40 * 33 * Self.ms)
        guard case .toPublisher(_, _, let rtcp)? = router.receiverReport(stream: stream, now: 41 * 33 * Self.ms) else {
            Issue.record("no receiver report to the publisher")
            return
        }
        let blocks = try RTCPCompoundPacket(parsing: rtcp).packets.flatMap { packet -> [RTCPReportBlock] in
            if case .receiverReport(let report) = packet { return report.reportBlocks }
            return []
        }
        let block = try #require(blocks.first { $0.ssrc == Self.ssrc })
        #expect(block.fractionLost == 0 && block.cumulativeLost == 0, "\(block)")
    }

    @Test("a viewer whose join keyframe passed before it could be sent it is not left waiting: while it has had no keyframe, each timer round asks the publisher for one")
    func waitingViewerAsksForAKeyframe() throws {
        var (router, stream) = try Self.router(codec: "VP9", viewers: ["late"])
        var none: [[Sent]] = []
        var sent: [[Sent]] = [[]]
        // The keyframe picture reaches the relay before the viewer is sent anything.
        for (packet, spatial, temporal) in try Self.vp9Picture(0, firstSequence: 0) {
            try Self.deliver(packet, picture: 0, spatial: spatial, temporal: temporal, to: &router, stream, now: 0, into: &none)
        }
        var requests = 0
        for picture in 1..<60 {
            let now = UInt64(picture) * 33 * Self.ms
            for (packet, spatial, temporal) in try Self.vp9Picture(picture, firstSequence: UInt16(picture * 6)) {
                try Self.deliver(packet, picture: picture, spatial: spatial, temporal: temporal, to: &router, stream, now: now, into: &sent)
            }
            for action in router.tick(now: now) {
                guard case .toPublisher(_, _, let rtcp) = action,
                      (try RTCPCompoundPacket(parsing: rtcp)).packets.contains(where: { if case .pictureLossIndication = $0 { true } else { false } })
                else { continue }
                requests += 1
            }
        }
        #expect(sent[0].isEmpty, "nothing before a keyframe")
        #expect(requests >= 1, "a keyframe asked for the waiting viewer")
    }
}

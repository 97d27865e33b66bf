import PCastContracts
import PCastProtocol
@testable import PCastRelay
import Testing

/// Claims of the API guide (PCast.docc/APIGuide.md) about the relay, checked on its pure pieces.
@Suite("API guide claims: the relay's retransmission budget and a simulcast publisher's REMB")
struct RelayAPIGuideClaimsTests {
    static let ms: UInt64 = 1_000_000, s: UInt64 = 1_000_000_000

    @Test("without an estimate every retransmission goes; with an 8 Mbit/s REMB every 250 ms, 2 s of 1 200-byte retransmissions every millisecond send 550 000 to 562 500 bytes (a quarter of the estimate, 500 000, plus a quarter second's worth of it, 62 500); 3 s after the last REMB nothing is held back again")
    func retransmissionBudget() {
        var budget = RetransmissionBudget()
        var unlimited = 0
        for step in UInt64(1)...1_000 {
            if budget.spend(1_200, now: step * Self.ms) { unlimited += 1 }
        }
        #expect(unlimited == 1_000, "no estimate yet: nothing is held back")

        let start = 10 * Self.s
        budget.estimate(8_000_000, now: start)
        var sent = 0
        for step in UInt64(1)...2_000 {
            let now = start + step * Self.ms
            if step % 250 == 0 { budget.estimate(8_000_000, now: now) }
            if budget.spend(1_200, now: now) { sent += 1_200 }
        }
        // Offered: 2 400 000 bytes (9.6 Mbit/s). A quarter of 8 Mbit/s is 250 000 bytes a second.
        #expect((550_000...562_500).contains(sent), "\(sent) bytes resent in 2 s")

        var stale = 0
        for step in UInt64(1)...100 {
            if budget.spend(1_200, now: start + 5 * Self.s + Self.ms + step * Self.ms) { stale += 1 }
        }
        #expect(stale == 100, "the last REMB is over 3 s old: nothing is held back")
    }

    /// `bits` as a REMB carries it (an 18-bit mantissa: low bits truncated).
    static func encoded(_ bits: UInt64) -> UInt64 {
        RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, bitrate: bits, ssrcs: []).bitrate
    }

    /// The REMB a compound packet to the publisher carries, if any.
    static func remb(_ action: RelayAction<Int>?) throws -> RTCPReceiverEstimatedMaxBitrate? {
        guard case .toPublisher(1, SimulcastRouterTests.publisher, let bytes)? = action else { return nil }
        for case .receiverEstimatedMaxBitrate(let remb) in try RTCPCompoundPacket(parsing: bytes).packets { return remb }
        return nil
    }

    /// The sum over the stream's layers (best, middle, lowest: tracks 2, 0 and 3 of
    /// `SimulcastRouterTests.router()`) of each layer's estimate, or 1.5 × its arrival rate where
    /// it has none; and the best layer's own estimate.
    static func layerEstimates(_ router: RelayRouter<Int>, _ stream: StreamHandle) throws -> (sum: UInt64, best: Int?) {
        let tracks = try #require(router.streams[stream]?.tracks)
        var sum: UInt64 = 0
        for index in [2, 0, 3] {
            let estimator = try #require(tracks[index].estimator)
            sum += UInt64(estimator.estimate ?? estimator.incomingRate * 3 / 2)
        }
        return (sum, tracks[2].estimator?.estimate)
    }

    @Test("a simulcast publisher whose three layers queue behind a 1 Mbit/s uplink is sent REMBs, at once when an estimate drops and with the receiver report, whose bitrate is the sum of its layers' estimates (1.5 × the arrival rate for a layer without one), more than the best layer's own estimate, naming every layer")
    func simulcastPublisherREMB() throws {
        var (router, stream) = try SimulcastRouterTests.router()
        // 30 fps: the best layer 4 × 1 200 bytes a frame, the middle 1 × 1 200, the lowest 1 × 600
        // (1.58 Mbit/s in all), through one FIFO link of 1 Mbit/s: each frame arrives later.
        let layers: [(track: Int, ssrc: UInt32, packets: Int, size: Int)] = [
            (2, SimulcastRouterTests.high, 4, 1_188), (0, SimulcastRouterTests.middle, 1, 1_188), (3, SimulcastRouterTests.low, 1, 588),
        ]
        var linkFree = 0.0
        var immediate: [(remb: RTCPReceiverEstimatedMaxBitrate, expected: UInt64)] = []
        for frame in 0..<150 {
            let capture = Double(frame) / 30
            for layer in layers {
                for part in 0..<layer.packets {
                    let sequence = UInt16(frame * layer.packets + part)
                    let packet = try rtpPacket(ssrc: layer.ssrc, sequence: sequence, size: layer.size)
                    linkFree = max(linkFree, capture) + Double(packet.count * 8) / 1_000_000
                    let action = router.publisherRTP(stream: stream, track: layer.track, packet: packet, sequenceNumber: sequence,
                                                     timestamp: UInt32(frame * 3_000), now: UInt64(linkFree * 1e9))
                    if let remb = try Self.remb(action) {
                        let expected = try Self.layerEstimates(router, stream).sum
                        immediate.append((remb: remb, expected: expected))
                    }
                }
            }
        }
        let first = try #require(immediate.first, "no REMB while the queue grew")
        #expect(Set(first.remb.ssrcs) == [SimulcastRouterTests.high, SimulcastRouterTests.middle, SimulcastRouterTests.low])
        #expect(immediate.allSatisfy { $0.remb.bitrate == Self.encoded($0.expected) }, "\(immediate.map { ($0.remb.bitrate, $0.expected) })")

        let (sum, best) = try Self.layerEstimates(router, stream)
        let bestEstimate = try #require(best, "the best layer has shown a limit")
        let periodic = try router.tick(now: UInt64(linkFree * 1e9) + 1_000 * Self.ms).compactMap { try Self.remb($0) }
        #expect(periodic.count == 1)
        #expect(periodic.first?.bitrate == Self.encoded(sum), "\(String(describing: periodic.first?.bitrate)) bit/s, layers' sum \(sum)")
        #expect(sum > UInt64(bestEstimate), "the sum, not one layer's estimate: \(sum) against the best layer's \(bestEstimate)")
    }
}

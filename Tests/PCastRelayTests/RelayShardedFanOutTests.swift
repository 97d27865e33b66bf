import Foundation
import PCastContracts
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

/// The fan-out split over the relay's threads (`FanOutWorkers`), over real sockets.
@Suite("Relay sharded fan-out")
struct RelayShardedFanOutTests {
    static let video: UInt32 = 0x5A4D_0001

    /// What one subscriber holds of the stream: every datagram unprotected with its own key, in
    /// arrival order.
    final class Tally {
        let subscriber: TestSubscriber
        var packets: [[UInt8]] = []
        var failures = 0
        init(_ subscriber: TestSubscriber) { self.subscriber = subscriber }

        func drain() {
            for var datagram in subscriber.socket.drain() where !(192...223).contains(datagram[1]) {
                do {
                    try subscriber.receiver.unprotect(&datagram)
                    packets.append(datagram)
                } catch {
                    failures += 1
                }
            }
        }
    }

    @Test("200 subscribers of one stream over 4 fan-out threads each get every stamped packet, complete and in order; the workers took shares (their CPU, the shared count); with segmentation offload the bursts left in GSO messages, without it none did",
          arguments: [true, false])
    func everySubscriberInOrder(segmentation: Bool) throws {
        var configuration = RelayConfiguration()
        configuration.fanOutThreads = 4
        configuration.segmentationOffload = segmentation
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let tallies = try (0..<200).map { Tally(try TestSubscriber(relay: relay, streamId: "s", subscriberId: "v\($0)")) }
        // Every subscriber is reachable once the relay has read its report. A warm-up packet after
        // the reports shows which were read (the relay reads its one socket in order); a receiver
        // that got none sends its report again, as a receiver's RTCP is periodic. (In 2 of 3 full
        // runs of a loaded machine one report of 200 was read seconds late or never; the cause was
        // not found, and the stamped packets below are what this test is about.)
        var unreached = tallies
        var warmUp: UInt16 = 59_000
        for round in 0..<5 where !unreached.isEmpty {
            for tally in unreached { try tally.subscriber.sendReceiverReport() }
            try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: warmUp, size: 300))
            warmUp += 1
            _ = waitUntil(timeout: 2) {
                for tally in unreached { tally.drain() }
                return unreached.allSatisfy { !$0.packets.isEmpty }
            }
            unreached = unreached.filter { $0.packets.isEmpty }
            if !unreached.isEmpty { print("RelayShardedFanOutTests: \(unreached.count) of 200 reports not read after round \(round + 1)") }
        }
        #expect(unreached.isEmpty, "\(unreached.count) subscribers never reachable")
        for tally in tallies {
            tally.drain()
            tally.packets.removeAll()
        }
        let warmUps = relay.statistics().packetsOut

        // Bursts of 10 (a frame's packets, as a publisher sends them), each packet stamped with
        // its place in the stream (sequence number and a payload derived from it); the subscribers
        // are drained between bursts so no socket buffer overflows.
        var sent: [[UInt8]] = []
        for burst in 0..<40 {
            for index in 0..<10 {
                let plain = try rtpPacket(ssrc: Self.video, sequence: UInt16(60_000 + burst * 10 + index), size: 300)
                sent.append(plain)
                try publisher.send(rtp: plain)
            }
            usleep(3_000)
            for tally in tallies { tally.drain() }
        }
        #expect(waitUntil(timeout: 10) {
            for tally in tallies { tally.drain() }
            return tallies.allSatisfy { $0.packets.count >= sent.count }
        })
        for (index, tally) in tallies.enumerated() {
            #expect(tally.failures == 0, "subscriber \(index): every packet authenticates with its own key")
            #expect(tally.packets == sent, "subscriber \(index): \(tally.packets.count) of \(sent.count) packets, byte for byte, in order (sequence numbers wrap at 65,535 inside the run)")
            if tally.packets != sent { break }
        }
        let statistics = relay.statistics()
        #expect(statistics.sendFailures == 0 && statistics.srtpFailures == 0)
        #expect(statistics.packetsOut - warmUps >= UInt64(sent.count * 200))
        #expect(statistics.sharedFanOuts > 0, "the fan-outs were split over the threads")
        #expect(relay.cpuTime > relay.ioThreadCPUTime, "the workers did part of the work")
        if segmentation {
            #expect(statistics.segmentedDatagrams > 0, "a subscriber's packets of one burst left as one message")
        } else {
            #expect(statistics.segmentedDatagrams == 0)
        }
    }

    @Test("a relay with one fan-out thread sends everything from its I/O thread: nothing shared, the same packets in order")
    func oneThread() throws {
        var configuration = RelayConfiguration()
        configuration.fanOutThreads = 1
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let tallies = try (0..<50).map { Tally(try TestSubscriber(relay: relay, streamId: "s", subscriberId: "v\($0)")) }
        for tally in tallies { try tally.subscriber.sendReceiverReport() }
        #expect(waitUntil { relay.statistics().packetsIn >= 50 })
        var sent: [[UInt8]] = []
        for sequence in UInt16(0)..<40 {
            let plain = try rtpPacket(ssrc: Self.video, sequence: sequence, size: 300)
            sent.append(plain)
            try publisher.send(rtp: plain)
        }
        #expect(waitUntil(timeout: 10) {
            for tally in tallies { tally.drain() }
            return tallies.allSatisfy { $0.packets.count >= sent.count }
        })
        #expect(tallies.allSatisfy { $0.packets == sent && $0.failures == 0 })
        #expect(relay.statistics().sharedFanOuts == 0)
        #expect(relay.cpuTime == relay.ioThreadCPUTime)
    }
}

@Suite("Fan-out shares")
struct FanOutSharesTests {
    @Test("shares cover every subscriber once, contiguous and in order, none empty, at most one per thread, each but the last worth a wake-up; small fan-outs stay whole")
    func shares() {
        for targets in [0, 1, 2, 3, 5, 7, 31, 64, 65, 200, 999, 1_000] {
            for packets in [1, 2, 9, 30] {
                for sharers in [1, 2, 3, 4, 8] {
                    let shares = FanOutWorkers.shares(targets: targets, packets: packets, sharers: sharers)
                    let context = "\(targets) targets, \(packets) packets, \(sharers) threads: \(shares)"
                    #expect(shares.flatMap { Array($0) } == Array(0..<targets), "\(context)")
                    #expect(shares.allSatisfy { !$0.isEmpty } && shares.count <= max(1, sharers), "\(context)")
                    #expect(shares.dropLast().allSatisfy { $0.count * packets >= FanOutWorkers.minimumShare } || shares.count == 1, "\(context)")
                    if targets * packets < 2 * FanOutWorkers.minimumShare { #expect(shares.count <= 1, "\(context)") }
                }
            }
        }
    }
}

import Glibc
@testable import PCastRelay
import Testing

/// `SendBatch` with UDP segmentation offload, over real loopback sockets: what joins a GSO message
/// follows the kernel's rule, and the receivers get exactly the datagrams queued, in order.
@Suite("UDP segmentation offload")
struct SegmentationOffloadTests {
    /// A datagram of `length` bytes whose every byte says which one it is.
    static func datagram(_ index: Int, length: Int) -> [UInt8] {
        (0..<length).map { UInt8(truncatingIfNeeded: index &* 7 &+ $0) }
    }

    /// Queues `plan` (receiver index, length) through a batch on `sender` and flushes it; returns
    /// the datagrams each receiver read, and what the batch reported.
    static func send(_ plan: [(to: Int, length: Int)], receivers: [UDPSocket], from sender: UDPSocket,
                     segmentation: Bool) -> (received: [[[UInt8]]], outcome: SendBatch.Outcome) {
        let batch = SendBatch(capacity: 256, slotSize: 1_500, segmentation: segmentation)
        for (index, step) in plan.enumerated() {
            batch.append(datagram(index, length: step.length), to: receivers[step.to].localAddress.loopbackIPv4, descriptor: sender.descriptor)
        }
        batch.flush(descriptor: sender.descriptor)
        let received = receivers.indices.map { index in
            // Waits for as many as were queued for it, then takes whatever more came.
            var datagrams: [[UInt8]] = []
            let queued = plan.filter { $0.to == index }.count
            while datagrams.count < queued, let next = receivers[index].receive(timeout: 1) { datagrams.append(next) }
            return datagrams + receivers[index].drain()
        }
        return (received, batch.takeOutcome())
    }

    static func expected(_ plan: [(to: Int, length: Int)], receivers: Int) -> [[[UInt8]]] {
        (0..<receivers).map { receiver in
            plan.enumerated().filter { $0.element.to == receiver }.map { datagram($0.offset, length: $0.element.length) }
        }
    }

    @Test("runs of equal datagrams to one address leave as GSO messages and arrive as the same datagrams, in order: a shorter one ends its run, a longer one or another address starts a new one")
    func segmentsFollowTheKernelsRule() throws {
        let sender = try UDPSocket.client()
        try #require(SegmentationControl.supported(on: sender.descriptor), "this kernel has UDP_SEGMENT (Linux 4.18)")
        let receivers = try (0..<3).map { _ in try UDPSocket.client() }
        let plan: [(to: Int, length: Int)] = [
            (0, 1_200), (0, 1_200), (0, 1_200), (0, 700),     // a frame's burst: one message of 4
            (0, 1_200), (0, 1_200),                           // after a short one: a new message of 2
            (1, 1_200), (1, 1_200), (1, 1_200), (1, 1_200),   // another address: a new message of 4
            (1, 1_300),                                       // longer than the segment size: alone
            (2, 400), (0, 400), (2, 400),                     // alternating addresses: nothing joins
        ]
        let (received, outcome) = Self.send(plan, receivers: receivers, from: sender, segmentation: true)
        #expect(received == Self.expected(plan, receivers: 3), "each receiver got its datagrams byte for byte, in order")
        #expect(outcome.packets == plan.count && outcome.failures == 0)
        #expect(outcome.segmented == 4 + 2 + 4, "the three runs went segmented, the rest alone")
        #expect(outcome.bytes == plan.reduce(0) { $0 + $1.length })
    }

    @Test("a message stops at 64 segments (the kernel's UDP_MAX_SEGMENTS) and at 64 KB: 200 datagrams to one address all arrive, in order")
    func longRunsAreSplit() throws {
        let sender = try UDPSocket.client()
        let receiver = try UDPSocket.client()
        let plan = Array(repeating: (to: 0, length: 1_000), count: 200)
        let (received, outcome) = Self.send(plan, receivers: [receiver], from: sender, segmentation: true)
        #expect(received == Self.expected(plan, receivers: 1))
        #expect(outcome.packets == 200 && outcome.failures == 0 && outcome.segmented == 200)
    }

    @Test("a segmented message the kernel refuses (here: a socket without UDP checksums, which GSO needs) is sent datagram by datagram: nothing is lost")
    func refusedMessagesGoApart() throws {
        let sender = try UDPSocket.client()
        var on: Int32 = 1
        // SO_NO_CHECK: the kernel refuses GSO on a socket that sends without checksums (EINVAL).
        #expect(setsockopt(sender.descriptor, SOL_SOCKET, 11, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let receiver = try UDPSocket.client()
        let plan = Array(repeating: (to: 0, length: 1_200), count: 10)
        let (received, outcome) = Self.send(plan, receivers: [receiver], from: sender, segmentation: true)
        #expect(received == Self.expected(plan, receivers: 1))
        #expect(outcome.packets == 10 && outcome.failures == 0)
        #expect(outcome.segmented == 0, "none left segmented")
    }

    @Test("without segmentation every datagram is its own message: the same datagrams arrive, none segmented")
    func offloadOff() throws {
        let sender = try UDPSocket.client()
        let receiver = try UDPSocket.client()
        let plan = Array(repeating: (to: 0, length: 1_200), count: 10)
        let (received, outcome) = Self.send(plan, receivers: [receiver], from: sender, segmentation: false)
        #expect(received == Self.expected(plan, receivers: 1))
        #expect(outcome.packets == 10 && outcome.segmented == 0)
    }
}

extension RelayAddress {
    /// This socket address's port on 127.0.0.1.
    fileprivate var loopbackIPv4: RelayAddress { RelayAddress(ipv4: 0x7F00_0001, port: port) }
}

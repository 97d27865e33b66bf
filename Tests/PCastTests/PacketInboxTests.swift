import GStreamer
@testable import PCast
import Synchronization
import Testing

@Suite("Packet inbox (a subscription's packets before its receiver exists)")
struct PacketInboxTests {
    final class Delivered: Sendable {
        enum Item: Equatable {
            case rtp(first: UInt8, payloadType: UInt8, arrived: Duration?)
            case rtcp(first: UInt8)
        }
        private let items = Mutex<[Item]>([])
        var all: [Item] { items.withLock { $0 } }
        var destination: PacketInbox.Destination {
            PacketInbox.Destination(
                rtp: { packet, payloadType, arrived in self.items.withLock { $0.append(.rtp(first: packet.bytes[0], payloadType: payloadType, arrived: arrived)) } },
                rtcp: { packet in self.items.withLock { $0.append(.rtcp(first: packet.bytes[0])) } })
        }
    }

    @Test("what comes before the receiver waits and is handed over in order, each RTP packet with its arrival on the system clock; what comes after goes straight through without one")
    func waitsThenPasses() throws {
        let inbox = PacketInbox()
        let before = Pipeline.systemClockTime
        inbox.rtp(Buffer(bytes: [1]), payloadType: 96)
        inbox.rtcp(Buffer(bytes: [2]))
        inbox.rtp(Buffer(bytes: [3]), payloadType: 111)
        let after = Pipeline.systemClockTime
        let firstArrival = try #require(inbox.firstArrival)
        #expect(before <= firstArrival && firstArrival <= after)
        let delivered = Delivered()
        #expect(delivered.all.isEmpty)
        inbox.open(to: delivered.destination)
        let handed = delivered.all
        #expect(handed.count == 3)
        guard handed.count == 3 else { return }
        guard case .rtp(1, 96, _?) = handed[0], case .rtp(3, 111, let thirdArrival?) = handed[2] else {
            Issue.record("order or kinds: \(handed)")
            return
        }
        #expect(handed[1] == .rtcp(first: 2))
        #expect(firstArrival == Self.arrival(ofFirstIn: handed) && firstArrival <= thirdArrival && thirdArrival <= after)
        #expect(inbox.firstArrival == nil, "nothing waits once it is open")

        inbox.rtp(Buffer(bytes: [4]), payloadType: 96)
        inbox.rtcp(Buffer(bytes: [5]))
        #expect(Array(delivered.all.dropFirst(3)) == [.rtp(first: 4, payloadType: 96, arrived: nil), .rtcp(first: 5)])
        #expect(inbox.dropped == 0)
    }

    static func arrival(ofFirstIn handed: [Delivered.Item]) -> Duration? {
        if case .rtp(_, _, let arrived)? = handed.first { return arrived }
        return nil
    }

    @Test("a full inbox keeps its first packets and counts the rest dropped (a receiver that never comes cannot hold unbounded memory)")
    func bounded() {
        let inbox = PacketInbox()
        for index in 0..<(PacketInbox.capacity + 10) { inbox.rtp(Buffer(bytes: [UInt8(truncatingIfNeeded: index)]), payloadType: 96) }
        #expect(inbox.dropped == 10)
        let delivered = Delivered()
        inbox.open(to: delivered.destination)
        let handed = delivered.all
        #expect(handed.count == PacketInbox.capacity)
        if case .rtp(let first, _, _)? = handed.first, case .rtp(let last, _, _)? = handed.last {
            #expect(first == 0 && last == UInt8(truncatingIfNeeded: PacketInbox.capacity - 1))
        }
    }
}

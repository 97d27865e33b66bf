import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import PCastTestSupport
import Testing

@Suite("RTCP feedback for the RTC stats report")
struct RTCPFeedbackTests {
    func buffer(_ packets: [RTCPPacket]) throws -> Buffer {
        Buffer(bytes: try RTCPCompoundPacket(packets: packets).serialized())
    }

    @Test("round trip from our sender report's send time and the receiver's LSR/DLSR; loss, jitter and feedback counted per SSRC")
    func recorder() async throws {
        let recorder = RTCPFeedbackRecorder()
        let ntp: UInt64 = 0x1234_5678_9ABC_DEF0
        let middle = UInt32(truncatingIfNeeded: ntp >> 16)
        try recorder.sent(buffer([.senderReport(RTCPSenderReport(ssrc: 7, ntpTimestamp: ntp, rtpTimestamp: 0, packetCount: 10, octetCount: 1000))]))
        try await Task.sleep(for: .milliseconds(200))
        // The receiver held the report 100 ms (6553.6 units of 1/65536 s) before answering.
        let block = RTCPReportBlock(ssrc: 7, fractionLost: 64, cumulativeLost: 12, jitter: 900,
                                    lastSenderReport: middle, delaySinceLastSenderReport: 6554)
        try recorder.received(buffer([
            .receiverReport(RTCPReceiverReport(ssrc: 99, reportBlocks: [block])),
            .genericNACK(RTCPGenericNACK(senderSSRC: 99, mediaSSRC: 7, items: [.init(packetID: 10, lostBitmask: 0b101)])),
            .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: 99, mediaSSRC: 7)),
            .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: 99, mediaSSRC: 8)),
        ]))
        let remote = recorder.remote(7)
        #expect(remote.fractionLost == 0.25)
        #expect(remote.packetsLost == 12)
        #expect(remote.jitter == 900)
        #expect(remote.nacks == 3, "packet 10 and the two the bitmask names")
        #expect(remote.plis == 1)
        #expect(recorder.remote(8).plis == 1)
        let rtt = try #require(remote.roundTripTime)
        // 200 ms (or more, on a busy machine) since the report went out, minus the 100 ms held.
        #expect(rtt >= .milliseconds(95) && rtt < .seconds(60), "\(rtt)")

        // A report naming a sender report we never sent gives no round trip.
        let stranger = RTCPFeedbackRecorder()
        try stranger.received(buffer([.receiverReport(RTCPReceiverReport(ssrc: 99, reportBlocks: [block]))]))
        #expect(stranger.remote(7).roundTripTime == nil)
        // Garbage is ignored.
        stranger.received(Buffer(bytes: [0x80, 0xC9, 0xFF, 0xFF]))
        #expect(stranger.remote(7).fractionLost == 0.25)
    }

    @Test("a receiver's NACKs, PLIs and FIRs are counted per media SSRC")
    func counter() throws {
        let counter = RTCPFeedbackCounter()
        counter.sent(try buffer([
            .receiverReport(RTCPReceiverReport(ssrc: 5)),
            .genericNACK(RTCPGenericNACK(senderSSRC: 5, mediaSSRC: 7, items: [.init(packetID: 1, lostBitmask: 0)])),
            .fullIntraRequest(RTCPFullIntraRequest(senderSSRC: 5, mediaSSRC: 0, entries: [.init(ssrc: 7, sequenceNumber: 1)])),
        ]))
        #expect(counter.counts(7) == .init(nacks: 1, plis: 0, firs: 1))
        #expect(counter.counts(9) == .init())
    }
}

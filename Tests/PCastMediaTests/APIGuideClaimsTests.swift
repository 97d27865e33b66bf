@testable import PCastMedia
import PCastProtocol
import Testing

/// Claims of the API guide (PCast.docc/APIGuide.md) about the receiver, checked on its pure pieces
/// (``ReceiverRecovery``, ``AdaptivePlayoutDelay``), fed packets and times.
@Suite("API guide claims: the receiver's reordering allowance, stalled decoder and first delay move")
struct MediaAPIGuideClaimsTests {
    static func ms(_ value: Int) -> Duration { .milliseconds(value) }
    static let ssrc: UInt32 = 0x10
    static let video = MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc)

    /// A receiver of one video track at `delay`: packets 1 and 3 arrive at 0 and 0.5 ms; returns
    /// the first millisecond tick that asks for anything, and what it asks.
    static func firstRequest(_ delay: PlayoutDelaySetting) -> (at: Int, actions: [LossRecovery.Action])? {
        let recovery = ReceiverRecovery(tracks: [video], playoutDelay: delay)
        _ = recovery.arrived(payloadType: 96, sequence: 1, timestamp: 0, ssrc: ssrc, keyframe: false, late: false, now: .zero)
        _ = recovery.arrived(payloadType: 96, sequence: 3, timestamp: 0, ssrc: ssrc, keyframe: false, late: false, now: .microseconds(500))
        for now in 1...60 {
            let actions = recovery.tick(now: ms(now), videoFrames: nil).actions.map { $0.0 }
            if !actions.isEmpty { return (now, actions) }
        }
        return nil
    }

    @Test("a gap noticed at 0.5 ms is first asked for at 21 ms with a fixed 40 ms delay and at 31 ms with a fixed 60 ms one (half the delay: 40 % of it, × 1.25), and at 32 ms (the usual 31.25 ms) with a fixed 100 ms delay or an adaptive one")
    func shortFixedDelayAllowance() {
        #expect(Self.firstRequest(.fixed(Self.ms(40)))?.at == 21)
        #expect(Self.firstRequest(.fixed(Self.ms(40)))?.actions == [.nack([2])])
        #expect(Self.firstRequest(.fixed(Self.ms(60)))?.at == 31)
        #expect(Self.firstRequest(.fixed(Self.ms(100)))?.at == 32)
        #expect(Self.firstRequest(.adaptive())?.at == 32)
    }

    /// What a receiver's tick at `now` asks for, told the decoder made `decoded` of `received` frames.
    static func frames(_ recovery: ReceiverRecovery, at now: Int, received: Int, decoded: Int) -> [LossRecovery.Action] {
        recovery.tick(now: ms(now), videoFrames: (payloadType: 96, received: received, decoded: decoded)).actions.map { $0.0 }
    }

    @Test("a decoder that made no frame while three arrived asks for a keyframe at 200 ms, not at 199 ms; two frames in 400 ms ask nothing until the third; a frame decoded meanwhile starts the 200 ms again")
    func stalledDecoder() {
        let stalled = ReceiverRecovery(tracks: [Self.video], playoutDelay: .fixed(Self.ms(100)))
        #expect(Self.frames(stalled, at: 0, received: 10, decoded: 10).isEmpty)
        #expect(Self.frames(stalled, at: 100, received: 13, decoded: 10).isEmpty)
        #expect(Self.frames(stalled, at: 199, received: 13, decoded: 10).isEmpty)
        #expect(Self.frames(stalled, at: 200, received: 13, decoded: 10) == [.requestKeyframe])

        let twoFrames = ReceiverRecovery(tracks: [Self.video], playoutDelay: .fixed(Self.ms(100)))
        #expect(Self.frames(twoFrames, at: 0, received: 10, decoded: 10).isEmpty)
        #expect(Self.frames(twoFrames, at: 400, received: 12, decoded: 10).isEmpty, "two frames arrived")
        #expect(Self.frames(twoFrames, at: 401, received: 13, decoded: 10) == [.requestKeyframe])

        let progressing = ReceiverRecovery(tracks: [Self.video], playoutDelay: .fixed(Self.ms(100)))
        #expect(Self.frames(progressing, at: 0, received: 10, decoded: 10).isEmpty)
        #expect(Self.frames(progressing, at: 150, received: 13, decoded: 11).isEmpty)
        #expect(Self.frames(progressing, at: 300, received: 16, decoded: 11).isEmpty, "150 ms since the decoder's last frame")
        #expect(Self.frames(progressing, at: 350, received: 16, decoded: 11) == [.requestKeyframe])
    }

    /// 30 fps video from 100 ms on, on time except frame `lateFrame`, 80 ms late; the delay
    /// (adaptive from 40 ms, default settings) updated every millisecond. Returns its first move.
    static func firstMove(lateFrame: Int) -> (at: Int, delay: Duration)? {
        var delay = AdaptivePlayoutDelay(settings: .init(bounds: ms(10)...ms(1_000), initial: ms(40)))
        let arrivals = (0..<45).map { frame in (at: 100 + frame * 33 + (frame == lateFrame ? 80 : 0), frame: frame) }
        for now in 100...1_600 {
            for arrival in arrivals where arrival.at == now {
                delay.arrived(stream: 96, timestamp: UInt32(arrival.frame * 3_000), clockRate: 90_000, now: ms(now))
            }
            if let moved = delay.update(repairRoom: .zero, repeatedLoss: nil, now: ms(now)) { return (now, moved) }
        }
        return nil
    }

    @Test("the adaptive delay first moves exactly 1 s after the first packet; a packet 80 ms late 278 ms after the first is not counted (it falls 2 ms, to 38 ms), the same lateness 608 ms after the first is (it rises past 100 ms)")
    func settlesAfterASecond() throws {
        let withinGrace = try #require(Self.firstMove(lateFrame: 6))
        #expect(withinGrace.at == 1_100)
        #expect(withinGrace.delay == Self.ms(38), "\(withinGrace.delay)")
        let afterGrace = try #require(Self.firstMove(lateFrame: 16))
        #expect(afterGrace.at == 1_100)
        #expect(afterGrace.delay > Self.ms(100), "\(afterGrace.delay)")
    }
}

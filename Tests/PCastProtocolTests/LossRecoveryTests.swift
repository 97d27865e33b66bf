import PCastImpairment
import PCastProtocol
import Testing

/// The receiver's NACK and keyframe-request machine, fed sequence numbers and times.
@Suite("Loss recovery: NACKs only for real gaps, a keyframe asked for when a packet is past repair")
struct LossRecoveryTests {
    static func ms(_ value: Int) -> Duration { .milliseconds(value) }

    /// Feeds `recovery` ticks every 5 ms from `from` to `to`, collecting what it asks for.
    static func run(_ recovery: inout LossRecovery, from: Int, to: Int) -> [LossRecovery.Action] {
        stride(from: from, through: to, by: 5).flatMap { recovery.handle(.tick, now: ms($0)) }
    }

    @Test("packets in order never make a NACK, however late they come (50 ms of jitter that keeps the order)")
    func jitterInOrder() {
        var recovery = LossRecovery(deadline: Self.ms(200))
        var actions: [LossRecovery.Action] = []
        var now = 0
        for sequence in 0..<2_000 {
            now += [1, 0, 0, 50, 3, 17, 0, 33][sequence % 8]
            actions += recovery.handle(.packet(sequence: UInt16(truncatingIfNeeded: 65_000 + sequence), keyframe: false), now: Self.ms(now))
            actions += recovery.handle(.tick, now: Self.ms(now))
        }
        #expect(actions.isEmpty)
        #expect(recovery.nacked == 0 && recovery.missingCount == 0)
    }

    @Test("the playout delay's repair room follows repeated losses: three packets asked for (a packet overtaken within the allowance is none, a single one taken for lost is not enough)")
    func lossesForRepairRoom() {
        var recovery = LossRecovery(deadline: Self.ms(200))
        _ = recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(1))
        _ = Self.run(&recovery, from: 5, to: 20)
        _ = recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(21))
        #expect(recovery.repeatedLoss == nil, "overtaken by 20 ms: no loss")
        _ = recovery.handle(.packet(sequence: 5, keyframe: false), now: Self.ms(30))
        #expect(Self.run(&recovery, from: 35, to: 65).count == 1, "4 asked for once the allowance passed")
        _ = recovery.handle(.packet(sequence: 4, keyframe: false), now: Self.ms(70))
        #expect(recovery.repeatedLoss == nil, "one loss")
        _ = recovery.handle(.packet(sequence: 8, keyframe: false), now: Self.ms(100))
        #expect(Self.run(&recovery, from: 105, to: 135).count == 1, "6 and 7 asked for")
        #expect(recovery.repeatedLoss == Self.ms(65), "three losses: since the first of them")
    }

    @Test("a packet asked for by other means (a relay passing a subscriber's NACK on) is asked again only a retry interval later, and its arrival is an answer, not an overtaking")
    func requestedElsewhere() {
        var recovery = LossRecovery(deadline: Self.ms(500))
        _ = recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(1))
        #expect(recovery.handle(.requested([2]), now: Self.ms(10)).isEmpty)
        #expect(Self.run(&recovery, from: 15, to: 45).isEmpty, "asked at 10 ms: the next try is a retry interval (37.5 ms) later")
        #expect(Self.run(&recovery, from: 50, to: 50) == [.nack([2])])
        _ = recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(52))
        #expect(recovery.reordered == 0 && recovery.reorderAllowance == Self.ms(31) + .microseconds(250), "the answer taught the allowance nothing")
    }

    @Test("a packet asked for once that came, then came again (the answer to the request), was overtaken: the allowance learns from it; a copy after two requests teaches nothing")
    func duplicateTeachesReordering() {
        var settings = LossRecovery.Settings()
        settings.initialReorderAllowance = .milliseconds(4)
        var recovery = LossRecovery(settings: settings, deadline: Self.ms(500))
        _ = recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(1))
        #expect(Self.run(&recovery, from: 5, to: 10) == [.nack([2])], "asked after the 5 ms allowance")
        _ = recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(21))
        #expect(recovery.reordered == 0, "taken for the answer")
        _ = recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(22))
        #expect(recovery.reordered == 1 && recovery.reorderAllowance == Self.ms(25), "the copy: overtaken by 20 ms, learnt (× 1.25)")
        // A packet asked twice: copies are answers to both requests.
        _ = recovery.handle(.packet(sequence: 5, keyframe: false), now: Self.ms(30))
        #expect(Self.run(&recovery, from: 35, to: 55) == [.nack([4])])
        #expect(Self.run(&recovery, from: 60, to: 75) == [.nack([4])], "again after 1.25 round trips (16 ms measured)")
        _ = recovery.handle(.packet(sequence: 4, keyframe: false), now: Self.ms(80))
        _ = recovery.handle(.packet(sequence: 4, keyframe: false), now: Self.ms(81))
        #expect(recovery.reordered == 1 && recovery.reorderAllowance == Self.ms(25))
    }

    @Test("a packet overtaken by 20 ms is not asked for (the first allowance is 1.25 × 25 ms); the allowance keeps the lateness it learns, and halves on a quiet path")
    func reorderingWithinAllowance() {
        var recovery = LossRecovery(deadline: Self.ms(200))
        #expect(recovery.reorderAllowance == Self.ms(31) + .microseconds(250))
        #expect(recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0)).isEmpty)
        #expect(recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(1)).isEmpty)
        #expect(Self.run(&recovery, from: 5, to: 20).isEmpty)
        #expect(recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(21)).isEmpty)
        #expect(recovery.reordered == 1 && recovery.nacked == 0)
        // Quiet for 12 s: 25 → 12.5 → 6.25 ms learnt.
        for (index, now) in stride(from: 22, through: 12_022, by: 10).enumerated() {
            _ = recovery.handle(.packet(sequence: UInt16(4 + index), keyframe: false), now: Self.ms(now))
        }
        #expect(recovery.reorderAllowance < Self.ms(8) && recovery.nacked == 0, "\(recovery.reorderAllowance)")
        // Overtaken by 30 ms once the allowance fell: taken for a loss and asked for once; its arrival is an answer.
        _ = recovery.handle(.packet(sequence: 1_300, keyframe: false), now: Self.ms(12_030))
        _ = recovery.handle(.packet(sequence: 1_302, keyframe: false), now: Self.ms(12_030))
        #expect(Self.run(&recovery, from: 12_035, to: 12_055).count == 1, "asked for once the shorter allowance passed")
        _ = recovery.handle(.packet(sequence: 1_301, keyframe: false), now: Self.ms(12_060))
        #expect(recovery.reordered == 1, "an answer arriving, not an overtaking")
    }

    @Test("on a jittery path the allowance adds the measured jitter: a packet overtaken by 20 ms and late by 20 ms more of jitter (40 ms) is not asked for; what it learns is the lateness beyond the jitter")
    func reorderingOnJitteryPath() {
        var recovery = LossRecovery(deadline: Self.ms(300))
        _ = recovery.handle(.pathJitter(Self.ms(20)), now: Self.ms(0))
        #expect(recovery.reorderAllowance == Self.ms(51) + .microseconds(250))
        _ = recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(1))
        #expect(Self.run(&recovery, from: 5, to: 40).isEmpty)
        #expect(recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(41)).isEmpty)
        #expect(recovery.reordered == 1 && recovery.nacked == 0)
        #expect(recovery.reorderAllowance == Self.ms(51) + .microseconds(250), "learnt 40 − 20 = 20 ms, under the first 25")
        // A short playout delay bounds it: one request and its answer must fit before the deadline.
        _ = recovery.handle(.deadline(Self.ms(40)), now: Self.ms(50))
        #expect(recovery.reorderAllowance == Self.ms(30))
    }

    @Test("a lost packet is asked for once the allowance passed, again every round trip, until its deadline; a video packet given up, or the depayloader's need, asks for a keyframe at once and again until a complete one leaves the depayloader")
    func lossThenKeyframe() {
        var settings = LossRecovery.Settings()
        settings.initialReorderAllowance = Self.ms(4)  // allowance 5 ms
        settings.initialRoundTrip = Self.ms(20)        // retries every 25 ms
        var recovery = LossRecovery(settings: settings, deadline: Self.ms(100))
        _ = recovery.handle(.packet(sequence: 10, keyframe: true), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 12, keyframe: false), now: Self.ms(10))
        #expect(recovery.handle(.tick, now: Self.ms(14)).isEmpty, "within the allowance")
        #expect(recovery.handle(.tick, now: Self.ms(15)) == [.nack([11])])
        #expect(recovery.handle(.tick, now: Self.ms(39)).isEmpty, "within a round trip")
        #expect(recovery.handle(.tick, now: Self.ms(40)) == [.nack([11])])
        #expect(Self.run(&recovery, from: 45, to: 105) == [.nack([11]), .nack([11])], "at 65 and 90 ms")
        #expect(recovery.handle(.tick, now: Self.ms(110)) == [.requestKeyframe], "its deadline passed: the picture needs a keyframe")
        #expect(recovery.expired == 1 && recovery.isAwaitingKeyframe)
        #expect(recovery.keyframeRetryInterval == Self.ms(150))
        #expect(Self.run(&recovery, from: 115, to: 255).isEmpty)
        #expect(recovery.handle(.tick, now: Self.ms(260)) == [.requestKeyframe], "asked again: the request or its answer may be lost")
        _ = recovery.handle(.packet(sequence: 13, keyframe: true), now: Self.ms(270))
        #expect(recovery.isAwaitingKeyframe, "until it is complete")
        #expect(Self.run(&recovery, from: 275, to: 415).isEmpty, "its first packet came: no request for 150 ms")
        #expect(recovery.handle(.tick, now: Self.ms(420)) == [.requestKeyframe], "it never completed")
        _ = recovery.handle(.packet(sequence: 14, keyframe: true), now: Self.ms(430))
        #expect(recovery.handle(.keyframeComplete, now: Self.ms(440)).isEmpty)
        #expect(!recovery.isAwaitingKeyframe)
        #expect(Self.run(&recovery, from: 445, to: 800).isEmpty)
        #expect(recovery.keyframesRequested == 3)
        // The depayloader's own need: at once, unless a keyframe just began arriving (a receiver
        // starting on its join keyframe), which then has 150 ms to complete.
        #expect(recovery.handle(.keyframeNeeded, now: Self.ms(900)) == [.requestKeyframe])
        _ = recovery.handle(.packet(sequence: 15, keyframe: true), now: Self.ms(920))
        _ = recovery.handle(.keyframeComplete, now: Self.ms(940))
        _ = recovery.handle(.packet(sequence: 16, keyframe: true), now: Self.ms(1_000))
        #expect(recovery.handle(.keyframeNeeded, now: Self.ms(1_005)).isEmpty)
        #expect(recovery.handle(.keyframeComplete, now: Self.ms(1_030)).isEmpty)
        #expect(Self.run(&recovery, from: 1_035, to: 1_500).isEmpty && recovery.keyframesRequested == 4)
    }

    @Test("the round trip is measured from a packet asked for once to its arrival, and paces the retries")
    func roundTripSample() {
        var settings = LossRecovery.Settings()
        settings.initialReorderAllowance = Self.ms(4)
        var recovery = LossRecovery(settings: settings, deadline: Self.ms(200))
        _ = recovery.handle(.packet(sequence: 1, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 3, keyframe: false), now: Self.ms(0))
        #expect(recovery.handle(.tick, now: Self.ms(5)) == [.nack([2])])
        _ = recovery.handle(.packet(sequence: 2, keyframe: false), now: Self.ms(13))
        #expect(recovery.roundTrip == Self.ms(8))
        #expect(recovery.retryInterval == Self.ms(10))
        #expect(recovery.reordered == 0, "an answer, not a reordering")
    }

    @Test("a packet lost before a keyframe that arrived asks for no keyframe; a jump of thousands of sequence numbers (a restart) asks for nothing; numbers wrap")
    func keyframeAlreadyThereAndRestart() {
        var settings = LossRecovery.Settings()
        settings.initialReorderAllowance = Self.ms(4)
        var recovery = LossRecovery(settings: settings, deadline: Self.ms(50))
        _ = recovery.handle(.packet(sequence: 65_534, keyframe: false), now: Self.ms(0))
        _ = recovery.handle(.packet(sequence: 0, keyframe: true), now: Self.ms(1))  // 65,535 lost, across the wrap
        let actions = Self.run(&recovery, from: 5, to: 100)
        #expect(actions.contains(.nack([65_535])) && !actions.contains(.requestKeyframe), "\(actions)")
        _ = recovery.handle(.packet(sequence: 20_000, keyframe: false), now: Self.ms(101))
        #expect(Self.run(&recovery, from: 105, to: 300).isEmpty && recovery.missingCount == 0)
    }

    /// `count` packets, one a millisecond, each lost with `loss`; every NACK and every answer
    /// crosses a path losing `loss`, and answers come a round trip after the request.
    static func simulate(loss: Double, roundTrip: Int, deadline: Int, count: Int, seed: UInt64,
                         initialReorderAllowance: Duration? = nil) -> (recovery: LossRecovery, lost: Int, keyframes: Int) {
        var generator = SeededGenerator(seed: seed)
        var settings = LossRecovery.Settings()
        settings.requestsKeyframes = true
        if let initialReorderAllowance { settings.initialReorderAllowance = initialReorderAllowance }
        var recovery = LossRecovery(settings: settings, deadline: ms(deadline))
        var lost = 0
        var answers: [Int: [UInt16]] = [:]  // arrival time (ms) → sequence numbers
        var now = 0
        var sequence = 0
        var keyframes = 0
        let eachWay = 1 - (1 - loss) * (1 - loss)
        while sequence < count || !answers.isEmpty {
            var actions: [LossRecovery.Action] = []
            if sequence < count {
                if Double.random(in: 0..<1, using: &generator) < loss {
                    lost += 1
                } else {
                    actions += recovery.handle(.packet(sequence: UInt16(truncatingIfNeeded: sequence), keyframe: false), now: ms(now))
                }
                sequence += 1
            }
            for late in answers.removeValue(forKey: now) ?? [] {
                actions += recovery.handle(.packet(sequence: late, keyframe: false), now: ms(now))
            }
            actions += recovery.handle(.tick, now: ms(now))
            for action in actions {
                switch action {
                case .nack(let sequences):
                    for asked in sequences where Double.random(in: 0..<1, using: &generator) >= eachWay {
                        answers[now + roundTrip, default: []].append(asked)
                    }
                case .requestKeyframe:
                    keyframes += 1
                }
            }
            now += 1
        }
        return (recovery, lost, keyframes)
    }

    @Test("uniform 5 % loss each way with the relay answering after a round trip: every lost packet repaired, NACKs ≤ 1.2 × packets lost")
    func nacksPerLoss() {
        let (recovery, lost, keyframes) = Self.simulate(loss: 0.05, roundTrip: 10, deadline: 200, count: 20_000, seed: 41)
        #expect(lost > 800)
        #expect(recovery.expired == 0 && keyframes == 0, "unrepaired: \(recovery.expired)")
        #expect(Double(recovery.nacked) <= 1.2 * Double(lost), "\(recovery.nacked) NACKs for \(lost) lost")
        #expect(recovery.roundTrip >= Self.ms(9) && recovery.roundTrip <= Self.ms(11))
    }

    @Test("the repair room holds as many tries as the path needs: a try fails about one time in ten at 5 % loss each way (four tries) and one in five at 10 % (six); with that room as the deadline, 10 % loss leaves nothing unrepaired")
    func triesFollowTheLoss() {
        let five = Self.simulate(loss: 0.05, roundTrip: 10, deadline: 200, count: 20_000, seed: 7).recovery
        #expect(five.tryFailure > 0.05 && five.tryFailure < 0.16, "\(five.tryFailure)")
        #expect((4...5).contains(five.triesForRepair), "\(five.triesForRepair)")

        let ten = Self.simulate(loss: 0.10, roundTrip: 10, deadline: 200, count: 20_000, seed: 8).recovery
        #expect(ten.tryFailure > 0.12 && ten.tryFailure < 0.27, "\(ten.tryFailure)")
        #expect((5...7).contains(ten.triesForRepair), "\(ten.triesForRepair)")

        // The room the 10 % path asked for, as the deadline of a fresh run on the same path (whose
        // allowance starts where the first run's ended: the path does not reorder).
        let room = Int(ten.repairRoom / .milliseconds(1)) + 1
        let (repaired, lost, _) = Self.simulate(loss: 0.10, roundTrip: 10, deadline: room, count: 20_000, seed: 9,
                                                initialReorderAllowance: ten.reorderAllowance)
        #expect(lost > 1_800)
        #expect(repaired.expired == 0, "\(repaired.expired) of \(lost) unrepaired within \(room) ms")

        let clean = LossRecovery(deadline: Self.ms(100))
        #expect(clean.triesForRepair == 4, "before any repair: a try in ten assumed to fail")
    }
}

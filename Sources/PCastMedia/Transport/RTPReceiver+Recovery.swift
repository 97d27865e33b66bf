import Foundation
import GStreamer
import PCastProtocol
import Synchronization

/// How a receiver's playout delay is set: by the receiver from what it measures, within bounds
/// (the default), or fixed.
package enum PlayoutDelaySetting: Sendable, Equatable {
    case adaptive(ClosedRange<Duration> = PlayoutDelaySetting.defaultBounds)
    case fixed(Duration)

    /// The bounds of an adaptive delay unless the application sets its own.
    package static let defaultBounds: ClosedRange<Duration> = .milliseconds(10) ... .seconds(1)

    /// Where the delay starts: a fixed one's value; an adaptive one's is
    /// ``RTPReceiver/defaultPlayoutDelay`` within its bounds, until the first measurements.
    var initial: Duration {
        switch self {
        case .fixed(let delay): delay
        case .adaptive(let bounds): min(max(RTPReceiver.defaultPlayoutDelay, bounds.lowerBound), bounds.upperBound)
        }
    }

    var adaptiveBounds: ClosedRange<Duration>? {
        if case .adaptive(let bounds) = self { return bounds }
        return nil
    }
}

/// Loss recovery and the adaptive playout delay of a receiver: the pure ``LossRecovery`` (one per
/// payload type) and ``AdaptivePlayoutDelay`` under one lock, fed from the packets as they arrive
/// and from a timer; what they ask for is sent as RTCP by ``RTPReceiver``.
///
/// GStreamer's jitter buffer now only holds and orders the packets. Its own requests went out for
/// any packet not there 2 ms after it was due, so jitter was taken for loss (a lossless loopback
/// saw 40 to 1,500 NACKs in ten seconds), and its lost packets waited for the depayloader's single
/// keyframe request (lost with the packet at 10 % loss, the picture froze until the encoder's next
/// keyframe, 2 s later).
final class ReceiverRecovery: Sendable {
    private struct State {
        var tracks: [UInt8: LossRecovery] = [:]
        /// The SSRC each payload type's packets last came with (the requests name it).
        var ssrcs: [UInt8: UInt32] = [:]
        /// Measures the path's jitter always; chooses the playout delay only where it adapts.
        var adaptive: AdaptivePlayoutDelay
        var adapts: Bool
    }
    private let state: Mutex<State>
    private let clockRates: [UInt8: Int]
    /// The video's payload types: their packets are asked for until ``RTPReceiver/videoRepairDeadline(_:)``.
    private let videoPayloadTypes: Set<UInt8>

    init(tracks: [MediaTrackDescription], playoutDelay setting: PlayoutDelaySetting) {
        let bounds = setting.adaptiveBounds ?? setting.initial ... setting.initial
        var state = State(adaptive: AdaptivePlayoutDelay(settings: .init(bounds: bounds, initial: setting.initial)),
                          adapts: setting.adaptiveBounds != nil)
        for track in tracks {
            var settings = LossRecovery.Settings()
            settings.requestsKeyframes = track.kind == .video
            // A short fixed delay does not grow to make room for repairs: the allowance starts at
            // 40 % of it (at 40 ms, 25 ms left one request in time, and 10 % loss showed 70 % of
            // the frames; from 62.5 ms on it is the usual 25 ms; an adaptive delay rises above the
            // allowance instead).
            if setting.adaptiveBounds == nil { settings.initialReorderAllowance = min(settings.initialReorderAllowance, setting.initial * 0.4) }
            let deadline = track.kind == .video ? RTPReceiver.videoRepairDeadline(setting.initial) : setting.initial
            state.tracks[track.payloadType] = LossRecovery(settings: settings, deadline: deadline)
            state.ssrcs[track.payloadType] = track.ssrc
        }
        self.state = Mutex(state)
        clockRates = Dictionary(tracks.map { ($0.payloadType, Int($0.clockRate)) }, uniquingKeysWith: { a, _ in a })
        videoPayloadTypes = Set(tracks.filter { $0.kind == .video }.map(\.payloadType))
    }

    /// A packet arrived; `late` when it was handed over after it arrived (its lateness would be
    /// ours). Returns what to send, with the SSRC to name.
    func arrived(payloadType: UInt8, sequence: UInt16, timestamp: UInt32, ssrc: UInt32, keyframe: Bool, late: Bool,
                 now: Duration) -> [(LossRecovery.Action, UInt32)] {
        state.withLock { state in
            state.ssrcs[payloadType] = ssrc
            let actions = state.tracks[payloadType]?.handle(.packet(sequence: sequence, keyframe: keyframe), now: now).map { ($0, ssrc) } ?? []
            // A retransmission's lateness is its repair's, which the repair room covers already.
            if !late, state.tracks[payloadType]?.latestWasRepair != true, let clockRate = clockRates[payloadType] {
                state.adaptive.arrived(stream: payloadType, timestamp: timestamp, clockRate: clockRate, now: now)
            }
            return actions
        }
    }

    /// The depayloader's news for the video (`.keyframeNeeded`, `.keyframeComplete`).
    func video(_ event: LossRecovery.Event, payloadType: UInt8, now: Duration) -> [(LossRecovery.Action, UInt32)] {
        state.withLock { state in
            let ssrc = state.ssrcs[payloadType] ?? 0
            return state.tracks[payloadType]?.handle(event, now: now).map { ($0, ssrc) } ?? []
        }
    }

    /// What falls due now, and the adaptive delay's new value if it moved. `videoFrames`: the
    /// video's frames received and decoded so far, where the receiver decodes (a stalled decoder
    /// asks for a keyframe).
    func tick(now: Duration, videoFrames: (payloadType: UInt8, received: Int, decoded: Int)?) -> (actions: [(LossRecovery.Action, UInt32)], delay: Duration?) {
        state.withLock { state in
            var actions: [(LossRecovery.Action, UInt32)] = []
            var repairRoom = Duration.zero
            var repeatedLoss: Duration?
            let jitter = state.adaptive.jitter
            for payloadType in state.tracks.keys.sorted() {
                let ssrc = state.ssrcs[payloadType] ?? 0
                _ = state.tracks[payloadType]!.handle(.pathJitter(jitter), now: now)
                let event: LossRecovery.Event = videoFrames.flatMap { frames in
                    frames.payloadType == payloadType ? .frames(received: frames.received, decoded: frames.decoded) : nil
                } ?? .tick
                actions += state.tracks[payloadType]!.handle(event, now: now).map { ($0, ssrc) }
                // Room for the repairs of a track that lost packets (an audio track's untried
                // round trip once made room for 158 ms where only the video lost any).
                if let loss = state.tracks[payloadType]!.repeatedLoss {
                    repeatedLoss = max(repeatedLoss ?? loss, loss)
                    repairRoom = max(repairRoom, state.tracks[payloadType]!.repairRoom)
                }
            }
            let delay = state.adaptive.update(repairRoom: repairRoom, repeatedLoss: repeatedLoss, now: now)
            return (actions, state.adapts ? delay : nil)
        }
    }

    /// The playout delay in effect changed: packets are asked for as long as they could be played
    /// (video: late, until ``RTPReceiver/videoRepairDeadline(_:)``).
    func deadline(_ delay: Duration, now: Duration) {
        state.withLock { state in
            for payloadType in state.tracks.keys {
                let deadline = videoPayloadTypes.contains(payloadType) ? RTPReceiver.videoRepairDeadline(delay) : delay
                _ = state.tracks[payloadType]!.handle(.deadline(deadline), now: now)
            }
        }
    }

    func nacked(payloadType: UInt8) -> Int { state.withLock { $0.tracks[payloadType]?.nacked ?? 0 } }
    /// Packets of `payloadType` that arrived late without being asked for (overtaken on the path).
    func reordered(payloadType: UInt8) -> Int { state.withLock { $0.tracks[payloadType]?.reordered ?? 0 } }
    /// Packets of `payloadType` given up at their deadline.
    func expired(payloadType: UInt8) -> Int { state.withLock { $0.tracks[payloadType]?.expired ?? 0 } }
    func keyframesRequested() -> Int { state.withLock { $0.tracks.values.map(\.keyframesRequested).reduce(0, +) } }
    /// The path's jitter as measured: the latest packet's lateness over the last 5 s.
    var jitter: Duration { state.withLock { $0.adaptive.jitter } }
}

extension RTPReceiver {
    /// The timer's period: NACK timing is counted in these steps (libwebrtc's NACK module
    /// processes every 20 ms; a reordering allowance of a few milliseconds needs finer).
    static let recoveryPeriod: Duration = .milliseconds(5)

    /// A packet of `payloadType` arrived (`late`: before the pipeline ran, handed over since).
    func recovered(payloadType: UInt8, sequence: UInt16, timestamp: UInt32, ssrc: UInt32, keyframe: Bool, late: Bool) {
        let actions = recovery.arrived(payloadType: payloadType, sequence: sequence, timestamp: timestamp, ssrc: ssrc, keyframe: keyframe,
                                       late: late, now: ContinuousClock.now - recoveryOrigin)
        perform(actions)
    }

    /// Listens to the video depayloader: its keyframe requests (and the decoder's, which pass
    /// through it) become ``LossRecovery``'s, sent at once and repeated until a complete keyframe
    /// leaves it, instead of the RTP session's single PLI (held for AVPF's early-feedback rule,
    /// and absorbed by the relay when it came while the viewer was starting).
    func watchDepayloader(payloadType: UInt8) -> [PadProbe] {
        guard let depayloader = try? pipeline.element(named: "video-depay"),
              let sink = try? depayloader.staticPad("sink"), let source = try? depayloader.staticPad("src") else { return [] }
        let origin = recoveryOrigin
        return [
            sink.addUpstreamEventProbe(named: "GstForceKeyUnit") { [weak self] _ in
                guard let self else { return .pass }
                perform(recovery.video(.keyframeNeeded, payloadType: payloadType, now: ContinuousClock.now - origin))
                return .drop
            },
            source.addBufferProbe { [weak self] buffer in
                if buffer.isKeyframe, let self {
                    perform(recovery.video(.keyframeComplete, payloadType: payloadType, now: ContinuousClock.now - origin))
                }
                return .pass
            },
        ]
    }

    /// Starts the thread that sends the NACKs and keyframe requests that fall due between packets,
    /// and moves the adaptive playout delay, until the receiver stops. A thread of its own: on the
    /// cooperative pool a busy application's tasks would delay the requests.
    func startRecoveryTimer() {
        let period = UInt32(Self.recoveryPeriod / .microseconds(1))
        let thread = Thread { [weak self] in
            while let receiver = self, !receiver.isStopped {
                receiver.recoveryTick()
                usleep(period)
            }
        }
        thread.name = "pcast.receiver.recovery"
        thread.start()
    }

    private func recoveryTick() {
        let (actions, delay) = recovery.tick(now: ContinuousClock.now - recoveryOrigin, videoFrames: decodedVideoFrames)
        perform(actions)
        if let delay { playoutDelay?.adapt(to: delay) }
    }

    func perform(_ actions: [(LossRecovery.Action, UInt32)]) {
        for (action, ssrc) in actions {
            let packet: RTCPPacket
            switch action {
            case .nack(let sequences):
                packet = .genericNACK(RTCPGenericNACK(senderSSRC: 0, mediaSSRC: ssrc, lostSequenceNumbers: sequences))
            case .requestKeyframe:
                packet = .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: 0, mediaSSRC: ssrc))
            }
            // Reduced-size RTCP (RFC 5506), sent at once rather than in the session's next
            // compound report; the relay reads either.
            guard let bytes = try? packet.serialized() else { continue }
            let buffer = Buffer(bytes: bytes)
            feedbackSent.sent(buffer)
            sendRTCP(buffer)
        }
    }
}

import Foundation
import GStreamer
import Logging
import PCastProtocol
import Synchronization

/// Receives a remote stream: RTP in, jitter buffer (the playout delay), decode, and raw media on
/// tees that renderers attach to. RTCP feedback (receiver reports, NACK, PLI) goes to `sendRTCP`.
/// Unchecked: GStreamer objects and `Mutex`/atomic state; its one var, `busTask`, is set in `start…` before it is returned.
package final class RTPReceiver: StreamEngine, @unchecked Sendable {
    let pipeline: Pipeline
    private let inputs: [UInt8: AppSource]
    private let rtcpInputs: [AppSource]
    private let hasVideo: Bool
    private let hasAudio: Bool
    /// Whether it decodes (for renderers), rather than records.
    private let decodes: Bool
    let playoutDelay: PlayoutDelay?
    /// The latency the pipeline's sinks are told: the playout delay in effect.
    package let sinkLatency: FixedLatency
    private let stopped = Atomic<Bool>(false)
    /// rtpbin makes a jitter buffer per stream when its first packets arrive; the receiver sets
    /// each up as it is made (``configure(jitterBuffer:)``).
    private let jitterBuffers = JitterBuffers()
    /// The video's jitter buffer (RTP session 0) once rtpbin made it: its latency is the video's
    /// repair deadline, not the playout delay (``videoRepairDeadline(_:)``).
    private let videoJitterBuffer = JitterBuffers()
    private let arrivals: [UInt8: ArrivalCounter]
    /// Per payload type: the time packets spend between arriving and leaving the jitter buffer.
    private let delayMeters: [UInt8: JitterBufferDelayMeter]
    private var payloadTypes: [MediaType: UInt8] { Dictionary(kinds.map { ($1, $0) }, uniquingKeysWith: { a, _ in a }) }
    /// Video frames and audio buffers out of the decoders (counted by probes on the hooks).
    let decoded = DecodeCounters()

    final class DecodeCounters: Sendable {
        let video = Atomic<Int>(0)
        let firstVideo = Mutex<ContinuousClock.Instant?>(nil)
        let audio = Atomic<Int>(0)
        /// Keyframes out of the depayloader (complete access units without the delta flag).
        let keyframes = Atomic<Int>(0)
        /// Video frames whose packets reached the depayloader (distinct RTP timestamps, in the
        /// jitter buffer's order), and the latest timestamp (`UInt64.max` before the first).
        let framesReceived = Atomic<Int>(0)
        let lastTimestamp = Atomic<UInt64>(.max)

        /// Counts a video RTP packet on its way into the depayloader; the first packet of each frame
        /// also measures the frame's time in the jitter buffer.
        func received(_ packet: Buffer, delays: JitterBufferDelayMeter) {
            guard let (sequence, timestamp) = try? packet.withUnsafeBytes({ bytes -> (UInt16, UInt64)? in
                guard bytes.count >= 8 else { return nil }
                return (UInt16(bytes[2]) << 8 | UInt16(bytes[3]),
                        UInt64(bytes[4]) << 24 | UInt64(bytes[5]) << 16 | UInt64(bytes[6]) << 8 | UInt64(bytes[7]))
            }) ?? nil else { return }
            if lastTimestamp.exchange(timestamp, ordering: .relaxed) != timestamp {
                framesReceived.add(1, ordering: .relaxed)
                delays.emitted(sequence: sequence)
            }
        }

        /// Frames received that never came out of the decoder: dropped before or by decoding
        /// (incomplete, or waiting for a keyframe after a loss). The decoder runs without frame
        /// threads, so only the frame being assembled may be in flight; it is not counted.
        var framesDropped: Int {
            max(0, framesReceived.load(ordering: .relaxed) - video.load(ordering: .relaxed) - 1)
        }
    }
    private let decodeProbes = Mutex<[PadProbe]>([])
    private let recoveryProbes = Mutex<[PadProbe]>([])
    private let kinds: [UInt8: MediaType]
    /// The video's codec (H.264 without video): where its keyframes start.
    private let videoCodec: VideoCodec
    private let ssrcs: [MediaType: UInt32]
    /// NACKs, PLIs and FIRs this receiver sent.
    let feedbackSent: RTCPFeedbackCounter
    /// NACKs for real gaps, keyframe requests and the adaptive playout delay (see
    /// `RTPReceiver+Recovery.swift`).
    let recovery: ReceiverRecovery
    /// The origin of the times ``LossRecovery`` and ``AdaptivePlayoutDelay`` are given.
    let recoveryOrigin = ContinuousClock.now
    var isStopped: Bool { stopped.load(ordering: .relaxed) }
    /// Where this receiver's RTCP leaves (protected and sent by the flow's socket).
    let sendRTCP: @Sendable (Buffer) -> Void

    /// What arrived for one payload type: packets, bytes, and gaps in the sequence numbers as the
    /// packets arrived (loss before any repair; reordering would count as loss too).
    final class ArrivalCounter: Sendable {
        private struct State {
            var packets = 0, bytes = 0
            var first: UInt16?, highest: Int = 0  // extended sequence number of the highest seen
            var missing = 0
        }
        private let state = Mutex(State())

        func count(sequence: UInt16, bytes: Int) {
            state.withLock { state in
                state.packets += 1
                state.bytes += bytes
                guard state.first != nil else {
                    state.first = sequence
                    state.highest = Int(sequence)
                    return
                }
                // Extend to the value nearest the highest so far (sequence numbers wrap at 65,536).
                let cycle = state.highest & ~0xFFFF
                var extended = cycle | Int(sequence)
                if extended - state.highest > 32_768 { extended -= 65_536 } else if state.highest - extended > 32_768 { extended += 65_536 }
                if extended > state.highest {
                    state.missing += extended - state.highest - 1
                    state.highest = extended
                }
            }
        }

        var snapshot: (packets: Int, bytes: Int, expected: Int, missing: Int) {
            state.withLock { state in
                let expected = state.first.map { state.highest - Int($0) + 1 } ?? 0
                return (state.packets, state.bytes, expected, state.missing)
            }
        }
    }

    final class JitterBuffers: Sendable {
        let elements = Mutex<[Element]>([])
        func withLock<T>(_ body: (inout [Element]) -> T) -> T { elements.withLock { body(&$0) } }
    }
    private var busTask: Task<Void, Never>?
    /// Told when the pipeline fails (given at init: a failure before the stream attaches is kept).
    let ends = EndSignal()
    private let stopHandlers = Mutex<[@Sendable () async -> Void]>([])

    /// Runs `handler` when the stream stops (the SDK closes the flow on the platform).
    package func onStop(_ handler: @escaping @Sendable () async -> Void) {
        stopHandlers.withLock { $0.append(handler) }
    }

    /// The default playout delay for real-time streams on a LAN (see the README's measurements).
    package static let defaultPlayoutDelay: Duration = .milliseconds(40)

    /// The least time the video's jitter buffer waits for a missing packet, whatever the playout
    /// delay. A frame whose packet is repaired after its playout time is shown late (a short
    /// stall) rather than given up: giving up leaves the decoder without a reference until a new
    /// keyframe, a freeze of a keyframe request's round trip and the keyframe's own repairs (at a
    /// fixed 20 ms delay and 10 % loss, 80 % of the frames shown and freezes of 470 ms). As in
    /// libwebrtc, whose frame buffer decodes a late frame once it is complete. In-order packets
    /// are not held by it: the jitter buffer passes them on at once, and the sinks keep the
    /// playout delay. Audio keeps the playout delay as its deadline (the decoder conceals a lost
    /// packet; a late one would be dropped by the sink).
    package static let videoRepairFloor: Duration = .milliseconds(100)

    /// How long a missing video packet is waited for and asked for at `delay`.
    static func videoRepairDeadline(_ delay: Duration) -> Duration { max(delay, videoRepairFloor) }

    static func milliseconds(_ delay: Duration) -> UInt32 {
        UInt32(clamping: delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Builds and starts the receive pipeline for `tracks`; returns it with the stream renderers use.
    package static func start(tracks: [MediaTrackDescription], playoutDelay: PlayoutDelaySetting = .adaptive(),
                             impairment: NetworkImpairment? = nil, runningSince: Duration? = nil,
                             sendRTCP: @escaping @Sendable (Buffer) -> Void) async throws(MediaError) -> (RTPReceiver, MediaStream) {
        let receiver = try RTPReceiver(tracks: tracks, playoutDelay: playoutDelay, impairment: impairment, runningSince: runningSince, sendRTCP: sendRTCP)
        var streamTracks: [MediaStreamTrack] = []
        do {
            for kind in [MediaType.video, .audio] where (kind == .video ? receiver.hasVideo : receiver.hasAudio) {
                let gate = TrackGate(kind: kind)
                gate.install(on: try receiver.pipeline.element(named: kind == .video ? "video-hook" : "audio-hook").staticPad("src"))
                streamTracks.append(MediaStreamTrack(kind: kind, source: nil, gate: gate))
            }
            try await receiver.pipeline.play(timeout: nil)
        } catch {
            throw .gstreamer(error)
        }
        let stream = MediaStream(engine: receiver, tracks: streamTracks)
        receiver.ends.attach { [weak stream] reason in stream?.finish(reason) }
        receiver.started()
        return (receiver, stream)
    }

    /// Builds and starts a receive pipeline that records instead of decoding: depayloaded H.264
    /// access units and Opus packets go to `recorder`. Stopping the stream finishes the recording.
    package static func startRecording(tracks: [MediaTrackDescription], into recorder: MediaRecorder, playoutDelay: PlayoutDelaySetting = .fixed(.milliseconds(200)),
                                      runningSince: Duration? = nil,
                                      sendRTCP: @escaping @Sendable (Buffer) -> Void) async throws(MediaError) -> (RTPReceiver, MediaStream) {
        let receiver = try RTPReceiver(tracks: tracks, playoutDelay: playoutDelay, impairment: nil, purpose: .record, runningSince: runningSince,
                                       sendRTCP: sendRTCP)
        do {
            for kind in [MediaType.video, .audio] where (kind == .video ? receiver.hasVideo : receiver.hasAudio) {
                try recorder.attach(try receiver.pipeline.appSink(named: kind == .video ? "video-record" : "audio-record"), kind: kind)
            }
            try await receiver.pipeline.play(timeout: nil)
        } catch {
            throw .gstreamer(error)
        }
        receiver.onStop { _ = await recorder.finish() }
        let stream = MediaStream(engine: receiver, tracks: [])
        receiver.ends.attach { [weak stream] reason in stream?.finish(reason) }
        receiver.started()
        return (receiver, stream)
    }

    /// Builds and starts a receive pipeline that hands over the media as it came, without
    /// decoding: H.264 access units (byte-stream, SPS/PPS before keyframes; from the first
    /// keyframe) and Opus packets, each with its caps, to `onSample` on a streaming thread.
    package static func startEncoded(tracks: [MediaTrackDescription], playoutDelay: PlayoutDelaySetting = .adaptive(),
                                     runningSince: Duration? = nil,
                                     onSample: @escaping @Sendable (MediaType, Sample) -> Void,
                                     sendRTCP: @escaping @Sendable (Buffer) -> Void) async throws(MediaError) -> (RTPReceiver, MediaStream) {
        let receiver = try RTPReceiver(tracks: tracks, playoutDelay: playoutDelay, impairment: nil, purpose: .record, runningSince: runningSince,
                                       sendRTCP: sendRTCP)
        do {
            for kind in [MediaType.video, .audio] where (kind == .video ? receiver.hasVideo : receiver.hasAudio) {
                try receiver.pipeline.appSink(named: kind == .video ? "video-record" : "audio-record").onSample { onSample(kind, $0) }
            }
            try await receiver.pipeline.play(timeout: nil)
        } catch {
            throw .gstreamer(error)
        }
        let stream = MediaStream(engine: receiver, tracks: [])
        receiver.ends.attach { [weak stream] reason in stream?.finish(reason) }
        receiver.started()
        return (receiver, stream)
    }

    /// What a receive pipeline does with the media: decode it for renderers, or record it.
    enum Purpose { case play, record }

    private init(tracks: [MediaTrackDescription], playoutDelay setting: PlayoutDelaySetting, impairment: NetworkImpairment?, purpose: Purpose = .play,
                 runningSince: Duration? = nil,
                 sendRTCP: @escaping @Sendable (Buffer) -> Void) throws(MediaError) {
        let video = tracks.first { $0.kind == .video }
        let audio = tracks.first { $0.kind == .audio }
        guard video != nil || audio != nil else { throw .unsupportedFormat("a stream without tracks") }
        let videoCodec = try video.map { track throws(MediaError) -> VideoCodec in
            guard let codec = VideoCodec(encodingName: track.codec) else { throw .unsupportedFormat("video codec \(track.codec)") }
            // Recordings, HLS and the encoded hand-over take H.264, VP9 and AV1 (fragmented MP4
            // with avc3, vp09, av01); VP8 is decoded and played only.
            guard purpose == .play || codec.recordingParser != nil else {
                throw .unsupportedFormat("\(track.codec) video kept encoded (recordings, HLS and undecoded hand-over take H.264, VP9 and AV1: VP8 has no MP4 form players and HLS clients read)")
            }
            return codec
        }
        if let audio, audio.codec.uppercased() != "OPUS" { throw .unsupportedFormat("audio codec \(audio.codec)") }
        let delay = setting.initial
        let recovery = ReceiverRecovery(tracks: [video, audio].compactMap { $0 }, playoutDelay: setting)
        self.recovery = recovery
        let milliseconds = Int(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)
        let feedbackSent = RTCPFeedbackCounter()
        self.feedbackSent = feedbackSent
        self.sendRTCP = sendRTCP
        do {
            var parts = [try StockPipelines.template("subscribe").render(["latency": String(milliseconds)])]
            let then = purpose == .play ? "decode" : "record"
            if let video {
                let codec = videoCodec ?? .h264
                var values = ["pt": String(video.payloadType), "encoding-name": codec.encodingName]
                if let impairment { values["impairment"] = impairment.description }
                parts.append(try StockPipelines.template("subscribe-video").render(values))
                parts.append(try StockPipelines.template("\(then)-video").render(
                    purpose == .play ? ["depayloader": codec.depayloader, "decoder": codec.decoder]
                        : ["depayloader": codec.depayloader, "parser": codec.recordingParser ?? ""]))
            }
            if let audio {
                parts.append(try StockPipelines.template("subscribe-audio").render(["pt": String(audio.payloadType)]))
                parts.append(try StockPipelines.template("\(then)-audio").render())
            }
            pipeline = try Pipeline(description: parts.joined(separator: "\n"), name: "subscriber")
            pipeline.useSystemClock()
            // Running time starts now, or at `runningSince` (system clock) when packets came before
            // the pipeline was built: they keep their arrival times (``receiveRTP(_:payloadType:arrivedAt:)``).
            let now = Pipeline.systemClockTime
            pipeline.setBaseTime(min(now, runningSince ?? now))
            var inputs: [UInt8: AppSource] = [:]
            var rtcpInputs: [AppSource] = []
            if let video {
                inputs[video.payloadType] = try pipeline.appSource(named: "video-rtp-in")
                rtcpInputs.append(try pipeline.appSource(named: "video-rtcp-in"))
                try pipeline.appSink(named: "video-rtcp-out").onSample { feedbackSent.sent($0.buffer); sendRTCP($0.buffer) }
            }
            if let audio {
                inputs[audio.payloadType] = try pipeline.appSource(named: "audio-rtp-in")
                rtcpInputs.append(try pipeline.appSource(named: "audio-rtcp-in"))
                try pipeline.appSink(named: "audio-rtcp-out").onSample { feedbackSent.sent($0.buffer); sendRTCP($0.buffer) }
            }
            self.inputs = inputs
            self.rtcpInputs = rtcpInputs
            arrivals = inputs.mapValues { _ in ArrivalCounter() }
            delayMeters = inputs.mapValues { _ in JitterBufferDelayMeter() }
            var kinds: [UInt8: MediaType] = [:]
            if let video { kinds[video.payloadType] = .video }
            if let audio { kinds[audio.payloadType] = .audio }
            self.kinds = kinds
            self.videoCodec = videoCodec ?? .h264
            var ssrcs: [MediaType: UInt32] = [:]
            if let video { ssrcs[.video] = video.ssrc }
            if let audio { ssrcs[.audio] = audio.ssrc }
            self.ssrcs = ssrcs
            let rtpbin = try pipeline.element(named: "rtpbin")
            // Regular reports every 100 ms or so (the relay aggregates them for the publisher's
            // estimate; PLIs ride on AVPF early packets). NACKs do not wait for them: see
            // ``sendRetransmissionRequests(from:)``.
            for session in pipeline.elements where session.factoryName == "rtpsession" {
                try session.set("rtcp-min-interval", UInt64(100_000_000))
                try session.set("rtcp-fraction", 0.1)
            }
            // Sinks present each frame one playout delay after it arrived: the time the jitter
            // buffer gives a lost packet to come again. Fixed, not queried: the query's answer
            // changes with which renderer sinks are ready when it runs (seen: 0 ms, or 180 ms with
            // opusdec's in-band FEC claiming 120 ms, where the video then waited 180 ms and its
            // renderer queue dropped three frames in four).
            let latency = pipeline.fixLatency(delay)
            sinkLatency = latency
            let origin = recoveryOrigin
            let videoJitterBuffer = videoJitterBuffer
            playoutDelay = PlayoutDelay(default: delay, adaptiveBounds: setting.adaptiveBounds) { delay in
                // rtpbin hands its latency to every jitter buffer; the video's gets its own after.
                try? rtpbin.set("latency", Self.milliseconds(delay))
                for element in videoJitterBuffer.withLock({ $0 }) {
                    try? element.set("latency", Self.milliseconds(Self.videoRepairDeadline(delay)))
                }
                latency.set(delay)
                // Packets are asked for again for as long as they could still be played.
                recovery.deadline(delay, now: ContinuousClock.now - origin)
            }
        } catch {
            throw .gstreamer(error)
        }
        hasVideo = video != nil
        hasAudio = audio != nil
        decodes = purpose == .play
        if purpose == .play {
            var probes: [PadProbe] = []
            if video != nil, let pad = try? pipeline.element(named: "video-hook").staticPad("src") {
                let counters = decoded
                probes.append(pad.addBufferProbe { _ in
                    if counters.video.add(1, ordering: .relaxed).newValue == 1 { counters.firstVideo.withLock { $0 = .now } }
                    return .pass
                })
            }
            if video != nil, let pad = try? pipeline.element(named: "video-depay").staticPad("src") {
                let counters = decoded
                probes.append(pad.addBufferProbe { buffer in
                    if buffer.isKeyframe { counters.keyframes.add(1, ordering: .relaxed) }
                    return .pass
                })
            }
            if let video, let pad = try? pipeline.element(named: "video-depay").staticPad("sink"), let delays = delayMeters[video.payloadType] {
                let counters = decoded
                probes.append(pad.addBufferProbe { buffer in
                    counters.received(buffer, delays: delays)
                    return .pass
                })
            }
            if let audio, let pad = try? pipeline.element(named: "audio-depay").staticPad("sink"), let delays = delayMeters[audio.payloadType] {
                probes.append(pad.addBufferProbe { buffer in
                    if let sequence = try? buffer.withUnsafeBytes({ $0.count >= 4 ? UInt16($0[2]) << 8 | UInt16($0[3]) : nil }) {
                        delays.emitted(sequence: sequence)
                    }
                    return .pass
                })
            }
            if audio != nil, let pad = try? pipeline.element(named: "audio-hook").staticPad("src") {
                let counters = decoded
                probes.append(pad.addBufferProbe { _ in counters.audio.add(1, ordering: .relaxed); return .pass })
            }
            decodeProbes.withLock { $0 = probes }
        }
        if let video {
            var probes = watchDepayloader(payloadType: video.payloadType)
            // A recording of scalable VP9 keeps each picture's layers as one superframe.
            if purpose != .play, self.videoCodec == .vp9, let depayloader = try? pipeline.element(named: "video-depay") {
                probes += (try? VP9LayerFrames.attach(to: depayloader)) ?? []
            }
            recoveryProbes.withLock { $0 = probes }
        }
        // Before playing, so no jitter buffer has a packet yet. Weak: the pipeline holds the handler.
        try? pipeline.element(named: "rtpbin").onNewJitterBuffer { [weak self] element, session in self?.configure(jitterBuffer: element, session: session) }
    }

    var firstVideoDecodedAt: ContinuousClock.Instant? { decoded.firstVideo.withLock { $0 } }

    /// The payload type of its `kind` of media, if it has that track.
    func payloadType(of kind: MediaType) -> UInt8? { payloadTypes[kind] }

    /// The video's frames received and decoded so far, where this receiver decodes (nil where it
    /// records, or has no video).
    var decodedVideoFrames: (payloadType: UInt8, received: Int, decoded: Int)? {
        guard decodes, let payloadType = payloadTypes[.video] else { return nil }
        return (payloadType, decoded.framesReceived.load(ordering: .relaxed), decoded.video.load(ordering: .relaxed))
    }

    /// Cumulative counts for data quality: decoded video frames and audio buffers, sequence numbers
    /// expected and missing on arrival (all tracks).
    func qualityCounters() -> (video: Int, audio: Int, expected: Int, missing: Int, hasVideo: Bool) {
        let arrived = arrivals.values.map(\.snapshot)
        return (decoded.video.load(ordering: .relaxed), decoded.audio.load(ordering: .relaxed),
                arrived.map(\.expected).reduce(0, +), arrived.map(\.missing).reduce(0, +), hasVideo)
    }

    func tee(for kind: MediaType) -> Element? {
        guard kind == .video ? hasVideo : hasAudio else { return nil }
        return try? pipeline.element(named: kind == .video ? "video-tee" : "audio-tee")
    }

    /// An RTP packet from the network, routed by its payload type; unknown types are dropped.
    /// `arrivedAt` (system clock, ``Pipeline/systemClockTime``) is when it arrived, for a packet
    /// that waited to be handed over: the jitter buffer times the stream from arrivals, and a
    /// burst stamped at once would start it late by the burst's length (the viewer's picture
    /// that much behind until its clock-skew estimate catches up, seconds later). Without it the
    /// packet arrives now.
    @discardableResult
    package func receiveRTP(_ packet: Buffer, payloadType: UInt8, arrivedAt: Duration? = nil) -> Bool {
        guard let input = inputs[payloadType] else { return false }
        let header = try? packet.withUnsafeBytes { bytes -> (sequence: UInt16, timestamp: UInt32, ssrc: UInt32, keyframe: Bool)? in
            guard bytes.count >= 12 else { return nil }
            return (UInt16(bytes[2]) << 8 | UInt16(bytes[3]),
                    UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7]),
                    UInt32(bytes[8]) << 24 | UInt32(bytes[9]) << 16 | UInt32(bytes[10]) << 8 | UInt32(bytes[11]),
                    kinds[payloadType] == .video && VideoCodec.packetStartsKeyframe(videoCodec, bytes))
        }
        if let header {
            arrivals[payloadType]?.count(sequence: header.sequence, bytes: packet.size)
            delayMeters[payloadType]?.arrived(sequence: header.sequence)
            recovered(payloadType: payloadType, sequence: header.sequence, timestamp: header.timestamp, ssrc: header.ssrc,
                      keyframe: header.keyframe, late: arrivedAt != nil)
        }
        let pushed = input.pushNow(Self.arrived(packet, at: arrivedAt.flatMap { arrival in
            pipeline.baseTime.map { base in max(.zero, arrival - base) }
        }))
        return pushed
    }

    /// Sets up a jitter buffer rtpbin has just made, before its first packet: a fast start.
    ///
    /// Fast start: the first packets go on as soon as two in a row are there, instead of after the
    /// playout delay (GStreamer waits that long in case an earlier packet is still coming). The
    /// relay sends a joining viewer the stream in order from the moment it hears from it (its
    /// keyframe from the cache, or live packets the depayloader skips until the keyframe asked for
    /// it comes), so there is nothing to wait for; the renderer shows the first frame at once
    /// (``Renderer``), and the frames after it keep the playout delay. Safe only with the pipeline's latency fixed
    /// (``Pipeline/fixLatency(_:)``): with a queried latency the early start raced the
    /// renderer sinks' latency query and left the picture 180 ms behind.
    ///
    /// The video's (session 0, see subscribe-video.pipeline) waits ``videoRepairDeadline(_:)`` for
    /// a missing packet.
    private func configure(jitterBuffer element: Element, session: UInt32) {
        try? element.set("faststart-min-packets", UInt32(2))
        if session == 0 && hasVideo {
            videoJitterBuffer.withLock { $0 = [element] }
            try? element.set("latency", Self.milliseconds(Self.videoRepairDeadline(sinkLatency.latency)))
        }
        jitterBuffers.withLock { $0.append(element) }
    }

    /// Per received track: what arrived, what was missing on arrival, and what the jitter buffer
    /// could not repair in time.
    package func networkStatistics() -> [ReceivedTrackStatistics] {
        var buffers: [MediaType: Structure] = [:]
        for element in jitterBuffers.withLock({ $0 }) {
            guard case .structure(let stats)? = try? element.property("stats"),
                  let caps = (try? element.staticPad("sink"))?.currentCaps?.structures.first,
                  case .string(let media?)? = caps["media"], let kind = MediaType(rawValue: media) else { continue }
            buffers[kind] = stats
        }
        func number(_ value: PropertyValue?) -> Int {
            switch value {
            case .uint(let u)?: return Int(clamping: u)
            case .int(let i)?: return Int(clamping: i)
            default: return 0
            }
        }
        return arrivals.keys.sorted().compactMap { payloadType in
            guard let counter = arrivals[payloadType], let kind = kinds[payloadType] else { return nil }
            let arrived = counter.snapshot
            let stats = buffers[kind]
            return ReceivedTrackStatistics(
                kind: kind, packetsReceived: arrived.packets, bytesReceived: arrived.bytes, packetsExpected: arrived.expected,
                packetsMissingOnArrival: arrived.missing, packetsLost: number(stats?["num-lost"]), packetsLate: number(stats?["num-late"]),
                nacksSent: recovery.nacked(payloadType: payloadType), jitter: .nanoseconds(number(stats?["avg-jitter"])))
        }
    }

    /// `inbound-rtp` entries for each received track (see ``RTCStatsReport``).
    package func rtcStats() -> [RTCStats] {
        let delay = playoutDelay.map { Double($0.current / .microseconds(1)) / 1_000_000 }
        return networkStatistics().map { track in
            let ssrc = ssrcs[track.kind] ?? 0
            var entry = RTCStats(type: "inbound-rtp", id: "inbound-\(track.kind.rawValue)-\(ssrc)", kind: track.kind.rawValue, ssrc: ssrc)
            entry.packetsReceived = track.packetsReceived
            entry.bytesReceived = track.bytesReceived
            entry.packetsLost = track.packetsLost
            entry.jitter = Double(track.jitter / .microseconds(1)) / 1_000_000
            entry.jitterBufferTargetDelay = delay
            let sent = feedbackSent.counts(ssrc)
            entry.nackCount = sent.nacks
            entry.pliCount = sent.plis
            entry.firCount = sent.firs
            if let meter = payloadTypes[track.kind].flatMap({ delayMeters[$0] }) {
                let (total, count) = meter.totals
                entry.jitterBufferDelay = total
                entry.jitterBufferEmittedCount = count
            }
            if track.kind == .video {
                entry.framesDecoded = decoded.video.load(ordering: .relaxed)
                entry.keyFramesDecoded = decoded.keyframes.load(ordering: .relaxed)
                entry.framesReceived = decoded.framesReceived.load(ordering: .relaxed)
                entry.framesDropped = decoded.framesDropped
            }
            return entry
        }
    }

    /// An RTCP packet from the network (sender reports of the publisher).
    package func receiveRTCP(_ packet: Buffer) {
        for input in rtcpInputs { input.pushNow(Self.arrived(packet)) }
    }

    /// The packet without timestamps, so the source stamps it with its arrival time (the jitter
    /// buffer works from arrival times; a sender's timestamps mean nothing here), or with the
    /// arrival `runningTime` given (the source keeps a decoding timestamp it is handed).
    static func arrived(_ packet: Buffer, at runningTime: Duration? = nil) -> Buffer {
        guard packet.presentationTimestamp != nil || packet.decodingTimestamp != nil || runningTime != nil else { return packet }
        let copy = packet.shallowCopy()
        copy.presentationTimestamp = nil
        copy.decodingTimestamp = runningTime
        copy.duration = nil
        return copy
    }

    /// Once the pipeline plays: its bus watched for failures, and loss recovery's timer.
    private func started() {
        watchBus()
        startRecoveryTimer()
    }

    private func watchBus() {
        let bus = pipeline.bus
        busTask = Task { [weak self] in
            for await message in bus {
                if case .error(let error) = message.kind {
                    self?.ends.fire(.failed(error.description))
                    return
                }
            }
        }
    }

    func stop() async {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        busTask?.cancel()
        await pipeline.stop()
        let handlers = stopHandlers.withLock { handlers in defer { handlers = [] }; return handlers }
        for handler in handlers { await handler() }
    }
}

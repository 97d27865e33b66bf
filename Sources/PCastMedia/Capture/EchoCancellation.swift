import Foundation
import GStreamer
import Logging
import Synchronization

// Acoustic echo cancellation across pipelines.
//
// `webrtcdsp` in a capture pipeline cancels the far-end audio that its `webrtcechoprobe` saw, and
// it matches the two by time: a capture buffer's running time against the time the probe's audio
// was played (the probe's running time plus its pipeline's latency). Renderers play in other
// pipelines (a subscription, another capture), with base times of their own, so each capture with
// echo cancellation gets an `EchoReference`: a small pipeline holding its probe, run on the system
// clock with the capture's base time. Renderers (on the system clock too) tap the audio going into
// their audio sink and hand it over, stamped with the clock time it will be played at, converted to
// the capture's running time. Measured here (PulseAudio null sink, its monitor as the microphone):
// about 24 dB less echo with the reference aligned this way, 2 dB with the pipelines' own timelines.

private let logger = SDKLog.logger("pcast.media.echo")

/// The far-end reference of one capture with echo cancellation: `appsrc ! … ! webrtcechoprobe`.
/// Unchecked: the pipeline and source are GStreamer objects (thread-safe); mutable state is in the `Mutex` `state`.
final class EchoReference: @unchecked Sendable {
    /// The probe's element name: what the capture's `webrtcdsp probe=` names.
    let probeName: String
    private let pipeline: Pipeline
    private let source: AppSource

    private struct State {
        /// The capture pipeline's base time, once it plays; buffers are dropped before.
        var captureBaseTime: Duration?
        /// This pipeline's latency, which the probe adds to running times.
        var latency: Duration = .zero
        var caps: Caps?
    }
    private let state = Mutex(State())

    /// - Throws: ``GStreamerError`` when the elements are missing or the pipeline cannot be built.
    init(sampleRate: Int) throws(GStreamerError) {
        probeName = "pcast-echo-probe-\(UUID().uuidString.prefix(8).lowercased())"
        // Mono at the capture's rate: webrtcdsp refuses a probe of another rate.
        pipeline = try Pipeline(description: """
            appsrc name=far-end is-live=true format=time max-bytes=192000 \
            ! audioconvert ! audioresample \
            ! audio/x-raw,format=S16LE,layout=interleaved,rate=\(sampleRate),channels=1 \
            ! webrtcechoprobe name=\(probeName) ! fakesink sync=false async=false
            """, name: "echo-reference")
        pipeline.useSystemClock()
        source = try pipeline.appSource(named: "far-end")
    }

    /// Starts taking the renderers' audio, on the timeline of the capture pipeline whose base time
    /// is `captureBaseTime` (which runs on the system clock).
    func start(captureBaseTime: Duration) async throws(GStreamerError) {
        pipeline.setBaseTime(captureBaseTime)
        try await pipeline.play(timeout: .seconds(5))
        let latency = pipeline.latency ?? .zero
        state.withLock { state in
            state.captureBaseTime = captureBaseTime
            state.latency = latency
        }
        EchoFeeds.shared.add(self)
    }

    func stop() async {
        EchoFeeds.shared.remove(self)
        state.withLock { $0.captureBaseTime = nil }
        await pipeline.stop()
    }

    /// A buffer a renderer plays at clock time `playClockTime`; called on its streaming thread.
    func feed(_ buffer: Buffer, caps: Caps, playClockTime: Duration) {
        let (base, latency, known) = state.withLock { ($0.captureBaseTime, $0.latency, $0.caps) }
        guard let base else { return }
        // The probe takes a buffer's running time plus this pipeline's latency as its play time.
        let timestamp = playClockTime - base - latency
        guard timestamp >= .zero else { return }
        if known.map({ $0 === caps || $0 == caps }) != true {
            do {
                try source.set("caps", caps)
            } catch {
                logger.warning("echo reference refused \(caps): \(error)")
                return
            }
            state.withLock { $0.caps = caps }
        }
        let copy = buffer.shallowCopy()
        copy.presentationTimestamp = timestamp
        copy.decodingTimestamp = nil
        source.pushNow(copy)
    }
}

/// The process's renderers and echo references: the most recently started renderer with audio is
/// the far end every reference hears.
final class EchoFeeds: Sendable {
    static let shared = EchoFeeds()

    private struct State {
        var references: [ObjectIdentifier: EchoReference] = [:]
        /// Renderer taps in start order; the last one feeds.
        var taps: [UInt64] = []
        var nextTap: UInt64 = 1
    }
    private let state = Mutex(State())
    /// How many references listen: taps return at once while there are none.
    private let listening = Atomic<Int>(0)

    func add(_ reference: EchoReference) {
        let count = state.withLock { state in
            state.references[ObjectIdentifier(reference)] = reference
            return state.references.count
        }
        listening.store(count, ordering: .releasing)
    }

    func remove(_ reference: EchoReference) {
        let count = state.withLock { state in
            state.references[ObjectIdentifier(reference)] = nil
            return state.references.count
        }
        listening.store(count, ordering: .releasing)
    }

    func registerTap() -> UInt64 {
        state.withLock { state in
            let id = state.nextTap
            state.nextTap += 1
            state.taps.append(id)
            return id
        }
    }

    func unregisterTap(_ id: UInt64) {
        state.withLock { $0.taps.removeAll { $0 == id } }
    }

    var hasListeners: Bool { listening.load(ordering: .acquiring) > 0 }

    /// Audio tap `id` plays `buffer` at clock time `playClockTime`.
    func played(by id: UInt64, _ buffer: Buffer, caps: Caps, playClockTime: Duration) {
        let references = state.withLock { state -> [EchoReference] in
            guard state.taps.last == id else { return [] }
            return Array(state.references.values)
        }
        for reference in references { reference.feed(buffer, caps: caps, playClockTime: playClockTime) }
    }
}

/// The tap on a renderer's audio sink: the clock time each buffer is played at (its running time
/// on the sink pad plus the pipeline's base time and latency) goes with it to the references.
final class RendererEchoTap: Sendable {
    private let id: UInt64
    private let probe: PadProbe
    private let refresh: Task<Void, Never>

    init(sinkPad: Pad, pipeline: Pipeline) {
        let id = EchoFeeds.shared.registerTap()
        self.id = id
        // The pipeline's latency changes once the new sink reports its own (an audio sink adds its
        // buffer), so it is asked again every half second, off the streaming thread.
        let latency = Mutex<Duration>(pipeline.latency ?? .zero)
        refresh = Task { [weak pipeline] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                // A latency query walks the pipeline and can wait on it (a pipeline being torn
                // down): ask only while some capture cancels echo, never for nothing.
                guard EchoFeeds.shared.hasListeners, let current = pipeline?.latency else { continue }
                latency.withLock { $0 = current }
            }
        }
        probe = sinkPad.addBufferProbe { [weak pipeline] buffer in
            guard EchoFeeds.shared.hasListeners else { return .pass }
            guard let timestamp = buffer.presentationTimestamp, let caps = sinkPad.currentCaps,
                  let running = sinkPad.runningTime(of: timestamp), let base = pipeline?.baseTime else { return .pass }
            let playClockTime = base + running + latency.withLock { $0 }
            EchoFeeds.shared.played(by: id, buffer, caps: caps, playClockTime: playClockTime)
            return .pass
        }
    }

    func remove() {
        refresh.cancel()
        probe.remove()
        EchoFeeds.shared.unregisterTap(id)
    }

    deinit { remove() }
}

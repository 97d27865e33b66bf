import GStreamer
import PCastTestSupport
import Synchronization
import Testing

@Suite("Pipeline latency")
struct LatencyTests {
    /// How long after its running time each buffer reached a synchronised sink's handoff.
    final class Lags: Sendable {
        private let values = Mutex<[Duration]>([])
        func add(_ lag: Duration) { values.withLock { $0.append(lag) } }
        var count: Int { values.withLock { $0.count } }
        /// The lags recorded from index `from` on.
        func since(_ from: Int) -> [Duration] { values.withLock { Array($0.dropFirst(from)) } }
    }

    /// The middle value (a loaded machine may hand one frame off late; a sink never hands one early).
    static func median(_ values: [Duration]) -> Duration? { values.isEmpty ? nil : values.sorted()[values.count / 2] }

    static func watch(_ pipeline: Pipeline) throws -> Lags {
        let lags = Lags()
        try pipeline.element(named: "sink").onHandoff { buffer in
            guard let pts = buffer.presentationTimestamp, let now = pipeline.clockTime, let base = pipeline.baseTime else { return }
            lags.add(now - base - pts)
        }
        return lags
    }

    @Test("a fixed latency is what a synchronised sink waits (150 ms after each frame's running time, not the 33 ms a live source reports), and a new one holds from the next frames")
    func fixedLatencyIsWaited() async throws {
        let pipeline = try Pipeline(description: "videotestsrc is-live=true ! \(ProbeTests.gray) ! fakesink name=sink sync=true async=false")
        let lags = try Self.watch(pipeline)
        let latency = pipeline.fixLatency(.milliseconds(150))
        try await pipeline.play()
        #expect(await eventually(.seconds(5)) { lags.count >= 12 })
        let fixed = lags.since(2)
        #expect(!fixed.isEmpty && fixed.allSatisfy { $0 >= .milliseconds(145) }, "never before its time: lags \(fixed)")
        #expect(Self.median(fixed).map { $0 < .milliseconds(250) } == true, "lags \(fixed)")

        latency.set(.milliseconds(20))
        #expect(latency.latency == .milliseconds(20))
        let changed = lags.count
        #expect(await eventually(.seconds(5)) { lags.count >= changed + 12 })
        // The frames already queued for the old latency go at once; from then on, 20 ms.
        let after = lags.since(changed + 8)
        #expect(Self.median(after).map { $0 >= .milliseconds(15) && $0 < .milliseconds(100) } == true, "lags \(after)")
        await pipeline.stop()
    }

    @Test("without a fixed latency the sink waits what the query finds (the live source's frame and the sink's processing deadline), well under 150 ms")
    func queriedLatencyForReference() async throws {
        let pipeline = try Pipeline(description: "videotestsrc is-live=true ! \(ProbeTests.gray) ! fakesink name=sink sync=true async=false")
        let lags = try Self.watch(pipeline)
        try await pipeline.play()
        #expect(await eventually(.seconds(5)) { lags.count >= 12 })
        let queried = lags.since(2)
        #expect(Self.median(queried).map { $0 < .milliseconds(120) } == true, "lags \(queried)")
        await pipeline.stop()
    }

    @Test("rtpbin hands each jitter buffer it makes to onNewJitterBuffer, with its session number, before its first packet passes (one per stream, settings made there hold); an element without the signal is refused")
    func newJitterBuffers() async throws {
        let pipeline = try Pipeline(description: """
            rtpbin name=rtpbin
            audiotestsrc is-live=true num-buffers=40 ! audio/x-raw,rate=8000,channels=1 ! rtpL16pay ssrc=5 ! rtpbin.recv_rtp_sink_0
            audiotestsrc is-live=true num-buffers=40 ! audio/x-raw,rate=8000,channels=1 ! rtpL16pay ssrc=6 ! rtpbin.recv_rtp_sink_1
            """)
        let made = Mutex<[(factory: String, pushedBefore: UInt64?, session: UInt32)]>([])
        try pipeline.element(named: "rtpbin").onNewJitterBuffer { element, session in
            try? element.set("faststart-min-packets", UInt32(3))
            var pushed: UInt64?
            if case .structure(let stats)? = try? element.property("stats"), case .uint(let value)? = stats["num-pushed"] { pushed = value }
            made.withLock { $0.append((element.factoryName ?? "", pushed, session)) }
        }
        let buffers = Mutex<[Element]>([])
        // What rtpbin made, read back after the packets flowed.
        try await pipeline.play()
        #expect(await eventually(.seconds(5)) { made.withLock { $0.count } == 2 })
        try await Task.sleep(for: .milliseconds(300))
        buffers.withLock { $0 = pipeline.elements.filter { $0.factoryName == "rtpjitterbuffer" } }
        await pipeline.stop()
        let seen = made.withLock { $0 }
        #expect(seen.count == 2 && seen.allSatisfy { $0.factory == "rtpjitterbuffer" }, "\(seen)")
        #expect(seen.allSatisfy { $0.pushedBefore == 0 }, "a jitter buffer had pushed packets before it was handed over: \(seen)")
        #expect(Set(seen.map(\.session)) == [0, 1], "each with its session's number: \(seen)")
        let jitterBuffers = buffers.withLock { $0 }
        #expect(jitterBuffers.count == 2)
        for element in jitterBuffers {
            #expect(try element.property("faststart-min-packets", as: UInt32.self) == 3)
        }
        #expect(throws: GStreamerError.unknownSignal(element: "src", signal: "new-jitterbuffer")) {
            try Pipeline(description: "videotestsrc name=src ! fakesink").element(named: "src").onNewJitterBuffer { _, _ in }
        }
    }

    @Test("the system clock's time is the clock time of a pipeline on the system clock")
    func systemClockTime() async throws {
        let pipeline = try Pipeline(description: "videotestsrc is-live=true ! \(ProbeTests.gray) ! fakesink sync=true async=false")
        pipeline.useSystemClock()
        try await pipeline.play()
        let before = Pipeline.systemClockTime
        let clock = try #require(pipeline.clockTime)
        let after = Pipeline.systemClockTime
        #expect(before <= clock && clock <= after, "\(before) ≤ \(clock) ≤ \(after)")
        await pipeline.stop()
    }
}

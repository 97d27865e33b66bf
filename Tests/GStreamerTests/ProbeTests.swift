import GStreamer
import PCastTestSupport
import Synchronization
import Testing

@Suite("Pad probes")
struct ProbeTests {
    /// 64×48 GRAY8 frames: one byte per pixel, so pixel checks are simple.
    static let gray = "video/x-raw,format=GRAY8,width=64,height=48,framerate=30/1"

    @Test("a probe counts buffers and drops every other one; downstream sees half")
    func countAndDrop() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=20 ! \(Self.gray) ! identity name=hook ! appsink name=out sync=false")
        let seen = Counter()
        try pipeline.element(named: "hook").staticPad("src").addBufferProbe { _ in
            let n = seen.increment()
            return n % 2 == 0 ? .drop : .pass
        }
        let samples = try pipeline.appSink(named: "out").samples(limit: 64)
        try await pipeline.play()
        var received = 0
        for await _ in samples { received += 1 }
        #expect(seen.value == 20)
        #expect(received == 10)
        await pipeline.stop()
    }

    @Test("a probe rewrites pixels in place; downstream sees the change")
    func rewritePixels() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=5 pattern=white ! \(Self.gray) ! identity name=hook ! appsink name=out sync=false")
        try pipeline.element(named: "hook").staticPad("src").addBufferProbe { buffer in
            try? buffer.withUnsafeMutableBytes { bytes in
                for i in 0..<(bytes.count / 2) { bytes[i] = 0x42 }
            }
            return .pass
        }
        let samples = try pipeline.appSink(named: "out").samples(limit: 8)
        try await pipeline.play()
        var frames = 0
        for await sample in samples {
            let bytes = sample.buffer.bytes
            #expect(bytes.count == 64 * 48)
            #expect(bytes[..<(bytes.count / 2)].allSatisfy { $0 == 0x42 })
            // The untouched half still holds the source's white (GRAY8 white is not necessarily 0xFF).
            #expect(bytes.last != 0x42)
            #expect(bytes[(bytes.count / 2)...].allSatisfy { $0 == bytes.last })
            frames += 1
        }
        #expect(frames == 5)
        await pipeline.stop()
    }

    @Test("a probe replaces the buffer with another one, timestamps included")
    func replaceBuffer() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=3 ! \(Self.gray) ! identity name=hook ! appsink name=out sync=false")
        try pipeline.element(named: "hook").staticPad("src").addBufferProbe { buffer in
            let replacement = Buffer(bytes: [UInt8](repeating: 7, count: 64 * 48))
            replacement.presentationTimestamp = buffer.presentationTimestamp.map { $0 + .seconds(100) }
            replacement.duration = buffer.duration
            buffer = replacement
            return .pass
        }
        let samples = try pipeline.appSink(named: "out").samples(limit: 8)
        try await pipeline.play()
        var timestamps: [Duration] = []
        for await sample in samples {
            #expect(sample.buffer.bytes.allSatisfy { $0 == 7 })
            timestamps.append(sample.buffer.presentationTimestamp ?? .zero)
        }
        #expect(timestamps.count == 3)
        #expect(timestamps.first == .seconds(100))
        await pipeline.stop()
    }

    @Test("removing a probe stops it; .remove removes it from inside")
    func removal() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=10 ! \(Self.gray) ! identity name=hook ! fakesink sync=false")
        let pad = try pipeline.element(named: "hook").staticPad("src")
        let once = Counter()
        pad.addBufferProbe { _ in
            once.increment()
            return .remove
        }
        let never = Counter()
        let removed = pad.addBufferProbe { _ in
            never.increment()
            return .pass
        }
        removed.remove()
        removed.remove()
        let counter = pad.countBuffers()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        #expect(once.value == 1)
        #expect(never.value == 0)
        #expect(counter.value == 10)
        await pipeline.stop()
    }

    @Test("pad caps and video info describe the negotiated frames")
    func padCaps() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=1 ! video/x-raw,format=I420,width=320,height=240,framerate=25/1 ! fakesink name=sink sync=false")
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        let caps = try #require(try pipeline.element(named: "sink").staticPad("sink").currentCaps)
        #expect(caps.isFixed)
        let info = try #require(caps.videoInfo)
        #expect(info.format == .i420)
        #expect(info.width == 320 && info.height == 240)
        #expect(info.frameRateNumerator == 25 && info.frameRateDenominator == 1)
        #expect(info.strides == [320, 160, 160])
        #expect(info.offsets == [0, 76_800, 96_000])
        #expect(info.size == 115_200)
        await pipeline.stop()
    }

    @Test("the counting probe counts buffers inside buffer lists")
    func countsBufferLists() async throws {
        // rtph264pay pushes buffer lists.
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=10 ! x264enc tune=zerolatency speed-preset=ultrafast ! rtph264pay mtu=300 ! fakesink name=sink sync=false")
        let counter = try pipeline.element(named: "sink").staticPad("sink").countBuffers()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(20))
        #expect(counter.value > 10)
        await pipeline.stop()
    }
    @Test("an upstream event probe sees a jitter buffer's retransmission request for the missing packet; dropped, the element upstream never gets it")
    func upstreamEvents() async throws {
        let caps = "application/x-rtp,media=video,clock-rate=90000,encoding-name=H264,payload=96"
        let pipeline = try Pipeline(description: """
            appsrc name=in is-live=true do-timestamp=true format=time caps=\(caps) \
            ! rtpjitterbuffer name=jb latency=200 do-retransmission=true rtx-next-seqnum=false ! fakesink sync=false
            """)
        let requested = Mutex<[UInt64]>([])
        try pipeline.element(named: "jb").staticPad("sink").addUpstreamEventProbe(named: "GstRTPRetransmissionRequest") { request in
            if case .uint(let sequence)? = request["seqnum"] { requested.withLock { $0.append(sequence) } }
            return .drop
        }
        let reachedSource = Counter()
        try pipeline.element(named: "in").staticPad("src").addUpstreamEventProbe(named: "GstRTPRetransmissionRequest") { _ in
            reachedSource.increment()
            return .pass
        }
        let source = try pipeline.appSource(named: "in")
        // Nothing reaches the sink before the first push, so do not wait for preroll.
        try await pipeline.play(timeout: nil)
        // Sequence numbers 0…19 every 20 ms, without 7.
        for sequence in 0..<20 where sequence != 7 {
            let timestamp = UInt32(sequence * 1800)
            let packet: [UInt8] = [0x80, 96, 0, UInt8(sequence), UInt8(timestamp >> 24), UInt8(timestamp >> 16 & 0xFF), UInt8(timestamp >> 8 & 0xFF),
                                   UInt8(timestamp & 0xFF), 0, 0, 0x12, 0x34, 0x65, 0x88, 0x84, 0x00]
            try await source.push(Buffer(bytes: packet))
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await eventually(.seconds(5)) { requested.withLock { $0.contains(7) } }, "requested \(requested.withLock { $0 })")
        #expect(Set(requested.withLock { $0 }) == [7])
        #expect(reachedSource.value == 0)
        await pipeline.stop()
    }
}

@Suite("Sink handoffs")
struct HandoffTests {
    @Test("a synchronised fakesink hands off each buffer after its clock wait (10 frames at 30 fps span about 300 ms, not a burst); an element without the signal is refused")
    func handoffAfterTheWait() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=10 ! \(ProbeTests.gray) ! fakesink name=sink sync=true")
        let times = Mutex<[ContinuousClock.Instant]>([])
        let sizes = Mutex<[Int]>([])
        try pipeline.element(named: "sink").onHandoff { buffer in
            times.withLock { $0.append(.now) }
            sizes.withLock { $0.append(buffer.bytes.count) }
        }
        try await pipeline.play()
        let deadline = ContinuousClock.now + .seconds(5)
        while times.withLock({ $0.count }) < 10, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        await pipeline.stop()
        let seen = times.withLock { $0 }
        #expect(seen.count == 10)
        #expect(sizes.withLock { $0 }.allSatisfy { $0 == 64 * 48 })
        if let first = seen.first, let last = seen.last {
            #expect(last - first >= .milliseconds(250), "handed off over \(last - first): paced by the clock")
        }
        #expect(throws: GStreamerError.unknownSignal(element: "src", signal: "handoff")) {
            try Pipeline(description: "videotestsrc name=src ! fakesink").element(named: "src").onHandoff { _ in }
        }
    }
}

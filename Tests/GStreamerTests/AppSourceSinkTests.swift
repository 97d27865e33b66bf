import GStreamer
import PCastTestSupport
import Testing

@Suite("appsrc and appsink")
struct AppSourceSinkTests {
    @Test("appsrc → appsink keeps bytes, timestamps and flags")
    func roundTrip() async throws {
        let pipeline = try Pipeline(description: "appsrc name=in ! queue ! appsink name=out sync=false")
        let source = try pipeline.appSource(named: "in")
        try source.setCaps(Caps("application/x-pcast-test"))
        // A small queue so back-pressure really suspends the pusher.
        try source.setQueueLimit(bytes: 4096, buffers: 2)
        let samples = try pipeline.appSink(named: "out").samples(limit: 200, dropping: .dropNewest)
        // Nothing reaches the sink before the first push, so do not wait for preroll.
        try await pipeline.play(timeout: nil)

        let count = 100
        for index in 0..<count {
            let buffer = Buffer(bytes: (0..<(index + 1)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
            buffer.presentationTimestamp = .milliseconds(index * 40)
            buffer.decodingTimestamp = .milliseconds(index * 40 + 1)
            buffer.duration = .milliseconds(40)
            if index % 10 != 0 { buffer.flags.insert(.deltaUnit) }
            try await source.push(buffer)
        }
        try source.endOfStream()

        var received = 0
        for await sample in samples {
            let index = received
            #expect(sample.buffer.bytes == (0..<(index + 1)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
            #expect(sample.buffer.presentationTimestamp == .milliseconds(index * 40))
            #expect(sample.buffer.decodingTimestamp == .milliseconds(index * 40 + 1))
            #expect(sample.buffer.duration == .milliseconds(40))
            #expect(sample.buffer.isKeyframe == (index % 10 == 0))
            #expect(sample.caps?.description == "application/x-pcast-test")
            received += 1
        }
        #expect(received == count)
        try await pipeline.waitUntilEnd(timeout: .seconds(5))
        await pipeline.stop()
    }

    @Test("a slow consumer loses the oldest samples, counted, with bounded memory")
    func dropOldest() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=50 ! video/x-raw,width=64,height=48 ! appsink name=out sync=false")
        let sink = try pipeline.appSink(named: "out")
        let samples = sink.samples(limit: 4, dropping: .dropOldest)
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        var offsets: [UInt64] = []
        for await sample in samples { offsets.append(sample.buffer.offset ?? 0) }
        #expect(offsets.count == 4)
        #expect(offsets == [46, 47, 48, 49])
        #expect(sink.droppedSamples == 46)
        await pipeline.stop()
    }

    @Test("pushing into a stopped pipeline is a typed flow error")
    func pushAfterStop() async throws {
        let pipeline = try Pipeline(description: "appsrc name=in ! fakesink")
        let source = try pipeline.appSource(named: "in")
        try await pipeline.play(timeout: nil)
        await pipeline.stop()
        await #expect(throws: GStreamerError.flow("flushing")) {
            try await source.push(Buffer(bytes: [1]))
        }
    }

    @Test("a pusher waiting for room is released when the pipeline stops")
    func waiterReleasedOnStop() async throws {
        // Nothing downstream consumes while paused, so the queue fills and push() waits.
        let pipeline = try Pipeline(description: "appsrc name=in max-buffers=1 ! fakesink sync=true")
        let source = try pipeline.appSource(named: "in")
        try source.setQueueLimit(buffers: 1)
        try await pipeline.setState(.ready)
        let pusher = Task {
            for _ in 0..<100 { try await source.push(Buffer(bytes: [1, 2, 3])) }
        }
        try await Task.sleep(for: .milliseconds(200))
        await pipeline.stop()
        await #expect(throws: GStreamerError.self) { try await pusher.value }
    }

    @Test("a callback consumer sees every sample on the streaming thread")
    func callbackConsumer() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=12 ! video/x-raw,width=32,height=32 ! appsink name=out sync=false")
        let counter = Counter()
        try pipeline.appSink(named: "out").onSample { sample in
            if sample.videoInfo?.width == 32 { counter.increment() }
        }
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        #expect(counter.value == 12)
        await pipeline.stop()
    }
}


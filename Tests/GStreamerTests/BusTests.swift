import GStreamer
import PCastTestSupport
import Testing

@Suite("Bus")
struct BusTests {
    @Test("warnings, errors, application messages and EOS arrive in posting order")
    func order() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=3 ! identity name=id ! fakesink sync=false")
        let identity = try pipeline.element(named: "id")
        // Posted before anyone iterates: kept for the first iteration.
        identity.postWarning("first warning")
        identity.postApplicationMessage(name: "marker", fields: ["n": "1"])
        identity.postError("an error", debug: "details")
        identity.postWarning("second warning")
        try await pipeline.play()

        var seen: [String] = []
        for await message in pipeline.bus {
            switch message.kind {
            case .warning(let w): seen.append("warning:\(w.message)")
            case .error(let e): seen.append("error:\(e.message)")
            case .application(let s): seen.append("application:\(s.name):\(s["n"]?.description ?? "")")
            case .endOfStream: seen.append("eos")
            default: continue
            }
            if seen.last == "eos" { break }
        }
        #expect(seen == ["warning:first warning", "application:marker:1", "error:an error", "warning:second warning", "eos"])
        await pipeline.stop()
    }

    @Test("state changes are reported for the pipeline, in order")
    func stateChanges() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=2 ! fakesink sync=false", name: "states")
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        var transitions: [String] = []
        for await message in pipeline.bus {
            if message.source == "states", case .stateChanged(let old, let new, _) = message.kind {
                transitions.append("\(old)->\(new)")
            }
            if case .endOfStream = message.kind { break }
        }
        #expect(transitions == ["NULL->READY", "READY->PAUSED", "PAUSED->PLAYING"])
        await pipeline.stop()
    }

    @Test("two iterations both see every later message")
    func twoSubscribers() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=2 ! identity name=id ! fakesink sync=false")
        let first = pipeline.bus.makeAsyncIterator()
        let second = pipeline.bus.makeAsyncIterator()
        try pipeline.element(named: "id").postWarning("shared")
        func firstWarning(_ iterator: AsyncStream<BusMessage>.Iterator) async -> String? {
            var iterator = iterator
            while let message = await iterator.next() {
                if case .warning(let w) = message.kind { return w.message }
            }
            return nil
        }
        #expect(await firstWarning(first) == "shared")
        #expect(await firstWarning(second) == "shared")
    }

    @Test("QoS, element and latency messages are copied with their figures")
    func elementMessages() async throws {
        // `level` posts element messages with measured audio levels.
        let pipeline = try Pipeline(description: "audiotestsrc num-buffers=20 ! level interval=10000000 ! fakesink sync=false")
        try await pipeline.play()
        var levelMessage: Structure?
        for await message in pipeline.bus {
            if case .element(let structure) = message.kind, structure.name == "level" { levelMessage = structure }
            if case .endOfStream = message.kind { break }
        }
        #expect(levelMessage?["rms"] != nil)
        #expect(levelMessage?.serialized.hasPrefix("level") == true)
        await pipeline.stop()
    }
}

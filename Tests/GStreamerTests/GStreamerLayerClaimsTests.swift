import GStreamer
import PCastTestSupport
import Testing

@Suite("GStreamer layer: bus backlog, appsink drop-newest, default state-change timeout")
struct GStreamerLayerClaimsTests {
    @Test("1,100 messages posted while nobody iterates: the first iteration gets the newest 1,024 (numbers 76…1099, in order) and 76 are counted as dropped")
    func busBacklogDropsOldest() async throws {
        #expect(Bus.backlogLimit == 1024)
        let pipeline = try Pipeline(description: "fakesrc num-buffers=1 ! identity name=id ! fakesink")
        let identity = try pipeline.element(named: "id")
        for index in 0..<1100 { identity.postApplicationMessage(name: "backlog", fields: ["n": "\(index)"]) }
        #expect(pipeline.bus.droppedBacklog == 76)
        var numbers: [Int] = []
        for await message in pipeline.bus {
            if case .application(let structure) = message.kind, structure.name == "backlog",
               let number = structure["n"].flatMap({ Int($0.description) }) {
                numbers.append(number)
                if number == 1099 { break }
            }
        }
        #expect(numbers == Array(76..<1100))
        await pipeline.stop()
    }

    @Test("an appsink sequence that drops newest keeps the first samples (offsets 0…3 of 50) and counts the 46 it dropped")
    func dropNewest() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=50 ! video/x-raw,width=64,height=48 ! appsink name=out sync=false")
        let sink = try pipeline.appSink(named: "out")
        let samples = sink.samples(limit: 4, dropping: .dropNewest)
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        var offsets: [UInt64] = []
        for await sample in samples { offsets.append(sample.buffer.offset ?? 0) }
        #expect(offsets == [0, 1, 2, 3])
        #expect(sink.droppedSamples == 46)
        await pipeline.stop()
    }

    @Test("pause() without a timeout argument gives up after 10 s: a pipeline that cannot preroll (an appsrc nobody pushes into) throws stateChangeTimeout(to: paused, after: 10 s)")
    func defaultStateChangeTimeout() async throws {
        let pipeline = try Pipeline(description: "appsrc name=in ! fakesink")
        await #expect(throws: GStreamerError.stateChangeTimeout(to: .paused, after: .seconds(10))) {
            try await pipeline.pause()
        }
        await pipeline.stop()
        #expect(pipeline.currentState == .null)
    }
}

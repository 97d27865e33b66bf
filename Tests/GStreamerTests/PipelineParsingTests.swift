import GStreamer
import PCastTestSupport
import Testing

@Suite("Pipeline descriptions")
struct PipelineParsingTests {
    @Test("a syntax error is a typed error with GStreamer's message")
    func syntaxError() {
        #expect {
            _ = try Pipeline(description: "videotestsrc ! ! fakesink")
        } throws: { error in
            guard case GStreamerError.invalidDescription(let message) = error else { return false }
            return message.contains("syntax")
        }
    }

    @Test("a missing element is a typed error naming it and the package that provides known ones")
    func missingElements() throws {
        do {
            _ = try Pipeline(description: "videotestsrc ! nosuchelement ! avdec_doesnotexist ! fakesink")
            Issue.record("parsing should have failed")
        } catch {
            guard case .missingElements(let missing, let message) = error else {
                Issue.record("unexpected error \(error)")
                return
            }
            #expect(missing.map(\.name) == ["nosuchelement", "avdec_doesnotexist"])
            #expect(missing[0].debianPackage == nil)
            #expect(missing[1].debianPackage == "gstreamer1.0-libav")
            #expect(message.contains("nosuchelement"))
        }
    }

    @Test("a single element is wrapped in a pipeline")
    func singleElement() async throws {
        let pipeline = try Pipeline(description: "fakesink name=only")
        #expect(try pipeline.element(named: "only").factoryName == "fakesink")
        try await pipeline.setState(.ready)
        #expect(pipeline.currentState == .ready)
        await pipeline.stop()
    }

    @Test("an unknown element name is a typed error")
    func elementLookup() throws {
        let pipeline = try Pipeline(description: "videotestsrc name=src ! fakesink name=sink")
        #expect(try pipeline.element(named: "src").factoryName == "videotestsrc")
        #expect(throws: GStreamerError.elementNotFound("nope")) { try pipeline.element(named: "nope") }
        #expect(throws: GStreamerError.wrongElementType(element: "sink", expected: "an appsink")) {
            try pipeline.appSink(named: "sink")
        }
        #expect(Set(pipeline.sinks.map(\.name)) == ["sink"])
        #expect(try pipeline.element(named: "src").pads.map(\.name) == ["src"])
        #expect(Set(try pipeline.element(named: "sink").pads.map(\.name)) == ["sink"])
    }

    @Test("a state change that fails carries the element's error")
    func failingStateChange() async throws {
        // Named: parallel tests create filesrc elements too, so the default name's number varies.
        let pipeline = try Pipeline(description: "filesrc name=missing-file location=/nonexistent/pcast-test-file ! fakesink")
        do {
            try await pipeline.play()
            Issue.record("playing a missing file should fail")
        } catch {
            guard case .stateChangeFailed(let target, let detail) = error else {
                Issue.record("unexpected error \(error)")
                return
            }
            #expect(target == .playing)
            #expect(detail?.domain == "gst-resource-error-quark")
            #expect(detail?.source == "missing-file")
            #expect(detail?.debug?.contains("No such file") == true, "the first error, not basesrc's generic one: \(String(describing: detail))")
        }
        await pipeline.stop()
        #expect(pipeline.currentState == .null)
    }

    @Test("a state change that cannot complete in time times out, and stop still reaches NULL")
    func stateChangeTimeout() async throws {
        // identity holds the first buffer for 2 s, so prerolling cannot finish within 100 ms.
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=1 ! identity sleep-time=2000000 ! fakesink")
        await #expect(throws: GStreamerError.stateChangeTimeout(to: .paused, after: .milliseconds(100))) {
            try await pipeline.pause(timeout: .milliseconds(100))
        }
        await pipeline.stop()
        #expect(pipeline.currentState == .null)
    }

    @Test("play, run to end of stream, play again")
    func playTwice() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=5 ! fakesink sync=false")
        for _ in 0..<2 {
            try await pipeline.play()
            #expect(pipeline.currentState == .playing)
            try await pipeline.waitUntilEnd(timeout: .seconds(10))
            await pipeline.stop()
        }
    }

    @Test("waiting for the end reports the first error")
    func waitReportsError() async throws {
        let pipeline = try Pipeline(description: "videotestsrc is-live=true ! identity name=id ! fakesink")
        try await pipeline.play()
        try pipeline.element(named: "id").postError("boom", debug: "from the test")
        await #expect {
            try await pipeline.waitUntilEnd(timeout: .seconds(5))
        } throws: { error in
            guard case GStreamerError.stream(let detail) = error else { return false }
            return detail.message == "boom" && detail.source == "id" && detail.debug?.contains("from the test") == true
        }
        await pipeline.stop()
    }
}

import Foundation
import PCastTestSupport
import Testing

@Suite("pcast pipeline and inspect")
struct PipelineCommandTests {
    @Test("a pipeline runs to end of stream and exits 0 with a summary")
    func endOfStream() throws {
        let result = try runCommand(try pcastBinary(), ["pipeline", "videotestsrc num-buffers=30 ! fakesink name=out sync=false"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("end of stream") && result.stdout.contains("out=30"))
    }

    @Test("a template runs with values, and --seconds stops a live pipeline")
    func templateWithDeadline() throws {
        let template = repositoryRoot.appendingPathComponent("pipelines/h264-loopback.pipeline").path
        let result = try runCommand(try pcastBinary(), ["pipeline", "--file", template, "--set", "port=5790",
                                                        "--set", "width=320", "--set", "height=240", "--seconds", "2"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("time limit reached"))
        // The status line reports buffers per second at the decoded-video sink.
        #expect(result.stderr.contains("video-out"))
    }

    @Test("a missing element exits non-zero with GStreamer's error and the package to install")
    func missingElement() throws {
        let result = try runCommand(try pcastBinary(), ["pipeline", "videotestsrc ! avdec_notreal ! fakesink"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("avdec_notreal"))
        #expect(result.stderr.contains("apt-get install gstreamer1.0-libav"))
    }

    @Test("a runtime error exits non-zero with GStreamer's message")
    func runtimeError() throws {
        let result = try runCommand(try pcastBinary(), ["pipeline", "filesrc location=/nonexistent/pcast ! fakesink"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("No such file"))
    }

    @Test("an unknown template placeholder is refused")
    func unknownPlaceholder() throws {
        let template = repositoryRoot.appendingPathComponent("pipelines/test-pattern.pipeline").path
        let result = try runCommand(try pcastBinary(), ["pipeline", "--file", template, "--set", "nonsense=1"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("nonsense"))
    }

    @Test("inspect lists the needed elements as present")
    func inspect() throws {
        let result = try runCommand(try pcastBinary(), ["inspect"])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.stdout.contains("all required elements are present"))
        #expect(result.stdout.contains("libsrtp"))
    }
}

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

@Suite("pcast devices and preview")
struct DevicesPreviewCommandTests {
    @Test("devices lists the synthetic and null sources")
    func devices() throws {
        let result = try runCommand(try pcastBinary(), ["devices"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("synthetic-video"))
        #expect(result.stdout.contains("null-audio"))
    }

    @Test("preview renders a test pattern and writes a PNG screenshot of the asked size")
    func previewScreenshot() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-preview-\(UUID().uuidString).png")
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try runCommand(try pcastBinary(), ["preview", "--width", "320", "--height", "180", "--seconds", "0.5", "--sink", "null", "--screenshot", file.path])
        #expect(result.status == 0, "\(result.stderr)")
        let png = try Data(contentsOf: file)
        // PNG signature, then the IHDR chunk: width and height as big-endian 32-bit integers.
        #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let width = png[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let height = png[20..<24].reduce(0) { $0 << 8 | Int($1) }
        #expect(width == 320 && height == 180)
    }

    @Test("preview --source screen:<display> captures an Xvfb screen at the asked size into a PNG; a name that is not a display fails with bad-request")
    func previewScreen() throws {
        let display = try XvfbServer.start(width: 800, height: 600)
        defer { display.stop() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-screen-\(UUID().uuidString).png")
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try runCommand(try pcastBinary(), ["preview", "--source", "screen:\(display.name)", "--width", "400", "--height", "300",
                                                        "--fps", "10", "--seconds", "1", "--sink", "null", "--screenshot", file.path])
        #expect(result.status == 0, "\(result.stderr)")
        let png = try Data(contentsOf: file)
        #expect(Array(png.prefix(4)) == [0x89, 0x50, 0x4E, 0x47])
        #expect(png[16..<20].reduce(0) { $0 << 8 | Int($1) } == 400 && png[20..<24].reduce(0) { $0 << 8 | Int($1) } == 300)
        let bad = try runCommand(try pcastBinary(), ["preview", "--source", "screen:nowhere", "--seconds", "0.5", "--sink", "null"])
        #expect(bad.status == 1 && bad.stderr.contains("bad-request") && bad.stderr.contains("not an X display name"), "\(bad.stderr)")
    }

    @Test("preview of a missing camera fails with the not-found status")
    func previewMissingCamera() throws {
        let result = try runCommand(try pcastBinary(), ["preview", "--source", "/dev/video0", "--seconds", "0.5"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("not-found"))
    }
}

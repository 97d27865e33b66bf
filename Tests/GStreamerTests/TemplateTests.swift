import Foundation
import GStreamer
import Testing

@Suite("Pipeline templates")
struct TemplateTests {
    @Test("placeholders are filled, defaults apply, values override defaults")
    func render() throws {
        let template = try PipelineTemplate(text: """
            # a comment line, dropped
            videotestsrc num-buffers={frames=30} ! video/x-raw,width={width} ! {sink=fakesink sync=false}
            """, name: "t")
        #expect(template.placeholders.map(\.name) == ["frames", "width", "sink"])
        #expect(template.placeholders.map(\.defaultValue) == ["30", nil, "fakesink sync=false"])
        #expect(try template.render(["width": "320"]) == "videotestsrc num-buffers=30 ! video/x-raw,width=320 ! fakesink sync=false")
        #expect(try template.render(["width": "64", "frames": "5", "sink": "appsink name=x"])
                == "videotestsrc num-buffers=5 ! video/x-raw,width=64 ! appsink name=x")
    }

    @Test("a missing value and an unknown name are typed errors")
    func errors() throws {
        let template = try PipelineTemplate(text: "videotestsrc ! video/x-raw,width={width} ! fakesink", name: "t")
        #expect(throws: GStreamerError.missingPlaceholderValue(template: "t", name: "width")) {
            try template.render()
        }
        #expect(throws: GStreamerError.unknownPlaceholder(template: "t", name: "height", known: ["width"])) {
            try template.render(["width": "1", "height": "2"])
        }
    }

    @Test("caps lists and doubled braces are literal")
    func literalBraces() throws {
        let template = try PipelineTemplate(text: "videotestsrc ! video/x-raw,format={ I420, NV12 } ! identity name={{x}} ! {sink}", name: "t")
        #expect(template.placeholders.map(\.name) == ["sink"])
        #expect(try template.render(["sink": "fakesink"]) == "videotestsrc ! video/x-raw,format={ I420, NV12 } ! identity name={x} ! fakesink")
    }

    @Test("malformed templates are refused")
    func malformed() {
        #expect(throws: GStreamerError.self) { try PipelineTemplate(text: "a ! {x=1} ! {x=2}", name: "t") }
        #expect(throws: GStreamerError.self) { try PipelineTemplate(text: "a ! {x=unclosed\n ! b", name: "t") }
        #expect(throws: GStreamerError.self) { try PipelineTemplate(text: "# only a comment", name: "t") }
        #expect(throws: GStreamerError.self) {
            try PipelineTemplate(contentsOf: URL(fileURLWithPath: "/nonexistent/x.pipeline"))
        }
    }

    @Test("every stock template documents a gst-launch-1.0 run and parses with its defaults")
    func stockTemplates() throws {
        let directory = repositoryRoot.appendingPathComponent("pipelines")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".pipeline") }
        #expect(files.count >= 2)
        for file in files {
            let url = directory.appendingPathComponent(file)
            let text = try String(contentsOf: url, encoding: .utf8)
            #expect(text.contains("gst-launch-1.0"), "\(file) should say how to run it by hand")
            // Descriptions with the plugin's elements parse where the plugin is loaded: in
            // gst-launch-1.0, which GStreamerPluginTests runs them in.
            if text.contains("# Plugin: pcast") {
                #expect(file.hasPrefix("pcast-"), "\(file): a plugin description is named pcast-…")
                continue
            }
            // A part of a larger pipeline names the files it is parsed with (`# Combine with: …`).
            var parts = [try PipelineTemplate(contentsOf: url).render()]
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("# Combine with:") }) {
                for other in line.dropFirst("# Combine with:".count).split(separator: " ") {
                    parts.append(try PipelineTemplate(contentsOf: directory.appendingPathComponent(String(other))).render())
                }
            }
            let pipeline = try Pipeline(description: parts.joined(separator: "\n"))
            #expect(!pipeline.sinks.isEmpty, "\(file) should have a sink")
        }
    }
}

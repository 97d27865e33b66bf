import ArgumentParser
import Foundation
import GStreamer
import PCastMedia

/// `pcast pipeline`: runs a gst-launch-style description or a template until EOS, error, Ctrl-C or a time limit.
struct PipelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "Run a gst-launch-style pipeline with a live status line.",
        discussion: """
        Examples:
          pcast pipeline "videotestsrc num-buffers=90 ! fakesink"
          pcast pipeline --file pipelines/h264-loopback.pipeline --set bitrate=1500 --seconds 10
        Exits 0 at end of stream, on Ctrl-C or when --seconds runs out; non-zero with GStreamer's error otherwise.
        """
    )

    @Argument(help: "A gst-launch-style description.")
    var pipelineDescription: String?

    @Option(name: .long, help: "A template file (pipelines/NAME.pipeline, or just NAME).")
    var file: String?

    @Option(name: .customLong("set"), help: "A template value, key=value (repeatable).")
    var values: [String] = []

    @Option(help: "Stop after this many seconds.")
    var seconds: Double?

    @Flag(help: "No status line.")
    var quiet = false

    func validate() throws {
        if (pipelineDescription == nil) == (file == nil) {
            throw ValidationError("give either a description or --file")
        }
        if !values.isEmpty && file == nil {
            throw ValidationError("--set needs --file")
        }
    }

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let description: String
        do {
            description = try resolveDescription()
        } catch {
            printError("\(error)")
            throw ExitCode(2)
        }
        let runner = PipelineRunner(description: description, seconds: seconds, statusLine: !quiet)
        let code = await runner.run()
        if code != 0 { throw ExitCode(code) }
    }

    private func resolveDescription() throws -> String {
        if let pipelineDescription { return pipelineDescription }
        var pairs: [String: String] = [:]
        for item in values {
            guard let equals = item.firstIndex(of: "=") else {
                throw ValidationError("--set \(item): expected key=value")
            }
            pairs[String(item[..<equals])] = String(item[item.index(after: equals)...])
        }
        let template = try PipelineTemplate(contentsOf: Self.templateURL(file!))
        return try template.render(pairs)
    }

    /// `NAME`, `NAME.pipeline` or a path; bare names are looked up in $PCAST_PIPELINES or ./pipelines.
    static func templateURL(_ name: String) -> URL {
        if name.contains("/") { return URL(fileURLWithPath: name) }
        let directory = ProcessInfo.processInfo.environment["PCAST_PIPELINES"] ?? "pipelines"
        let file = name.hasSuffix(".pipeline") ? name : name + ".pipeline"
        return URL(fileURLWithPath: directory).appendingPathComponent(file)
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data(("error: " + text + "\n").utf8))
}

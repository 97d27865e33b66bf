import Foundation
@testable import PCastMedia
import Testing

@Suite("Stock pipelines built into the code")
struct StockPipelinesTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/PCastMedia/Pipelines")

    @Test("every Pipelines/*.pipeline file is built in, byte for byte, and nothing else is")
    func everyFileIsBuiltIn() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).filter { $0.hasSuffix(".pipeline") }
        #expect(Set(files.map { String($0.dropLast(".pipeline".count)) }) == Set(StockPipelines.names))
        for file in files {
            let name = String(file.dropLast(".pipeline".count))
            let text = try String(contentsOf: Self.directory.appendingPathComponent(file), encoding: .utf8)
            #expect(StockPipelines.builtIn[name].map { String(decoding: $0, as: UTF8.self) } == text, "\(name) differs from its file")
        }
    }

    @Test("a template is found without a resource bundle or a source tree; an unknown one is a typed error naming the known ones")
    func lookup() throws {
        let template = try StockPipelines.template("user-media-video")
        #expect(!template.placeholders.isEmpty)
        do {
            _ = try StockPipelines.template("no-such-pipeline")
            Issue.record("an unknown template was found")
        } catch {
            #expect("\(error)".contains("no such stock pipeline") && "\(error)".contains("user-media-video"), "\(error)")
        }
    }
}

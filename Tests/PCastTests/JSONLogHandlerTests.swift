import Foundation
import Logging
@testable import PCastMedia
import Testing

@Suite("JSON log lines: one object a line, the ids as fields")
struct JSONLogHandlerTests {
    @Test("a record is one line of JSON: time (UTC, milliseconds), level, logger, message, source first; metadata as fields without their pcast. prefix; lists and dictionaries kept; quotes, backslashes and control characters escaped; a key that would take a fixed field keeps its prefix")
    func line() throws {
        let time = Date(timeIntervalSince1970: 1_795_974_008.1234)
        let text = JSONLogHandler.line(time: time, level: .notice, label: "pcast.server", message: "closing \"bye\"\n\tat once\u{1}",
                                       source: "PCastServer", metadata: [
                                           "pcast.session": "session-1", "pcast.stream": "stream-2", "pcast.room": "room-3",
                                           "pcast.message": "kept apart", "tags": .array(["a", "b"]),
                                           "limits": .dictionary(["bitrate": .stringConvertible(500_000)]), "path": "C:\\x",
                                       ])
        #expect(!text.contains("\n"))
        #expect(text.hasPrefix(#"{"time":"2026-11-29T17:40:08.123Z","level":"notice","logger":"pcast.server","message":"closing \"bye\"\n\tat once\u0001","source":"PCastServer""#), "\(text)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["message"] as? String == "closing \"bye\"\n\tat once\u{1}")
        #expect(object["session"] as? String == "session-1" && object["stream"] as? String == "stream-2" && object["room"] as? String == "room-3")
        #expect(object["pcast.message"] as? String == "kept apart", "a metadata key that would replace the message keeps its prefix")
        #expect(object["tags"] as? [String] == ["a", "b"])
        #expect((object["limits"] as? [String: Any])?["bitrate"] as? String == "500000")
        #expect(object["path"] as? String == "C:\\x")
    }

    @Test("the handler writes each record as one line to its descriptor, with its own metadata merged under the event's")
    func handlerWritesLines() throws {
        var pipe: [Int32] = [0, 0]
        #expect(Glibc.pipe(&pipe) == 0)
        defer { close(pipe[0]) }
        var handler = JSONLogHandler(label: "pcast.test", descriptor: pipe[1])
        handler[metadataKey: "pcast.session"] = "session-9"
        let logger = Logger(label: "pcast.test") { _ in handler }
        logger.info("first", metadata: ["pcast.stream": "stream-1"])
        logger.debug("below the level")
        logger.warning("second", metadata: ["pcast.session": "session-override"])
        close(pipe[1])
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(pipe[0], $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            bytes += buffer[..<count]
        }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 2)
        let records = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(records.count == 2)
        #expect(records.first?["message"] as? String == "first" && records.first?["session"] as? String == "session-9"
                && records.first?["stream"] as? String == "stream-1" && records.first?["level"] as? String == "info")
        #expect(records.last?["session"] as? String == "session-override" && records.last?["level"] as? String == "warning")
    }
}

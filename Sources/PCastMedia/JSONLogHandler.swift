import Foundation
import Logging

/// A swift-log handler that writes one JSON object a line, for log shippers (Vector, Fluent Bit,
/// Promtail): `time` (UTC, RFC 3339 with milliseconds), `level`, `logger` (the logger's label),
/// `message`, `source` (the module), then each metadata item as a field of its own, its key without
/// the `pcast.` prefix (`session`, `stream`, `room`, `remote`, `reason`, …; a key that would take
/// one of the first five names keeps its prefix). Values are strings; lists become arrays and
/// dictionaries objects. Each line is one `write(2)` to its file descriptor, so lines of several
/// threads never interleave.
///
/// ```swift
/// LoggingSystem.bootstrap { JSONLogHandler(label: $0) }
/// // {"time":"2026-11-29T17:40:08.123Z","level":"info","logger":"pcast.server","message":"session opened","source":"PCastServer","session":"session-a0…"}
/// ```
package struct JSONLogHandler: LogHandler {
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .info
    let label: String
    let descriptor: Int32

    /// Lines go to `descriptor` (standard error by default).
    package init(label: String, descriptor: Int32 = 2) {
        self.label = label
        self.descriptor = descriptor
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let line = Self.line(time: Date(), level: event.level, label: label, message: "\(event.message)", source: event.source, metadata: merged)
        Self.write(line, to: descriptor)
    }

    /// Writes `line` and a newline with one system call.
    package static func write(_ line: String, to descriptor: Int32) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// The fields every line starts with; metadata keys that would take them keep their prefix.
    static let reserved: Set<String> = ["time", "level", "logger", "message", "source"]

    /// One log record as a line of JSON (no newline).
    package static func line(time: Date, level: Logger.Level, label: String, message: String, source: String,
                             metadata: Logger.Metadata) -> String {
        var text = "{\"time\":\(quoted(timestamp(time))),\"level\":\(quoted(level.rawValue)),\"logger\":\(quoted(label))"
        text += ",\"message\":\(quoted(message)),\"source\":\(quoted(source))"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            var field = key.hasPrefix("pcast.") ? String(key.dropFirst("pcast.".count)) : key
            if reserved.contains(field) || field.isEmpty { field = key }
            text += ",\(quoted(field)):\(json(value))"
        }
        return text + "}"
    }

    static func json(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let string): return quoted(string)
        case .stringConvertible(let convertible): return quoted(convertible.description)
        case .array(let values): return "[" + values.map(json).joined(separator: ",") + "]"
        case .dictionary(let dictionary):
            return "{" + dictionary.sorted { $0.key < $1.key }.map { "\(quoted($0.key)):\(json($0.value))" }.joined(separator: ",") + "}"
        }
    }

    /// A JSON string: quotes, backslashes and control characters escaped (RFC 8259).
    static func quoted(_ string: String) -> String {
        var text = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }

    /// `2026-11-29T17:40:08.123Z`.
    static func timestamp(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        var seconds = time_t(interval.rounded(.down))
        let milliseconds = min(999, Int((interval - Double(seconds)) * 1000))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = milliseconds < 10 ? "00\(milliseconds)" : milliseconds < 100 ? "0\(milliseconds)" : "\(milliseconds)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millis)Z"
    }
}

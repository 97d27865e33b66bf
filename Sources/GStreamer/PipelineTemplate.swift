import Foundation

/// A gst-launch-style description with named placeholders, as stored in `pipelines/*.pipeline`.
///
/// Syntax: `{name}` must be given a value; `{name=default}` may be. Names are letters, digits,
/// `_`, `-` and `.`, starting with a letter or `_`. Lines starting with `#` are comments. Anything
/// else in braces, such as a caps list `{ I420, NV12 }`, is left alone; `{{` and `}}` stand for
/// literal braces. Values are inserted verbatim, so a value may itself be a piece of pipeline.
///
/// ```swift
/// let template = try PipelineTemplate(text: "videotestsrc num-buffers={frames=30} ! {sink}")
/// let description = try template.render(["sink": "fakesink"])
/// // "videotestsrc num-buffers=30 ! fakesink"
/// ```
public struct PipelineTemplate: Sendable, Hashable {
    public struct Placeholder: Sendable, Hashable {
        public let name: String
        public let defaultValue: String?
    }

    /// A name for messages: the file name for templates read from disk.
    public let name: String
    /// The description with comments removed, placeholders still in place.
    public let body: String
    /// Each placeholder once, in order of first appearance.
    public let placeholders: [Placeholder]

    private enum Piece: Sendable, Hashable {
        case text(String)
        case placeholder(String)
    }
    private let pieces: [Piece]

    public init(text: String, name: String = "inline") throws(GStreamerError) {
        self.name = name
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
        body = lines.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        var pieces: [Piece] = []
        var found: [Placeholder] = []
        var literal = ""
        var index = body.startIndex
        while index < body.endIndex {
            let character = body[index]
            let next = body.index(after: index)
            if character == "{", next < body.endIndex, body[next] == "{" {
                literal.append("{")
                index = body.index(after: next)
                continue
            }
            if character == "}", next < body.endIndex, body[next] == "}" {
                literal.append("}")
                index = body.index(after: next)
                continue
            }
            if character == "{", let (placeholder, end) = try Self.placeholder(in: body, at: next, template: name) {
                if let earlier = found.first(where: { $0.name == placeholder.name }) {
                    if let value = placeholder.defaultValue, let other = earlier.defaultValue, value != other {
                        throw .invalidTemplate(template: name, reason: "placeholder {\(placeholder.name)} has two defaults: '\(other)' and '\(value)'")
                    }
                    if earlier.defaultValue == nil, placeholder.defaultValue != nil {
                        found[found.firstIndex(of: earlier)!] = placeholder
                    }
                } else {
                    found.append(placeholder)
                }
                if !literal.isEmpty { pieces.append(.text(literal)); literal = "" }
                pieces.append(.placeholder(placeholder.name))
                index = end
                continue
            }
            literal.append(character)
            index = next
        }
        if !literal.isEmpty { pieces.append(.text(literal)) }
        if body.isEmpty { throw .invalidTemplate(template: name, reason: "the template is empty") }
        self.pieces = pieces
        placeholders = found
    }

    /// Reads a `.pipeline` file.
    public init(contentsOf url: URL) throws(GStreamerError) {
        let text: String
        do {
            text = try String(contentsOf: url, encoding: .utf8)
        } catch {
            throw .invalidTemplate(template: url.lastPathComponent, reason: "cannot read \(url.path): \(error.localizedDescription)")
        }
        try self.init(text: text, name: url.deletingPathExtension().lastPathComponent)
    }

    /// Fills the placeholders.
    ///
    /// - Throws: ``GStreamerError/unknownPlaceholder(template:name:known:)`` for a value the template
    ///   has no placeholder for, ``GStreamerError/missingPlaceholderValue(template:name:)`` for a
    ///   placeholder with neither value nor default.
    public func render(_ values: [String: String] = [:]) throws(GStreamerError) -> String {
        let known = placeholders.map(\.name)
        for key in values.keys.sorted() where !known.contains(key) {
            throw .unknownPlaceholder(template: name, name: key, known: known)
        }
        var resolved: [String: String] = [:]
        for placeholder in placeholders {
            guard let value = values[placeholder.name] ?? placeholder.defaultValue else {
                throw .missingPlaceholderValue(template: name, name: placeholder.name)
            }
            resolved[placeholder.name] = value
        }
        return pieces.map { piece in
            switch piece {
            case .text(let text): return text
            case .placeholder(let key): return resolved[key]!
            }
        }.joined()
    }

    /// Parses `name}` or `name=default}` starting at `start` (just after `{`). Returns nil when the
    /// braces do not hold a placeholder (a caps list, for example).
    private static func placeholder(in text: String, at start: String.Index, template: String) throws(GStreamerError) -> (Placeholder, String.Index)? {
        var index = start
        var name = ""
        while index < text.endIndex {
            let c = text[index]
            let isStart = c.isLetter || c == "_"
            let isInner = isStart || c.isNumber || c == "-" || c == "."
            if name.isEmpty ? !(isStart && c.isASCII) : !(isInner && c.isASCII) { break }
            name.append(c)
            index = text.index(after: index)
        }
        guard !name.isEmpty, index < text.endIndex else { return nil }
        if text[index] == "}" {
            return (Placeholder(name: name, defaultValue: nil), text.index(after: index))
        }
        guard text[index] == "=" else { return nil }
        index = text.index(after: index)
        var value = ""
        var depth = 0
        while index < text.endIndex {
            let c = text[index]
            if c == "{" { depth += 1 }
            if c == "}" {
                if depth == 0 { return (Placeholder(name: name, defaultValue: value), text.index(after: index)) }
                depth -= 1
            }
            if c == "\n" { break }
            value.append(c)
            index = text.index(after: index)
        }
        throw .invalidTemplate(template: template, reason: "placeholder {\(name)=… is not closed on its line")
    }
}

/// Why a stream name cannot name a recording.
public enum RecordingNameError: Error, Sendable, Hashable, CustomStringConvertible {
    case empty
    case tooLong(bytes: Int, limit: Int)
    /// A character outside `A–Z a–z 0–9 . _ -` (this refuses `/`, `\`, NUL, `%`-encoded forms,
    /// spaces and control characters), with its UTF-8 byte offset.
    case forbiddenCharacter(String, offset: Int)
    /// Starts with a dot (hidden files, `.` and `..`) or contains `..`.
    case traversal

    public var description: String {
        switch self {
        case .empty: return "the stream name is empty"
        case .tooLong(let bytes, let limit): return "the stream name is \(bytes) bytes long (at most \(limit))"
        case .forbiddenCharacter(let character, let offset):
            return "the stream name contains \(character.unicodeScalars.map { "U+\(String($0.value, radix: 16, uppercase: true))" }.joined()) at byte \(offset); allowed are A-Z a-z 0-9 . _ -"
        case .traversal: return "the stream name starts with a dot or contains '..'"
        }
    }
}

/// A stream name that is safe as a recording's file name: 1–128 bytes of `A–Z a–z 0–9 . _ -`, not
/// starting with a dot and without `..`. Names are checked, never rewritten: a name that is refused
/// is reported, so two different names can never land in the same file.
///
/// ```swift
/// let name = try RecordingName("morning-show_2026.11")   // ok
/// try RecordingName("../etc/passwd")                      // throws .forbiddenCharacter("/", …)
/// name.fileName                                          // "morning-show_2026.11.mp4"
/// ```
public struct RecordingName: Sendable, Hashable, CustomStringConvertible {
    public static let maximumLength = 128
    public let value: String

    public init(_ value: String) throws(RecordingNameError) {
        let bytes = Array(value.utf8)
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= Self.maximumLength else { throw .tooLong(bytes: bytes.count, limit: Self.maximumLength) }
        var offset = 0
        for character in value {
            let isAllowed = character.isASCII && (character.isLetter || character.isNumber || character == "." || character == "_" || character == "-")
            guard isAllowed else { throw .forbiddenCharacter(String(character), offset: offset) }
            offset += character.utf8.count
        }
        guard bytes.first != UInt8(ascii: "."), !value.contains("..") else { throw .traversal }
        self.value = value
    }

    /// The recording's file name in the recordings directory.
    public var fileName: String { value + ".mp4" }

    /// The name of a recording file (`<name>.mp4`); nil for any other file.
    public init?(fileName: String) {
        guard fileName.hasSuffix(".mp4"), let name = try? RecordingName(String(fileName.dropLast(4))) else { return nil }
        self = name
    }

    public var description: String { value }
}

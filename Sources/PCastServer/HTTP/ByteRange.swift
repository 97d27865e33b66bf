import Foundation

/// A `Range: bytes=…` request header against a file of `size` bytes (RFC 9110 §14): one range
/// is served; several ranges, or a header that is not a byte range, get the whole file (which the
/// RFC allows); a range that starts past the end is unsatisfiable (416).
///
/// ```swift
/// ByteRange(header: "bytes=0-99", size: 1000)    // .partial(0...99)
/// ByteRange(header: "bytes=-100", size: 1000)    // .partial(900...999)
/// ByteRange(header: "bytes=2000-", size: 1000)   // .unsatisfiable
/// ```
enum ByteRange: Equatable {
    case whole
    case partial(ClosedRange<Int>)
    case unsatisfiable

    init(header: String?, size: Int) {
        guard let header else { self = .whole; return }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes="), !trimmed.contains(",") else { self = .whole; return }
        let spec = trimmed.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { self = .whole; return }
        let first = parts[0].trimmingCharacters(in: .whitespaces), last = parts[1].trimmingCharacters(in: .whitespaces)
        let isDigits: (String) -> Bool = { !$0.isEmpty && $0.utf8.allSatisfy { (48...57).contains($0) } && $0.utf8.count <= 18 }
        if first.isEmpty {
            // A suffix: the last N bytes.
            guard isDigits(last), let count = Int(last) else { self = .whole; return }
            guard count > 0, size > 0 else { self = .unsatisfiable; return }
            self = .partial(max(0, size - count)...(size - 1))
            return
        }
        guard isDigits(first), let start = Int(first) else { self = .whole; return }
        guard start < size else { self = .unsatisfiable; return }
        if last.isEmpty {
            self = .partial(start...(size - 1))
            return
        }
        guard isDigits(last), let end = Int(last), end >= start else { self = .whole; return }
        self = .partial(start...min(end, size - 1))
    }
}

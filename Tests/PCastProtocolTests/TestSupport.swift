import Foundation
import Testing

import PCastTestSupport

extension SeededRNG {
    mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The project's own parser corpus (`Tests/Corpora`, see `Corpora`).
func corporaDirectory() -> URL {
    Corpora.own
}

/// Every regular file under `directory`, sorted for stable output.
func corpusFiles(in directory: URL) throws -> [URL] {
    let files = Corpora.files(in: directory)
    guard !files.isEmpty else { throw TestFailure("no corpus files in \(directory.path)") }
    return files
}

func hex(_ s: String) -> [UInt8] {
    let digits = Array(s.filter { !$0.isWhitespace }.utf8)
    precondition(digits.count % 2 == 0, "odd hex string")
    func v(_ c: UInt8) -> UInt8 {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        case 0x41...0x46: return c - 0x41 + 10
        default: preconditionFailure("bad hex digit")
        }
    }
    return stride(from: 0, to: digits.count, by: 2).map { v(digits[$0]) << 4 | v(digits[$0 + 1]) }
}

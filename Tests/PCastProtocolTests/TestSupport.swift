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

/// Locates the shared parser corpora relative to this file: `<package>/../shared/corpora` (the
/// final repository layout) or `<package>/../../shared/corpora` (scratch checkouts).
func corporaDirectory(filePath: String = #filePath) throws -> URL {
    let package = URL(fileURLWithPath: filePath)
        .deletingLastPathComponent()  // PCastProtocolTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
    let candidates = [
        package.appendingPathComponent("../shared/corpora").standardizedFileURL,
        package.appendingPathComponent("../../shared/corpora").standardizedFileURL,
    ]
    for c in candidates {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: c.path, isDirectory: &isDir), isDir.boolValue { return c }
    }
    throw TestFailure("parser corpora not found; looked in: \(candidates.map(\.path).joined(separator: ", "))")
}

/// Every regular file under `directory`, sorted for stable output.
func corpusFiles(in directory: URL) throws -> [URL] {
    guard let e = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey]) else {
        throw TestFailure("cannot enumerate \(directory.path)")
    }
    var files: [URL] = []
    for case let url as URL in e where (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true {
        files.append(url)
    }
    return files.sorted { $0.path < $1.path }
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

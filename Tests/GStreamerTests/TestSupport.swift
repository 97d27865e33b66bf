import Foundation
import Synchronization

/// A counter closures on streaming threads can share.
final class TestCounter: Sendable {
    private let count = Atomic<Int>(0)
    @discardableResult
    func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Figures about this process from /proc.
enum ProcessStatus {
    static func field(_ name: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            let digits = line.dropFirst(name.count + 1).filter(\.isNumber)
            return Int(digits) ?? 0
        }
        return 0
    }
    static var threads: Int { field("Threads") }
    /// Resident set size in KiB.
    static var residentKiB: Int { field("VmRSS") }
}

/// The repository root, found from this file's path.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

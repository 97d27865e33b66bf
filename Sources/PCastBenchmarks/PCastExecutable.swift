import Foundation

/// The `pcast` executable the benchmarks run as a child (`pcast serve`, `pcast publish`): the one
/// beside the running `pcast-bench`, from the same build (`make bench` builds both).
public enum PCastExecutable {
    /// `pcast` in the folder of the running executable.
    ///
    /// - Throws: ``BenchFailure`` when there is none there.
    public static func beside() throws -> URL {
        let running = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let pcast = running.deletingLastPathComponent().appendingPathComponent("pcast")
        guard FileManager.default.isExecutableFile(atPath: pcast.path) else {
            throw BenchFailure("pcast is not beside \(running.path): build it with swift build -c release --product pcast (make bench does)")
        }
        return pcast
    }
}

import Foundation

/// The parser corpora the tests replay: the project's own (`Tests/Corpora`, written by
/// `scripts/make-corpus.py` and grown by the fuzzers). Nothing outside the repository is read, so
/// a clone alone runs exactly the same tests.
public enum Corpora {
    static let package = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // PCastTestSupport
        .deletingLastPathComponent()  // Sources
        .deletingLastPathComponent()

    /// `Tests/Corpora` in this repository.
    public static let own = package.appendingPathComponent("Tests/Corpora")

    /// Every regular file under `directory`, sorted.
    public static func files(in directory: URL) -> [URL] {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
        var files: [URL] = []
        for case let url as URL in walker where (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true {
            files.append(url)
        }
        return files.sorted { $0.path < $1.path }
    }

    /// The RTP and RTCP files of the corpus.
    public static func packetFiles() -> [URL] {
        ["rtp", "rtcp"].flatMap { files(in: own.appendingPathComponent($0)) }
    }
}

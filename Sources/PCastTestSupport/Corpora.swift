import Foundation

/// The parser corpora the tests replay: the project's own (`Tests/Corpora`, written by
/// `scripts/make-corpus.py` and grown by the fuzzers), always; the shared reading material's
/// (`../shared/corpora`, from other projects' fuzzers), in addition when it sits beside the
/// repository.
public enum Corpora {
    static let package = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // PCastTestSupport
        .deletingLastPathComponent()  // Sources
        .deletingLastPathComponent()

    /// `Tests/Corpora` in this repository.
    public static let own = package.appendingPathComponent("Tests/Corpora")

    /// `../shared/corpora` beside the repository, when there.
    public static var shared: URL? {
        let url = package.appendingPathComponent("../shared/corpora").standardizedFileURL
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) && isDirectory.boolValue ? url : nil
    }

    /// Every regular file under `directory`, sorted.
    public static func files(in directory: URL) -> [URL] {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
        var files: [URL] = []
        for case let url as URL in walker where (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true {
            files.append(url)
        }
        return files.sorted { $0.path < $1.path }
    }

    /// The RTP and RTCP files of the own corpus, and of the shared one when present.
    public static func packetFiles() -> [URL] {
        ([own] + [shared].compactMap { $0 }).flatMap { root in
            ["rtp", "rtcp"].flatMap { files(in: root.appendingPathComponent($0)) }
        }
    }
}

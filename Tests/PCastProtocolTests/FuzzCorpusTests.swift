import Foundation
import PCastFuzzing
import PCastProtocol
import PCastTestSupport
import Testing

/// What `make fuzz` found and grew stays fixed: every committed input of every fuzz corpus (and the
/// harness's seeds) runs through the same harness the fuzzer used, with no finding and no trap.
@Suite("Fuzz corpora")
struct FuzzCorpusTests {
    static let root = Corpora.own.appendingPathComponent("fuzz")

    @Test("every input of each fuzz corpus, and each harness's seeds, pass the harness", arguments: FuzzTarget.allCases)
    func corpus(_ target: FuzzTarget) throws {
        let files = Corpora.files(in: Self.root.appendingPathComponent(target.rawValue))
        // The corpus is committed after a fuzz run: more than the seeds alone.
        #expect(files.count > target.seeds.count, "\(target.rawValue): only \(files.count) committed inputs")
        var findings: [String] = []
        for seed in target.seeds {
            do { try target.run(seed) } catch { findings.append("seed: \(error.description)") }
        }
        for file in files {
            let bytes = Array(try Data(contentsOf: file))
            do { try target.run(bytes) } catch { findings.append("\(file.lastPathComponent): \(error.description)") }
        }
        #expect(findings.isEmpty, "\(target.rawValue): \(findings.joined(separator: "; "))")
    }

    @Test("a broken contract is a finding: the harness is not a no-op")
    func harnessesCheck() throws {
        // An RTP packet whose layout the parser accepts is fine; the token harness refuses to see a
        // forged token verify, so a token signed with the harness's own secret must be a finding.
        let signed = try DigestTokenBuilder().forStreamingOnly().expiresIn(seconds: 3_600)
            .encode(applicationId: "fuzz-app", secret: FuzzTarget.tokenSecret)
        #expect(throws: FuzzTarget.Finding.self) { try FuzzTarget.token.run(Array(signed.utf8)) }
        #expect(throws: Never.self) { try FuzzTarget.rtp.run([0x80, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 7]) }
    }
}


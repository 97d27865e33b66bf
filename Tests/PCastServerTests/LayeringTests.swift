import Foundation
import Testing

/// The layers point one way: what each target's sources import, read from the sources themselves
/// (the package manifest is the first guard; this one also catches a module reached transitively).
@Suite struct LayeringTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")

    /// The modules imported anywhere under `Sources/<target>`, with the file that imports each.
    static func imports(of target: String) throws -> [String: String] {
        let root = sources.appendingPathComponent(target)
        guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else {
            throw CocoaError(.fileReadNoSuchFile)
        }
        var found: [String: String] = [:]
        for case let file as URL in walker where file.pathExtension == "swift" {
            for line in try String(contentsOf: file, encoding: .utf8).split(separator: "\n") {
                let words = line.split(separator: " ")
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count,
                      words[..<index].allSatisfy({ $0.hasPrefix("@") || ["public", "package", "internal", "private", "fileprivate"].contains($0) })
                else { continue }
                found[String(words[index + 1]), default: file.lastPathComponent] = file.lastPathComponent
            }
        }
        #expect(!found.isEmpty, "no imports found under \(root.path)")
        return found
    }

    static let mediaEngine: Set<String> = ["PCast", "PCastMedia", "GStreamer", "CGStreamer", "CGStreamerShim", "PCastRecording"]

    @Test("the control plane links neither the media engine, the relay nor the media services")
    func controlPlane() throws {
        let imports = try Self.imports(of: "PCastServer")
        let forbidden = Self.mediaEngine.union(["PCastRelay", "PCastMediaServices", "PCastNode", "SRTP", "CSRTP"])
        for (module, file) in imports where forbidden.contains(module) {
            Issue.record("PCastServer imports \(module) (in \(file))")
        }
        #expect(imports["PCastContracts"] != nil)
    }

    @Test("the contracts depend on the wire formats only")
    func contracts() throws {
        for (module, file) in try Self.imports(of: "PCastContracts") where !["Foundation", "PCastProtocol", "Synchronization"].contains(module) {
            Issue.record("PCastContracts imports \(module) (in \(file))")
        }
    }

    @Test("the relay and the media services do not reach into the control plane or each other")
    func mediaPlane() throws {
        for (module, file) in try Self.imports(of: "PCastRelay")
        where Self.mediaEngine.union(["PCastServer", "PCastMediaServices", "PCastNode"]).contains(module) {
            Issue.record("PCastRelay imports \(module) (in \(file))")
        }
        for (module, file) in try Self.imports(of: "PCastMediaServices") where ["PCastServer", "PCastRelay", "PCastNode"].contains(module) {
            Issue.record("PCastMediaServices imports \(module) (in \(file))")
        }
        for (module, file) in try Self.imports(of: "PCastProtocol")
        where Self.mediaEngine.union(["PCastServer", "PCastRelay", "PCastContracts", "PCastMediaServices", "PCastNode"]).contains(module) {
            Issue.record("PCastProtocol imports \(module) (in \(file))")
        }
    }

    static let productTargets = ["GStreamer", "PCastProtocol", "PCastMedia", "PCastRelay", "PCast", "PCastContracts",
                                 "PCastServer", "PCastMediaServices", "PCastNode"]

    @Test("product libraries hold product code only: no benchmark, no test support, no unsafe flags")
    func productsHoldProductCode() throws {
        for target in Self.productTargets {
            let root = Self.sources.appendingPathComponent(target)
            let files = try FileManager.default.subpathsOfDirectory(atPath: root.path).filter { $0.hasSuffix(".swift") }
            #expect(!files.isEmpty, "no sources under \(root.path)")
            for file in files where file.contains("Benchmark") || file.contains("Measurement") {
                Issue.record("\(target) holds benchmark code: \(file)")
            }
            for (module, file) in try Self.imports(of: target) where ["PCastBenchmarks", "PCastTestSupport", "Testing", "XCTest"].contains(module) {
                Issue.record("\(target) imports \(module) (in \(file))")
            }
        }
        let manifest = try String(contentsOf: Self.sources.deletingLastPathComponent().appendingPathComponent("Package.swift"), encoding: .utf8)
        #expect(!manifest.contains("unsafeFlags"), "Package.swift uses unsafe flags, which no versioned dependency accepts")
    }

    /// Engine plumbing that `import PCast` (which re-exports `PCastMedia`) must not put in a user's
    /// namespace: `package` access, reachable by the platform's own targets only.
    static let enginePlumbing = ["RTPReceiver", "RTPPublisher", "IngestPublisher", "RTPSource", "OutgoingPacket", "BitrateController"]

    @Test("import PCast is the SDK: the media engine's RTP publisher, receiver, ingest publisher and rate controller are not public")
    func enginePlumbingIsNotPublic() throws {
        let declaration = try Regex(#"(public|open)\s+(final\s+)?(class|struct|enum|protocol|actor|typealias)\s+(\w+)"#)
        var declared: Set<String> = []
        for target in ["PCastMedia", "PCast"] {
            let root = Self.sources.appendingPathComponent(target)
            for file in try FileManager.default.subpathsOfDirectory(atPath: root.path) where file.hasSuffix(".swift") {
                let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
                for match in text.matches(of: declaration) {
                    guard let name = match.output[4].substring.map(String.init) else { continue }
                    declared.insert(name)
                    if Self.enginePlumbing.contains(name) { Issue.record("\(target)/\(file) declares \(name) public") }
                }
            }
        }
        // The scan sees the public API (else it would pass vacuously).
        #expect(declared.isSuperset(of: ["PCast", "Publisher", "MediaStream", "UserMedia", "Renderer"]), "\(declared.count) public types found")
    }
}


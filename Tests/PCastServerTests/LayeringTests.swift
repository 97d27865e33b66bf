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
                // `import class Module.Name` (a scoped import) names its module after the kind.
                let kinds: Set<Substring> = ["class", "struct", "enum", "protocol", "typealias", "func", "var", "let"]
                var module = words[index + 1]
                if kinds.contains(module), index + 2 < words.count { module = words[index + 2].split(separator: ".").first ?? module }
                // A line of another language inside a string literal (`import sys, os`) is none.
                guard module.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else { continue }
                found[String(module), default: file.lastPathComponent] = file.lastPathComponent
            }
        }
        #expect(!found.isEmpty, "no imports found under \(root.path)")
        return found
    }

    static let mediaEngine: Set<String> = ["PCast", "PCastMedia", "GStreamer", "CGStreamer", "CGStreamerShim", "CAV1RTP", "PCastRecording"]

    @Test("the control plane links neither the media engine, the relay nor the media services")
    func controlPlane() throws {
        let imports = try Self.imports(of: "PCastServer")
        let forbidden = Self.mediaEngine.union(["PCastRelay", "PCastMediaServices", "PCastNode", "SRTP", "CSRTP"])
        for (module, file) in imports where forbidden.contains(module) {
            Issue.record("PCastServer imports \(module) (in \(file))")
        }
        #expect(imports["PCastContracts"] != nil)
    }

    @Test("the contracts depend on the wire formats only, and do no I/O: no files, sockets, name resolution or processes")
    func contracts() throws {
        for (module, file) in try Self.imports(of: "PCastContracts") where !["Foundation", "PCastProtocol", "Synchronization"].contains(module) {
            Issue.record("PCastContracts imports \(module) (in \(file))")
        }
        let root = Self.sources.appendingPathComponent("PCastContracts")
        let io = ["FileManager", "resolvingSymlinksInPath", "realpath(", "getaddrinfo", "gethostbyname", "URLSession",
                  "contentsOf:", "fopen(", "Process(", "posix_spawn", "Data(contentsOf", "socket(AF", "connect("]
        var scanned = 0
        for file in try FileManager.default.subpathsOfDirectory(atPath: root.path) where file.hasSuffix(".swift") {
            scanned += 1
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            for call in io where text.contains(call) { Issue.record("PCastContracts/\(file) does I/O: \(call)") }
        }
        #expect(scanned >= 4, "\(scanned) files scanned")
    }

    @Test("the one-shot HTTP client depends on NIO and NIOSSL only, so both the SDK and the control plane can use it")
    func httpClient() throws {
        for (module, file) in try Self.imports(of: "PCastHTTPClient") where !["Foundation", "NIOCore", "NIOPosix", "NIOHTTP1", "NIOSSL"].contains(module) {
            Issue.record("PCastHTTPClient imports \(module) (in \(file))")
        }
    }

    @Test("the TLS store depends on the contracts and NIOSSL only, so both the control plane and the media services can serve from it")
    func tlsStore() throws {
        for (module, file) in try Self.imports(of: "PCastTLS") where !["Foundation", "NIOCore", "NIOSSL", "PCastContracts", "Synchronization"].contains(module) {
            Issue.record("PCastTLS imports \(module) (in \(file))")
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
                                 "PCastServer", "PCastMediaServices", "PCastNode", "PCastGstPlugin"]

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

    @Test("no product links the benchmarks or the test stand-ins: every product's targets, and all they depend on, are free of PCastBenchmarks and PCastTestSupport; the pcast executable holds no measuring code")
    func productsLinkNoBenchmarks() throws {
        let targets = try Self.declaredDependencies()
        let byName = Dictionary(targets.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let manifest = try String(contentsOf: Self.sources.deletingLastPathComponent().appendingPathComponent("Package.swift"), encoding: .utf8)
        // `.library(name: "X", targets: [...])` and `.executable(name: "pcast", targets: [...])`.
        let products = manifest.matches(of: /\.(?:library|executable)\(name: "([^"]+)"[^\]]*targets: \[([^\]]*)\]/).map {
            (name: String($0.1), targets: String($0.2).matches(of: /"([^"]+)"/).map { String($0.1) })
        }
        #expect(products.contains { $0.name == "pcast" }, "the pcast executable is a product")
        #expect(products.count >= 8, "\(products.count) products read from Package.swift")
        for product in products {
            var seen: Set<String> = [], stack = product.targets
            while let name = stack.popLast() {
                guard seen.insert(name).inserted, let target = byName[name] else { continue }
                stack.append(contentsOf: target.modules.subtracting([name]))
            }
            for forbidden in ["PCastBenchmarks", "PCastTestSupport", "pcast-bench"] where seen.contains(forbidden) {
                Issue.record("the product \(product.name) links \(forbidden)")
            }
        }
        guard let cli = byName["pcast"] else { Issue.record("no pcast target"); return }
        let folder = Self.sources.appendingPathComponent(cli.folder)
        let files = try FileManager.default.subpathsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".swift") }
        #expect(files.count > 5, "\(files.count) files in \(cli.folder)")
        for file in files {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            if file.contains("Benchmark") || file.contains("Bench") || text.contains("BenchmarkCommand") || text.contains("Histogram") {
                Issue.record("the pcast executable holds measuring code: \(file)")
            }
        }
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

    @Test("import PCast re-exports chosen declarations, not whole modules: nothing of the engine, the parsers or the signaling messages")
    func sdkReexportsChosenDeclarations() throws {
        let root = Self.sources.appendingPathComponent("PCast")
        let scoped = try Regex(#"^@_exported\s+(?:public\s+)?import\s+(struct|class|enum|protocol|typealias|func|var|let)\s+(\w+)\.(\w+)\s*$"#)
        let notForApplications = Set(Self.enginePlumbing).union([
            "FrameHook", "FrameStamp", "DataQualityEvaluator", "DataQualitySample", "SourceSelector", "StockPipelines",
            "BandwidthLimiter", "PlayoutDelay", "EventBroadcast", "RTPPacket", "RTCPPacket", "ServerMessage", "ClientMessage",
            "SignalingCodec", "DigestToken", "UnverifiedDigestToken", "RTMPServerSession", "BackendAPI",
        ])
        var exported: [String] = []
        for file in try FileManager.default.subpathsOfDirectory(atPath: root.path) where file.hasSuffix(".swift") {
            for line in try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8).split(separator: "\n")
            where line.hasPrefix("@_exported") {
                guard let match = try scoped.wholeMatch(in: String(line)), let module = match.output[2].substring,
                      let name = match.output[3].substring else {
                    Issue.record("PCast/\(file) re-exports more than one declaration: \(line)")
                    continue
                }
                #expect(["PCastMedia", "PCastProtocol"].contains(String(module)), "PCast/\(file): \(line)")
                #expect(!notForApplications.contains(String(name)), "PCast/\(file) re-exports \(name)")
                exported.append(String(name))
            }
        }
        // The scan sees the re-exports (else it would pass vacuously).
        #expect(Set(exported).isSuperset(of: ["MediaStream", "Renderer", "UserMediaOptions", "MediaError", "StreamEndedReason"]),
                "\(exported.count) re-exported declarations found")
    }

    @Test("every product library has a DocC catalog whose landing page is the module's")
    func everyProductHasDocumentation() throws {
        for target in Self.productTargets + ["SRTP"] {
            let page = Self.sources.appendingPathComponent("\(target)/\(target).docc/\(target).md")
            let text = try String(contentsOf: page, encoding: .utf8)
            #expect(text.hasPrefix("# ``\(target)``"), "\(page.path) does not open with the module's title")
            #expect(text.contains("## Overview") && text.contains("## Topics"), "\(page.path) lacks an overview or topics")
        }
    }

    @Test("the Makefile runs tests by group: every group declared in Tests/*/TestGroups.swift is run, and no suite is named")
    func testGroupsMatchTheMakefile() throws {
        let root = Self.sources.deletingLastPathComponent()
        let makefile = try String(contentsOf: root.appendingPathComponent("Makefile"), encoding: .utf8)
        guard let line = makefile.split(separator: "\n").first(where: { $0.hasPrefix("GROUPS = ") }) else {
            Issue.record("the Makefile has no GROUPS line")
            return
        }
        let listed = Set(line.dropFirst("GROUPS = ".count).split(separator: " ").map(String.init))
        var declared: Set<String> = []
        let tests = root.appendingPathComponent("Tests")
        for target in try FileManager.default.contentsOfDirectory(atPath: tests.path) {
            let file = tests.appendingPathComponent("\(target)/TestGroups.swift")
            guard let text = try? String(contentsOf: file, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("enum ") {
                declared.insert(String(line.dropFirst("enum ".count).prefix { $0.isLetter }))
            }
        }
        #expect(declared.count >= 5, "groups found: \(declared.sorted())")
        #expect(declared == listed, "declared \(declared.sorted()), the Makefile runs \(listed.sorted())")
        // The recipe names groups and test targets only through those variables, never a suite (a
        // renamed suite would silently move to the main group).
        let recipe = makefile.components(separatedBy: "\ntest: ").dropFirst().first?.components(separatedBy: "\n\n").first ?? ""
        let selections = try recipe.matches(of: Regex(#"(--filter|--skip)\s+(\S+)"#))
        #expect(selections.count >= 8, "the test recipe: \(recipe)")
        for selection in selections {
            #expect(selection.output[2].substring?.hasPrefix("$(") == true, "the test recipe selects tests by name: \(selection.output[0].substring ?? "")")
        }
    }

    @Test("a clone alone builds and tests: nothing in the sources, tests, scripts or Makefile reads the reading material beside the repository")
    func nothingReachesOutside() throws {
        let root = Self.sources.deletingLastPathComponent()
        let outside = ".." + "/shared"   // spelled in two parts so that this file does not match itself
        var scanned = 0
        for folder in ["Sources", "Tests", "scripts", "Examples"] {
            let base = root.appendingPathComponent(folder)
            for file in try FileManager.default.subpathsOfDirectory(atPath: base.path)
            where [".swift", ".sh", ".py", ".c", ".h"].contains(where: file.hasSuffix) && !file.contains(".build") {
                let text = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
                scanned += 1
                #expect(!text.contains(outside), "\(folder)/\(file) reads \(outside)")
            }
        }
        let makefile = try String(contentsOf: root.appendingPathComponent("Makefile"), encoding: .utf8)
        #expect(!makefile.contains(outside), "the Makefile reads \(outside)")
        #expect(scanned > 200, "\(scanned) files scanned")
    }

    /// Where `Sources` declares unchecked sendability without saying why: each line with an
    /// `@unchecked Sendable` conformance or a `nonisolated(unsafe)` declaration needs a line
    /// starting `Unchecked:` in the comments directly above it (attributes may sit between) or
    /// after it on the same line, saying what makes it safe.
    static func unexplainedUncheckedSendability() throws -> (sites: Int, unexplained: [String]) {
        let markers = ["@unchecked " + "Sendable", "nonisolated" + "(unsafe)"]   // in parts: this file does not match itself
        var sites = 0
        var unexplained: [String] = []
        for file in try FileManager.default.subpathsOfDirectory(atPath: sources.path) where file.hasSuffix(".swift") {
            let lines = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
                .split(separator: "\n", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            for (index, line) in lines.enumerated() where markers.contains(where: line.contains) && !line.hasPrefix("//") {
                sites += 1
                if let trailing = line.range(of: "//"), line[trailing.lowerBound...].contains("Unchecked:") { continue }
                var above = index - 1
                var explained = false
                while above >= 0, lines[above].hasPrefix("//") || lines[above].hasPrefix("@") {
                    if lines[above].contains("Unchecked:") { explained = true }
                    above -= 1
                }
                if !explained { unexplained.append("\(file):\(index + 1)") }
            }
        }
        return (sites, unexplained)
    }

    @Test("every @unchecked Sendable conformance and nonisolated(unsafe) declaration says what makes it safe (an `Unchecked:` comment)")
    func uncheckedSendabilityIsExplained() throws {
        let (sites, unexplained) = try Self.unexplainedUncheckedSendability()
        #expect(sites > 20, "\(sites) sites found: the scan looks in the wrong place")
        #expect(unexplained.isEmpty, "no reason given at \(unexplained.joined(separator: ", "))")
    }

    /// Each `Sources` target of the manifest with the modules it declares it depends on (targets
    /// by name, products by name), read from `Package.swift`'s text: `.target(` /
    /// `.executableTarget(` blocks, their `name:`, `path:` and `dependencies:`.
    static func declaredDependencies() throws -> [(folder: String, name: String, modules: Set<String>)] {
        let manifest = try String(contentsOf: sources.deletingLastPathComponent().appendingPathComponent("Package.swift"), encoding: .utf8)
        var result: [(folder: String, name: String, modules: Set<String>)] = []
        var rest = manifest[...]
        while let start = rest.range(of: #"\.(target|executableTarget)\("#, options: .regularExpression) {
            // The block: up to the parenthesis that closes this call.
            var depth = 0
            var end = start.upperBound
            var index = rest.index(before: start.upperBound)
            while index < rest.endIndex {
                if rest[index] == "(" { depth += 1 } else if rest[index] == ")" { depth -= 1; if depth == 0 { end = index; break } }
                index = rest.index(after: index)
            }
            let block = String(rest[start.lowerBound..<end])
            rest = rest[end...]
            func strings(after label: String) -> [String] {
                guard let range = block.range(of: label) else { return [] }
                return block[range.upperBound...].matches(of: /"([^"]+)"/).map { String($0.1) }
            }
            guard let name = strings(after: "name:").first else { continue }
            let folder = strings(after: "path:").first.map { ($0 as NSString).lastPathComponent } ?? name
            var modules: Set<String> = [name]
            if let deps = block.range(of: "dependencies:") {
                let list = block[deps.upperBound...]
                let close = list.firstIndex(of: "]") ?? list.endIndex
                for line in list[..<close].split(separator: "\n") {
                    let quoted = line.matches(of: /"([^"]+)"/).map { String($0.1) }
                    // `.product(name: "X", package: "p")` is module X; a bare "X" is target X.
                    if let first = quoted.first { modules.insert(first) }
                    else { continue }
                    for other in quoted.dropFirst() where !line.contains("package:") { modules.insert(other) }
                }
            }
            result.append((folder, name, modules))
        }
        return result
    }

    /// What any target may import without declaring it: the toolchain's own modules.
    static let toolchainModules: Set<String> = [
        "Foundation", "FoundationEssentials", "FoundationNetworking", "Glibc", "Dispatch", "Synchronization",
        "_Concurrency", "RegexBuilder", "Observation", "Musl", "Darwin",
    ]

    @Test("every module a target imports is declared in the manifest (a target or product it depends on, or the toolchain's): none arrives only through another dependency")
    func importsAreDeclared() throws {
        let targets = try Self.declaredDependencies()
        #expect(targets.count > 20, "\(targets.count) targets read from Package.swift")
        var checked = 0
        for target in targets {
            let folder = Self.sources.appendingPathComponent(target.folder)
            guard FileManager.default.fileExists(atPath: folder.path),
                  (try FileManager.default.subpathsOfDirectory(atPath: folder.path)).contains(where: { $0.hasSuffix(".swift") })
            else { continue }
            checked += 1
            for (module, file) in try Self.imports(of: target.folder)
            where !target.modules.contains(module) && !Self.toolchainModules.contains(module) {
                Issue.record("\(target.name) imports \(module) (in \(file)) without declaring it in Package.swift")
            }
        }
        #expect(checked > 15, "\(checked) Swift targets checked")
    }

    @Test("the relay's I/O hands every RTP and RTCP packet to the router's one receive call, and the router's core holds no force unwrap of a stream lookup")
    func relayCoreHasOneEntry() throws {
        let relay = Self.sources.appendingPathComponent("PCastRelay")
        let engine = try String(contentsOf: relay.appendingPathComponent("RelayEngine.swift"), encoding: .utf8)
        #expect(engine.contains("router.receive(datagram:"), "the engine's packet path calls receive")
        // The per-packet steps receive takes in turn: the I/O side calls none of them itself.
        for step in ["publisherRTP(", "publisherRTCP(", "subscriberRTCP(", "publisherDuplicate(", "answerRequested(", "bindWireSSRC("] {
            for file in ["RelayEngine.swift", "RelayEngine+WebRTC.swift", "FanOutWorkers.swift", "TCPMedia.swift"] {
                let text = try String(contentsOf: relay.appendingPathComponent(file), encoding: .utf8)
                #expect(!text.contains("router." + step), "\(file) calls router.\(step) (the packet path is receive's)")
            }
        }
        var core = 0
        for file in try FileManager.default.contentsOfDirectory(atPath: relay.path)
        where file.hasPrefix("RelayRouter") || file.hasPrefix("RelayStream") {
            core += 1
            let text = try String(contentsOf: relay.appendingPathComponent(file), encoding: .utf8)
            let unwraps = text.ranges(of: #/streams\[[^\]]*\]!/#).count
            #expect(unwraps == 0, "\(file): \(unwraps) force-unwrapped stream lookups")
        }
        #expect(core >= 6, "\(core) router files found")
    }
}

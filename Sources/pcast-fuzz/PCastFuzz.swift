import Foundation
import PCastFuzzing

// Built two ways (not a product):
// - `make fuzz` builds it with `-sanitize=fuzzer -D FUZZING`: libFuzzer's driver, the harness
//   named by `PCAST_FUZZ_TARGET` (see FuzzTarget); a broken contract traps, which libFuzzer saves.
// - a normal build: `pcast-fuzz seed <folder>` writes each harness's seeds into <folder>/<target>,
//   `pcast-fuzz replay <target> <file or folder>…` runs inputs through a harness and names the
//   ones with a finding (exit status 1).

#if FUZZING

/// The harness of this run, from `PCAST_FUZZ_TARGET`.
let fuzzTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["PCAST_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        fatalError("PCAST_FUZZ_TARGET must be one of \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")); it is '\(name)'")
    }
    return target
}()

/// libFuzzer's driver (`FuzzerDriver.cpp`): parses libFuzzer's flags from argv and runs `callback`.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32

/// The executable's entry point: SwiftPM links an executable target's `main` to `<module>_main`,
/// so the driver is started here rather than by libFuzzer's own `main`.
@_cdecl("pcast_fuzz_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    do {
        try fuzzTarget.run(bytes)
    } catch {
        fatalError("\(fuzzTarget.rawValue): \(error.description)")
    }
    return 0
}

#else

@main
enum PCastFuzz {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        switch arguments.first {
        case "seed" where arguments.count == 2:
            seed(into: URL(fileURLWithPath: arguments[1]))
        case "replay" where arguments.count >= 3:
            guard let target = FuzzTarget(rawValue: arguments[1]) else { usage("unknown target \(arguments[1])") }
            exit(replay(target, arguments.dropFirst(2).map { URL(fileURLWithPath: $0) }) ? 0 : 1)
        default:
            usage(nil)
        }
    }

    static func usage(_ problem: String?) -> Never {
        if let problem { FileHandle.standardError.write(Data("pcast-fuzz: \(problem)\n".utf8)) }
        FileHandle.standardError.write(Data("""
            usage: pcast-fuzz seed <corpus folder>
                   pcast-fuzz replay <target> <file or folder>...
            targets: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))

            """.utf8))
        exit(2)
    }

    /// Writes each target's seeds as `<folder>/<target>/seed-<n>`, leaving other files alone.
    static func seed(into folder: URL) {
        for target in FuzzTarget.allCases {
            let directory = folder.appendingPathComponent(target.rawValue)
            try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            for (index, seed) in target.seeds.enumerated() {
                try? Data(seed).write(to: directory.appendingPathComponent("seed-\(index)"))
            }
            print("\(target.rawValue): \(target.seeds.count) seeds in \(directory.path)")
        }
    }

    /// Runs every file (folders: every file in them) through `target`; false if any had a finding.
    static func replay(_ target: FuzzTarget, _ paths: [URL]) -> Bool {
        var files: [URL] = []
        for path in paths {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path.path, isDirectory: &isFolder) else { usage("\(path.path) does not exist") }
            if isFolder.boolValue {
                files += ((try? FileManager.default.contentsOfDirectory(at: path, includingPropertiesForKeys: nil)) ?? []).sorted { $0.path < $1.path }
            } else {
                files.append(path)
            }
        }
        var clean = true
        for file in files {
            guard let data = try? Data(contentsOf: file) else { continue }
            do {
                try target.run(Array(data))
            } catch {
                print("\(file.path): \(error.description)")
                clean = false
            }
        }
        print("\(target.rawValue): \(files.count) inputs, \(clean ? "no finding" : "findings above")")
        return clean
    }
}

#endif

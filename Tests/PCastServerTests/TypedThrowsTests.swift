import Foundation
import Testing

/// The SDK's errors are typed: read from its sources, as `LayeringTests` reads their imports.
@Suite("The SDK's async functions name their error type")
struct TypedThrowsTests {
    static let sdk = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/PCast")

    @Test("no function or initializer under Sources/PCast is declared plain `async throws`: each names its error type (`async throws(PCastError)`…), and there are at least 20 such; plain `async throws` appears only inside a closure's type (the application's token provider)")
    func asyncFunctionsNameTheirErrorType() throws {
        var typed = 0
        var untyped: [String] = []
        var closureTypes: [String] = []
        for file in try FileManager.default.subpathsOfDirectory(atPath: Self.sdk.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: Self.sdk.appendingPathComponent(file), encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.trimmingCharacters(in: .whitespaces)
                if code.hasPrefix("//") { continue }
                var rest = Substring(line)
                while let found = rest.range(of: "async throws") {
                    let prefix = line[line.startIndex..<found.lowerBound]
                    let after = rest[found.upperBound...]
                    rest = after
                    if after.hasPrefix("(") { typed += 1; continue }
                    // Inside parentheses (a parameter's or property's function type) or a typealias: a type, not a declaration.
                    let open = prefix.filter { $0 == "(" }.count - prefix.filter { $0 == ")" }.count
                    if open > 0 || code.contains("typealias ") {
                        closureTypes.append("\(file):\(number + 1)")
                    } else {
                        untyped.append("\(file):\(number + 1): \(code)")
                    }
                }
            }
        }
        #expect(untyped.isEmpty, "declared plain async throws: \(untyped)")
        #expect(typed >= 20, "only \(typed) typed async throws found under \(Self.sdk.path)")
        #expect(closureTypes.allSatisfy { $0.hasPrefix("Connection/PCast.swift:") }, "\(closureTypes)")
    }
}

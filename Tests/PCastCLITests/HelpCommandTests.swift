import Foundation
import Testing

/// `pcast --help`, as the SDK's *Getting started* article points a reader to it.
@Suite("pcast --help")
struct HelpCommandTests {
    static let commands = ["demo", "serve", "publish", "subscribe", "room", "chat", "channel", "ingest", "nettest",
                           "devices", "preview", "pipeline", "inspect", "token"]

    @Test("pcast --help exits 0 and lists, under SUBCOMMANDS, each of its commands (serve, token, publish, subscribe and the others) as a line of its own")
    func listsTheCommands() throws {
        let result = try runCommand(try pcastBinary(), ["--help"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.lines
        let start = try #require(lines.firstIndex { $0.hasPrefix("SUBCOMMANDS:") }, "\(result.stdout)")
        let listed = lines[(start + 1)...].map { $0.trimmingCharacters(in: .whitespaces) }
        for command in Self.commands {
            #expect(listed.contains { $0 == command || $0.hasPrefix(command + " ") }, "\(command) not listed: \(result.stdout)")
        }
    }
}

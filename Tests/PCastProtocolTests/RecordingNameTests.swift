import PCastProtocol
import Testing

@Suite("Recording names")
struct RecordingNameTests {
    @Test("plain names are kept verbatim and map to <name>.mp4", arguments: ["show", "morning-show_2026.11", "A", "a.b.c", String(repeating: "x", count: 128)])
    func accepted(_ raw: String) throws {
        let name = try RecordingName(raw)
        #expect(name.value == raw)
        #expect(name.fileName == raw + ".mp4")
        #expect(RecordingName(fileName: raw + ".mp4") == name)
    }

    @Test("traversal, separators, NUL, encoded forms, control and non-ASCII characters are refused with the reason")
    func refused() {
        let cases: [(String, RecordingNameError)] = [
            ("", .empty),
            (String(repeating: "x", count: 129), .tooLong(bytes: 129, limit: 128)),
            ("..", .traversal),
            (".hidden", .traversal),
            ("a..b", .traversal),
            ("../escape", .forbiddenCharacter("/", offset: 2)),
            ("/etc/passwd", .forbiddenCharacter("/", offset: 0)),
            ("a\\b", .forbiddenCharacter("\\", offset: 1)),
            ("%2e%2e%2f", .forbiddenCharacter("%", offset: 0)),
            ("a\u{0}b", .forbiddenCharacter("\u{0}", offset: 1)),
            ("show\n", .forbiddenCharacter("\n", offset: 4)),
            ("a b", .forbiddenCharacter(" ", offset: 1)),
            ("é", .forbiddenCharacter("é", offset: 0)),
            ("x١", .forbiddenCharacter("١", offset: 1)),
        ]
        for (raw, expected) in cases {
            #expect(throws: expected, "\(raw.debugDescription)") { try RecordingName(raw) }
        }
    }

    @Test("only <valid name>.mp4 files are recordings")
    func fileNames() {
        #expect(RecordingName(fileName: "show.mp4")?.value == "show")
        #expect(RecordingName(fileName: "show") == nil)
        #expect(RecordingName(fileName: ".mp4") == nil)
        #expect(RecordingName(fileName: "..mp4") == nil)
        #expect(RecordingName(fileName: "a b.mp4") == nil)
    }
}

@testable import PCastMedia
import Testing

/// The part-following player's reading of a low-latency playlist (RFC 8216bis), without I/O.
@Suite("Low-latency HLS playlist")
struct LowLatencyPlaylistTests {
    typealias Position = LowLatencyPlaylist.Position

    /// Segment 7 complete (three parts), segment 8 complete (two parts), segment 9 being cut (one
    /// part so far), as the platform's packager writes it; URIs carry a token.
    static let live = """
        #EXTM3U
        #EXT-X-VERSION:9
        #EXT-X-TARGETDURATION:2
        #EXT-X-PART-INF:PART-TARGET=0.50000
        #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.50000
        #EXT-X-MEDIA-SEQUENCE:6
        #EXT-X-MAP:URI="init.mp4?token=a%3Db"
        #EXTINF:2.00000,
        seg6.m4s?token=a%3Db
        #EXT-X-PART:DURATION=0.48000,URI="part7.0.m4s?token=a%3Db",INDEPENDENT=YES
        #EXT-X-PART:DURATION=0.48000,URI="part7.1.m4s?token=a%3Db"
        #EXT-X-PART:DURATION=0.08000,URI="part7.2.m4s?token=a%3Db"
        #EXTINF:1.04000,
        seg7.m4s?token=a%3Db
        #EXT-X-PART:DURATION=0.48000,URI="part8.0.m4s?token=a%3Db",INDEPENDENT=YES
        #EXT-X-PART:DURATION=0.48000,URI="part8.1.m4s?token=a%3Db"
        #EXTINF:0.96000,
        seg8.m4s?token=a%3Db
        #EXT-X-PART:DURATION=0.48000,URI="part9.0.m4s?token=a%3Db",INDEPENDENT=YES
        #EXT-X-PRELOAD-HINT:TYPE=PART,URI="part9.1.m4s?token=a%3Db"
        """

    @Test("parts by (media sequence, index), the map, the part target, complete segments and where the next part goes; quoted attributes keep their commas and equals signs")
    func parse() throws {
        let playlist = try LowLatencyPlaylist(parsing: Self.live)
        #expect(playlist.map == "init.mp4?token=a%3Db" && playlist.partTarget == 0.5 && !playlist.ended)
        #expect(playlist.parts.keys.sorted() == [Position(7, 0), Position(7, 1), Position(7, 2), Position(8, 0), Position(8, 1), Position(9, 0)])
        #expect(playlist.parts[Position(7, 2)]?.uri == "part7.2.m4s?token=a%3Db" && playlist.parts[Position(7, 2)]?.independent == false)
        #expect(playlist.parts[Position(9, 0)]?.independent == true)
        #expect(playlist.completeSegments == [6: 0, 7: 3, 8: 2], "segment 6's parts are no longer listed")
        #expect(playlist.nextPosition == Position(9, 1))
        #expect(LowLatencyPlaylist.attribute("URI", in: #"#EXT-X-PART:DURATION=0.1,URI="a,b=c.m4s",INDEPENDENT=YES"#) == "a,b=c.m4s")
        #expect(LowLatencyPlaylist.attribute("INDEPENDENT", in: #"#EXT-X-PART:DURATION=0.1,URI="a,b=c.m4s",INDEPENDENT=YES"#) == "YES")
        let ended = try LowLatencyPlaylist(parsing: Self.live + "\n#EXT-X-ENDLIST")
        #expect(ended.ended)
    }

    @Test("the part after the last of a complete segment is the next segment's first; a position past a segment's end moves there too; playback starts at the first independent part from the live edge")
    func following() throws {
        let playlist = try LowLatencyPlaylist(parsing: Self.live)
        #expect(playlist.successor(of: Position(7, 1)) == Position(7, 2))
        #expect(playlist.successor(of: Position(7, 2)) == Position(8, 0))
        #expect(playlist.successor(of: Position(9, 0)) == Position(9, 1), "the segment being cut goes on")
        #expect(playlist.normalised(Position(8, 2)) == Position(9, 0), "segment 8 ended after two parts")
        #expect(playlist.normalised(Position(9, 1)) == Position(9, 1))
        #expect(playlist.firstIndependent(atOrAfter: Position(7, 1)) == Position(8, 0))
        #expect(playlist.firstIndependent(atOrAfter: Position(9, 1)) == nil, "not listed yet: the player waits for it")
    }

    @Test("what is not a media playlist with parts is refused")
    func malformed() {
        #expect(throws: LowLatencyPlaylist.Malformed.self) { try LowLatencyPlaylist(parsing: "<html>not found</html>") }
        #expect(throws: LowLatencyPlaylist.Malformed.self) { try LowLatencyPlaylist(parsing: "#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:x") }
        #expect(throws: LowLatencyPlaylist.Malformed.self) { try LowLatencyPlaylist(parsing: "#EXTM3U\n#EXT-X-PART:DURATION=0.5") }
        let plain = try? LowLatencyPlaylist(parsing: "#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXTINF:6.0,\nseg0.ts")
        #expect(plain?.partTarget == nil && plain?.parts.isEmpty == true, "plain HLS parses, and the receiver plays it as segments")
    }
}

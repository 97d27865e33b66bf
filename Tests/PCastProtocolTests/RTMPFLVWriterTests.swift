@testable import PCastProtocol
import PCastTestSupport
import Testing

/// A minimal FLV reader for checking what the writer produced.
struct FLVTestTag: Equatable {
    var type: UInt8
    var timestamp: UInt32
    var streamID: UInt32
    var data: [UInt8]
}

func parseFLV(_ bytes: [UInt8]) throws -> (flags: UInt8, tags: [FLVTestTag]) {
    guard bytes.count >= 13, bytes[0..<4] == [0x46, 0x4C, 0x56, 0x01][...] else { throw TestFailure("not an FLV header") }
    func u24(_ i: Int) -> UInt32 { UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) }
    func u32(_ i: Int) -> UInt32 { UInt32(bytes[i]) << 24 | u24(i + 1) }
    guard u32(5) == 9, u32(9) == 0 else { throw TestFailure("bad header length or PreviousTagSize0") }
    var tags: [FLVTestTag] = []
    var i = 13
    while i < bytes.count {
        guard i + 11 <= bytes.count else { throw TestFailure("truncated tag header at \(i)") }
        let size = Int(u24(i + 1))
        let timestamp = u24(i + 4) | UInt32(bytes[i + 7]) << 24
        guard i + 11 + size + 4 <= bytes.count else { throw TestFailure("truncated tag at \(i)") }
        guard u32(i + 11 + size) == UInt32(11 + size) else { throw TestFailure("PreviousTagSize mismatch at \(i)") }
        tags.append(FLVTestTag(type: bytes[i], timestamp: timestamp, streamID: u24(i + 8), data: Array(bytes[(i + 11)..<(i + 11 + size)])))
        i += 11 + size + 4
    }
    return (bytes[4], tags)
}

@Suite("FLV writer")
struct RTMPFLVWriterTests {
    @Test("header bytes and flags")
    func header() {
        #expect(FLVWriter.header(hasAudio: true, hasVideo: true) == hex("464C5601 05 00000009 00000000"))
        #expect(FLVWriter.header(hasAudio: true, hasVideo: false)[4] == 0x04)
        #expect(FLVWriter.header(hasAudio: false, hasVideo: true)[4] == 0x01)
    }

    @Test("tag layout: 24-bit size, timestamp with its extended byte, stream id 0, PreviousTagSize")
    func tagLayout() throws {
        var writer = FLVWriter()
        let first = try writer.video(timestamp: 0x1234_5678, payload: [0x17, 0x01, 0xAA])
        #expect(first == FLVWriter.header(hasAudio: true, hasVideo: true) + hex("09 000003 345678 12 000000 1701AA 0000000E"))
        let second = try writer.audio(timestamp: 21, payload: [0xAF, 0x01])
        #expect(second == hex("08 000002 000015 00 000000 AF01 0000000D"))  // no second header
        #expect(writer.tagsWritten == 2 && writer.headerWritten)
    }

    @Test("metadata becomes an onMetaData script tag with an ECMA array")
    func metadata() throws {
        var writer = FLVWriter(hasAudio: false, hasVideo: true)
        let meta: AMF0Object = ["width": 1280, "height": 720, "videocodecid": 7]
        let (flags, tags) = try parseFLV(try writer.metadata(meta))
        #expect(flags == 0x01)
        #expect(tags.count == 1 && tags[0].type == 18)
        #expect(try AMF0.decode(tags[0].data) == ["onMetaData", .ecmaArray(meta)])
        #expect(FLVWriter.streams(announcedIn: meta) == (audio: false, video: true))
        #expect(FLVWriter.streams(announcedIn: ["audiocodecid": 10, "videocodecid": 7]) == (audio: true, video: true))
    }

    @Test("session actions map to tags in order; other actions produce nothing")
    func fromActions() throws {
        var writer = FLVWriter()
        var flv: [UInt8] = []
        let actions: [RTMPServerSession.Action] = [
            .send([1, 2]), .metadata(["duration": 3], timestamp: 0), .video(timestamp: 0, payload: [0x17, 0]),
            .audio(timestamp: 0, payload: [0xAF, 0]), .video(timestamp: 0x0100_0040, payload: [0x27, 1]), .ended(.unpublished), .close,
        ]
        for action in actions { flv += try writer.write(action) }
        let (_, tags) = try parseFLV(flv)
        #expect(tags.map(\.type) == [18, 9, 8, 9])
        #expect(tags.map(\.timestamp) == [0, 0, 0, 0x0100_0040])
        #expect(tags.allSatisfy { $0.streamID == 0 })
        #expect(tags[3].data == [0x27, 1])
    }

    @Test("tags larger than 24 bits are refused")
    func tooLarge() {
        var writer = FLVWriter()
        #expect(throws: FLVWriterError.tagTooLarge(size: 1 << 24)) { try writer.video(timestamp: 0, payload: [UInt8](repeating: 0, count: 1 << 24)) }
        #expect(!writer.headerWritten)
    }

    @Test("a session's media round-trips through FLV with RTMP timestamps (seeded)")
    func sessionToFLV() throws {
        var rng = SeededRNG(seed: 5)
        var session = RTMPServerSession()
        var client = RTMPTestClient(seed: 5, compressesHeaders: true)
        var bytes = client.handshake() + client.connect() + client.publish("k")
        var sent: [FLVTestTag] = []
        for i in 0..<60 {
            let video = i % 2 == 0
            let ts = UInt32(i) * 20 + 0x00FF_FF00  // crosses the 24-bit boundary
            let payload = rng.bytes(Int.random(in: 1...3000, using: &rng))
            bytes += video ? client.video(ts, payload) : client.audio(ts, payload)
            sent.append(FLVTestTag(type: video ? 9 : 8, timestamp: ts, streamID: 0, data: payload))
        }
        var actions = try session.receive(bytes)
        actions += try session.accept()
        var writer = FLVWriter()
        var flv: [UInt8] = []
        for action in actions { flv += try writer.write(action) }
        #expect(try parseFLV(flv).tags == sent)
    }
}

@testable import PCastProtocol
import PCastTestSupport
import Testing

/// The messages among demuxer events.
func rtmpMessages(_ events: [RTMPChunkDemuxer.Event]) -> [RTMPMessage] {
    events.compactMap { if case .message(let m) = $0 { m } else { nil } }
}

/// Feeds `bytes` one byte at a time.
func feedBytewise(_ demuxer: inout RTMPChunkDemuxer, _ bytes: [UInt8]) throws(RTMPError) -> [RTMPChunkDemuxer.Event] {
    var events: [RTMPChunkDemuxer.Event] = []
    for b in bytes { events += try demuxer.feed([b]) }
    return events
}

/// Feeds `bytes` in random pieces of 1...maxPiece bytes.
func feedRandomly(
    _ demuxer: inout RTMPChunkDemuxer, _ bytes: [UInt8], maxPiece: Int, using rng: inout SeededRNG
) throws(RTMPError) -> [RTMPChunkDemuxer.Event] {
    var events: [RTMPChunkDemuxer.Event] = []
    var i = 0
    while i < bytes.count {
        let n = min(Int.random(in: 1...maxPiece, using: &rng), bytes.count - i)
        events += try demuxer.feed(bytes[i..<(i + n)])
        i += n
    }
    return events
}

/// A fmt 0 chunk header: csid < 64, 24-bit timestamp field, length, type, stream id.
private func fmt0(csid: UInt8, ts: UInt32, length: Int, type: UInt8, stream: UInt32 = 0) -> [UInt8] {
    var w = ByteWriter()
    w.u8(csid)
    w.u24(ts)
    w.u24(UInt32(length))
    w.u8(type)
    w.u8(UInt8(stream & 0xFF)); w.u8(UInt8(stream >> 8 & 0xFF)); w.u8(UInt8(stream >> 16 & 0xFF)); w.u8(UInt8(stream >> 24))
    return w.bytes
}

private func setChunkSizeBytes(_ size: UInt32) -> [UInt8] {
    var w = ByteWriter()
    w.u32(size)
    return fmt0(csid: 2, ts: 0, length: 4, type: 1) + w.bytes
}

@Suite("RTMP chunk stream")
struct RTMPChunkStreamTests {
    @Test("a fmt 0 message decodes, stream id little endian; byte-wise feeding agrees")
    func basicMessage() throws {
        let bytes = fmt0(csid: 3, ts: 0x10, length: 5, type: 0x14, stream: 0x0102_0304) + [1, 2, 3, 4, 5]
        var whole = RTMPChunkDemuxer()
        let messages = rtmpMessages(try whole.feed(bytes))
        #expect(messages == [RTMPMessage(type: .commandAMF0, streamID: 0x0102_0304, timestamp: 0x10, payload: [1, 2, 3, 4, 5])])
        var bytewise = RTMPChunkDemuxer()
        #expect(rtmpMessages(try feedBytewise(&bytewise, bytes)) == messages)
        #expect(whole.bytesReceived == UInt64(bytes.count) && bytewise.bytesReceived == UInt64(bytes.count))
        #expect(whole.messagesReceived == 1)
    }

    @Test("fmt 1, 2 and 3 before any fmt 0 on a chunk stream are refused", arguments: [
        ([0x43], UInt32(3), UInt8(1)), ([0x83], 3, 2), ([0xC3], 3, 3), ([0x40, 0x05], 69, 1), ([0xC1, 0x00, 0x01], 320, 3),
    ] as [([UInt8], UInt32, UInt8)])
    func chunkBeforeInitialHeader(bytes: [UInt8], csid: UInt32, format: UInt8) {
        var demuxer = RTMPChunkDemuxer()
        #expect(throws: RTMPError.chunkBeforeInitialHeader(chunkStreamID: csid, format: format)) {
            try demuxer.feed(bytes + [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        }
        // The demuxer stays failed.
        #expect(throws: RTMPError.chunkBeforeInitialHeader(chunkStreamID: csid, format: format)) { try demuxer.feed([]) }
        // fmt 1 on a *different* chunk stream than the one that had fmt 0 is refused too.
        var other = RTMPChunkDemuxer()
        _ = try? other.feed(fmt0(csid: 4, ts: 0, length: 1, type: 8) + [0])
        #expect(throws: RTMPError.chunkBeforeInitialHeader(chunkStreamID: csid, format: format)) { try other.feed(bytes) }
    }

    @Test("Set Chunk Size 0, with the top bit, or over the cap is refused; at the cap it is accepted")
    func badChunkSizes() throws {
        for size: UInt32 in [0, 0x8000_0000, 0x8000_0080, 0xFFFF_FFFF] {
            var demuxer = RTMPChunkDemuxer()
            #expect(throws: RTMPError.badChunkSize(size)) { try demuxer.feed(setChunkSizeBytes(size)) }
        }
        var big = RTMPChunkDemuxer()
        #expect(throws: RTMPError.chunkSizeTooLarge(0x7FFF_FFFF, limit: 16 << 20)) { try big.feed(setChunkSizeBytes(0x7FFF_FFFF)) }
        var atCap = RTMPChunkDemuxer()
        _ = try atCap.feed(setChunkSizeBytes(16 << 20))
        #expect(atCap.chunkSize == 16 << 20)
        var short = RTMPChunkDemuxer()
        #expect(throws: RTMPError.malformedControlMessage(type: 1, length: 2)) { try short.feed(fmt0(csid: 2, ts: 0, length: 2, type: 1) + [0, 1]) }
    }

    @Test("chunk size 1 splits a message into one-byte chunks; the new size applies to the next chunk")
    func chunkSizeOne() throws {
        var bytes = setChunkSizeBytes(1)
        bytes += fmt0(csid: 3, ts: 7, length: 5, type: 9) + [0xA]
        for b: UInt8 in [0xB, 0xC, 0xD, 0xE] { bytes += [0xC3, b] }
        var demuxer = RTMPChunkDemuxer()
        let messages = rtmpMessages(try demuxer.feed(bytes))
        #expect(messages.count == 2)
        #expect(messages[1] == RTMPMessage(type: .video, timestamp: 7, payload: [0xA, 0xB, 0xC, 0xD, 0xE]))
        #expect(demuxer.chunkSize == 1)
    }

    @Test("a message longer than the cap is refused as soon as its header is complete")
    func messageTooLarge() throws {
        var demuxer = RTMPChunkDemuxer()
        #expect(throws: RTMPError.messageTooLarge(length: (8 << 20) + 1, limit: 8 << 20)) {
            try demuxer.feed(fmt0(csid: 3, ts: 0, length: (8 << 20) + 1, type: 9))
        }
        var atCap = RTMPChunkDemuxer()
        #expect(try atCap.feed(fmt0(csid: 3, ts: 0, length: 8 << 20, type: 9) + [1, 2, 3]).isEmpty)
        // fmt 1 can raise the length too.
        var viaFmt1 = RTMPChunkDemuxer()
        _ = try viaFmt1.feed(fmt0(csid: 3, ts: 0, length: 1, type: 9) + [0])
        #expect(throws: RTMPError.messageTooLarge(length: 0xFF_FFFF, limit: 8 << 20)) {
            try viaFmt1.feed([0x43, 0, 0, 1, 0xFF, 0xFF, 0xFF, 9])
        }
        var tight = RTMPChunkDemuxer(limits: .init(maxMessageLength: 100))
        #expect(throws: RTMPError.messageTooLarge(length: 101, limit: 100)) { try tight.feed(fmt0(csid: 3, ts: 0, length: 101, type: 8)) }
    }

    @Test("partial messages across chunk streams are bounded in total")
    func bufferLimit() throws {
        var demuxer = RTMPChunkDemuxer(limits: .init(maxBufferedBytes: 1000))
        _ = try demuxer.feed(fmt0(csid: 3, ts: 0, length: 600, type: 9) + [UInt8](repeating: 1, count: 128))
        #expect(throws: RTMPError.bufferLimitExceeded(limit: 1000)) { try demuxer.feed(fmt0(csid: 4, ts: 0, length: 600, type: 8)) }
        // Completed messages release their share.
        var released = RTMPChunkDemuxer(limits: .init(maxBufferedBytes: 1000))
        for _ in 0..<5 { _ = try released.feed(fmt0(csid: 3, ts: 0, length: 600, type: 9) + Self.chunked(600, csid: 3)) }
    }

    @Test("more chunk streams than the limit are refused")
    func tooManyChunkStreams() throws {
        var demuxer = RTMPChunkDemuxer(limits: .init(maxChunkStreams: 4))
        for csid: UInt8 in 2...5 { _ = try demuxer.feed(fmt0(csid: csid, ts: 0, length: 0, type: 8)) }
        #expect(throws: RTMPError.tooManyChunkStreams(limit: 4)) { try demuxer.feed(fmt0(csid: 6, ts: 0, length: 0, type: 8)) }
    }

    @Test("a fmt 0/1/2 header in the middle of a message is refused")
    func headerMidMessage() throws {
        var demuxer = RTMPChunkDemuxer()
        _ = try demuxer.feed(fmt0(csid: 3, ts: 0, length: 200, type: 9) + [UInt8](repeating: 0, count: 128))
        #expect(throws: RTMPError.headerInMiddleOfMessage(chunkStreamID: 3)) { try demuxer.feed([0x83, 0, 0, 1] + [UInt8](repeating: 0, count: 72)) }
    }

    @Test("timestamps: fmt 0 absolute, fmt 1/2 deltas, fmt 3 repeats the last field (as ffmpeg and nginx-rtmp)")
    func timestampDeltas() throws {
        var bytes = fmt0(csid: 4, ts: 100, length: 1, type: 8, stream: 1) + [0xAA]
        bytes += [0xC4, 0xBB]  // new message, delta = 100 (the fmt 0 field)
        bytes += [0x84, 0, 0, 10, 0xCC]  // fmt 2, delta 10
        bytes += [0xC4, 0xDD]  // delta 10 again
        bytes += [0x44, 0, 0, 5, 0, 0, 2, 9, 1, 2]  // fmt 1: delta 5, length 2, video
        var demuxer = RTMPChunkDemuxer()
        let messages = rtmpMessages(try demuxer.feed(bytes))
        #expect(messages.map(\.timestamp) == [100, 200, 210, 220, 225])
        #expect(messages.map(\.type) == [.audio, .audio, .audio, .audio, .video])
        #expect(messages.allSatisfy { $0.streamID == 1 })
        #expect(messages.last?.payload == [1, 2])
    }

    @Test("extended timestamps: fmt 0, continuation chunks, fmt 1 deltas, fmt 3 new messages, 32-bit wrap")
    func extendedTimestamps() throws {
        // fmt 0 with timestamp 0x01000000, 200 bytes over two chunks: the continuation repeats it.
        var bytes: [UInt8] = [0x03, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0xC8, 0x09, 1, 0, 0, 0, 0x01, 0x00, 0x00, 0x00]
        bytes += [UInt8](repeating: 1, count: 128) + [0xC3, 0x01, 0x00, 0x00, 0x00] + [UInt8](repeating: 2, count: 72)
        // fmt 1 with an extended delta of 0x01000000, 1 byte.
        bytes += [0x43, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x09, 0x01, 0x00, 0x00, 0x00, 0xEE]
        // fmt 3 new message: the extended field is present again and is the delta.
        bytes += [0xC3, 0x01, 0x00, 0x00, 0x00, 0xEF]
        // fmt 2 back to a small delta: no extended field from now on.
        bytes += [0x83, 0x00, 0x00, 0x05, 0xF0]
        bytes += [0xC3, 0xF1]
        var demuxer = RTMPChunkDemuxer()
        let messages = rtmpMessages(try demuxer.feed(bytes))
        #expect(messages.map(\.timestamp) == [0x0100_0000, 0x0200_0000, 0x0300_0000, 0x0300_0005, 0x0300_000A])
        #expect(messages[0].payload == [UInt8](repeating: 1, count: 128) + [UInt8](repeating: 2, count: 72))
        var bytewise = RTMPChunkDemuxer()
        #expect(rtmpMessages(try feedBytewise(&bytewise, bytes)) == messages)

        // 32-bit wrap-around.
        var wrap = RTMPChunkDemuxer()
        let wrapBytes: [UInt8] = [0x04, 0xFF, 0xFF, 0xFF, 0, 0, 0, 8, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xF0] + [0x84, 0, 0, 0x20]
        #expect(rtmpMessages(try wrap.feed(wrapBytes)).map(\.timestamp) == [0xFFFF_FFF0, 0x10])
    }

    @Test("zero-length messages are delivered at once")
    func zeroLength() throws {
        var demuxer = RTMPChunkDemuxer()
        let messages = rtmpMessages(try demuxer.feed(fmt0(csid: 3, ts: 1, length: 0, type: 8) + [0xC3]))
        #expect(messages == [RTMPMessage(type: .audio, timestamp: 1, payload: []), RTMPMessage(type: .audio, timestamp: 2, payload: [])])
    }

    @Test("chunk stream ids in the 1, 2 and 3 byte forms, and 64...319 in the 3 byte form")
    func chunkStreamIDForms() throws {
        var muxer = RTMPChunkMuxer()
        var demuxer = RTMPChunkDemuxer()
        for csid: UInt32 in [2, 3, 63, 64, 65, 319, 320, 1000, 65599] {
            let message = RTMPMessage(type: .video, streamID: 1, timestamp: csid, payload: [UInt8](repeating: 7, count: 300))
            let bytes = try muxer.encode(message, chunkStreamID: csid)
            let basic = csid < 64 ? 1 : csid < 320 ? 2 : 3
            #expect(bytes.count == basic + 11 + 300 + 2 * basic)  // two continuation chunks
            #expect(rtmpMessages(try demuxer.feed(bytes)) == [message])
        }
        #expect(try muxer.encode(.abort(chunkStreamID: 0), chunkStreamID: 64).prefix(2) == [0x00, 0x00][...])
        #expect(try muxer.encode(.abort(chunkStreamID: 0), chunkStreamID: 319).prefix(2) == [0x00, 0xFF][...])
        #expect(try muxer.encode(.abort(chunkStreamID: 0), chunkStreamID: 320).prefix(3) == [0x01, 0x00, 0x01][...])
        #expect(try muxer.encode(.abort(chunkStreamID: 0), chunkStreamID: 65599).prefix(3) == [0x01, 0xFF, 0xFF][...])
        // csid 100 written in the 3-byte form (allowed, if unusual).
        var three = RTMPChunkDemuxer()
        let bytes: [UInt8] = [0x01, 36, 0, 0, 0, 9, 0, 0, 1, 8, 0, 0, 0, 0, 0x55]
        #expect(rtmpMessages(try three.feed(bytes)) == [RTMPMessage(type: .audio, timestamp: 9, payload: [0x55])])
        // The muxer refuses what the wire cannot express.
        for csid: UInt32 in [0, 1, 65600] {
            #expect(throws: RTMPError.invalidChunkStreamID(csid)) { try muxer.encode(.abort(chunkStreamID: 0), chunkStreamID: csid) }
        }
    }

    @Test("interleaved chunk streams reassemble independently")
    func interleaved() throws {
        var bytes = fmt0(csid: 4, ts: 10, length: 200, type: 8, stream: 1) + [UInt8](repeating: 0xA, count: 128)
        bytes += fmt0(csid: 6, ts: 20, length: 300, type: 9, stream: 1) + [UInt8](repeating: 0xB, count: 128)
        bytes += [0xC4] + [UInt8](repeating: 0xA, count: 72)
        bytes += [0xC6] + [UInt8](repeating: 0xB, count: 128)
        bytes += [0xC6] + [UInt8](repeating: 0xB, count: 44)
        var demuxer = RTMPChunkDemuxer()
        let messages = rtmpMessages(try demuxer.feed(bytes))
        #expect(messages.map(\.type) == [.audio, .video])
        #expect(messages.map(\.payload.count) == [200, 300])
        #expect(messages.map(\.timestamp) == [10, 20])
    }

    @Test("Abort drops the partial message; the chunk stream continues with the next one")
    func abort() throws {
        var bytes = fmt0(csid: 6, ts: 0, length: 300, type: 9, stream: 1) + [UInt8](repeating: 0, count: 128)
        var w = ByteWriter()
        w.u32(6)
        bytes += fmt0(csid: 2, ts: 0, length: 4, type: 2) + w.bytes
        bytes += [0x86, 0, 0, 40] + [UInt8](repeating: 1, count: 128)  // fmt 2: a new 300-byte message
        bytes += [0xC6] + [UInt8](repeating: 1, count: 128) + [0xC6] + [UInt8](repeating: 1, count: 44)
        var demuxer = RTMPChunkDemuxer(limits: .init(maxBufferedBytes: 310))
        let messages = rtmpMessages(try demuxer.feed(bytes))
        #expect(messages.count == 2)
        #expect(messages[0].type == .abort)
        #expect(messages[1] == RTMPMessage(type: .video, streamID: 1, timestamp: 40, payload: [UInt8](repeating: 1, count: 300)))
    }

    @Test("acknowledgements are due after each window of received bytes")
    func acknowledgements() throws {
        var w = ByteWriter()
        w.u32(1000)
        var bytes = fmt0(csid: 2, ts: 0, length: 4, type: 5) + w.bytes
        for i in 0..<20 { bytes += fmt0(csid: 4, ts: UInt32(i), length: 100, type: 8, stream: 1) + [UInt8](repeating: 0, count: 100) }
        // 16 + 20 * 112 = 2256 bytes: acknowledgements at 1000 and 2000.
        var bytewise = RTMPChunkDemuxer()
        let events = try feedBytewise(&bytewise, bytes)
        let acks = events.compactMap { if case .acknowledgementDue(let s) = $0 { s } else { nil } }
        #expect(acks == [1000, 2000])
        #expect(bytewise.acknowledgementWindow == 1000)
        var whole = RTMPChunkDemuxer()
        let wholeAcks = try whole.feed(bytes).compactMap { if case .acknowledgementDue(let s) = $0 { s } else { nil } }
        #expect(wholeAcks.count == 2)
        #expect(wholeAcks.allSatisfy { $0 % 1000 < 112 })
        // No window, no acknowledgements.
        var none = RTMPChunkDemuxer()
        #expect(try none.feed(Array(bytes[16...])).count == 20)
    }

    @Test("the muxer chunks at 128 by default and switches after Set Chunk Size")
    func muxer() throws {
        var muxer = RTMPChunkMuxer()
        let message = RTMPMessage(type: .commandAMF0, timestamp: 0, payload: [UInt8](repeating: 3, count: 300))
        let bytes = try muxer.encode(message, chunkStreamID: 3)
        #expect(bytes.count == 12 + 128 + 1 + 128 + 1 + 44)
        #expect(bytes[140] == 0xC3 && bytes[269] == 0xC3)
        // Without compression every message gets a full header.
        #expect(try muxer.encode(message, chunkStreamID: 3)[0] == 0x03)

        let set = try muxer.setChunkSize(4096)
        #expect(set == hex("02 000000 000004 01 00000000 00001000"))
        #expect(muxer.chunkSize == 4096)
        #expect(try muxer.encode(message, chunkStreamID: 3).count == 12 + 300)
        #expect(throws: RTMPError.invalidOutgoingChunkSize(0)) { try muxer.setChunkSize(0) }
        #expect(throws: RTMPError.messageTooLargeToSend(length: 1 << 24)) {
            try muxer.encode(RTMPMessage(type: .video, payload: [UInt8](repeating: 0, count: 1 << 24)), chunkStreamID: 6)
        }
    }

    @Test("header compression uses fmt 1, 2 and 3")
    func compression() throws {
        var muxer = RTMPChunkMuxer(compressesHeaders: true)
        let a = RTMPMessage(type: .audio, streamID: 1, timestamp: 0, payload: [1])
        let formats = try [
            a, RTMPMessage(type: .audio, streamID: 1, timestamp: 0, payload: [2]),  // delta 0 = last field (0): fmt 3
            RTMPMessage(type: .audio, streamID: 1, timestamp: 23, payload: [3]),  // fmt 2
            RTMPMessage(type: .audio, streamID: 1, timestamp: 46, payload: [4]),  // fmt 3
            RTMPMessage(type: .audio, streamID: 1, timestamp: 69, payload: [5, 6]),  // fmt 1 (length)
            RTMPMessage(type: .audio, streamID: 1, timestamp: 10, payload: [7, 8]),  // backwards: fmt 0
            RTMPMessage(type: .audio, streamID: 2, timestamp: 20, payload: [7, 8]),  // other stream: fmt 0
        ].map { try muxer.encode($0, chunkStreamID: 4)[0] >> 6 }
        #expect(formats == [0, 3, 2, 3, 1, 0, 0])
    }

    /// Payload bytes for a message of `length` at chunk size 128, with continuation headers.
    static func chunked(_ length: Int, csid: UInt8) -> [UInt8] {
        var out: [UInt8] = []
        var left = length
        while left > 0 {
            let n = min(128, left)
            out += [UInt8](repeating: 0x5A, count: n)
            left -= n
            if left > 0 { out.append(0xC0 | csid) }
        }
        return out
    }

    @Test("property: random messages, chunk sizes and header forms survive random splits (seeded)", arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func property(seed: UInt64) throws {
        var rng = SeededRNG(seed: seed)
        var muxer = RTMPChunkMuxer(compressesHeaders: seed % 2 == 0)
        var expected: [RTMPMessage] = []
        var bytes: [UInt8] = []
        var clocks: [UInt32: UInt32] = [:]
        var lasts: [UInt32: (message: RTMPMessage, delta: UInt32)] = [:]
        var formats = [0, 0, 0, 0]
        let csids: [UInt32] = [2, 3, 4, 5, 6, 8, 63, 64, 200, 319, 320, 4000, 65599]
        let types: [UInt8] = [8, 9, 18, 20, 17, 22, 99]
        for _ in 0..<400 {
            if Int.random(in: 0..<25, using: &rng) == 0 {
                let size = [1, 7, 64, 128, 1000, 4096, 65536].randomElement(using: &rng)!
                bytes += try muxer.setChunkSize(size)
                expected.append(.setChunkSize(UInt32(size)))
                continue
            }
            let csid = csids.randomElement(using: &rng)!
            var clock = clocks[csid] ?? UInt32.random(in: 0...1000, using: &rng)
            let message: RTMPMessage
            if let last = lasts[csid], Int.random(in: 0..<3, using: &rng) > 0 {
                // Like a steady audio stream: same type, length and delta, so fmt 2/3 headers are used.
                clock &+= last.delta
                message = RTMPMessage(type: last.message.type, streamID: last.message.streamID, timestamp: clock,
                                      payload: rng.bytes(last.message.payload.count))
            } else {
                switch Int.random(in: 0..<10, using: &rng) {
                case 0: clock &+= UInt32.random(in: 0x00FF_FFF0...0x0200_0000, using: &rng)  // extended deltas
                case 1: clock = UInt32.random(in: 0...UInt32.max, using: &rng)  // jumps, backwards too
                case 2: break  // same timestamp
                default: clock &+= [20, 21, 23, 33, 40].randomElement(using: &rng)!
                }
                let length = Int.random(in: 0..<20, using: &rng) == 0 ? Int.random(in: 0...20_000, using: &rng) : Int.random(in: 0...400, using: &rng)
                message = RTMPMessage(
                    type: RTMPMessageType(rawValue: types.randomElement(using: &rng)!), streamID: UInt32.random(in: 0...2, using: &rng),
                    timestamp: clock, payload: rng.bytes(length))
            }
            lasts[csid] = (message, clock &- (clocks[csid] ?? clock))
            clocks[csid] = clock
            expected.append(message)
            let chunk = try muxer.encode(message, chunkStreamID: csid)
            formats[Int(chunk[0] >> 6)] += 1
            bytes += chunk
        }
        if muxer.compressesHeaders {
            #expect(formats.allSatisfy { $0 > 10 }, "header formats used: \(formats)")
        }
        var random = RTMPChunkDemuxer()
        #expect(rtmpMessages(try feedRandomly(&random, bytes, maxPiece: 3000, using: &rng)) == expected)
        var small = RTMPChunkDemuxer()
        #expect(rtmpMessages(try feedRandomly(&small, bytes, maxPiece: 5, using: &rng)) == expected)
        var whole = RTMPChunkDemuxer()
        #expect(rtmpMessages(try whole.feed(bytes)) == expected)
        if seed == 1 {
            var bytewise = RTMPChunkDemuxer()
            #expect(rtmpMessages(try feedBytewise(&bytewise, bytes)) == expected)
        }
    }

    @Test("random garbage after a valid prefix ends in a typed error or more messages, never a crash (seeded)")
    func garbage() {
        var rng = SeededRNG(seed: 77)
        for _ in 0..<300 {
            var demuxer = RTMPChunkDemuxer(limits: .init(maxMessageLength: 1 << 16, maxChunkStreams: 8, maxBufferedBytes: 1 << 17))
            let garbage = rng.bytes(Int.random(in: 1...2000, using: &rng))
            do throws(RTMPError) {
                _ = try demuxer.feed(garbage)
            } catch {
                _ = error  // typed by the signature
            }
        }
    }
}

import Foundation
import PCastProtocol
import PCastRecording

extension FuzzTarget {
    /// Valid inputs built with our own encoders, so that the fuzzer starts past the first checks
    /// (`pcast-fuzz seed` writes them into the corpus; the tests replay them too).
    public var seeds: [[UInt8]] {
        switch self {
        case .rtp: return Self.rtpSeeds
        case .rtcp: return Self.rtcpSeeds
        case .rtmp: return Self.rtmpSeeds
        case .amf0: return Self.amf0Seeds
        case .signaling: return Self.signalingSeeds
        case .token: return Self.tokenSeeds
        case .fmp4: return Self.fmp4Seeds
        case .h264: return Self.h264Seeds
        case .av1: return Self.av1Seeds
        case .stun: return Self.stunSeeds
        case .sdp: return Self.sdpSeeds
        case .scalable: return Self.scalableSeeds
        }
    }

    private static var rtpSeeds: [[UInt8]] {
        [
            try? RTPPacket(marker: true, payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [4],
                           headerExtension: .oneByte([.init(id: 1, data: [1]), .init(id: 3, data: [0, 1])]),
                           payload: [0x7C, 0x85, 1, 2, 3], paddingLength: 2).serialized(),
            try? RTPPacket(payloadType: 111, sequenceNumber: 9, timestamp: 960, ssrc: 7,
                           headerExtension: .twoByte(appBits: 0, [.init(id: 9, data: [1, 2])]), payload: [0xFC, 0xFF, 0xFE]).serialized(),
        ].compactMap { $0 }
    }

    private static var rtcpSeeds: [[UInt8]] {
        [
            try? RTCPCompoundPacket(packets: [
                .senderReport(.init(ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5, reportBlocks: [.init(ssrc: 6)])),
                .sourceDescription(.init(chunks: [.init(ssrc: 1, items: [.init(type: 1, text: "cname")])])),
            ]).serialized(),
            try? RTCPCompoundPacket(packets: [
                .receiverReport(.init(ssrc: 1, reportBlocks: [.init(ssrc: 2)])),
                .genericNACK(.init(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [1, 5, 40])),
                .pictureLossIndication(.init(senderSSRC: 1, mediaSSRC: 2)),
                .receiverEstimatedMaxBitrate(.init(senderSSRC: 1, bitrate: 1_000_000, ssrcs: [2])),
                .goodbye(.init(ssrcs: [1], reason: Array("bye".utf8))),
            ]).serialized(),
        ].compactMap { $0 }
    }

    /// A client's side of a session: C0 C1 C2, then connect, createStream, publish, metadata,
    /// an AVC sequence header and an audio frame, in 128-byte chunks.
    private static var rtmpSeeds: [[UInt8]] {
        var client = [UInt8(3)] + [UInt8](repeating: 0, count: 1536) + [UInt8](repeating: 0x5A, count: 1536)
        var muxer = RTMPChunkMuxer()
        let commands: [(RTMPCommand, UInt32)] = [
            (RTMPCommand(name: "connect", transactionID: 1,
                         commandObject: .object(["app": "live", "type": "nonprivate", "tcUrl": "rtmp://127.0.0.1/live"])), 0),
            (RTMPCommand(name: "createStream", transactionID: 2), 0),
            (RTMPCommand(name: "publish", transactionID: 3, arguments: ["stream-key", "live"]), 1),
        ]
        for (command, stream) in commands {
            guard let message = try? RTMPMessage.command(command, streamID: stream),
                  let bytes = try? muxer.encode(message, chunkStreamID: 3) else { continue }
            client += bytes
        }
        let metadata = (try? AMF0.encode(["@setDataFrame", "onMetaData", .ecmaArray(["width": 320, "height": 240])])) ?? []
        let media = [
            RTMPMessage(type: .dataAMF0, streamID: 1, payload: metadata),
            RTMPMessage(type: .video, streamID: 1, payload: [0x17, 0, 0, 0, 0, 1, 0x42, 0xC0, 0x1E, 0xFF, 0xE1, 0, 4, 0x67, 0x42, 0xC0, 0x1E, 1, 0, 2, 0x68, 0xCE]),
            RTMPMessage(type: .audio, streamID: 1, timestamp: 20, payload: [0xAF, 1, 0x21, 0x10, 4, 0x60]),
        ]
        for message in media {
            if let bytes = try? muxer.encode(message, chunkStreamID: 4) { client += bytes }
        }
        // Video message bodies alone (the harness reads its bytes as one too): enhanced RTMP's
        // HEVC sequence start and frames, an enhanced AVC frame with a composition time.
        let videoBodies: [[UInt8]] = [
            [0x90, 0x68, 0x76, 0x63, 0x31, 1, 1, 0x60, 0, 0, 0, 0x90],
            [0xA1, 0x68, 0x76, 0x63, 0x31, 0, 0, 0x42, 0, 0, 0, 1, 0x26],
            [0xA1, 0x61, 0x76, 0x63, 0x31, 0xFF, 0xFF, 0xCE, 0, 0, 0, 1, 0x41],
            [0xD4, 0x68, 0x76, 0x63, 0x31, 2, 0, 9],
        ]
        return [client, Array(client.dropFirst(3073))] + videoBodies
    }

    private static var amf0Seeds: [[UInt8]] {
        [
            try? AMF0.encode(["connect", 1, .object(["app": "live", "flashVer": "FMLE/3.0", "videoCodecs": 252.0]), .null]),
            try? AMF0.encode([.strictArray([1, true, "x", .undefined]), .ecmaArray(["a": 1]), .date(millisecondsSince1970: 1e12, timeZone: 0)]),
        ].compactMap { $0 }
    }

    private static var signalingSeeds: [[UInt8]] {
        [
            #"{"v":1,"id":1,"type":"authenticate","payload":{"authToken":"DIGEST:e30=","sessionId":null}}"#,
            #"{"v":1,"id":2,"type":"publish","payload":{"streamToken":"DIGEST:e30=","tags":["a"],"tracks":[{"kind":"video","codec":"H264","payloadType":96,"clockRate":90000,"ssrc":1}]}}"#,
            #"{"v":1,"id":3,"type":"send-chat-message","payload":{"roomId":"r","text":"hello"}}"#,
            #"{"v":1,"id":4,"type":"keep-alive"}"#,
            #"{"v":1,"id":5,"type":"ok"}"#,
            #"{"v":1,"id":6,"type":"error","payload":{"status":"unauthorized","reason":"expired"}}"#,
        ].map { Array($0.utf8) }
    }

    private static var tokenSeeds: [[UInt8]] {
        // Signed with another secret than the harness checks with: valid in form, never verified.
        let builders = [
            DigestTokenBuilder().forAuthenticateOnly().expiresAt(milliseconds: 4_102_444_800_000),
            DigestTokenBuilder().forStreamingOnly().channelAlias("fuzz").capabilities(["streaming", "hd"]).expiresAt(milliseconds: 4_102_444_800_000),
            DigestTokenBuilder().forPublishingOnly().applyTags(["a", "b"]).streamName("s").expiresAt(milliseconds: 1),
        ]
        return builders.compactMap { try? $0.encode(applicationId: "fuzz-app", secret: "another-secret") }.map { Array($0.utf8) }
    }

    private static var fmp4Seeds: [[UInt8]] {
        let sps: [UInt8] = [0x67, 0x64, 0x00, 0x1F, 0xAC, 0xD9], pps: [UInt8] = [0x68, 0xEB, 0xE3, 0xCB]
        let tracks = [
            FMP4Track(id: 1, timescale: 90_000, codec: .h264(width: 320, height: 240, sps: sps, pps: pps)),
            FMP4Track(id: 2, timescale: 48_000, codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 312)),
        ]
        func run(_ id: UInt32, from start: UInt64, count: Int, duration: UInt32) -> FMP4TrackRun {
            FMP4TrackRun(trackID: id, samples: (0..<count).map { index in
                FMP4Sample(decodeTime: start + UInt64(index) * UInt64(duration), duration: duration, isSync: index == 0,
                           data: [UInt8](repeating: UInt8(index + 1), count: 12))
            })
        }
        guard let initSegment = try? FMP4.initSegment(tracks: tracks).bytes,
              let first = try? FMP4.fragment(sequence: 1, runs: [run(1, from: 0, count: 3, duration: 3000), run(2, from: 0, count: 4, duration: 960)]),
              let second = try? FMP4.fragment(sequence: 2, runs: [run(1, from: 9000, count: 2, duration: 3000)])
        else { return [] }
        // Whole, torn in the second fragment, and zero-filled after the first.
        return [initSegment + first + second, initSegment + first + second.prefix(second.count / 2),
                initSegment + first + [UInt8](repeating: 0, count: 64)]
    }

    private static var scalableSeeds: [[UInt8]] {
        // An L1T3 keyframe's dependency descriptor (its structure) and a later frame's, and a
        // VP9 k-SVC keyframe's descriptor with its scalability structure.
        let structure: [UInt8] = [0x80, 0x00, 0x01, 0x80, 0x02, 0x14, 0xEA, 0xA8, 0x60, 0x41,
                                  0x4D, 0x14, 0x12, 0x20, 0x84, 0x27, 0x02, 0x7F, 0x01, 0xDF]
        return [
            [UInt8(structure.count)] + structure + [0xC2, 0x00, 0x03],
            [0xAA, 0x92, 0x34, 0x00, 0x05, 0x58, 0x00, 0xF0, 0x00, 0x87, 0x01, 0xE0, 0x01, 0x0E, 0x03, 0xC0, 0x02, 0x1C, 0x01, 0x04, 0x01, 0x82],
            [0xFD, 0x21, 0x53, 0x03, 0x04, 0x82],
        ]
    }

    private static var h264Seeds: [[UInt8]] {
        [
            [0, 0, 0, 1, 0x67, 0x42, 0xC0, 0x1E, 0, 0, 0, 1, 0x68, 0xCE, 0x3C, 0x80, 0, 0, 1, 0x65, 0x88, 0x84],
            [0x7C, 0x85, 0x88, 0x84],       // FU-A start of an IDR slice
            [0x78, 0, 4, 0x67, 0x42, 0xC0, 0x1E, 0, 2, 0x68, 0xCE],   // STAP-A with SPS and PPS
            [0x80, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 7, 0x7C, 0x85, 0x88],   // a whole RTP packet
            [0x90, 0xF0, 0x85, 0x01, 0x07, 0x20, 0x10, 0x02, 0x00],   // VP8: the longest descriptor, a key frame
            [0xA8, 0x85, 0x01, 0x20, 0x00],                           // VP9: picture id, layer indices
        ]
    }

    private static var av1Seeds: [[UInt8]] {
        // A key unit (delimiter, sequence header, key frame) and an inter unit with an extension
        // byte, each after a limit byte; and a run of payloads (a key unit's single packet).
        let key: [UInt8] = [0x12, 0x00, 0x0A, 0x05, 0x00, 0x00, 0x00, 0x0C, 0xC4, 0x32, 0x04, 0x10, 0x01, 0x02, 0x03]
        let inter: [UInt8] = [0x12, 0x00, 0x36, 0x28, 0x03, 0x30, 0x07, 0x08]
        let run = (try? AV1Payload.packetize(temporalUnit: key, maximumPayloadSize: 1_200).first?.payload) ?? []
        return [[0x00] + key, [0x03] + inter, [0x01] + run]
    }

    private static var stunSeeds: [[UInt8]] {
        let transaction: [UInt8] = Array(0..<12)
        var check = STUNMessage(kind: .request, transactionID: transaction)
        check.username = "relayufrag:peerufrag"
        check.priority = 1_845_501_695
        check.iceControlling = 0x1122_3344_5566_7788
        check.useCandidate = true
        var success = STUNMessage(kind: .successResponse, transactionID: transaction)
        success.xorMappedAddress = STUNAddress(address: [127, 0, 0, 1], port: 50_000)
        var ipv6 = STUNMessage(kind: .successResponse, transactionID: transaction)
        ipv6.xorMappedAddress = STUNAddress(address: [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 7, count: 12), port: 9)
        var refusal = STUNMessage(kind: .errorResponse, transactionID: transaction)
        refusal.errorCode = (401, "Unauthorized")
        let key = Array("fuzz-password".utf8)
        return [check.encoded(integrityKey: key), success.encoded(integrityKey: key), ipv6.encoded(),
                refusal.encoded(), STUNMessage(kind: .indication, transactionID: transaction).encoded(fingerprint: false)]
    }

    private static var sdpSeeds: [[UInt8]] {
        let fingerprint = [String](repeating: "C5", count: 32).joined(separator: ":")
        let section = { (kind: String, mid: String, format: String, map: String, fmtp: String) in
            "m=\(kind) 9 UDP/TLS/RTP/SAVPF \(format)\r\nc=IN IP4 0.0.0.0\r\na=mid:\(mid)\r\na=ice-ufrag:abcd\r\n"
                + "a=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=fingerprint:sha-256 \(fingerprint)\r\na=setup:actpass\r\n"
                + "a=sendrecv\r\na=rtcp-mux\r\na=rtpmap:\(format) \(map)\r\na=fmtp:\(format) \(fmtp)\r\n"
                + "a=rtcp-fb:\(format) nack pli\r\na=extmap:1 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=ssrc:7 cname:x\r\n"
        }
        let head = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n"
        let both = head + section("audio", "0", "111", "opus/48000/2", "minptime=10;useinbandfec=1")
            + section("video", "1", "102", "H264/90000", "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f")
        let audio = head + section("audio", "0", "111", "opus/48000/2", "useinbandfec=1")
        return [Array(both.utf8), Array(audio.utf8), Array(both.replacingOccurrences(of: "sendrecv", with: "recvonly").utf8)]
    }
}

import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import Testing

/// Where VP8 and VP9 keyframes start in RTP, checked against GStreamer's own encoders and
/// payloaders (peers we did not write), and the descriptors' edge cases by hand.
@Suite("VP8 and VP9 RTP payloads: where keyframes start")
struct VideoPayloadTests {
    /// Encodes 12 frames with a keyframe every 4, payloads them at 1,200 bytes, and returns every
    /// RTP packet with whether its frame was a keyframe and starts there (the payloader's first
    /// packet of a frame carries the frame's timestamp first).
    static func packets(_ codec: VideoCodec) async throws -> [(bytes: [UInt8], keyframeStart: Bool)] {
        let encoder = codec.encoder(name: "e", kilobitsPerSecond: 2000, keyframeInterval: 4, burstMilliseconds: 600)
        let payloader = codec.payloader(name: "p", payloadType: "96", ssrc: "1", timestampOffset: "0")
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=12 pattern=snow ! video/x-raw,format=I420,width=640,height=360,framerate=30/1 \
            ! \(encoder) ! tee name=t \
            t. ! queue ! appsink name=frames sync=false \
            t. ! queue ! \(payloader) ! appsink name=out sync=false
            """)
        let frames = try pipeline.appSink(named: "frames").samples(limit: 1_000, dropping: .dropNewest)
        let rtp = try await runCollecting(pipeline)
        var keyframes: [Bool] = []
        for await frame in frames { keyframes.append(frame.buffer.isKeyframe) }
        #expect(keyframes.count == 12 && keyframes.filter { $0 }.count == 3, "frames \(keyframes)")
        // Which packet starts which frame: the first packet of each RTP timestamp.
        var result: [(bytes: [UInt8], keyframeStart: Bool)] = []
        var timestamps: [UInt32] = []
        for sample in rtp {
            let bytes = sample.buffer.bytes
            let timestamp = UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7])
            var starts = false
            if timestamps.last != timestamp {
                timestamps.append(timestamp)
                starts = keyframes.indices.contains(timestamps.count - 1) && keyframes[timestamps.count - 1]
            }
            result.append((bytes, starts))
        }
        #expect(timestamps.count == 12, "\(timestamps.count) frames payloaded")
        return result
    }

    @Test("from vp8enc through rtpvp8pay and vp9enc through rtpvp9pay, exactly the first packet of each keyframe (3 of 12 frames) is where a keyframe starts; no other packet is",
          arguments: [VideoCodec.vp8, .vp9])
    func gstreamerPayloads(codec: VideoCodec) async throws {
        let packets = try await Self.packets(codec)
        #expect(packets.count > 24, "\(packets.count) packets: frames of more than one packet")
        for (index, packet) in packets.enumerated() {
            let found = packet.bytes.withUnsafeBytes { VideoCodec.packetStartsKeyframe(codec, $0) }
            #expect(found == packet.keyframeStart, "packet \(index): keyframe start \(packet.keyframeStart), found \(found)")
        }
    }

    @Test("VP8 descriptors by hand: a keyframe needs S, partition 0 and a clear P bit in the frame tag; 7- and 15-bit picture ids, TL0PICIDX and TID/KEYIDX are skipped; a descriptor its flags make longer than the payload, or nothing after it, is no keyframe")
    func vp8Descriptors() {
        func starts(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { VP8Payload.startsKeyframe($0) } }
        func length(_ bytes: [UInt8]) -> Int? { bytes.withUnsafeBytes { VP8Payload.descriptorLength($0) } }
        #expect(starts([0x10, 0x10, 0x02, 0x00]), "S, PID 0, frame tag P = 0")
        #expect(!starts([0x10, 0x11, 0x02, 0x00]), "P = 1: an inter frame")
        #expect(!starts([0x00, 0x10]), "not the start of a partition")
        #expect(!starts([0x11, 0x10]), "partition 1")
        #expect(starts([0x90, 0x80, 0x05, 0x10]), "X, I with a 7-bit picture id")
        #expect(starts([0x90, 0x80, 0x85, 0x01, 0x10]), "X, I with a 15-bit picture id")
        #expect(length([0x90, 0xF0, 0x85, 0x01, 0x07, 0x20, 0x10]) == 6, "I (15 bits), L, T and K: the longest descriptor")
        #expect(length([0x90, 0x40, 0x07]) == 3, "L alone")
        #expect(length([0x90]) == nil && length([0x90, 0x80]) == nil && length([0x90, 0x80, 0x85]) == nil, "truncated")
        #expect(!starts([0x10]) && !starts([]), "nothing after the descriptor")
    }

    @Test("VP9 descriptors by hand: a keyframe starts where B is set and P is clear, on spatial layer 0 when layer indices are present (after a 7- or 15-bit picture id); a truncated descriptor is no keyframe")
    func vp9Descriptors() {
        func starts(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { VP9Payload.startsKeyframe($0) } }
        #expect(starts([0x08, 0x00]), "B, not predicted")
        #expect(!starts([0x48, 0x00]), "P: inter-picture predicted")
        #expect(!starts([0x04, 0x00]), "not the start of a frame")
        #expect(starts([0xA8, 0x05, 0x00, 0x00]), "I (7 bits) and L, spatial layer 0")
        #expect(!starts([0xA8, 0x05, 0x02, 0x00]), "spatial layer 1")
        #expect(starts([0xA8, 0x85, 0x01, 0x20, 0x00]), "I (15 bits) and L with temporal layer 1, spatial layer 0")
        #expect(!starts([0xA8]) && !starts([0xA8, 0x85]) && !starts([0x28]) && !starts([]), "truncated")
    }
}

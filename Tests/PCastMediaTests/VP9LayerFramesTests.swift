import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import Testing

/// GStreamer's VP9 depayloader joins a scalable picture's layer frames without a superframe
/// index; the probes a recording adds (`VP9LayerFrames`) give it one.
@Suite("VP9 layer frames out of rtpvp9depay become superframes")
struct VP9LayerFramesTests {
    /// An RTP packet of one layer frame's part: k-SVC as Chromium sends it (inter-layer
    /// dependency at a keyframe's upper layers only), the marker on the picture's last packet.
    static func packet(picture: Int, spatial: Int, part: Int, of parts: Int, key: Bool, marker: Bool, bytes: Int, sequence: UInt16) throws -> [UInt8] {
        var flags: UInt8 = 0x80 | 0x20
        if !key { flags |= 0x40 }
        if part == 0 { flags |= 0x08 }
        if part == parts - 1 { flags |= 0x04 }
        let layers = UInt8(spatial << 1) | (key && spatial > 0 ? 1 : 0)
        let payload = [flags, UInt8(picture), layers, 0] + [UInt8](repeating: UInt8(0x10 * (spatial + 1)), count: bytes)
        return try RTPPacket(marker: marker, payloadType: 98, sequenceNumber: sequence, timestamp: UInt32(picture * 3000), ssrc: 7,
                             payload: payload[...]).serialized()
    }

    @Test("a keyframe picture of three layer frames (2, 1 and 3 packets) comes out as one buffer of the three with an index of their sizes; a picture of the top layer alone (what an uncapped viewer gets between keyframes) as it came, without one")
    func superframes() async throws {
        let pipeline = try Pipeline(description: """
            appsrc name=in format=time caps="application/x-rtp,media=video,clock-rate=90000,encoding-name=VP9,payload=98" \
            ! rtpvp9depay name=video-depay ! appsink name=out sync=false
            """)
        let probes = try VP9LayerFrames.attach(to: try pipeline.element(named: "video-depay"))
        #expect(probes.count == 2)
        let source = try pipeline.appSource(named: "in")
        let samples = try pipeline.appSink(named: "out").samples(limit: 100, dropping: .dropNewest)
        try await pipeline.play(timeout: nil)
        var sequence: UInt16 = 100
        var packets: [[UInt8]] = []
        for (spatial, parts, bytes) in [(0, 2, 150), (1, 1, 400), (2, 3, 1_000)] {
            for part in 0..<parts {
                packets.append(try Self.packet(picture: 0, spatial: spatial, part: part, of: parts, key: true,
                                               marker: spatial == 2 && part == parts - 1, bytes: bytes, sequence: sequence))
                sequence += 1
            }
        }
        for part in 0..<3 {
            packets.append(try Self.packet(picture: 1, spatial: 2, part: part, of: 3, key: false, marker: part == 2, bytes: 900, sequence: sequence))
            sequence += 1
        }
        for (index, packet) in packets.enumerated() {
            let buffer = Buffer(bytes: packet)
            buffer.presentationTimestamp = .milliseconds(Int64(index))
            try await source.push(buffer)
        }
        try source.endOfStream()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        await pipeline.stop()
        var outputs: [[UInt8]] = []
        for await sample in samples { outputs.append(sample.buffer.bytes) }
        try #require(outputs.count == 2, "\(outputs.map(\.count))")
        let frames = VP9Superframe.frames(in: outputs[0])
        #expect(frames.map(\.count) == [300, 400, 3_000], "\(frames.map(\.count))")
        let fills: [UInt8] = [0x10, 0x20, 0x30]
        let layered = zip(frames, fills).allSatisfy { frame, fill in frame.allSatisfy { $0 == fill } }
        #expect(layered, "each layer frame's bytes in order")
        let indexed: Int = 3_700 + 2 + 3 * 2
        #expect(outputs[0].count == indexed, "two-byte sizes, three frames")
        #expect(outputs[1].count == 2_700 && VP9Superframe.frames(in: outputs[1]).count == 1, "one frame: no index")
        withExtendedLifetime(probes) {}
    }
}

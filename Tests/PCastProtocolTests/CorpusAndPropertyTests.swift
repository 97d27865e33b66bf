import PCastTestSupport
import Foundation
@testable import PCastProtocol
import Testing

/// Parses `bytes` as RTP; if accepted, checks parse → build → parse equality and that the
/// allocation-free layout agrees. Returns whether it was accepted.
@discardableResult
private func checkRTP(_ bytes: [UInt8], _ name: String) -> Bool {
    let packet: RTPPacket
    do {
        packet = try RTPPacket(parsing: bytes)
    } catch {
        // Rejected with a typed error (the signature guarantees RTPError); the layout must agree.
        #expect((try? RTPPacketLayout(parsing: bytes)) == nil, "\(name): layout accepted what the packet parser rejected")
        return false
    }
    #expect((try? RTPPacketLayout(parsing: bytes)) != nil, "\(name): layout rejected an accepted packet")
    do {
        let rebuilt = try packet.serialized()
        #expect(try RTPPacket(parsing: rebuilt) == packet, "\(name): RTP round trip changed the packet")
    } catch {
        Issue.record("\(name): accepted RTP packet could not be rebuilt: \(error)")
    }
    return true
}

@discardableResult
private func checkRTCP(_ bytes: [UInt8], _ name: String) -> Bool {
    let compound: RTCPCompoundPacket
    do {
        compound = try RTCPCompoundPacket(parsing: bytes)
    } catch {
        return false
    }
    do {
        let rebuilt = try compound.serialized()
        #expect(try RTCPCompoundPacket(parsing: rebuilt) == compound, "\(name): RTCP round trip changed the packet")
    } catch {
        Issue.record("\(name): accepted RTCP packet could not be rebuilt: \(error)")
    }
    return true
}

@Suite("Corpora and properties")
struct CorpusAndPropertyTests {
    @Test("every RTP/RTCP file of our corpus is accepted and round-trips, or is rejected with a typed error; the valid ones named are accepted")
    func corpora() throws {
        try replay(corporaDirectory(), minimumRTP: 30, minimumRTCP: 80, minimumHostile: 30,
                   goodRTCP: ["rtcp/fir", "rtcp/nacks", "rtcp/pli", "rtcp/remb", "rtcp/rr-remb", "rtcp/rr-sdes-bye", "rtcp/rr",
                              "rtcp/sr-sdes", "rtcp/twcc-feedback", "rtcp/sdes-six-chunks", "rtcp/compound-everything"],
                   goodRTP: ["rtp/opus-audio-level-ext", "rtp/video-transport-cc-ext", "rtp/video-two-byte-ext", "rtp/h264-fu-a-start",
                             "rtp/padding", "rtp/csrcs", "rtp/empty-payload"])
    }

    /// Feeds every file under `root` (and its prefixes) to both parsers; files named in
    /// `goodRTCP` / `goodRTP` must be accepted, not merely survived.
    private func replay(_ root: URL, minimumRTP: Int, minimumRTCP: Int, minimumHostile: Int, goodRTCP: [String], goodRTP: [String]) throws {
        let rtpFiles = try corpusFiles(in: root.appendingPathComponent("rtp"))
        let rtcpFiles = try corpusFiles(in: root.appendingPathComponent("rtcp"))
        let all = rtpFiles + rtcpFiles
        #expect(rtpFiles.count >= minimumRTP && rtcpFiles.count >= minimumRTCP, "corpora look incomplete: \(rtpFiles.count) RTP, \(rtcpFiles.count) RTCP files")
        let hostile = all.filter { $0.lastPathComponent.contains("crash") || $0.lastPathComponent.contains("timeout") }
        #expect(hostile.count >= minimumHostile, "expected the crash/timeout reproducers, found \(hostile.count)")

        var acceptedRTP: Set<String> = [], acceptedRTCP: Set<String> = []
        for url in all {
            let bytes = Array(try Data(contentsOf: url))
            let name = url.path.replacingOccurrences(of: root.path + "/", with: "")
            // Both parsers see every file: a relay may be handed either on a muxed port.
            if checkRTP(bytes, name) { acceptedRTP.insert(name) }
            if checkRTCP(bytes, name) { acceptedRTCP.insert(name) }
            // Truncations of each file too: every prefix must also be handled cleanly.
            for cut in stride(from: 0, to: min(bytes.count, 256), by: 7) {
                checkRTP(Array(bytes[..<cut]), name + "[..<\(cut)]")
                checkRTCP(Array(bytes[..<cut]), name + "[..<\(cut)]")
            }
        }
        for name in goodRTCP { #expect(acceptedRTCP.contains(name), "\(name) should parse as RTCP") }
        for name in goodRTP { #expect(acceptedRTP.contains(name), "\(name) should parse as RTP") }
        print("corpora \(root.path): \(all.count) files (\(hostile.count) crash/timeout), RTP accepted \(acceptedRTP.count), RTCP accepted \(acceptedRTCP.count)")
    }

    @Test("random bytes never crash the parsers (seeded property test)")
    func randomBytes() {
        var rng = SeededRNG(seed: 0xC0FF_EE00)
        for _ in 0..<3000 {
            let bytes = rng.bytes(Int.random(in: 0...200, using: &rng))
            checkRTP(bytes, "random")
            checkRTCP(bytes, "random")
            _ = RTPPacket.isRTCP(bytes)
        }
    }

    @Test("mutations of valid packets never crash the parsers and accepted ones round-trip")
    func mutatedPackets() throws {
        let seeds: [[UInt8]] = [
            try RTPPacket(marker: true, payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [4, 5],
                          headerExtension: .oneByte([.init(id: 1, data: [1]), .init(id: 2, data: [1, 2, 3])]),
                          payload: [1, 2, 3, 4, 5, 6], paddingLength: 2).serialized(),
            try RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3,
                          headerExtension: .twoByte(appBits: 0, [.init(id: 9, data: [1, 2])]), payload: [7]).serialized(),
            try RTCPCompoundPacket(packets: [
                .senderReport(.init(ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5, reportBlocks: [.init(ssrc: 6)])),
                .sourceDescription(.init(chunks: [.init(ssrc: 1, items: [.init(type: 1, text: "cname")])])),
                .genericNACK(.init(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [1, 5, 40])),
                .receiverEstimatedMaxBitrate(.init(senderSSRC: 1, bitrate: 1_000_000, ssrcs: [2])),
                .goodbye(.init(ssrcs: [1], reason: Array("x".utf8))),
            ]).serialized(),
        ]
        var rng = SeededRNG(seed: 0xBADC_0DE)
        var accepted = 0
        for i in 0..<6000 {
            var bytes = seeds[i % seeds.count]
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let j = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: bytes[j] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes[j] ^= 1 << UInt8.random(in: 0...7, using: &rng)
                case 2: bytes.removeSubrange(j...)
                default: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: j)
                }
                if bytes.isEmpty { break }
            }
            if checkRTP(bytes, "mutated #\(i)") { accepted += 1 }
            if checkRTCP(bytes, "mutated #\(i)") { accepted += 1 }
        }
        // The mutations must reach past the header checks to mean anything.
        #expect(accepted > 100)
    }
}

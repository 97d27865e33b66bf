import Benchmark
import Foundation
import GStreamer
import PCastProtocol
@_spi(Benchmarks) import PCastRelay
import SRTP

// The per-packet and per-frame paths of the platform, one operation per benchmark iteration (the
// framework scales the count): what the relay does for each datagram, what a viewer's token costs
// to check, what the frame-ready API's `read(format: .bgra)` costs per 720p frame.

/// A 1,200-byte H.264 RTP packet (FU-A middle fragment) with one transport-wide sequence extension.
func videoPacket(sequence: UInt16 = 1) -> [UInt8] {
    // swiftlint:disable:next force_try
    try! RTPPacket(marker: false, payloadType: 96, sequenceNumber: sequence, timestamp: 90_000, ssrc: RouterWorkload.videoSSRC,
                   headerExtension: .oneByte([.init(id: 3, data: [0x01, 0x02])]),
                   payload: [0x7C, 0x05] + [UInt8](repeating: 0xAB, count: 1_200 - 12 - 8 - 2)).serialized()
}

/// What a subscriber's RTCP looks like: a receiver report, a REMB and a NACK in one compound.
func subscriberRTCP() -> [UInt8] {
    // swiftlint:disable:next force_try
    try! RTCPCompoundPacket(packets: [
        .receiverReport(.init(ssrc: 0x5000_0001, reportBlocks: [.init(ssrc: RouterWorkload.videoSSRC)])),
        .receiverEstimatedMaxBitrate(.init(senderSSRC: 0x5000_0001, bitrate: 2_500_000, ssrcs: [RouterWorkload.videoSSRC])),
        .genericNACK(.init(senderSSRC: 0x5000_0001, mediaSSRC: RouterWorkload.videoSSRC, lostSequenceNumbers: [10, 11, 14, 40])),
    ]).serialized()
}

let benchmarks: @Sendable () -> Void = {
    // A thousand operations per measured iteration (the figures are per operation), 3 s each.
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .throughput, .mallocCountTotal], scalingFactor: .kilo,
                                           maxDuration: .seconds(3), maxIterations: 10_000)

    Benchmark("RTP parse (header layout, no allocation)") { benchmark in
        let packet = videoPacket()
        for _ in benchmark.scaledIterations {
            packet.withUnsafeBytes { blackHole(try? RTPPacketLayout(parsing: $0)) }
        }
    }

    Benchmark("RTP parse (RTPPacket)") { benchmark in
        let packet = videoPacket()
        for _ in benchmark.scaledIterations { blackHole(try? RTPPacket(parsing: packet)) }
    }

    Benchmark("RTCP parse (RR + REMB + NACK compound)") { benchmark in
        let packet = subscriberRTCP()
        for _ in benchmark.scaledIterations { blackHole(try? RTCPCompoundPacket(parsing: packet)) }
    }

    for profile in [SRTPProfile.aeadAES128GCM, .aes128CMHMACSHA1_80] {
        Benchmark("SRTP protect 1,200 B (\(profile.rawValue))") { benchmark in
            let key = SRTPKey.random(for: profile)
            guard let sender = try? SRTPSession(key: key, direction: .outbound) else { return benchmark.error("SRTP session") }
            let plain = videoPacket()
            var buffer = [UInt8](repeating: 0, count: plain.count + SRTPSession.maximumOverhead)
            var sequence: UInt16 = 0
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                sequence &+= 1
                buffer.withUnsafeMutableBytes { raw in
                    raw.copyMemory(from: UnsafeRawBufferPointer(start: plain, count: plain.count))
                    raw[2] = UInt8(sequence >> 8)
                    raw[3] = UInt8(sequence & 0xFF)
                    blackHole(try? sender.protect(raw, length: plain.count))
                }
            }
        }

        Benchmark("SRTP unprotect 1,200 B (\(profile.rawValue))") { benchmark in
            let key = SRTPKey.random(for: profile)
            guard let sender = try? SRTPSession(key: key, direction: .outbound),
                  let receiver = try? SRTPSession(key: key, direction: .inbound)
            else { return benchmark.error("SRTP session") }
            // Distinct packets (the replay window refuses a repeat), protected before the clock starts.
            let count = benchmark.scaledIterations.count
            var packets: [[UInt8]] = []
            packets.reserveCapacity(count)
            for index in 0..<count {
                var packet = videoPacket(sequence: UInt16(truncatingIfNeeded: index))
                try? sender.protect(&packet)
                packets.append(packet)
            }
            benchmark.startMeasurement()
            for index in benchmark.scaledIterations {
                blackHole(try? receiver.unprotect(&packets[index]))
            }
        }
    }

    for subscribers in [1, 100] {
        Benchmark("Relay router: one video packet to \(subscribers) subscriber(s)") { benchmark in
            var workload = RouterWorkload(subscribers: subscribers)
            var packets = (0..<256).map { videoPacket(sequence: UInt16($0)) }
            var now: UInt64 = 1_000_000
            var sequence: UInt16 = 256
            benchmark.startMeasurement()
            for index in benchmark.scaledIterations {
                let slot = index & 255
                sequence &+= 1
                packets[slot][2] = UInt8(sequence >> 8)
                packets[slot][3] = UInt8(sequence & 0xFF)
                now &+= 400_000
                blackHole(workload.forward(packets[slot], now: now))
            }
        }
    }

    Benchmark("Token verify (stream token, HMAC-SHA-512)") { benchmark in
        guard let token = try? DigestTokenBuilder().forStreamingOnly().channelAlias("bench").expiresIn(seconds: 3_600)
            .encode(applicationId: "bench-app", secret: "bench-secret")
        else { return benchmark.error("token") }
        for _ in benchmark.scaledIterations {
            blackHole(DigestToken.verify(token, applicationId: "bench-app", secret: "bench-secret"))
        }
    }

    Benchmark("Pixel converter 720p I420 → BGRA (frame-ready read)", configuration: .init(metrics: [.wallClock, .throughput, .mallocCountTotal], scalingFactor: .one, maxDuration: .seconds(3), maxIterations: 2_000)) { benchmark in
        do {
            try GStreamerRuntime.initialize()
            let converter = try VideoConverter(from: Caps("video/x-raw,format=I420,width=1280,height=720,framerate=30/1"),
                                               to: Caps("video/x-raw,format=BGRA,width=1280,height=720,framerate=30/1"))
            guard converter.usesFastPath else { return benchmark.error("the converter did not take our fast path") }
            let frame = Buffer(bytes: (0..<(1280 * 720 * 3 / 2)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { blackHole(try converter.convert(frame)) }
        } catch {
            benchmark.error("\(error)")
        }
    }
}

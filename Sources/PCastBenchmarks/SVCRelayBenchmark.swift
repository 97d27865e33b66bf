import Dispatch
import PCastProtocol
@_spi(Benchmarks) import PCastRelay
import SRTP

/// The relay's CPU per viewer for a scalable stream whose viewers are sent different layers,
/// against forwarding one stream as it is: the router's decisions (``RouterWorkload``, as the
/// relay's I/O thread makes them) and an SRTP protect (AES-GCM, one session per viewer) for each
/// packet sent, over the same seconds of 30 fps video.
///
/// The scalable stream is VP9 in L3T3_KEY as Chromium sends it (each picture's spatial layers in
/// 1, 2 and 4 packets; a keyframe every 2 s); half its viewers limit themselves to 300 kbit/s
/// (the relay moves them to the layer that fits, S1), half take everything (the top layer alone
/// between keyframes). Plain forwarding sends the same packets, every one to every viewer.
public struct SVCRelayBenchmark {
    public let viewers: Int
    public let seconds: Int

    public init(viewers: Int = 100, seconds: Int = 10) {
        self.viewers = viewers
        self.seconds = seconds
    }

    public struct Result: Codable {
        /// "plain forwarding" or "SVC layer dropping".
        public let mode: String
        public let viewers: Int
        /// CPU microseconds per viewer per second of video (best of three runs).
        public let microsecondsPerViewerSecond: Double
        /// Of which the router's decisions.
        public let routerMicrosecondsPerViewerSecond: Double
        /// Packets sent per viewer per second, and the video bitrate a viewer gets on average.
        public let packetsPerViewerSecond: Double
        public let kilobitsPerViewer: Double
    }

    public func run() throws -> [Result] {
        let pictures = Self.pictures(seconds: seconds)
        return try [false, true].map { scalable in try measure(pictures, scalable: scalable) }
    }

    /// One picture's packets (each with its arrival), 33 ms apart.
    static func pictures(seconds: Int) -> [[(packet: [UInt8], now: UInt64)]] {
        (0..<(seconds * 30)).map { picture in
            let key = picture % 60 == 0
            let temporal = [0, 2, 1, 2][picture % 4]
            let switchingUp = [false, true, true, false][picture % 4]
            let now = UInt64(picture) * 33_333_333
            var packets: [(packet: [UInt8], now: UInt64)] = []
            var sequence = UInt16(truncatingIfNeeded: picture * 7)
            for (spatial, count) in [1, 2, 4].enumerated() {
                for part in 0..<count {
                    var flags: UInt8 = 0x80 | 0x20
                    if !key { flags |= 0x40 }
                    if part == 0 { flags |= 0x08 }
                    if part == count - 1 { flags |= 0x04 }
                    if !key || spatial == 2 { flags |= 0x01 }
                    let layers = UInt8(temporal << 5) | (switchingUp ? 0x10 : 0) | UInt8(spatial << 1) | (key && spatial > 0 ? 1 : 0)
                    let payload = [flags, UInt8(picture & 0x7F), layers, UInt8(picture / 4 & 0xFF)]
                        + [UInt8](repeating: 0x5A, count: (spatial == 0 ? 400 : 1_150) - 4)
                    // swiftlint:disable:next force_try
                    let packet = try! RTPPacket(marker: spatial == 2 && part == count - 1, payloadType: 96, sequenceNumber: sequence,
                                                timestamp: UInt32(truncatingIfNeeded: picture * 3000), ssrc: RouterWorkload.videoSSRC,
                                                payload: payload[...]).serialized()
                    packets.append((packet, now))
                    sequence &+= 1
                }
            }
            return packets
        }
    }

    private func measure(_ pictures: [[(packet: [UInt8], now: UInt64)]], scalable: Bool) throws -> Result {
        let sessions = try (0..<viewers).map { _ in try SRTPSession(key: SRTPKey.random(for: .aeadAES128GCM), direction: .outbound) }
        var slot = [UInt8](repeating: 0, count: 1_500 + SRTPSession.maximumOverhead)
        var best = (total: Double.infinity, router: Double.infinity)
        var sent = 0, bytes = 0
        for _ in 0..<3 {
            // The reference: the same packets under a track the relay reads no layers of (an
            // H.264 label, whose keyframe reading finds no parameter sets in VP9 payloads), so
            // every viewer is sent every packet as plain forwarding does.
            var workload = RouterWorkload(subscribers: viewers, videoCodec: scalable ? "VP9" : "H264")
            if scalable {
                for index in stride(from: 0, to: viewers, by: 2) { workload.limit(subscriber: index, bitsPerSecond: 300_000, now: 0) }
            }
            var total: UInt64 = 0, protecting: UInt64 = 0
            sent = 0
            bytes = 0
            for picture in pictures {
                for (packet, now) in picture {
                    let start = DispatchTime.now().uptimeNanoseconds
                    var sealing: UInt64 = 0
                    _ = workload.forward(packet, now: now) { viewer in
                        let sealStart = DispatchTime.now().uptimeNanoseconds
                        slot.withUnsafeMutableBytes { raw in
                            raw.copyMemory(from: UnsafeRawBufferPointer(start: packet, count: packet.count))
                            _ = try? sessions[viewer].protect(raw, length: packet.count)
                        }
                        sealing += DispatchTime.now().uptimeNanoseconds - sealStart
                        sent += 1
                        bytes += packet.count
                    }
                    total += DispatchTime.now().uptimeNanoseconds - start
                    protecting += sealing
                }
                if let now = picture.first?.now { workload.tick(now: now) }
            }
            let perViewerSecond = Double(viewers * pictures.count) / 30
            best.total = min(best.total, Double(total) / 1_000 / perViewerSecond)
            best.router = min(best.router, Double(total - protecting) / 1_000 / perViewerSecond)
        }
        let viewerSeconds = Double(viewers * pictures.count) / 30
        return Result(mode: scalable ? "SVC layer dropping" : "plain forwarding", viewers: viewers,
                      microsecondsPerViewerSecond: best.total, routerMicrosecondsPerViewerSecond: best.router,
                      packetsPerViewerSecond: Double(sent) / viewerSeconds, kilobitsPerViewer: Double(bytes) * 8 / viewerSeconds / 1_000)
    }
}

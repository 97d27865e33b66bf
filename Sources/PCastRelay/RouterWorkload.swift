import PCastProtocol

/// The relay router's per-packet decisions without sockets or crypto, for the micro-benchmarks in
/// `Benchmarks/` and `pcast-bench svc` (other modules, so `package` access does not reach it): a
/// router with one stream (Opus + H.264, or Opus + VP9 whose packets say their layers) and
/// `subscribers` reachable subscribers, fed plain RTP packets as the relay's I/O thread feeds it —
/// route lookup by SSRC, cache and reception statistics, a scalable packet's layers read once,
/// then one forwarding decision per subscriber. Not part of the SDK: only an
/// `@_spi(Benchmarks) import` sees it.
@_spi(Benchmarks)
public struct RouterWorkload {
    public static let audioSSRC: UInt32 = 0xA0D1_0000
    public static let videoSSRC: UInt32 = 0x71DE_0000

    private var router: RelayRouter<Int>
    private var gated: [Int] = []

    /// `videoCodec` "H264", or "VP9" / "AV1" for a stream whose viewers may be sent some layers.
    public init(subscribers: Int, videoCodec: String = "H264") {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 0x5E1F), now: 0)
        router.addStream(id: "bench", tracks: [
            MediaTrackDescription(kind: .audio, codec: "opus", payloadType: 111, clockRate: 48_000, ssrc: Self.audioSSRC),
            MediaTrackDescription(kind: .video, codec: videoCodec, payloadType: 96, clockRate: 90_000, ssrc: Self.videoSSRC),
        ], publisher: 0)
        let stream = router.handle(streamId: "bench")!
        router.authenticated(.track(stream: stream, track: 1), from: RelayAddress(ipv4: 0x7F00_0001, port: 5000))
        for index in 0..<subscribers {
            let rtcpSSRC = 0x5000_0000 + UInt32(index)
            _ = router.addSubscriber(streamId: "bench", subscriberId: "s\(index)", rtcpSSRC: rtcpSSRC, context: index + 1, now: 0)
            router.authenticated(.subscriber(stream: stream, rtcpSSRC: rtcpSSRC),
                                 from: RelayAddress(ipv4: 0x7F00_0001, port: UInt16(10_000 + index)))
        }
        self.router = router
    }

    /// A viewer's own bandwidth limit (`s<index>`), as its SDK asks.
    public mutating func limit(subscriber index: Int, bitsPerSecond: Int?, now: UInt64) {
        _ = router.setSubscriberLimit(streamId: "bench", subscriberId: "s\(index)", bitsPerSecond: bitsPerSecond, now: now)
    }

    /// The router's timers (reports, a scalable video's viewers choosing again).
    public mutating func tick(now: UInt64) {
        _ = router.tick(now: now)
    }

    /// One plain RTP packet from the publisher at `now` (ns): the number of subscriber sends the
    /// router decided on (0 when the packet is not routed).
    public mutating func forward(_ packet: [UInt8], now: UInt64) -> Int {
        forward(packet, now: now) { _ in }
    }

    /// The same, calling `send` with the slot of each subscriber the packet goes to.
    public mutating func forward(_ packet: [UInt8], now: UInt64, send: (Int) -> Void) -> Int {
        guard packet.count >= RTPPacketLayout.fixedHeaderLength else { return 0 }
        let ssrc = UInt32(packet[8]) << 24 | UInt32(packet[9]) << 16 | UInt32(packet[10]) << 8 | UInt32(packet[11])
        guard case .track(let stream, let track)? = router.route(ssrc: ssrc),
              let layout = try? RTPPacketLayout(parsing: packet)
        else { return 0 }
        _ = router.publisherRTP(stream: stream, track: track, packet: packet, sequenceNumber: layout.sequenceNumber,
                                timestamp: layout.timestamp, now: now)
        let layers = router.withStream(stream) { stream, state in
            stream.readLayers(track: track, packet: packet, descriptor: nil, now: now, &state)
        } ?? nil
        var sends = 0
        gated.removeAll(keepingCapacity: true)
        router.forEachReachableSlot(of: stream) { slot, _, _, transparent in
            if transparent {
                sends += 1
                send(slot)
            } else {
                gated.append(slot)
            }
        }
        // Subscribers on the audio-only fallback, renumbered since, or sent some layers: each video packet is asked about.
        let video = router.isVideo(stream: stream, track: track)
        for slot in gated where video {
            if router.forwardVideo(stream: stream, track: track, slot: slot, packet: packet, layers: layers, now: now) != .dropped {
                sends += 1
                send(slot)
            }
        }
        if video { router.noteForwarded(stream: stream, track: track, sequence: layout.sequenceNumber) }
        return sends
    }
}

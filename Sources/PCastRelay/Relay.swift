import Glibc
import PCastContracts
import PCastProtocol
import SRTP
import Synchronization

/// The media relay (SFU): one UDP port, SRTP per flow, packets forwarded without decoding.
///
/// All I/O runs on one dedicated thread (never Swift's cooperative pool) that reads with
/// `recvmmsg`, re-protects each publisher packet once per subscriber straight into preallocated
/// send slots and writes them with `sendmmsg`. Control calls come from any thread: they are
/// checked against a locked registry (so errors are immediate), then queued for the I/O thread,
/// which applies them before it handles the next packets it reads.
///
/// Flows are found by the SSRC in a packet's clear header: a publisher's RTP and RTCP by its
/// tracks' SSRCs (its RTCP must use one as sender SSRC), a subscriber's RTCP by the `rtcpSSRC`
/// the relay assigned. A flow's address is the source of its latest authenticated packet
/// (symmetric RTP), so a subscriber receives nothing until its first authenticated RTCP. The
/// relay sends each publisher its own receiver report every `receiverReportInterval`: see
/// `RelayRouter.receiverReport` (its own leg's figures, loss and jitter raised to the worst
/// subscriber's). A subscriber whose leg cannot carry the video gets the audio alone until a
/// probe shows the video gets through again (see `VideoGate`); ``takeSubscriberVideoEvents()``
/// says which.
///
/// ```swift
/// let relay = try Relay(configuration: RelayConfiguration())
/// let publisher = try relay.addPublisher(streamId: "s1", tracks: [video])
/// let subscriber = try relay.addSubscriber(streamId: "s1", subscriberId: "viewer-1")
/// // Clients send SRTP to 127.0.0.1:\(relay.mediaPort) with their clientKey,
/// // and unprotect what they receive with their serverKey.
/// relay.shutdown()
/// ```
public final class Relay: RelayControl {
    public let mediaPort: UInt16
    public let configuration: RelayConfiguration
    /// The sender SSRC of the RTCP the relay itself sends (PLI, FIR, receiver reports).
    public let relaySSRC: UInt32

    private struct Registry {
        struct Stream {
            var trackSSRCs: [UInt32]
            let publisher: FlowCrypto
            var subscribers: [String: UInt32] = [:]
        }

        var stopped = false
        var streams: [String: Stream] = [:]
        /// Every SSRC a flow is found by, and the relay's own.
        var ssrcs: Set<UInt32> = []
        var subscriberCount = 0
    }

    private enum Lifecycle {
        case running(thread: pthread_t, cpuClock: clockid_t?)
        case stopped
    }

    private let engine: RelayEngine
    private let registry: Mutex<Registry>
    private let lifecycle: Mutex<Lifecycle>

    /// Binds the media socket and starts the I/O thread.
    public init(configuration: RelayConfiguration = RelayConfiguration()) throws(RelayError) {
        self.configuration = configuration
        var generator = SystemRandomNumberGenerator()
        let relaySSRC = UInt32.random(in: 1...UInt32.max, using: &generator)
        self.relaySSRC = relaySSRC
        engine = try RelayEngine(configuration: configuration, relaySSRC: relaySSRC)
        mediaPort = engine.socket.localAddress.port
        registry = Mutex(Registry(ssrcs: [relaySSRC]))

        var thread = pthread_t()
        let context = Unmanaged.passRetained(engine).toOpaque()
        let created = pthread_create(&thread, nil, relayThreadMain, context)
        guard created == 0 else {
            Unmanaged<RelayEngine>.fromOpaque(context).release()
            throw .socket(operation: "pthread_create", errno: created)
        }
        var clock = clockid_t()
        let cpuClock: clockid_t? = pthread_getcpuclockid(thread, &clock) == 0 ? clock : nil
        lifecycle = Mutex(.running(thread: thread, cpuClock: cpuClock))
    }

    deinit {
        shutdown()
    }

    /// Stops the I/O thread (joined before this returns) and closes the socket. Idempotent; later
    /// control calls throw ``RelayError/stopped``.
    public func shutdown() {
        registry.withLock { $0.stopped = true }
        lifecycle.withLock { state in
            guard case .running(let thread, _) = state else { return }
            engine.stop()
            // The I/O thread never takes this lock, so joining under it cannot deadlock; holding
            // it makes a concurrent shutdown() wait for the join too.
            pthread_join(thread, nil)
            engine.closeDescriptors()
            state = .stopped
        }
    }

    /// CPU time the I/O thread has used (all of it, once stopped).
    public var ioThreadCPUTime: Duration {
        let nanoseconds = lifecycle.withLock { state -> UInt64 in
            switch state {
            case .running(_, let clock?): return cpuNanoseconds(clock)
            case .running(_, nil): return 0
            case .stopped: return engine.finalCPUTime.load(ordering: .acquiring)
            }
        }
        return .nanoseconds(Int64(clamping: nanoseconds))
    }

    /// User and system CPU time of the I/O thread while it runs (clock-tick resolution), or nil.
    package var ioThreadCPUSplit: (user: Duration, system: Duration)? {
        let id = engine.threadID.load(ordering: .acquiring)
        guard id != 0, let split = lifecycle.withLock({ state -> (user: UInt64, system: UInt64)? in
            guard case .running = state else { return nil }
            return ThreadIdentity.cpuSplit(thread: id)
        }) else { return nil }
        return (.nanoseconds(Int64(clamping: split.user)), .nanoseconds(Int64(clamping: split.system)))
    }

    // MARK: RelayControl

    public func addPublisher(streamId: String, tracks: [MediaTrackDescription]) throws(RelayError) -> MediaTransport {
        try Self.validate(streamId: streamId, tracks: tracks)
        let keys = (client: SRTPKey.random(for: configuration.srtpProfile), server: SRTPKey.random(for: configuration.srtpProfile))
        let crypto = try makeCrypto(client: keys.client, server: keys.server)
        try registry.withLock { (registry: inout Registry) throws(RelayError) in
            guard !registry.stopped else { throw .stopped }
            guard registry.streams[streamId] == nil else { throw .streamExists(streamId) }
            for track in tracks where registry.ssrcs.contains(track.ssrc) { throw .ssrcInUse(track.ssrc) }
            registry.streams[streamId] = Registry.Stream(trackSSRCs: tracks.map(\.ssrc), publisher: crypto)
            registry.ssrcs.formUnion(tracks.map(\.ssrc))
            // Enqueued under the registry lock so the I/O thread sees commands in registry order.
            engine.enqueue(.addStream(id: streamId, tracks: tracks, crypto: crypto))
        }
        return MediaTransport(
            srtpProfile: configuration.srtpProfile.rawValue, port: mediaPort,
            clientKey: keys.client.base64, serverKey: keys.server.base64)
    }

    /// Opens a subscriber flow. Subscribing again with the same `subscriberId` replaces the
    /// earlier flow (new keys, new `rtcpSSRC`), as a client does after reconnecting.
    public func addSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport {
        let keys = (client: SRTPKey.random(for: configuration.srtpProfile), server: SRTPKey.random(for: configuration.srtpProfile))
        let crypto = try makeCrypto(client: keys.client, server: keys.server)
        let rtcpSSRC = try registry.withLock { (registry: inout Registry) throws(RelayError) -> UInt32 in
            guard !registry.stopped else { throw .stopped }
            guard registry.streams[streamId] != nil else { throw .streamNotFound(streamId) }
            var generator = SystemRandomNumberGenerator()
            var ssrc = UInt32.random(in: 1...UInt32.max, using: &generator)
            while registry.ssrcs.contains(ssrc) { ssrc = UInt32.random(in: 1...UInt32.max, using: &generator) }
            if let previous = registry.streams[streamId]!.subscribers.updateValue(ssrc, forKey: subscriberId) {
                registry.ssrcs.remove(previous)
            } else {
                registry.subscriberCount += 1
            }
            registry.ssrcs.insert(ssrc)
            engine.enqueue(.addSubscriber(streamId: streamId, subscriberId: subscriberId, rtcpSSRC: ssrc, crypto: crypto))
            return ssrc
        }
        return MediaTransport(
            srtpProfile: configuration.srtpProfile.rawValue, port: mediaPort,
            clientKey: keys.client.base64, serverKey: keys.server.base64, rtcpSSRC: rtcpSSRC)
    }

    public func removeSubscriber(streamId: String, subscriberId: String) {
        registry.withLock { registry in
            guard !registry.stopped,
                  let ssrc = registry.streams[streamId]?.subscribers.removeValue(forKey: subscriberId)
            else { return }
            registry.ssrcs.remove(ssrc)
            registry.subscriberCount -= 1
            engine.enqueue(.removeSubscriber(streamId: streamId, subscriberId: subscriberId))
        }
    }

    public func removeStream(streamId: String) {
        registry.withLock { registry in
            guard !registry.stopped, let stream = registry.streams.removeValue(forKey: streamId) else { return }
            registry.ssrcs.subtract(stream.trackSSRCs)
            registry.ssrcs.subtract(stream.subscribers.values)
            registry.subscriberCount -= stream.subscribers.count
            engine.enqueue(.removeStream(id: streamId))
        }
    }

    public func publisherIdleTime(streamId: String) -> Duration? {
        guard let publisher = registry.withLock({ $0.streams[streamId]?.publisher }) else { return nil }
        let last = publisher.lastMedia.load(ordering: .relaxed)
        let now = monotonicNanoseconds()
        return .nanoseconds(Int64(clamping: now > last ? now - last : 0))
    }

    public func statistics() -> RelayStatistics {
        var result = RelayStatistics()
        registry.withLock {
            result.streams = $0.streams.count
            result.subscribers = $0.subscriberCount
        }
        let c = engine.counters
        result.packetsIn = c.packetsIn.load(ordering: .relaxed)
        result.bytesIn = c.bytesIn.load(ordering: .relaxed)
        result.packetsOut = c.packetsOut.load(ordering: .relaxed)
        result.bytesOut = c.bytesOut.load(ordering: .relaxed)
        result.srtpFailures = c.srtpFailures.load(ordering: .relaxed)
        result.unknownPackets = c.unknownPackets.load(ordering: .relaxed)
        result.nacksServed = c.nacksServed.load(ordering: .relaxed)
        result.nacksMissed = c.nacksMissed.load(ordering: .relaxed)
        result.keyframeRequests = c.keyframeRequests.load(ordering: .relaxed)
        result.sendFailures = c.sendFailures.load(ordering: .relaxed)
        result.videoSuspensions = c.videoSuspensions.load(ordering: .relaxed)
        result.videoProbes = c.videoProbes.load(ordering: .relaxed)
        result.videoResumptions = c.videoResumptions.load(ordering: .relaxed)
        result.rembsSent = c.rembsSent.load(ordering: .relaxed)
        return result
    }

    public func takeSubscriberVideoEvents() -> [SubscriberVideoEvent] {
        engine.takeVideoEvents()
    }

    // MARK: Helpers

    private func makeCrypto(client: SRTPKey, server: SRTPKey) throws(RelayError) -> FlowCrypto {
        do {
            return FlowCrypto(
                inbound: try SRTPSession(key: client, direction: .inbound),
                outbound: try SRTPSession(key: server, direction: .outbound))
        } catch {
            // Fresh keys of the right length only fail if libsrtp itself cannot start.
            throw .socket(operation: "SRTP session (\(error))", errno: EIO)
        }
    }

    /// Track rules: 1–16 tracks, distinct non-zero SSRCs, 7-bit payload types outside 64–95
    /// (which would collide with RTCP on a multiplexed port, RFC 5761 §4), a clock rate of 1 Hz–10 MHz.
    static func validate(streamId: String, tracks: [MediaTrackDescription]) throws(RelayError) {
        guard !streamId.isEmpty else { throw .invalidTracks("empty stream id") }
        guard !tracks.isEmpty else { throw .invalidTracks("no tracks") }
        guard tracks.count <= 16 else { throw .invalidTracks("\(tracks.count) tracks, at most 16") }
        var seen = Set<UInt32>()
        for track in tracks {
            guard track.ssrc != 0 else { throw .invalidTracks("SSRC 0") }
            guard seen.insert(track.ssrc).inserted else { throw .invalidTracks("SSRC \(track.ssrc) appears twice") }
            guard track.payloadType < 128, !(64...95).contains(track.payloadType) else {
                throw .invalidTracks("payload type \(track.payloadType) is not usable with rtcp-mux")
            }
            guard (1...10_000_000).contains(track.clockRate) else { throw .invalidTracks("clock rate \(track.clockRate)") }
        }
    }
}

/// The I/O thread's entry point; a C function, so it captures nothing.
private func relayThreadMain(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let context else { return nil }
    let engine = Unmanaged<RelayEngine>.fromOpaque(context).takeRetainedValue()
    engine.run()
    return nil
}

import DTLS
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
    /// The TCP port of ICE over TCP (``RelayConfiguration/iceTCP``); nil when there is none.
    public let tcpPort: UInt16?
    public let configuration: RelayConfiguration
    /// The sender SSRC of the RTCP the relay itself sends (PLI, FIR, receiver reports).
    public let relaySSRC: UInt32

    private struct Registry {
        struct Stream {
            var trackSSRCs: [UInt32]
            var publisher: FlowCrypto
            /// Pulled from an origin relay (its publisher flow is a leg of the origin's).
            var isUpstream = false
            var subscribers: [String: UInt32] = [:]
            /// Edge relays' flows, for how long each has been silent.
            var edgeFlows: [String: FlowCrypto] = [:]
        }

        var stopped = false
        var streams: [String: Stream] = [:]
        /// ICE ufrags of open WebRTC peers, by flow.
        var ufrags: [WebRTCPeerKey: String] = [:]
        /// Every SSRC a flow is found by, and the relay's own.
        var ssrcs: Set<UInt32> = []
        var subscriberCount = 0
    }

    private enum Lifecycle {
        case running(thread: pthread_t, cpuClock: clockid_t?)
        case stopped
    }

    /// What WebRTC answers say about this relay; nil if DTLS could not be set up.
    public let webRTC: WebRTCEndpoint?
    private let engine: RelayEngine
    private let registry: Mutex<Registry>
    private let lifecycle: Mutex<Lifecycle>

    /// Binds the media socket and starts the I/O thread.
    public init(configuration: RelayConfiguration = RelayConfiguration()) throws(RelayError) {
        self.configuration = configuration
        var generator = SystemRandomNumberGenerator()
        let relaySSRC = UInt32.random(in: 1...UInt32.max, using: &generator)
        self.relaySSRC = relaySSRC
        // One DTLS identity per relay run (a fresh certificate each start, as browsers expect of
        // WebRTC endpoints). Without OpenSSL working the relay still serves the SDK's flows.
        let dtls = try? DTLSContext(certificate: DTLSCertificate(commonName: "PCastKit relay"))
        let engine = try RelayEngine(configuration: configuration, relaySSRC: relaySSRC, dtlsContext: dtls)
        let port = engine.socket.localAddress.port
        self.engine = engine
        mediaPort = port
        let hosts = HostCandidates.addresses(configuration: configuration)
        let tcpPort = engine.tcp?.localAddress.port
        self.tcpPort = tcpPort
        webRTC = dtls.map { context in
            WebRTCEndpoint(fingerprint: context.certificate.fingerprint,
                           candidates: hosts.map { address in
                               var candidate = address
                               candidate.port = port
                               return STUNAddress(candidate)
                           },
                           tcpCandidates: tcpPort.map { tcpPort in
                               hosts.map { address in
                                   var candidate = address
                                   candidate.port = tcpPort
                                   return STUNAddress(candidate)
                               }
                           } ?? [])
        }
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

    /// CPU time all the relay's threads have used: the I/O thread and the fan-out workers
    /// (``RelayConfiguration/fanOutThreads``); the workers' as of their latest fan-out.
    public var cpuTime: Duration {
        ioThreadCPUTime + .nanoseconds(Int64(clamping: engine.workersCPUNanoseconds))
    }

    /// User and system CPU time of the relay's threads while they run (clock-tick resolution), or nil.
    package var cpuSplit: (user: Duration, system: Duration)? {
        let ids = engine.threadIDs
        guard !ids.isEmpty, let split = lifecycle.withLock({ state -> (user: UInt64, system: UInt64)? in
            guard case .running = state else { return nil }
            var total: (user: UInt64, system: UInt64) = (0, 0)
            for id in ids {
                guard let thread = ThreadIdentity.cpuSplit(thread: id) else { return nil }
                total.user &+= thread.user
                total.system &+= thread.system
            }
            return total
        }) else { return nil }
        return (.nanoseconds(Int64(clamping: split.user)), .nanoseconds(Int64(clamping: split.system)))
    }

    // MARK: RelayControl

    public func addPublisher(streamId: String, tracks: [MediaTrackDescription]) throws(RelayError) -> MediaTransport {
        let keys = (client: SRTPKey.random(for: configuration.srtpProfile), server: SRTPKey.random(for: configuration.srtpProfile))
        try registerPublisher(streamId: streamId, tracks: tracks, crypto: try makeCrypto(client: keys.client, server: keys.server), peer: nil)
        return MediaTransport(
            srtpProfile: configuration.srtpProfile.rawValue, port: mediaPort,
            clientKey: keys.client.base64, serverKey: keys.server.base64, tcpPort: tcpPort)
    }

    public func addWebRTCPublisher(streamId: String, tracks: [MediaTrackDescription], peer: WebRTCPeerParameters) throws(RelayError) {
        guard webRTC != nil else { throw .webRTCUnavailable }
        // Random keys until DTLS supplies the real ones: nothing authenticates before that.
        let crypto = try makeCrypto(client: .random(for: .aeadAES128GCM), server: .random(for: .aeadAES128GCM), stripsHeaderExtensions: true,
                                    dependencyDescriptorExtension: peer.dependencyDescriptorExtension)
        try registerPublisher(streamId: streamId, tracks: tracks, crypto: crypto, peer: peer)
    }

    private func registerPublisher(
        streamId: String, tracks: [MediaTrackDescription], crypto: FlowCrypto, peer: WebRTCPeerParameters?, upstream: UpstreamLeg? = nil
    ) throws(RelayError) {
        try Self.validate(streamId: streamId, tracks: tracks)
        try registry.withLock { (registry: inout Registry) throws(RelayError) in
            guard !registry.stopped else { throw .stopped }
            guard registry.streams[streamId] == nil else { throw .streamExists(streamId) }
            for track in tracks where registry.ssrcs.contains(track.ssrc) { throw .ssrcInUse(track.ssrc) }
            let key = WebRTCPeerKey(streamId: streamId, subscriberId: nil)
            if let peer {
                guard !registry.ufrags.values.contains(peer.local.ufrag) else { throw .iceUfragInUse(peer.local.ufrag) }
                registry.ufrags[key] = peer.local.ufrag
            }
            registry.streams[streamId] = Registry.Stream(trackSSRCs: tracks.map(\.ssrc), publisher: crypto, isUpstream: upstream != nil)
            registry.ssrcs.formUnion(tracks.map(\.ssrc))
            // Enqueued under the registry lock so the I/O thread sees commands in registry order.
            engine.enqueue(.addStream(id: streamId, tracks: tracks, crypto: crypto, upstream: upstream))
            if let peer {
                engine.enqueue(.addWebRTC(WebRTCSetup(streamId: streamId, subscriberId: nil, rtcpSSRC: nil, parameters: peer, crypto: crypto)))
            }
        }
    }

    /// Opens a subscriber flow. Subscribing again with the same `subscriberId` replaces the
    /// earlier flow (new keys, new `rtcpSSRC`), as a client does after reconnecting.
    public func addSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport {
        try addSubscriber(streamId: streamId, subscriberId: subscriberId, isEdge: false)
    }

    public func addEdgeSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport {
        try addSubscriber(streamId: streamId, subscriberId: subscriberId, isEdge: true)
    }

    private func addSubscriber(streamId: String, subscriberId: String, isEdge: Bool) throws(RelayError) -> MediaTransport {
        let keys = (client: SRTPKey.random(for: configuration.srtpProfile), server: SRTPKey.random(for: configuration.srtpProfile))
        let crypto = try makeCrypto(client: keys.client, server: keys.server)
        let rtcpSSRC = try registerSubscriber(streamId: streamId, subscriberId: subscriberId, crypto: crypto, peer: nil, isEdge: isEdge)
        return MediaTransport(
            srtpProfile: configuration.srtpProfile.rawValue, port: mediaPort,
            clientKey: keys.client.base64, serverKey: keys.server.base64, rtcpSSRC: rtcpSSRC, tcpPort: isEdge ? nil : tcpPort)
    }

    /// The edge's end of the origin's subscriber flow: it unprotects with the key the origin
    /// sends with (the transport's server key) and protects its RTCP with the client key.
    public func addUpstream(streamId: String, tracks: [MediaTrackDescription], origin: UpstreamOrigin) throws(RelayError) {
        let (crypto, leg) = try Self.upstreamFlow(origin)
        try registerPublisher(streamId: streamId, tracks: tracks, crypto: crypto, peer: nil, upstream: leg)
    }

    public func replaceUpstream(streamId: String, origin: UpstreamOrigin) throws(RelayError) {
        let (crypto, leg) = try Self.upstreamFlow(origin)
        try registry.withLock { (registry: inout Registry) throws(RelayError) in
            guard !registry.stopped else { throw .stopped }
            guard registry.streams[streamId]?.isUpstream == true else { throw .streamNotFound(streamId) }
            registry.streams[streamId]!.publisher = crypto
            engine.enqueue(.replaceUpstream(id: streamId, crypto: crypto, upstream: leg))
        }
    }

    /// The edge's end of a leg: keys swapped (it unprotects what the origin sends its subscriber)
    /// and the origin's address and the SSRC its RTCP must carry.
    private static func upstreamFlow(_ origin: UpstreamOrigin) throws(RelayError) -> (FlowCrypto, UpstreamLeg) {
        guard let address = RelayAddress(host: origin.host, port: origin.port), origin.port != 0 else {
            throw .invalidUpstream("'\(origin.host):\(origin.port)' is not an IPv4 address and port")
        }
        guard let ssrc = origin.transport.rtcpSSRC, ssrc != 0 else { throw .invalidUpstream("the transport names no RTCP SSRC") }
        guard let profile = SRTPProfile(rawValue: origin.transport.srtpProfile) else {
            throw .invalidUpstream("unknown SRTP profile '\(origin.transport.srtpProfile)'")
        }
        let crypto: FlowCrypto
        do {
            crypto = FlowCrypto(
                inbound: try SRTPSession(key: try SRTPKey(profile: profile, base64: origin.transport.serverKey), direction: .inbound),
                outbound: try SRTPSession(key: try SRTPKey(profile: profile, base64: origin.transport.clientKey), direction: .outbound))
        } catch {
            throw .invalidUpstream("its keys: \(error)")
        }
        return (crypto, UpstreamLeg(address: address, ssrc: ssrc))
    }

    public func addWebRTCViewer(streamId: String, subscriberId: String, peer: WebRTCPeerParameters) throws(RelayError) {
        guard webRTC != nil else { throw .webRTCUnavailable }
        let crypto = try makeCrypto(client: .random(for: .aeadAES128GCM), server: .random(for: .aeadAES128GCM),
                                    payloadTypes: RTPRewrite.table(peer.payloadTypes))
        _ = try registerSubscriber(streamId: streamId, subscriberId: subscriberId, crypto: crypto, peer: peer)
    }

    private func registerSubscriber(
        streamId: String, subscriberId: String, crypto: FlowCrypto, peer: WebRTCPeerParameters?, isEdge: Bool = false
    ) throws(RelayError) -> UInt32 {
        try registry.withLock { (registry: inout Registry) throws(RelayError) -> UInt32 in
            guard !registry.stopped else { throw .stopped }
            guard registry.streams[streamId] != nil else { throw .streamNotFound(streamId) }
            let key = WebRTCPeerKey(streamId: streamId, subscriberId: subscriberId)
            if let peer {
                guard !registry.ufrags.contains(where: { $0.value == peer.local.ufrag && $0.key != key }) else { throw .iceUfragInUse(peer.local.ufrag) }
                registry.ufrags[key] = peer.local.ufrag
            } else {
                registry.ufrags[key] = nil
            }
            var generator = SystemRandomNumberGenerator()
            var ssrc = UInt32.random(in: 1...UInt32.max, using: &generator)
            while registry.ssrcs.contains(ssrc) { ssrc = UInt32.random(in: 1...UInt32.max, using: &generator) }
            if let previous = registry.streams[streamId]!.subscribers.updateValue(ssrc, forKey: subscriberId) {
                registry.ssrcs.remove(previous)
            } else {
                registry.subscriberCount += 1
            }
            registry.ssrcs.insert(ssrc)
            registry.streams[streamId]!.edgeFlows[subscriberId] = isEdge ? crypto : nil
            // A WebRTC viewer's REMB is its browser's receive-side estimate, bounded by what it receives.
            engine.enqueue(.addSubscriber(streamId: streamId, subscriberId: subscriberId, rtcpSSRC: ssrc, crypto: crypto, isEdge: isEdge,
                                          receiveBoundEstimate: peer != nil))
            if let peer {
                engine.enqueue(.addWebRTC(WebRTCSetup(streamId: streamId, subscriberId: subscriberId, rtcpSSRC: ssrc, parameters: peer, crypto: crypto)))
            }
            return ssrc
        }
    }

    public func removeSubscriber(streamId: String, subscriberId: String) {
        registry.withLock { registry in
            guard !registry.stopped,
                  let ssrc = registry.streams[streamId]?.subscribers.removeValue(forKey: subscriberId)
            else { return }
            registry.streams[streamId]!.edgeFlows[subscriberId] = nil
            registry.ssrcs.remove(ssrc)
            registry.subscriberCount -= 1
            registry.ufrags[WebRTCPeerKey(streamId: streamId, subscriberId: subscriberId)] = nil
            engine.enqueue(.removeSubscriber(streamId: streamId, subscriberId: subscriberId))
        }
    }

    public func removeStream(streamId: String) {
        registry.withLock { registry in
            guard !registry.stopped, let stream = registry.streams.removeValue(forKey: streamId) else { return }
            registry.ssrcs.subtract(stream.trackSSRCs)
            registry.ssrcs.subtract(stream.subscribers.values)
            registry.subscriberCount -= stream.subscribers.count
            registry.ufrags[WebRTCPeerKey(streamId: streamId, subscriberId: nil)] = nil
            for subscriberId in stream.subscribers.keys { registry.ufrags[WebRTCPeerKey(streamId: streamId, subscriberId: subscriberId)] = nil }
            engine.enqueue(.removeStream(id: streamId))
        }
    }

    /// The size a simulcast viewer shows the video at (nil: any): the relay sends it no better
    /// layer than the smallest that fills it. Ignored for a stream without layers.
    public func setSubscriberViewSize(streamId: String, subscriberId: String, size: ViewSize?) {
        engine.enqueue(.viewSize(streamId: streamId, subscriberId: subscriberId, size: size))
    }

    /// A simulcast viewer's own bandwidth limit (bits per second; nil lifts it): the relay sends
    /// it the best layer under the limit, and the publisher's encodings stay as they are. Ignored
    /// for a stream without layers.
    public func limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?) {
        engine.enqueue(.limitSubscriber(streamId: streamId, subscriberId: subscriberId, bitsPerSecond: bitsPerSecond))
    }

    public func watchedLayers(streamId: String) -> Set<String>? {
        engine.watchedLayers.withLock { $0[streamId] }
    }

    public func onWatchedLayersGrew(_ grew: @escaping @Sendable () -> Void) {
        engine.watchedLayersGrew.withLock { $0 = grew }
    }

    public func pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?) {
        engine.enqueue(.pinSubscriberLayer(streamId: streamId, subscriberId: subscriberId, layer: layer))
    }

    /// The layer a simulcast viewer is sent and the one it is moving to; nil for a viewer of a
    /// stream without layers (or not known). Updated by the I/O thread as layers change.
    public func subscriberLayer(streamId: String, subscriberId: String) -> SubscriberLayer? {
        engine.layers.withLock { $0[streamId]?[subscriberId] }
    }

    public func publisherIdleTime(streamId: String) -> Duration? {
        registry.withLock { $0.streams[streamId]?.publisher }.map(Self.idleTime)
    }

    public func edgeIdleTime(streamId: String, subscriberId: String) -> Duration? {
        registry.withLock { $0.streams[streamId]?.edgeFlows[subscriberId] }.map(Self.idleTime)
    }

    private static func idleTime(_ flow: FlowCrypto) -> Duration {
        let last = flow.lastHeard.load(ordering: .relaxed)
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
        result.duplicates = c.duplicates.load(ordering: .relaxed)
        result.unknownPackets = c.unknownPackets.load(ordering: .relaxed)
        result.nacksServed = c.nacksServed.load(ordering: .relaxed)
        result.nacksMissed = c.nacksMissed.load(ordering: .relaxed)
        result.keyframeRequests = c.keyframeRequests.load(ordering: .relaxed)
        result.sendFailures = c.sendFailures.load(ordering: .relaxed)
        result.videoSuspensions = c.videoSuspensions.load(ordering: .relaxed)
        result.videoProbes = c.videoProbes.load(ordering: .relaxed)
        result.videoResumptions = c.videoResumptions.load(ordering: .relaxed)
        result.rembsSent = c.rembsSent.load(ordering: .relaxed)
        result.nacksForwarded = c.nacksForwarded.load(ordering: .relaxed)
        result.gapRequests = c.gapRequests.load(ordering: .relaxed)
        result.upstreamRetransmissions = c.upstreamRetransmissions.load(ordering: .relaxed)
        result.webRTCPeers = c.webRTCPeers.load(ordering: .relaxed)
        result.stunRefusals = c.stunRefusals.load(ordering: .relaxed)
        result.dtlsFailures = c.dtlsFailures.load(ordering: .relaxed)
        result.sharedFanOuts = c.sharedFanOuts.load(ordering: .relaxed)
        result.segmentedDatagrams = c.segmentedDatagrams.load(ordering: .relaxed)
        result.layerSwitches = c.layerSwitches.load(ordering: .relaxed)
        result.nacksThrottled = c.nacksThrottled.load(ordering: .relaxed)
        result.webRTCPeersOverTCP = c.webRTCPeersOverTCP.load(ordering: .relaxed)
        (result.viewerJoin, result.viewerLoss) = c.histograms.withLock { $0 }
        return result
    }

    public func takeSubscriberVideoEvents() -> [SubscriberVideoEvent] {
        engine.takeVideoEvents()
    }

    /// WebRTC peers' changes; an ended peer's stream or subscription is closed here too (the
    /// I/O thread already stopped its media), so its SSRCs and ufrag are free again.
    public func takeWebRTCEvents() -> [WebRTCPeerEvent] {
        let events = engine.takeWebRTCEvents()
        for event in events {
            guard case .ended = event.change else { continue }
            if let subscriberId = event.subscriberId {
                removeSubscriber(streamId: event.streamId, subscriberId: subscriberId)
            } else {
                removeStream(streamId: event.streamId)
            }
        }
        return events
    }

    // MARK: Helpers

    private func makeCrypto(
        client: SRTPKey, server: SRTPKey, payloadTypes: [UInt8]? = nil, stripsHeaderExtensions: Bool = false,
        dependencyDescriptorExtension: UInt8? = nil
    ) throws(RelayError) -> FlowCrypto {
        do {
            return FlowCrypto(
                inbound: try SRTPSession(key: client, direction: .inbound),
                outbound: try SRTPSession(key: server, direction: .outbound),
                payloadTypes: payloadTypes, stripsHeaderExtensions: stripsHeaderExtensions,
                dependencyDescriptorExtension: dependencyDescriptorExtension)
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

import Foundation
package import GStreamer
import Logging
import PCastMedia
import PCastProtocol
import Synchronization

/// A published stream (the PCast iOS SDK's Publisher).
///
/// ```swift
/// let publisher = try await pcast.publish(streamToken: token, mediaStream: media, tags: ["room:lobby"])
/// print(publisher.streamId)
/// publisher.setPublisherEndedCallback { reason, description in … }
/// await publisher.stop(reason: .custom, description: "bye")
/// ```
public final class Publisher: Sendable {
    public let streamId: String
    let rtp: any RTPSource
    let socket: SocketSlot
    private weak let pcast: PCast?
    private let ending = Mutex<(ended: (StreamEndedReason, String?)?, callbacks: [@Sendable (StreamEndedReason, String?) -> Void], waiters: [CheckedContinuation<(StreamEndedReason, String?), Never>])>((nil, [], []))

    private let bandwidth: BandwidthLimiter
    private let quality = Mutex<(task: Task<Void, Never>?, callback: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?)>((nil, nil))
    private let qualityEvents = EventBroadcast<DataQuality>()

    init(streamId: String, rtp: any RTPSource, socket: SocketSlot, pcast: PCast) {
        self.streamId = streamId
        self.rtp = rtp
        self.socket = socket
        self.pcast = pcast
        bandwidth = BandwidthLimiter { [weak rtp] bitsPerSecond in rtp?.limitVideoBitrate(bitsPerSecond) }
        // The quality evaluation runs once someone listens; an ingest has none to report.
        if rtp is RTPPublisher {
            qualityEvents.onFirstConsumer { [weak self] in self?.watchDataQuality() }
        } else {
            qualityEvents.finish()
        }
    }

    /// Limits the published video bitrate (bits per second) until the returned disposable is
    /// released or dropped. The most recent limit is the one in effect; releasing it restores the
    /// configured bitrate; releasing one a later call superseded does nothing. A passed-through
    /// ingest (no encoder) is not affected.
    ///
    /// ```swift
    /// var limit: Disposable? = publisher.limitBandwidth(200_000)
    /// limit = nil   // back to the configured bitrate
    /// ```
    public func limitBandwidth(_ bitsPerSecond: Int) -> Disposable {
        bandwidth.limit(bitsPerSecond)
    }

    /// Applies `bitsPerSecond` (nil: none) directly, for ``ExpressPublisher``, which keeps its own
    /// limits across republishing.
    func applyVideoBitrateLimit(_ bitsPerSecond: Int?) {
        rtp.limitVideoBitrate(bitsPerSecond)
    }

    /// Called with the publisher's data quality once a second of sending has been seen, then
    /// whenever it changes (two seconds in a row): `all` / `audioOnly` / `noData` from what leaves,
    /// `uploadLimited` while the bitrate estimate holds the video down. Not for ingests.
    ///
    /// ```swift
    /// publisher.setDataQualityChangedCallback { status, reason in print(status, reason) }
    /// ```
    public func setDataQualityChangedCallback(_ callback: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?) {
        quality.withLock { $0.callback = callback }
        if callback != nil { watchDataQuality() }
    }

    /// The same reports as ``setDataQualityChangedCallback(_:)``, for any number of consumers; each
    /// sequence ends when the stream ends. Empty for an ingest.
    ///
    /// ```swift
    /// for await quality in publisher.dataQualityChanges { statusLine.show(quality) }
    /// ```
    public var dataQualityChanges: AsyncStream<DataQuality> {
        qualityEvents.stream()
    }

    /// Evaluates the data quality once a second while the stream lives and someone listens.
    private func watchDataQuality() {
        guard let rtp = rtp as? RTPPublisher else { return }
        quality.withLock { quality in
            guard quality.task == nil else { return }
            quality.task = Task { [weak self] in
                var evaluator = DataQualityEvaluator()
                var previous = (rtp.packetsSent(.video), rtp.packetsSent(.audio))
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    guard let self, !Task.isCancelled, !self.hasEnded else { return }
                    let now = (rtp.packetsSent(.video), rtp.packetsSent(.audio))
                    let assessed = DataQualityEvaluator.assessPublisher(videoPackets: now.0 - previous.0, audioPackets: now.1 - previous.1,
                                                                        uploadLimited: rtp.isUploadLimited, networkLimited: rtp.isNetworkLimited)
                    previous = now
                    if let (status, reason) = evaluator.evaluate(assessed: assessed) {
                        self.quality.withLock { $0.callback }?(status, reason)
                        self.qualityEvents.yield(DataQuality(status: status, reason: reason))
                    }
                }
            }
        }
    }

    /// What the publisher estimates the network carries for its video, bits per second, from the
    /// loss and round trips the relay reports, capped by the relay's REMB (nil for an ingest); see
    /// ``BitrateController``.
    public var estimatedVideoBitrate: Int? { (rtp as? RTPPublisher)?.estimatedBitrate }

    /// The relay's delay-based estimate of this publisher's uplink (REMB, bits per second): it
    /// appears once the relay sees a queue build on the way in, and caps the video while it holds.
    public var remoteEstimate: Int? { (rtp as? RTPPublisher)?.remoteEstimate }

    /// Whether that estimate holds the video below its configured bitrate: the PCast iOS SDK's
    /// `uploadLimited` for a publisher.
    public var isUploadLimited: Bool { (rtp as? RTPPublisher)?.isUploadLimited ?? false }

    /// RTP bytes sent for `kind` so far (nil for an ingest).
    public func bytesSent(_ kind: MediaType) -> Int? {
        (rtp as? RTPPublisher)?.bytesSent(kind)
    }

    /// The ingest producing this stream, when it publishes a remote source (``PCast/publish(streamToken:ingest:options:tags:publishType:streamName:)``).
    package var ingest: IngestPublisher? { rtp as? IngestPublisher }

    /// The tracks announced to the platform.
    public var tracks: [MediaTrackDescription] { rtp.tracks }

    /// The simulcast layers being encoded now (RIDs): the platform rests those nobody watches.
    /// Empty without simulcast.
    public var encodedLayers: Set<String> { (rtp as? RTPPublisher)?.activeLayers ?? [] }

    public var hasEnded: Bool { ending.withLock { $0.ended != nil } }

    /// Called once when the stream ends: stopped here, ended by the platform (censored,
    /// maintenance…), or the connection lost.
    public func setPublisherEndedCallback(_ callback: @escaping @Sendable (StreamEndedReason, String?) -> Void) {
        let ended: (StreamEndedReason, String?)? = ending.withLock { state in
            if let ended = state.ended { return ended }
            state.callbacks.append(callback)
            return nil
        }
        if let ended { callback(ended.0, ended.1) }
    }

    /// Waits until the stream ends; returns why.
    public func ended() async -> (StreamEndedReason, String?) {
        await withCheckedContinuation { continuation in
            let ended: (StreamEndedReason, String?)? = ending.withLock { state in
                if let ended = state.ended { return ended }
                state.waiters.append(continuation)
                return nil
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// The publisher's statistics as WebRTC names them: `outbound-rtp` per track (packets, bytes,
    /// NACKs / PLIs / FIRs received, target bitrate) and `remote-inbound-rtp` from the relay's
    /// receiver reports (fraction lost, packets lost, jitter, round-trip time).
    public func rtcStatsReport() -> RTCStatsReport {
        RTCStatsReport(stats: (rtp as? RTPPublisher)?.rtcStats() ?? [])
    }

    /// Packets sent to the relay so far.
    public var packetsSent: Int { socket.value.withLock { $0?.statistics.packetsSent.load(ordering: .relaxed) ?? 0 } }

    /// Packets sent again because the relay asked for them (it saw them missing), of those above.
    public var retransmittedPacketsSent: Int { socket.value.withLock { $0?.statistics.retransmissionsSent.load(ordering: .relaxed) ?? 0 } }

    /// How this publisher's media reaches the relay (UDP, or TCP and why); nil once it ended.
    public var mediaPath: MediaPath? { socket.value.withLock { $0?.path } }

    /// Stops publishing; subscribers are told the stream ended with `reason` (and `description`).
    public func stop(reason: StreamEndedReason = .ended, description: String? = nil) async {
        guard !hasEnded else { return }
        await pcast?.requestWhenOnline(.unpublish(.init(streamId: streamId, reason: reason, description: description)))
        pcast?.state.withLock { _ = $0.publishers.removeValue(forKey: streamId) }
        finish(reason, description)
    }

    func finish(_ reason: StreamEndedReason, _ description: String?) {
        let (callbacks, waiters): ([@Sendable (StreamEndedReason, String?) -> Void], [CheckedContinuation<(StreamEndedReason, String?), Never>]) = ending.withLock { state in
            guard state.ended == nil else { return ([], []) }
            state.ended = (reason, description)
            defer { state.callbacks = []; state.waiters = [] }
            return (state.callbacks, state.waiters)
        }
        let socket = self.socket.value.withLock { socket in defer { socket = nil }; return socket }
        socket?.shutdown()
        let rtp = self.rtp
        Task { await rtp.stop() }
        callbacks.forEach { $0(reason, description) }
        waiters.forEach { $0.resume(returning: (reason, description)) }
        qualityEvents.finish()
    }
}

/// Which layer of a simulcast stream (published with the `multi-bitrate` capability) a viewer is
/// sent. Streams without layers ignore it.
public enum LayerSelection: Sendable, Hashable {
    /// The best layer the viewer's link carries, moving as it changes (the relay measures).
    case adaptive
    /// The largest layer, whatever the link (a recording).
    case best
    /// The smallest layer (a thumbnail).
    case lowest
    /// The layer with this RID (the SDK's publishers name theirs `h`, `m`, `l`).
    case rid(String)

    /// What the subscribe request carries.
    var requested: String? {
        switch self {
        case .adaptive: nil
        case .best: SimulcastLayer.best
        case .lowest: SimulcastLayer.lowest
        case .rid(let rid): rid
        }
    }
}

/// A subscribed stream: its receive engine (`receiver`, decoding into `stream`) for its whole
/// life, and under it the flow to a relay (socket, keys, the subscriber id the platform gave).
/// The flow is replaced when the SDK's session moves to another node and the stream is subscribed
/// there again (``PCast/follow(_:on:)``): the viewer keeps its stream, renderers and taps.
final class Subscription: Sendable {
    /// The SDK's key for it: subscriber ids change when the flow moves.
    let key = UUID().uuidString
    let streamId: String
    /// What subscribes to it again on another node.
    let streamToken: String
    let tracks: [MediaTrackDescription]
    /// The simulcast layer it asked to stay on (nil: adaptive); asked again when it follows.
    let layer: String?
    /// The application's tags for it; given again when it follows.
    let tags: [String]
    let stream: MediaStream
    let receiver: RTPReceiver
    /// Where every flow's socket delivers (to `receiver`).
    let inbox: PacketInbox
    /// The current flow's socket (the receiver's RTCP goes through it).
    let slot: SocketSlot
    private let flow = Mutex<Flow>(Flow())

    private struct Flow {
        var subscriberId: String?
        var keepAlive: Task<Void, Never>?
        var closed = false
    }

    init(streamId: String, streamToken: String, layer: String?, tags: [String] = [], tracks: [MediaTrackDescription], stream: MediaStream,
         receiver: RTPReceiver, inbox: PacketInbox, slot: SocketSlot) {
        self.streamId = streamId
        self.streamToken = streamToken
        self.layer = layer
        self.tags = tags
        self.tracks = tracks
        self.stream = stream
        self.receiver = receiver
        self.inbox = inbox
        self.slot = slot
    }

    /// The platform's id of the current flow.
    var subscriberId: String? { flow.withLock { $0.subscriberId } }

    /// Makes a relay's flow the subscription's: opens its socket, tells the relay where we are and
    /// keeps telling it (NAT bindings expire); the previous flow's socket closes. False when the
    /// subscription was closed meanwhile (nothing stays open).
    func attach(subscriberId: String?, host: String, transport: MediaTransport, rtcpSSRC: UInt32, path: MediaPath = .udp) throws(PCastError) -> Bool {
        let socket = try Self.openSocket(host: host, transport: transport, rtcpSSRC: rtcpSSRC, path: path, into: inbox)
        return adopt(socket, subscriberId: subscriberId, rtcpSSRC: rtcpSSRC)
    }

    /// A socket to a relay's flow that delivers into `inbox`, and has told the relay where we are
    /// (the relay sends nothing before it hears from the flow).
    static func openSocket(host: String, transport: MediaTransport, rtcpSSRC: UInt32, path: MediaPath = .udp,
                           into inbox: PacketInbox) throws(PCastError) -> MediaSocket {
        let socket = try MediaSocket(host: host, transport: transport, rtcpSenderSSRC: rtcpSSRC, path: path,
                                     onRTP: { packet, payloadType in inbox.rtp(packet, payloadType: payloadType) },
                                     onRTCP: { rtcp in inbox.rtcp(rtcp) })
        socket.sendEmptyReceiverReport(ssrc: rtcpSSRC)
        return socket
    }

    /// Makes an open socket (``openSocket(host:transport:rtcpSSRC:into:)``) the current flow's.
    /// False when the subscription was closed meanwhile: the socket is shut down.
    func adopt(_ socket: MediaSocket, subscriberId: String?, rtcpSSRC: UInt32) -> Bool {
        let previous: (socket: MediaSocket?, keepAlive: Task<Void, Never>?)? = flow.withLock { flow in
            guard !flow.closed else { return nil }
            let previous = (slot.value.withLock { slot in defer { slot = socket }; return slot }, flow.keepAlive)
            flow.subscriberId = subscriberId
            flow.keepAlive = Task {
                var interval = Duration.milliseconds(100)
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    socket.sendEmptyReceiverReport(ssrc: rtcpSSRC)
                    interval = min(interval * 2, .seconds(1))
                }
            }
            return previous
        }
        guard let previous else {
            socket.shutdown()
            return false
        }
        previous.keepAlive?.cancel()
        if previous.socket !== socket { previous.socket?.shutdown() }
        return true
    }

    /// Closes the flow for good; returns its subscriber id, or nil when it was closed already.
    @discardableResult
    func close() -> String?? {
        let closing: (keepAlive: Task<Void, Never>?, subscriberId: String?)? = flow.withLock { flow in
            guard !flow.closed else { return nil }
            flow.closed = true
            return (flow.keepAlive, flow.subscriberId)
        }
        guard let closing else { return nil }
        closing.keepAlive?.cancel()
        // The socket's packet handler holds the receiver, whose RTCP sender holds the slot:
        // emptying the slot breaks that cycle so all of it is freed.
        slot.value.withLock { slot in defer { slot = nil }; return slot }?.shutdown()
        return .some(closing.subscriberId)
    }

    func finish(_ reason: StreamEndedReason, _ description: String?) {
        close()
        stream.finish(.remote(reason, description))
        let stream = self.stream
        Task { await stream.stop() }
    }
}

extension PCast {
    /// Publishes local media with a publish token; returns once the platform has assigned the
    /// stream id. Tags are kept with the stream (the token's `applyTags` are added).
    ///
    /// - Throws: ``PCastError/refused(_:_:)`` with the platform's status for a refused token.
    public func publish(streamToken: String, mediaStream: UserMediaStream, tags: [String] = [],
                        settings: EncodingSettings = EncodingSettings(),
                        publishType: PublishType = .live, streamName: String? = nil) async throws(PCastError) -> Publisher {
        try await publish(streamToken: streamToken, media: mediaStream.mediaStream, tags: tags, settings: settings,
                          publishType: publishType, streamName: streamName)
    }

    /// Publishes a stream this SDK subscribed to (the PCast iOS SDK's re-publish): its decoded media is
    /// encoded again (with `settings`) and published as a stream of its own, e.g. to carry a
    /// stream into another platform or room. When the subscribed stream ends, so does this one,
    /// with the same reason.
    ///
    /// ```swift
    /// let remote = try await pcast.subscribe(streamToken: viewToken)
    /// let again = try await otherPlatform.publish(streamToken: publishToken, subscribedStream: remote)
    /// ```
    ///
    /// - Throws: ``PCastError/invalidRequest(_:)`` for a stream that has ended or carries no
    ///   track; otherwise as the publish of local media.
    public func publish(streamToken: String, subscribedStream: MediaStream, tags: [String] = [],
                        settings: EncodingSettings = EncodingSettings(),
                        publishType: PublishType = .live, streamName: String? = nil) async throws(PCastError) -> Publisher {
        guard subscribedStream.endReason == nil else { throw .invalidRequest("the subscribed stream has ended") }
        guard !subscribedStream.getTracks().isEmpty else { throw .invalidRequest("the subscribed stream carries no track") }
        return try await publish(streamToken: streamToken, media: subscribedStream, tags: tags, settings: settings,
                                 publishType: publishType, streamName: streamName)
    }

    private func publish(streamToken: String, media mediaStream: MediaStream, tags: [String], settings: EncodingSettings,
                         publishType: PublishType, streamName: String?) async throws(PCastError) -> Publisher {
        _ = try signaling()
        let socketBox = SocketSlot()
        let rtp: RTPPublisher
        do {
            rtp = try await RTPPublisher.start(stream: mediaStream, settings: settings,
                                               simulcast: Self.grantsSimulcast(streamToken), ceiling: Self.qualityCeiling(streamToken)) { packet in
                socketBox.value.withLock { $0 }?.send(packet)
            }
        } catch {
            throw .media(error)
        }
        let publisher = try await announce(rtp, socketBox: socketBox, streamToken: streamToken, tags: tags, publishType: publishType, streamName: streamName)
        // The media's end is the stream's: a file that played out ends it as `ended` (viewers
        // hear why instead of watching a stream that carries nothing), a failed source as `failed`.
        // The observer goes when the publisher ends first: media published over and over (a
        // camera across many publishes) must not collect one per publish.
        let media = mediaStream
        let observer = media.observeEnd { [weak publisher] end in
            guard let publisher, !publisher.hasEnded else { return }
            Task {
                switch end {
                case .endOfStream: await publisher.stop(reason: .ended, description: "the source ended")
                case .failed(let why): await publisher.stop(reason: .failed, description: "the source failed: \(why)")
                case .stopped: await publisher.stop(reason: .ended, description: "the local media stopped")
                // A re-published stream ends as the stream it re-publishes did.
                case .remote(let reason, let why): await publisher.stop(reason: reason, description: why ?? "the subscribed stream ended")
                }
            }
        }
        if let observer {
            publisher.setPublisherEndedCallback { _, _ in media.removeEndObserver(observer) }
        }
        return publisher
    }

    /// Whether a publish token carries the `multi-bitrate` capability: the video is then sent as
    /// three simulcast layers and each viewer is sent the one its link carries. Read from the
    /// token's claims, which anyone may read (the platform checks the digest).
    static func grantsSimulcast(_ streamToken: String) -> Bool {
        guard case .some(let token) = try? DigestToken.decode(streamToken) else { return false }
        return token.claims.capabilities.contains(SimulcastLayer.capability)
    }

    /// The largest video a publish token allows (its `hd`, `sd`, … capability, see
    /// ``QualityCeiling``): the SDK scales its video to fit before encoding.
    static func qualityCeiling(_ streamToken: String) -> QualityCeiling? {
        guard case .some(let token) = try? DigestToken.decode(streamToken) else { return nil }
        return QualityCeiling(capabilities: token.claims.capabilities)
    }

    /// Publishes a remote source (a URI GStreamer can pull, or pushed FLV) without decoding its
    /// H.264 — the same as the platform's ingest, run here. The stream ends as `ended` when the
    /// source ends (or as `failed` with the reason when it fails).
    ///
    /// - Throws: ``PCastError/media(_:)`` when the source cannot be opened; the platform's refusals.
    public func publish(streamToken: String, ingest source: IngestSource, options ingestOptions: IngestOptions = IngestOptions(),
                        tags: [String] = [], publishType: PublishType = .live, streamName: String? = nil) async throws(PCastError) -> Publisher {
        _ = try signaling()
        let socketBox = SocketSlot()
        let ingest: IngestPublisher
        do {
            ingest = try await IngestPublisher.start(source, options: ingestOptions) { packet in
                socketBox.value.withLock { $0 }?.send(packet)
            }
        } catch {
            throw .media(error)
        }
        let publisher = try await announce(ingest, socketBox: socketBox, streamToken: streamToken, tags: tags, publishType: publishType, streamName: streamName)
        Task { [weak publisher] in
            do throws(MediaError) { try await ingest.begin() } catch {
                await publisher?.stop(reason: .failed, description: error.description)
                return
            }
            let end = await ingest.ended()
            guard let publisher, !publisher.hasEnded else { return }
            switch end {
            case .endOfStream: await publisher.stop(reason: .ended, description: "the source ended")
            case .stopped: await publisher.stop(reason: .ended)
            case .timeout, .noData, .tooLarge, .failed: await publisher.stop(reason: .failed, description: end.description)
            }
        }
        return publisher
    }

    /// Announces an RTP source to the platform and connects its media socket.
    private func announce(_ rtp: any RTPSource, socketBox: SocketSlot, streamToken: String, tags: [String], publishType: PublishType,
                          streamName: String?) async throws(PCastError) -> Publisher {
        let client: SignalingClient
        do { client = try signaling() } catch {
            await rtp.stop()
            throw error
        }
        let reply: ServerMessage
        do {
            reply = try await client.request(.publish(.init(streamToken: streamToken, tags: tags, publishType: publishType,
                                                            streamName: streamName, tracks: rtp.tracks)))
        } catch {
            await rtp.stop()
            throw error
        }
        guard case .published(let published) = reply else {
            await rtp.stop()
            throw .invalidRequest("unexpected reply to publish: \(reply.type)")
        }
        do {
            let route = await mediaRoute(published.transport)
            let socket = try MediaSocket(host: route.host, transport: route.transport, rtcpSenderSSRC: nil, path: route.path,
                                         answersRetransmissions: true,
                                         onRTP: { _, _ in }, onRTCP: { rtcp in rtp.receiveRTCP(rtcp) })
            socketBox.value.withLock { $0 = socket }
            // Tell the relay where this flow is before any media: a source that waits for its first
            // viewer's keyframe request (a passed-through file) must be reachable for that request.
            if rtp is IngestPublisher, let first = rtp.tracks.first { socket.sendEmptyReceiverReport(ssrc: first.ssrc) }
        } catch {
            _ = try? await client.request(.unpublish(.init(streamId: published.streamId, reason: .failed, description: error.description)))
            await rtp.stop()
            throw error
        }
        let publisher = Publisher(streamId: published.streamId, rtp: rtp, socket: socketBox, pcast: self)
        state.withLock { $0.publishers[published.streamId] = publisher }
        if let encoder = rtp as? RTPPublisher { reportQuality(of: publisher, encoder) }
        logger.info("publishing", metadata: ["stream": "\(published.streamId)", "tracks": "\(rtp.tracks.map(\.kind.rawValue))"])
        return publisher
    }

    /// Tells the platform, for the stream's viewers, why the publisher's quality is reduced
    /// (`uploadLimited` / `networkLimited` / `none`) once a new reason has held for two seconds.
    private func reportQuality(of publisher: Publisher, _ rtp: RTPPublisher) {
        let streamId = publisher.streamId
        Task { [weak self, weak publisher] in
            var sent = PublisherQualityReason.none, pending: PublisherQualityReason?
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                guard let self, let publisher, !publisher.hasEnded else { return }
                let reason: PublisherQualityReason = rtp.isUploadLimited ? .uploadLimited : (rtp.isNetworkLimited ? .networkLimited : .none)
                guard reason != sent else { pending = nil; continue }
                guard pending == reason else { pending = reason; continue }
                sent = reason
                pending = nil
                await self.requestWhenOnline(.publisherQuality(.init(streamId: streamId, reason: reason)))
            }
        }
    }

    /// Subscribes with a stream token; returns the remote stream (create a renderer to show it).
    /// Stopping the stream unsubscribes.
    ///
    /// - Throws: ``PCastError/refused(_:_:)``: `unauthorized` for a bad token, `not-found` or
    ///   `no-stream-playing` when there is nothing to subscribe to.
    ///
    /// `layer` matters for a simulcast (a stream published with `multi-bitrate`): by default the
    /// relay sends the best layer this viewer's link carries and moves it as the link changes;
    /// ``LayerSelection/best``, ``LayerSelection/lowest`` or a RID keep it on one.
    ///
    /// `tags` are the application's for this subscription (who watches, from where): the platform
    /// keeps them with it and tells them to the backend with the viewer's notifications.
    public func subscribe(streamToken: String, playoutDelay: Duration? = nil, layer: LayerSelection = .adaptive,
                          tags: [String] = []) async throws(PCastError) -> MediaStream {
        let delay = options.playoutDelaySetting(playoutDelay), impairment = options.receiveImpairment
        return try await openSubscription(streamToken: streamToken, layer: layer, tags: tags, streaming: { source throws(PCastError) in
            try await self.playStreaming(source, streamToken: streamToken)
        }) { tracks, since, sendRTCP throws(MediaError) in
            try await RTPReceiver.start(tracks: tracks, playoutDelay: delay, impairment: impairment, runningSince: since, sendRTCP: sendRTCP)
        }.stream
    }

    /// Plays a stream the platform delivers as HLS (the stream token has the `streaming`
    /// capability and not `real-time`): the playlist from the platform's HTTP (the signaling
    /// node's host and port, `http` for `ws` and `https` for `wss`), rewritten by
    /// ``PCastOptions/streamingSourceMapping`` when the application set one, with the token in
    /// its query. The stream ends when the playlist does; ``PCast/stop()`` stops it.
    /// A private CA: the playlist and parts through the SDK's own HTTP client, which trusts it.
    private static func httpsGet(_ trust: SignalingTrust) -> HLSReceiver.Get {
        { url in
            let answer = try await HTTPSExchange(trust: trust).send("GET", url)
            return (answer.body, answer.status)
        }
    }

    private func playStreaming(_ source: ServerMessage.StreamingSource, streamToken: String) async throws(PCastError) -> MediaStream {
        var url = try Self.streamingURL(signaling: currentURI, playlistPath: source.playlistPath, streamToken: streamToken)
        if let mapping = options.streamingSourceMapping { url = try mapping.apply(to: url) }
        let kinds = Set(source.tracks.map { $0.kind == .video ? MediaType.video : .audio })
        let trust = SignalingTrust(options)
        let get = trust.isCustom ? Self.httpsGet(trust) : HLSReceiver.systemGet
        let stream: MediaStream
        do {
            (_, stream) = try await HLSReceiver.start(url: url, kinds: kinds,
                                                      delivery: options.streamingPlayback == .lowLatency ? .parts : .segments,
                                                      get: get, customTrust: trust.isCustom)
        } catch {
            throw .media(error)
        }
        logger.info("playing as HLS", metadata: ["pcast.stream": .string(source.streamId), "pcast.url": .string(url.split(separator: "?")[0].description)])
        let key = ObjectIdentifier(stream)
        state.withLock { $0.streamingStreams[key] = stream }
        Task { [weak self] in
            _ = await stream.ended()
            self?.state.withLock { _ = $0.streamingStreams.removeValue(forKey: key) }
        }
        return stream
    }

    /// `http(s)://<signaling host:port><playlistPath>?token=<stream token>`.
    static func streamingURL(signaling: String, playlistPath: String, streamToken: String) throws(PCastError) -> String {
        guard var components = URLComponents(string: signaling), let scheme = components.scheme?.lowercased(), components.host != nil else {
            throw .invalidRequest("the signaling URI '\(signaling)' has no host to fetch HLS from")
        }
        components.scheme = scheme == "wss" || scheme == "https" ? "https" : "http"
        components.path = playlistPath
        components.percentEncodedQuery = HLSAddress.tokenQuery(streamToken)
        guard let url = components.string else { throw .invalidRequest("cannot make an HLS URL from '\(signaling)'") }
        return url
    }

    /// Subscribes without decoding: each H.264 access unit and Opus packet goes to `onSample`
    /// (on a streaming thread) as it arrives, with its caps. For elements of ours that hand the
    /// encoded media on (`pcastsrc decode=false`). Stopping the stream unsubscribes.
    /// `onTracks` hears the stream's kinds before the first sample.
    package func subscribeEncoded(streamToken: String, playoutDelay: Duration? = nil,
                                  onTracks: (Set<MediaType>) -> Void,
                                  onSample: @escaping @Sendable (MediaType, Sample) -> Void) async throws(PCastError) -> MediaStream {
        let delay = options.playoutDelaySetting(playoutDelay)
        return try await openSubscription(streamToken: streamToken) { tracks, since, sendRTCP throws(MediaError) in
            onTracks(Set(tracks.map { $0.kind == .video ? MediaType.video : .audio }))
            return try await RTPReceiver.startEncoded(tracks: tracks, playoutDelay: delay, runningSince: since, onSample: onSample, sendRTCP: sendRTCP)
        }.stream
    }

    /// Records a stream into a fragmented MP4 file at `path` without decoding it (see
    /// ``MediaRecorder``): `.record` replaces the file, `.append` continues it after its end. The
    /// recording follows the stream until it ends or ``StreamRecording/stop()`` is called. A
    /// simulcast is recorded from its best layer throughout.
    ///
    /// - Throws: the refusals of ``subscribe(streamToken:playoutDelay:layer:)``.
    public func record(streamToken: String, to path: String, mode: RecordingMode = .record) async throws(PCastError) -> StreamRecording {
        try await record(streamToken: streamToken, into: MediaRecorder(path: path, mode: mode))
    }

    /// Records a stream in memory for live packaging (the platform's HLS): the fragments go to
    /// `consumer` as they are cut, at every keyframe and at most `fragmentDuration` long. The best
    /// layer of a simulcast is taken throughout.
    package func package(streamToken: String, into consumer: any FragmentConsumer, fragmentDuration: Duration) async throws(PCastError) -> StreamRecording {
        try await record(streamToken: streamToken, into: MediaRecorder(consumer: consumer, fragmentDuration: fragmentDuration))
    }

    /// The best layer, depayloaded into `recorder` until the stream ends or the recording stops.
    private func record(streamToken: String, into recorder: MediaRecorder) async throws(PCastError) -> StreamRecording {
        let (streamId, stream) = try await openSubscription(streamToken: streamToken, layer: .best) { tracks, since, sendRTCP throws(MediaError) in
            try await RTPReceiver.startRecording(tracks: tracks, into: recorder, runningSince: since, sendRTCP: sendRTCP)
        }
        return StreamRecording(streamId: streamId, stream: stream, recorder: recorder)
    }

    /// Subscribes and connects the flow's socket to a receive engine `start` builds for the tracks.
    /// A `streaming` token is answered with the stream's HLS source: `streaming` plays it, and
    /// without one (recording, encoded subscriptions) it is refused.
    private func openSubscription(
        streamToken: String, layer: LayerSelection = .adaptive, tags: [String] = [],
        streaming: ((ServerMessage.StreamingSource) async throws(PCastError) -> MediaStream)? = nil,
        start: (_ tracks: [MediaTrackDescription], _ runningSince: Duration?,
                _ sendRTCP: @escaping @Sendable (Buffer) -> Void) async throws(MediaError) -> (RTPReceiver, MediaStream)
    ) async throws(PCastError) -> (streamId: String, stream: MediaStream) {
        let client = try signaling()
        let reply = try await client.request(.subscribe(.init(streamToken: streamToken, layer: layer.requested, tags: tags.isEmpty ? nil : tags)))
        if case .streamingSource(let source) = reply {
            guard let streaming else {
                throw .invalidRequest("the stream token asks for HLS delivery ('streaming' without 'real-time'); this needs the real-time stream")
            }
            return (source.streamId, try await streaming(source))
        }
        guard case .subscribed(let subscribed) = reply else {
            throw .invalidRequest("unexpected reply to subscribe: \(reply.type)")
        }
        guard let rtcpSSRC = subscribed.transport.rtcpSSRC else {
            _ = try? await client.request(.unsubscribe(.init(streamId: subscribed.streamId, subscriberId: subscribed.subscriberId)))
            throw .invalidTransport("the platform assigned no RTCP SSRC")
        }
        // The flow opens before the receive engine is built (tens of milliseconds): the relay
        // starts sending once it hears from us, and what comes meanwhile, often the keyframe asked
        // for this viewer, waits in the inbox instead of behind the build.
        let inbox = PacketInbox(), slot = SocketSlot()
        let socket: MediaSocket
        do {
            let route = await mediaRoute(subscribed.transport)
            socket = try Subscription.openSocket(host: route.host, transport: route.transport, rtcpSSRC: rtcpSSRC, path: route.path, into: inbox)
        } catch {
            _ = try? await client.request(.unsubscribe(.init(streamId: subscribed.streamId, subscriberId: subscribed.subscriberId)))
            throw error
        }
        slot.value.withLock { $0 = socket }
        let receiver: RTPReceiver, stream: MediaStream
        do {
            // Its running time starts no later than the first packet that waited, or than now when
            // none has come yet (one arriving while the pipeline is built is later than that).
            (receiver, stream) = try await start(subscribed.tracks, inbox.firstArrival ?? Pipeline.systemClockTime) { rtcp in
                slot.value.withLock { $0 }?.send(OutgoingPacket(kind: .rtcp, buffer: rtcp))
            }
        } catch {
            slot.value.withLock { slot in defer { slot = nil }; return slot }?.shutdown()
            _ = try? await client.request(.unsubscribe(.init(streamId: subscribed.streamId, subscriberId: subscribed.subscriberId)))
            throw .media(error)
        }
        inbox.open(to: receiver)
        let subscription = Subscription(streamId: subscribed.streamId, streamToken: streamToken, layer: layer.requested, tags: tags, tracks: subscribed.tracks,
                                        stream: stream, receiver: receiver, inbox: inbox, slot: slot)
        _ = subscription.adopt(socket, subscriberId: subscribed.subscriberId, rtcpSSRC: rtcpSSRC)
        // A session may subscribe to one stream several times: each subscription is its own.
        state.withLock { $0.subscriptions[subscription.key] = subscription }
        let streamId = subscribed.streamId
        // A viewer's limitBandwidth on the video track asks the publisher through the platform,
        // one request after another so the last one said is the one that holds. The subscriber
        // id is read when the request goes: the flow may have moved to another node.
        let requests = SerialRequests()
        // The size its renderers show the video at chooses a simulcast viewer's layer.
        stream.setViewSizeRequester { [weak self, weak subscription] size in
            guard let pcast = self, let subscription else { return }
            requests.enqueue { [weak pcast] in
                await pcast?.requestWhenOnline(.setViewSize(.init(streamId: streamId, subscriberId: subscription.subscriberId,
                                                                  size: size.map { ViewSize(width: $0.width, height: $0.height) })))
            }
        }
        for track in stream.getVideoTracks() {
            track.setBandwidthRequester { [weak self, weak subscription] bitsPerSecond in
                guard let pcast = self, let subscription else { return }
                requests.enqueue { [weak pcast] in
                    await pcast?.requestWhenOnline(.limitBandwidth(.init(streamId: streamId, subscriberId: subscription.subscriberId, bitsPerSecond: bitsPerSecond)))
                }
            }
        }
        receiver.onStop { [weak self] in
            guard case .some(let subscriberId) = subscription.close(),
                  let self, self.state.withLock({ $0.subscriptions.removeValue(forKey: subscription.key) }) != nil else { return }
            await self.requestWhenOnline(.unsubscribe(.init(streamId: streamId, subscriberId: subscriberId)))
        }
        logger.info("subscribed", metadata: ["stream": "\(streamId)", "tracks": "\(subscribed.tracks.map(\.kind.rawValue))"])
        return (streamId, stream)
    }

    /// Subscribes again, on the node of a new session, to a stream the previous session watched
    /// (its node stopped or crashed, or the session could not be resumed), and moves the
    /// subscription's flow there: the viewer's stream, renderers and taps keep going. Ends the
    /// stream as `failed` when it cannot follow: the stream is gone (it lived on the lost node),
    /// the token no longer admits it, or the platform now describes other tracks.
    func follow(_ subscription: Subscription, on client: SignalingClient) async {
        let streamId = subscription.streamId
        var subscribed: ServerMessage.Subscribed?
        let refusal: String?
        do throws(PCastError) {
            let reply = try await client.request(.subscribe(.init(streamToken: subscription.streamToken, layer: subscription.layer,
                                                                  tags: subscription.tags.isEmpty ? nil : subscription.tags)))
            guard case .subscribed(let answer) = reply else { throw .invalidRequest("unexpected reply to subscribe: \(reply.type)") }
            subscribed = answer
            guard answer.streamId == streamId else { throw .invalidRequest("the token now leads to another stream (\(answer.streamId))") }
            guard Set(answer.tracks) == Set(subscription.tracks) else { throw .invalidTransport("the stream's tracks differ on this node") }
            guard let rtcpSSRC = answer.transport.rtcpSSRC else { throw .invalidTransport("the platform assigned no RTCP SSRC") }
            let route = await mediaRoute(answer.transport)
            guard try subscription.attach(subscriberId: answer.subscriberId, host: route.host, transport: route.transport, rtcpSSRC: rtcpSSRC,
                                          path: route.path) else {
                // Stopped while it moved: the new flow goes too.
                _ = try? await client.request(.unsubscribe(.init(streamId: streamId, subscriberId: answer.subscriberId)))
                return
            }
            refusal = nil
        } catch {
            refusal = error.description
        }
        guard let refusal else {
            // A limit the viewer set holds on the new node too.
            for track in subscription.stream.getVideoTracks() { track.reapplyBandwidthLimit() }
            subscription.stream.reapplyViewSize()
            logger.info("subscription followed to the new session's node", metadata: ["stream": "\(streamId)"])
            return
        }
        if let subscribed {
            _ = try? await client.request(.unsubscribe(.init(streamId: streamId, subscriberId: subscribed.subscriberId)))
        }
        logger.warning("subscription could not follow to the new session's node", metadata: ["stream": "\(streamId)", "reason": "\(refusal)"])
        guard state.withLock({ $0.subscriptions.removeValue(forKey: subscription.key) }) != nil else { return }
        subscription.finish(.failed, "the session moved to another node and the stream could not follow: \(refusal)")
    }
}

/// Runs async operations one after another, in the order they were enqueued.
final class SerialRequests: Sendable {
    private let last = Mutex<Task<Void, Never>?>(nil)

    func enqueue(_ operation: @escaping @Sendable () async -> Void) {
        last.withLock { last in
            let previous = last
            last = Task {
                await previous?.value
                await operation()
            }
        }
    }
}

/// Where packets go once the flow's socket exists (media starts before the platform answers).
final class SocketSlot: Sendable {
    let value = Mutex<MediaSocket?>(nil)
}

/// Where a subscription's sockets deliver. Packets that arrive before the receive engine exists
/// wait here, up to ``capacity`` (about a second of 720p video), and reach it in their order, with
/// the times they arrived, when it opens; after that, each goes straight through.
final class PacketInbox: Sendable {
    /// Where packets go once the inbox is open: an RTP packet with its payload type and, for one
    /// that waited, its arrival on the system clock (``Pipeline/systemClockTime``); an RTCP packet.
    struct Destination: Sendable {
        let rtp: @Sendable (Buffer, UInt8, Duration?) -> Void
        let rtcp: @Sendable (Buffer) -> Void
    }
    private enum Waiting {
        case rtp(Buffer, UInt8, arrived: Duration)
        case rtcp(Buffer)
    }
    private struct State: @unchecked Sendable {
        var destination: Destination?
        var waiting: [Waiting] = []
        var dropped = 0

        mutating func wait(_ item: Waiting) {
            if waiting.count < PacketInbox.capacity { waiting.append(item) } else { dropped += 1 }
        }
    }
    private let state = Mutex(State())
    static let capacity = 512

    /// Packets that came while it was full (dropped: the jitter buffer asks for them again).
    var dropped: Int { state.withLock { $0.dropped } }

    /// When the first packet that is waiting arrived (system clock); nil when none waits.
    var firstArrival: Duration? {
        state.withLock { state in
            guard case .rtp(_, _, let arrived)? = state.waiting.first(where: { if case .rtp = $0 { true } else { false } }) else { return nil }
            return arrived
        }
    }

    func rtp(_ packet: Buffer, payloadType: UInt8) {
        let destination = state.withLock { state -> Destination? in
            if state.destination == nil { state.wait(.rtp(packet, payloadType, arrived: Pipeline.systemClockTime)) }
            return state.destination
        }
        destination?.rtp(packet, payloadType, nil)
    }

    func rtcp(_ packet: Buffer) {
        let destination = state.withLock { state -> Destination? in
            if state.destination == nil { state.wait(.rtcp(packet)) }
            return state.destination
        }
        destination?.rtcp(packet)
    }

    /// Hands what waited to `destination`, in order, and everything after it as it comes. A packet
    /// arriving meanwhile waits for the lock, so none overtakes those that waited.
    func open(to destination: Destination) {
        state.withLock { state in
            for item in state.waiting {
                switch item {
                case .rtp(let packet, let payloadType, let arrived): destination.rtp(packet, payloadType, arrived)
                case .rtcp(let packet): destination.rtcp(packet)
                }
            }
            state.waiting = []
            state.destination = destination
        }
    }

    func open(to receiver: RTPReceiver) {
        open(to: Destination(rtp: { receiver.receiveRTP($0, payloadType: $1, arrivedAt: $2) }, rtcp: { receiver.receiveRTCP($0) }))
    }
}

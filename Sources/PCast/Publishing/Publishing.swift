import Foundation
import GStreamer
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
        logger.info("publishing", metadata: ["stream": "\(published.streamId)", "tracks": "\(rtp.tracks.map { "\($0.kind.rawValue) \($0.codec)" })"])
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

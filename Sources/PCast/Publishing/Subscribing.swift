import Foundation
package import GStreamer
import Logging
import PCastMedia
import PCastProtocol
import Synchronization

// The subscribe side of the SDK: subscribing (over RTP, or as HLS where the platform sends the
// stream that way), recording a subscribed stream, a subscription's flow, and where its packets
// wait until the receive engine exists.

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
        logger.info("subscribed", metadata: ["stream": "\(streamId)", "tracks": "\(subscribed.tracks.map { "\($0.kind.rawValue) \($0.codec)" })"])
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
    // Unchecked: holds GStreamer buffers waiting for the engine, reached only inside the inbox's `Mutex`.
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

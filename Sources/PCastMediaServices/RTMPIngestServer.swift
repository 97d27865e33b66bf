import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PCast
import PCastContracts
import PCastMedia
import PCastProtocol
import PCastTLS
import Synchronization

/// The platform's RTMP push endpoint: ffmpeg, OBS or any RTMP encoder publishes to
/// `rtmp://HOST:PORT/live/<publish token>` and the stream appears on the platform like any other
/// (H.264 and H.265 passed through, audio converted to Opus). H.265 comes in enhanced RTMP (the
/// `hvc1` FourCC) or as the older codec id 12; the stream is announced in the codec of the first
/// video message, so the publish is accepted first and its media held until then.
///
/// The stream key is the publish token, optionally followed by `?name=<stream name>` and
/// `&type=record|append|live`: the platform's publish type. Without `type=` the RTMP publish type
/// applies, but ffmpeg and OBS always send `live`, so they ask for a recording in the key:
/// `<token>?name=show&type=append`. Names are checked, not decoded: `%2e%2e` is refused.
/// The key is checked before any media pipeline is built: a forged, expired or wrong-type token is
/// answered with `NetStream.Publish.BadName` and the connection closed. Video in a codec the
/// platform does not carry is refused once it shows, with `NetStream.Publish.Failed` naming it. Tokens bound to a session
/// cannot be used here (the push has no signaling session).
///
/// Protocol limits come from ``RTMPServerSession``: chunk sizes, message sizes and name lengths are
/// bounded, and a violation closes the connection. A connection that has not started publishing
/// within ``setupTimeout`` is closed. Connections are admitted by ``RTMPAdmission``: publishing
/// encoders and connections still in their handshake have budgets of their own, so handshakes
/// that never finish, from one address or many, cannot take the places of encoders.
///
/// With a TLS certificate the same endpoint speaks RTMPS (`rtmps://host:port/live/<token>`).
///
/// ```swift
/// let server = try await RTMPIngestServer.start(host: "0.0.0.0", port: 1935, ingest: ingest, authorizer: tokens, logger: logger)
/// print(server.port)
/// await server.shutdown()
/// ```
final class RTMPIngestServer: Sendable {
    /// The port it listens on (the bound one when asked for 0).
    let port: Int
    static let setupTimeout: Duration = .seconds(10)
    /// How long a publish refused after it started stays open for its encoder to read why.
    static let refusalLinger: Duration = .seconds(5)
    private let channel: any Channel
    private let acceptTask: Task<Void, Never>

    private init(port: Int, channel: any Channel, acceptTask: Task<Void, Never>) {
        self.port = port
        self.channel = channel
        self.acceptTask = acceptTask
    }

    /// Binds the listener and starts accepting connections.
    static func start(host: String, port: Int, ingest: IngestService, authorizer: any PublishAuthorizing,
                      limits: (perAddress: Int, total: Int) = (8, 64), tls: TLSCertificateStore? = nil,
                      logger: Logger) async throws -> RTMPIngestServer {
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(host: host, port: port) { child in
                child.eventLoop.makeCompletedFuture {
                    // RTMPS: TLS below the RTMP bytes, the certificate current at accept.
                    if let tls { try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls.context)) }
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: child)
                }
            }
        let bound = listener.channel.localAddress?.port ?? port
        let serverChannel = listener.channel
        let scheme = tls == nil ? "rtmp" : "rtmps"
        let admission = RTMPAdmission(limits: .init(perAddress: limits.perAddress, publishers: limits.total))
        let acceptTask = Task {
            do {
                try await listener.executeThenClose { inbound in
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await connection in inbound {
                            let address = connection.channel.remoteAddress?.ipAddress ?? "?"
                            guard let ticket = admission.arrive(address: address, channel: connection.channel) else {
                                logger.debug("\(scheme) connection refused: too many handshakes from one address", metadata: ["pcast.remote": .string(address)])
                                try? await connection.channel.close()
                                continue
                            }
                            group.addTask {
                                defer { admission.leave(ticket) }
                                await RTMPPushConnection(ingest: ingest, authorizer: authorizer, logger: logger,
                                                         startsPublishing: { admission.promote(ticket) }).serve(connection)
                            }
                        }
                    }
                }
            } catch {
                logger.debug("\(scheme) listener closed: \(error)")
            }
        }
        logger.info("\(scheme) push endpoint listening", metadata: ["pcast.rtmp": "\(host):\(bound)"])
        return RTMPIngestServer(port: bound, channel: serverChannel, acceptTask: acceptTask)
    }

    /// Stops listening and closes every connection (their streams end).
    func shutdown() async {
        try? await channel.close()
        acceptTask.cancel()
        await acceptTask.value
    }
}

/// One push connection: drives an ``RTMPServerSession`` with the bytes read and performs its
/// actions: replies, the key check, FLV into the ingest, closing.
struct RTMPPushConnection {
    let ingest: IngestService
    let authorizer: any PublishAuthorizing
    let logger: Logger
    /// Asked when a publish is requested: whether the endpoint has a publisher's place for it
    /// (``RTMPAdmission/promote(_:)``).
    var startsPublishing: @Sendable () -> Bool = { true }

    /// What a stream key says: the publish token, an optional stream name (`?name=`) and an
    /// optional publish type (`&type=`).
    struct StreamKey: Equatable {
        var token: String
        var streamName: String?
        var publishType: String?

        /// Splits `<token>[?name=<stream name>][&type=<publish type>]`; other query items are ignored.
        init(_ key: String) {
            guard let mark = key.firstIndex(of: "?") else {
                token = key
                return
            }
            token = String(key[..<mark])
            let query = key[key.index(after: mark)...]
            for item in query.split(separator: "&") {
                let parts = item.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                switch parts[0] {
                case "name": streamName = String(parts[1])
                case "type": publishType = String(parts[1])
                default: break
                }
            }
        }
    }

    /// A publish whose key was checked and accepted, waiting for its first video to say the codec
    /// its stream is announced in.
    struct Admission {
        let token: String
        let publishType: PublishType
        let streamName: String?
    }

    /// How long an accepted publish's media is held for its video to say its codec (an audio-only
    /// push without metadata waits this long), and how much of it.
    static let codecWait: Duration = .seconds(3)
    static let codecWaitBytes = 4 << 20

    func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        let remote = connection.channel.remoteAddress?.ipAddress
        var session = RTMPServerSession(configuration: .init(applications: ["live"]))
        var flv = FLVWriter()
        var publisher: Publisher?
        var video = VideoCodec.h264
        // Accepted, not started yet: the media that came meanwhile.
        var admission: Admission?
        var held: [RTMPServerSession.Action] = []
        var heldBytes = 0
        var heldSince: ContinuousClock.Instant?
        var dropped = 0
        let channel = connection.channel
        // Nothing published in time: close (the read loop then ends).
        let setupTimer = Task {
            try? await Task.sleep(for: RTMPIngestServer.setupTimeout)
            if !Task.isCancelled { try? await channel.close() }
        }
        defer { setupTimer.cancel() }
        do {
            try await connection.executeThenClose { inbound, outbound in
                var closing = false, lingers = false
                func perform(_ actions: [RTMPServerSession.Action]) async throws {
                    for action in actions {
                        switch action {
                        case .send(let bytes):
                            try await outbound.write(ByteBuffer(bytes: bytes))
                        case .publishRequested(_, let key, let type):
                            guard startsPublishing() else {
                                logger.warning("rtmp publish refused: the endpoint is at capacity", metadata: ["pcast.remote": .string(remote ?? "?")])
                                try await perform(session.reject("the RTMP endpoint is at capacity"))
                                continue
                            }
                            switch check(StreamKey(key), type: type, remote: remote) {
                            case .success(let admitted):
                                // Accepted now: an encoder sends its media (whose codec the
                                // stream is announced in) only once its publish has started.
                                admission = admitted
                                try await perform(session.accept())
                            case .failure(let failure):
                                logger.notice("rtmp publish refused", metadata: ["pcast.remote": .string(remote ?? "?"), "pcast.reason": .string(failure.message)])
                                try await perform(session.reject(failure.message))
                            }
                        case .audio, .video, .metadata:
                            if let ingest = publisher?.ingest {
                                route(action, to: ingest, video: video, flv: &flv, dropped: &dropped)
                                continue
                            }
                            guard let admitted = admission else { continue }
                            held.append(action)
                            heldBytes += Self.size(of: action)
                            let since = heldSince ?? .now
                            heldSince = since
                            guard let codec = Self.announcedCodec(of: action, waited: ContinuousClock.now - since, heldBytes: heldBytes) else { continue }
                            admission = nil
                            guard let chosen = Self.carried(codec) else {
                                let reason = "RTMP video in \(codec) is not carried: push H.264 or H.265"
                                logger.notice("rtmp publish refused", metadata: ["pcast.remote": .string(remote ?? "?"), "pcast.reason": .string(reason)])
                                lingers = true
                                try await perform(session.reject(reason, code: "NetStream.Publish.Failed"))
                                continue
                            }
                            switch await ingest.startPushed(streamToken: admitted.token, publishType: admitted.publishType, streamName: admitted.streamName,
                                                            video: chosen, remote: remote) {
                            case .success(let started):
                                publisher = started
                                video = chosen
                                setupTimer.cancel()
                                // The ingest ending (source silent, platform stopping) closes the connection.
                                started.setPublisherEndedCallback { _, _ in channel.close(promise: nil) }
                                // H.265 goes to the ingest as frames: the FLV carries the audio.
                                flv = FLVWriter(hasAudio: true, hasVideo: chosen == .h264)
                                if let ingest = started.ingest {
                                    for action in held { route(action, to: ingest, video: chosen, flv: &flv, dropped: &dropped) }
                                }
                                held = []
                            case .failure(let failure):
                                held = []
                                logger.notice("rtmp publish refused", metadata: ["pcast.remote": .string(remote ?? "?"), "pcast.reason": .string(failure.message)])
                                lingers = true
                                try await perform(session.reject(failure.message))
                            }
                        case .ended(let reason):
                            logger.info("rtmp publish ended", metadata: ["pcast.reason": "\(reason)", "pcast.stream": .string(publisher?.streamId ?? "-")])
                            publisher?.ingest?.endPushedStream()
                        case .close:
                            // An encoder refused once publishing reads the server's messages
                            // only after its next write (FFmpeg: a second or more later, its
                            // encoder's delay): closed at once, it sees a broken pipe instead of
                            // the reason. Its input is read and ignored until it hangs up or
                            // ``refusalLinger`` passes.
                            if lingers {
                                Task {
                                    try? await Task.sleep(for: RTMPIngestServer.refusalLinger)
                                    try? await channel.close()
                                }
                            } else {
                                closing = true
                            }
                        case .connected, .refused:
                            break
                        }
                    }
                }
                for try await buffer in inbound {
                    try await perform(try session.receive(Array(buffer.readableBytesView)))
                    if closing { return }
                }
                try await perform(session.connectionClosed())
            }
        } catch {
            logger.notice("rtmp connection closed: \(error)", metadata: ["pcast.remote": .string(remote ?? "?")])
        }
        if dropped > 0 {
            logger.warning("rtmp push: video messages dropped (unreadable, or not in the stream's codec)",
                           metadata: ["pcast.stream": .string(publisher?.streamId ?? "-"), "pcast.count": "\(dropped)"])
        }
        // However it ended, the stream it fed ends once the queued media played out.
        publisher?.ingest?.endPushedStream()
    }

    /// The codec an accepted publish's stream is announced in, once its media says it: its first
    /// video message's; H.264 (the default) when its metadata announces no video, or once
    /// ``codecWait`` or ``codecWaitBytes`` passed without video (audio only). Nil: hold on.
    static func announcedCodec(of action: RTMPServerSession.Action, waited: Duration, heldBytes: Int) -> FLVVideoTag.Codec? {
        switch action {
        case .video(_, let payload):
            if let (codec, _) = FLVVideoTag.codec(of: payload) { return codec }
        case .metadata(let object, _):
            if !FLVWriter.streams(announcedIn: object).video { return .h264 }
        default:
            break
        }
        return waited >= codecWait || heldBytes >= codecWaitBytes ? .h264 : nil
    }

    /// The ingest's codec for a pushed one; nil for those it does not carry.
    static func carried(_ codec: FLVVideoTag.Codec) -> VideoCodec? {
        switch codec {
        case .h264: return .h264
        case .h265: return .h265
        default: return nil
        }
    }

    static func size(of action: RTMPServerSession.Action) -> Int {
        switch action {
        case .audio(_, let payload), .video(_, let payload): return payload.count
        default: return 64
        }
    }

    /// One media message of a started push into its ingest: audio and metadata as FLV; H.264 video
    /// as FLV in the legacy form GStreamer's demuxer reads; H.265 video as frames. Video in another
    /// codec than the stream's, or unreadable, is counted in `dropped`.
    private func route(_ action: RTMPServerSession.Action, to ingest: IngestPublisher, video: VideoCodec,
                       flv: inout FLVWriter, dropped: inout Int) {
        var bytes: [UInt8] = []
        do throws(FLVWriterError) {
            switch action {
            case .video(let timestamp, let payload):
                guard let (codec, isEnhanced) = FLVVideoTag.codec(of: payload), Self.carried(codec) == video else {
                    dropped += 1
                    return
                }
                // Legacy AVC, nearly every H.264 push, goes on as it came: its frame is not copied.
                if video == .h264, !isEnhanced {
                    bytes = try flv.video(timestamp: timestamp, payload: payload)
                    break
                }
                guard let tag = try? FLVVideoTag(parsing: payload) else {
                    dropped += 1
                    return
                }
                if video == .h265 {
                    switch tag.content {
                    case .sequenceStart(let record): ingest.pushH265(configuration: record)
                    case .codedFrame(let compositionTime, let data):
                        ingest.pushH265(frame: data, decodingTime: timestamp, compositionTime: compositionTime, isKeyframe: tag.isKeyframe)
                    case .sequenceEnd, .other: break
                    }
                    return
                }
                if let legacy = tag.legacyAVCBody { bytes = try flv.video(timestamp: timestamp, payload: legacy) }
            default:
                bytes = try flv.write(action)
            }
        } catch {
            dropped += 1
            return
        }
        if !bytes.isEmpty, !ingest.push(bytes) {
            logger.warning("rtmp push: the ingest refused media (it ended or its queue is full)")
        }
    }

    /// Checks the key (signature, expiry, type, stream name) before anything is built or accepted;
    /// the ingest, started once the media says its codec, is checked again as a publish.
    private func check(_ key: StreamKey, type: RTMPPublishType, remote: String?) -> Result<Admission, ServerMessage.Failure> {
        var publishType: PublishType
        switch type {
        case .live: publishType = .live
        case .record: publishType = .record
        case .append: publishType = .append
        }
        if let requested = key.publishType {
            guard let parsed = PublishType(rawValue: requested) else {
                return .failure(.init(status: .badRequest, message: "unknown publish type '\(SignalingError.clipped(requested))' in the stream key (live, record or append)"))
            }
            publishType = parsed
        }
        if publishType != .live, key.streamName == nil {
            return .failure(.init(status: .badRequest, message: "publish type '\(publishType.rawValue)' needs a stream name: <token>?name=<name>&type=\(publishType.rawValue)"))
        }
        // Everything the platform will check of the publish (token, scope, recording name), before
        // any pipeline is built.
        if let failure = authorizer.authorizeSessionlessPublish(key.token, publishType: publishType, streamName: key.streamName,
                                                                 remoteAddress: remote, now: Date()) {
            return .failure(failure)
        }
        return .success(Admission(token: key.token, publishType: publishType, streamName: key.streamName))
    }
}

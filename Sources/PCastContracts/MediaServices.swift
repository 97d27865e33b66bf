import Foundation
import PCastProtocol

/// What the control plane asks of the platform's media services: the work that runs media
/// pipelines (pulling remote sources, the RTMP push endpoint, recording) and therefore lives apart
/// from signaling, in a target that links the media engine.
///
/// The control plane decides who may do what (tokens, scopes, sessions) and owns the messages
/// clients see; a media service does the work and reports back through these calls. A service
/// reaches the published streams the way any client does, through signaling and the relay, so it
/// can run in the same process as the control plane or, later, on another machine.
///
/// ```swift
/// let server = try await PlatformServer.start(configuration: configuration, relay: relay, services: services)
/// ```
public protocol MediaServices: Sendable {
    /// Remote sources pulled into the platform (`publish-remote`); nil: this node runs no ingest.
    var ingest: (any IngestControl)? { get }
    /// Streams published as `record` / `append` recorded to files; nil: this node does not record.
    var recordings: (any RecordingControl)? { get }
    /// Streams delivered as live HLS (the `streaming` capability); nil: this node does not package.
    var hls: (any HLSControl)? { get }

    /// The control plane listens at `endpoint` (`ws://host:port/ws`, or `wss://` with its
    /// certificate's files): services that act as a platform client connect there, services with
    /// listeners of their own (the RTMP push endpoint) start them. Called once, after the control
    /// plane is bound.
    func platformListening(at endpoint: PlatformEndpoint) async throws(MediaServiceError)

    /// Reads the TLS certificate and key of the services' own TLS listeners (RTMPS) again; open
    /// connections keep theirs. A failure keeps the certificate in use.
    func reloadCertificates() throws(TLSSetupError)

    /// Stops every ingest and listener and finishes every recording (the last fragment written),
    /// before the control plane ends the remaining streams and sessions.
    func shutdown() async
}

extension MediaServices {
    /// Services without TLS listeners have nothing to reload.
    public func reloadCertificates() throws(TLSSetupError) {}
}

/// Why a media service could not start.
public enum MediaServiceError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A listener of the service (the RTMP push endpoint) could not be bound.
    case cannotListen(service: String, host: String, port: Int, reason: String)

    public var description: String {
        switch self {
        case .cannotListen(let service, let host, let port, let reason): return "\(service): cannot listen on \(host):\(port): \(reason)"
        }
    }
}

/// The ingest service as the control plane drives it. Every ingest belongs to the session that
/// asked for it (its owner): the owner gets the replies, progress and the end, may stop it, and
/// its end stops it.
public protocol IngestControl: Sendable {
    /// Starts pulling `request.streamURI` for `owner`. The control plane has already authorised
    /// the publish (token, scope, recording name); the service checks the URI against its
    /// ``IngestURIPolicy`` and its capacity before it opens anything.
    func start(owner: String, _ request: ClientMessage.PublishRemote) async -> Result<ServerMessage.IngestStarted, ServerMessage.Failure>

    /// Stops an ingest on its owner's request; the failure to send back otherwise (unknown id,
    /// another session's ingest).
    func stop(_ streamId: String, by owner: String) async -> ServerMessage.Failure?

    /// The owner's session ended: its ingests stop.
    func ownerEnded(_ owner: String) async

    /// Position and duration of every running ingest that has an owner, for progress events.
    func progress() async -> [IngestProgressReport]

    /// Who hears of ingests that ended (source finished or failed, stopped, platform stopping).
    func setEndedHandler(_ handler: @escaping @Sendable (IngestEnded) async -> Void) async

    /// How each running ingest's stream is fed, by stream id: ``IngestKind/pull`` (a URI asked for
    /// by a session) or ``IngestKind/push`` (an encoder's RTMP push). For the operator's lists.
    func kinds() async -> [String: IngestKind]
}

/// How an ingest's stream is fed.
public enum IngestKind: String, Sendable, Codable {
    /// A URI pulled for a session (`publish-remote`).
    case pull
    /// An encoder pushing to the RTMP endpoint.
    case push
}

extension IngestControl {
    public func kinds() async -> [String: IngestKind] { [:] }
}

/// One running ingest's progress, for its owner.
public struct IngestProgressReport: Sendable, Hashable {
    public var owner: String
    public var progress: ServerMessage.IngestProgress

    public init(owner: String, progress: ServerMessage.IngestProgress) {
        self.owner = owner
        self.progress = progress
    }
}

/// An ingest that ended.
public struct IngestEnded: Sendable, Hashable {
    /// The session that asked for it; nil for a push (its connection owned it).
    public var owner: String?
    public var streamId: String
    public var reason: StreamEndedReason
    public var description: String?

    public init(owner: String?, streamId: String, reason: StreamEndedReason, description: String?) {
        self.owner = owner
        self.streamId = streamId
        self.reason = reason
        self.description = description
    }
}

/// The recorder as the control plane drives it: it starts a recording when a `record` or
/// `append` stream is published and lists the recordings for `GET /recordings`.
public protocol RecordingControl: Sendable {
    /// Records `streamId` into the recording `name` while the stream lasts; `type` says whether
    /// an existing recording of that name is replaced (`record`) or continued (`append`). The
    /// name was checked when the stream was published.
    func start(streamId: String, name: String, type: PublishType) async

    /// The recordings there are, in name order.
    func list() async -> [RecordingInfo]

    /// Where the recording `name` is (or would be) kept, for downloads.
    func path(of name: RecordingName) -> String
}

/// A recording, as `GET /recordings` lists it.
public struct RecordingInfo: Codable, Sendable, Hashable {
    public var name: String
    public var bytes: Int
    /// From the file's header, which the recorder updates after every fragment.
    public var durationMilliseconds: Int64?
    /// Last written, ISO 8601.
    public var modified: String
    /// The stream being recorded into it right now, if any.
    public var recordingStreamId: String?
    /// In a cluster, the node that keeps it (the one its stream was published on); nil on a single node.
    public var node: String?

    public init(name: String, bytes: Int, durationMilliseconds: Int64?, modified: String, recordingStreamId: String?, node: String? = nil) {
        self.name = name
        self.bytes = bytes
        self.durationMilliseconds = durationMilliseconds
        self.modified = modified
        self.recordingStreamId = recordingStreamId
        self.node = node
    }
}

/// Checks a publish token the way the control plane does, for media services that take a
/// publish outside signaling (the RTMP push endpoint checks the stream key before it builds any
/// pipeline). The control plane checks the publish again when the service's session publishes.
public protocol PublishAuthorizing: Sendable {
    /// nil when `token` may publish a stream of `publishType` (named `streamName`) from
    /// `remoteAddress` without a signaling session; otherwise the refusal.
    func authorizeSessionlessPublish(_ token: String, publishType: PublishType, streamName: String?, remoteAddress: String?,
                                     now: Date) -> ServerMessage.Failure?
}

/// Live HLS delivery as the control plane drives it: the service packages a stream (by
/// subscribing to it, without transcoding) into low-latency HLS held in memory, and answers the
/// players' requests. The control plane checks the player's token and resolves channel aliases
/// before it asks.
public protocol HLSControl: Sendable {
    /// Packages `streamId` from now on (a stream published with the `streaming` capability); a
    /// stream already packaged is left as it is.
    func start(streamId: String) async

    /// Answers a player's request for `file` of the stream's presentation (`index.m3u8`,
    /// `init.mp4`, `seg<N>.m4s`, `part<N>.<I>.m4s`), starting the packaging if the stream is not
    /// packaged yet. A blocking reload (`reload`) is held until the playlist lists what it asks
    /// for, as is a request for the next part (the playlist's preload hint). `uriQuery` (without
    /// the `?`) is added to every URI the playlist lists: a token given in the playlist's query
    /// reaches the files too, as relative URLs lose the query. `startIfNeeded` is false for a
    /// stream that has ended: only a presentation still kept is served.
    func serve(streamId: String, file: String, reload: HLSReload?, uriQuery: String?, startIfNeeded: Bool) async -> HLSReply
}

/// A blocking playlist reload: `_HLS_msn` and, optionally, `_HLS_part`.
public struct HLSReload: Sendable, Hashable {
    public var mediaSequence: Int
    public var part: Int?

    public init(mediaSequence: Int, part: Int? = nil) {
        self.mediaSequence = mediaSequence
        self.part = part
    }
}

/// The answer to an HLS request.
public enum HLSReply: Sendable, Hashable {
    /// The bytes, their content type, and how long a cache may keep them (seconds; 0: not at all).
    case ok(contentType: String, body: [UInt8], maxAge: Int)
    /// Not in the presentation (not a name it uses, gone from the window, or no such live stream).
    case notFound(String)
    /// The request cannot be served as asked (a reload too far ahead).
    case badRequest(String)
    /// Not yet: the stream has not produced what was asked within the wait (the player retries).
    case unavailable(String)
}

/// Where the control plane listens, as the media services reach it.
///
/// ```swift
/// let endpoint = PlatformEndpoint(signalingURL: "ws://127.0.0.1:8080/ws")
/// ```
public struct PlatformEndpoint: Sendable, Hashable {
    /// `ws://host:port/ws`, or `wss://…` when the listener speaks TLS.
    public var signalingURL: String
    /// The listener's certificate and key when it speaks TLS: a client in the same process trusts
    /// exactly that certificate, and the RTMPS endpoint serves it too.
    public var tls: TLSFiles?

    public init(signalingURL: String, tls: TLSFiles? = nil) {
        self.signalingURL = signalingURL
        self.tls = tls
    }
}

/// The PEM files of a TLS listener: read at start and again when the server is told to reload
/// them (SIGHUP for `pcast serve`). Names only: nothing here reads them.
///
/// ```swift
/// configuration.tls = TLSFiles(certificateChain: "/etc/pcast/fullchain.pem", privateKey: "/etc/pcast/key.pem")
/// ```
public struct TLSFiles: Sendable, Hashable {
    /// The certificate chain, leaf first (a Let's Encrypt `fullchain.pem`).
    public var certificateChain: String
    /// The leaf's private key (PKCS#8, RSA or EC, unencrypted).
    public var privateKey: String

    public init(certificateChain: String, privateKey: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }
}

/// Why the TLS certificate or key could not be used.
///
/// ```swift
/// do { try server.reloadCertificates() } catch { print(error) }   // "TLS: /etc/pcast/key.pem: …"
/// ```
public struct TLSSetupError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The file at fault.
    public let path: String
    public let reason: String

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "TLS: \(path): \(reason)" }
}

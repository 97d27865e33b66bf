import Foundation
import Logging
import PCastContracts
import PCastProtocol
import PCastTLS
import Synchronization

/// What the media services need to know: the application they act for (they mint their own
/// session and stream tokens with its secret), what ingest may pull and how much, where
/// recordings go, and where the RTMP push endpoint listens.
public struct MediaServicesConfiguration: Sendable {
    public var applicationId: String
    public var secret: String
    public var ingestPolicy: IngestURIPolicy
    /// Ingests one session may run at once, and the node in all.
    public var maximumIngestsPerSession: Int
    public var maximumIngests: Int
    /// Where recordings are kept (`<stream name>.mp4`).
    public var recordingsDirectory: String
    /// The RTMP push endpoint (`rtmp://host:port/live/<publish token>`); nil: none. Port 0 picks
    /// a free port (see ``PlatformMediaServices/rtmpPort``).
    public var rtmp: RTMPEndpoint?
    /// The same endpoint over TLS (`rtmps://host:port/live/<publish token>`), served with the
    /// control plane's certificate (``PlatformEndpoint/tls``); nil: none.
    public var rtmps: RTMPEndpoint?

    /// Where the RTMP push endpoint listens and how many connections it holds.
    public struct RTMPEndpoint: Sendable, Hashable {
        public var host: String
        public var port: Int
        /// Connections one address may hold (half-open handshakes count), and in all.
        public var maximumConnectionsPerAddress: Int
        public var maximumConnections: Int

        public init(host: String, port: Int, maximumConnectionsPerAddress: Int = 8, maximumConnections: Int = 64) {
            self.host = host
            self.port = port
            self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
            self.maximumConnections = maximumConnections
        }
    }

    public init(applicationId: String, secret: String, ingestPolicy: IngestURIPolicy = IngestURIPolicy(),
                maximumIngestsPerSession: Int = 4, maximumIngests: Int = 32, recordingsDirectory: String, rtmp: RTMPEndpoint? = nil,
                rtmps: RTMPEndpoint? = nil) {
        self.applicationId = applicationId
        self.secret = secret
        self.ingestPolicy = ingestPolicy
        self.maximumIngestsPerSession = maximumIngestsPerSession
        self.maximumIngests = maximumIngests
        self.recordingsDirectory = recordingsDirectory
        self.rtmp = rtmp
        self.rtmps = rtmps
    }
}

/// The platform's media services in one process: ingest of remote sources, the RTMP push
/// endpoint, the recorder and live HLS. They run the SDK's publishers and recorders on a client session of
/// their own against the control plane's signaling (the way any client reaches the platform), and
/// the control plane drives them through ``MediaServices``.
///
/// ```swift
/// let services = PlatformMediaServices(configuration: media, authorizer: configuration.tokenAuthority)
/// let server = try await PlatformServer.start(configuration: configuration, relay: relay, services: services)
/// services.rtmpPort   // the bound port once the server listens
/// ```
public final class PlatformMediaServices: MediaServices {
    public let configuration: MediaServicesConfiguration
    private let session: InternalSession
    private let ingestService: IngestService
    private let recordingService: RecordingService
    private let hlsService: HLSService
    private let authorizer: any PublishAuthorizing
    private let logger: Logger
    private let rtmpServer = Mutex<RTMPIngestServer?>(nil)
    private let rtmpsServer = Mutex<RTMPIngestServer?>(nil)
    /// RTMPS's certificate, read when the control plane listens.
    private let tls = Mutex<TLSCertificateStore?>(nil)

    /// `authorizer` checks RTMP stream keys before any pipeline is built (the control plane's
    /// token authority).
    public init(configuration: MediaServicesConfiguration, authorizer: any PublishAuthorizing,
                logger: Logger = Logger(label: "pcast.media-services")) {
        self.configuration = configuration
        self.authorizer = authorizer
        self.logger = logger
        session = InternalSession(applicationId: configuration.applicationId, secret: configuration.secret)
        ingestService = IngestService(policy: configuration.ingestPolicy, session: session, logger: logger,
                                      maximumPerOwner: configuration.maximumIngestsPerSession, maximum: configuration.maximumIngests)
        recordingService = RecordingService(directory: configuration.recordingsDirectory, session: session, logger: logger)
        hlsService = HLSService(session: session, logger: logger)
    }

    public var ingest: (any IngestControl)? { ingestService }
    public var recordings: (any RecordingControl)? { recordingService }
    public var hls: (any HLSControl)? { hlsService }

    /// The RTMP push endpoint's port once it listens (the bound one when configured as 0); nil
    /// when there is no endpoint or it has not started.
    public var rtmpPort: Int? { rtmpServer.withLock { $0?.port } }
    /// The RTMPS endpoint's port once it listens; nil when there is none.
    public var rtmpsPort: Int? { rtmpsServer.withLock { $0?.port } }

    public func platformListening(at platform: PlatformEndpoint) async throws(MediaServiceError) {
        await session.listening(at: platform)
        if let endpoint = configuration.rtmp, rtmpServer.withLock({ $0 == nil }) {
            let server = try await startRTMP(endpoint, tls: nil)
            rtmpServer.withLock { $0 = server }
        }
        if let endpoint = configuration.rtmps, rtmpsServer.withLock({ $0 == nil }) {
            guard let files = platform.tls else {
                throw .cannotListen(service: "rtmps", host: endpoint.host, port: endpoint.port, reason: "no TLS certificate (tlsCertificate, tlsKey)")
            }
            let store: TLSCertificateStore
            do throws(TLSSetupError) {
                store = try TLSCertificateStore(files: files)
            } catch {
                throw .cannotListen(service: "rtmps", host: endpoint.host, port: endpoint.port, reason: error.description)
            }
            tls.withLock { $0 = store }
            let server = try await startRTMP(endpoint, tls: store)
            rtmpsServer.withLock { $0 = server }
        }
    }

    public func reloadCertificates() throws(TLSSetupError) {
        try tls.withLock { $0 }?.reload()
    }

    private func startRTMP(_ endpoint: MediaServicesConfiguration.RTMPEndpoint, tls: TLSCertificateStore?) async throws(MediaServiceError) -> RTMPIngestServer {
        do {
            return try await RTMPIngestServer.start(
                host: endpoint.host, port: endpoint.port, ingest: ingestService, authorizer: authorizer,
                limits: (endpoint.maximumConnectionsPerAddress, endpoint.maximumConnections), tls: tls, logger: logger)
        } catch {
            throw .cannotListen(service: tls == nil ? "rtmp" : "rtmps", host: endpoint.host, port: endpoint.port, reason: "\(error)")
        }
    }

    public func shutdown() async {
        await rtmpServer.withLock { server in
            defer { server = nil }
            return server
        }?.shutdown()
        await rtmpsServer.withLock { server in
            defer { server = nil }
            return server
        }?.shutdown()
        await ingestService.shutdown()
        await recordingService.shutdown()
        await hlsService.shutdown()
        await session.stop()
    }
}

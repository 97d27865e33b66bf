import Foundation
import Logging
import PCastContracts
import PCastMediaServices
import PCastProtocol
import PCastRelay
import PCastServer

/// The platform started in-process on loopback ports (the embedded default): the relay on an
/// ephemeral UDP port, signaling on an ephemeral HTTP port, the media services (ingest, RTMP push,
/// recording), a fresh application secret, and a token helper for that secret. Tests, `make demo` and `pcast demo` use it; `pcast serve` runs the
/// same pieces as a server.
///
/// ```swift
/// let platform = try await LocalPlatform.start()
/// let pcast = PCast(PCastOptions(uri: platform.signalingURL))
/// try await pcast.start(authToken: try platform.token(.auth))
/// ```
public final class LocalPlatform: Sendable {
    public let server: PlatformServer
    public let relay: Relay
    public let services: PlatformMediaServices
    public let configuration: PlatformConfiguration

    private init(server: PlatformServer, relay: Relay, services: PlatformMediaServices, configuration: PlatformConfiguration) {
        self.server = server
        self.relay = relay
        self.services = services
        self.configuration = configuration
    }

    /// Starts relay and signaling on 127.0.0.1 (and the RTMP push endpoint when `rtmpPort` is
    /// given; 0 picks a free port).
    public static func start(applicationId: String = "pcast-local",
                             secret: String = SRTPFreeRandom.secret(),
                             relayConfiguration: RelayConfiguration = RelayConfiguration(),
                             dataDirectory: String? = nil,
                             httpPort: Int = 0,
                             resumeWindow: TimeInterval = PlatformConfiguration.defaultResumeWindow,
                             keepAliveInterval: Int = PlatformConfiguration.defaultKeepAliveInterval,
                             backendPolicy: (any BackendPolicy)? = SampleBackendPolicy(),
                             ingestPolicy: IngestURIPolicy = IngestURIPolicy(),
                             rtmpPort: Int? = nil,
                             logger: Logger = Logger(label: "pcast.platform"),
                             configure: (inout PlatformConfiguration) -> Void = { _ in }) async throws -> LocalPlatform {
        let relay = try Relay(configuration: relayConfiguration)
        let directory = dataDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent("pcast-local-\(UUID().uuidString)").path
        var configuration = PlatformConfiguration(applicationId: applicationId, secret: secret, host: "127.0.0.1",
                                                  httpPort: httpPort, mediaPort: Int(relay.mediaPort), dataDirectory: directory,
                                                  keepAliveInterval: keepAliveInterval)
        configuration.resumeWindow = resumeWindow
        configuration.ingestPolicy = ingestPolicy
        configuration.rtmpPort = rtmpPort
        // Everything here connects from loopback, often many clients from one process (the room
        // benchmark holds 2,000 sessions): the per-address cap is the total.
        configuration.connectionLimits.perAddress = configuration.connectionLimits.total
        configure(&configuration)
        let services = PlatformMediaServices(configuration: MediaServicesConfiguration(platform: configuration),
                                             authorizer: configuration.tokenAuthority, logger: logger)
        do {
            let server = try await PlatformServer.start(configuration: configuration, relay: relay, services: services, logger: logger,
                                                        backendPolicy: backendPolicy)
            return LocalPlatform(server: server, relay: relay, services: services, configuration: configuration)
        } catch {
            relay.shutdown()
            throw error
        }
    }

    public var signalingURL: String { server.signalingURL }
    /// The RTMP push endpoint's port, when it was asked for.
    public var rtmpPort: Int? { services.rtmpPort }
    /// The RTMPS endpoint's port, when it was asked for (``PlatformConfiguration/rtmpsPort``).
    public var rtmpsPort: Int? { services.rtmpsPort }

    /// The plain-HTTP port that redirects to HTTPS, when configured.
    public var httpRedirectPort: Int? { server.httpRedirectPort }

    /// Reads the TLS certificate and key again (see ``PlatformServer/reloadCertificates()``).
    public func reloadCertificates() throws(TLSSetupError) {
        try server.reloadCertificates()
    }
    public var httpURL: String { server.httpURL }
    /// The sample backend's base URI for ``PCastExpressOptions``-style clients (`…/backend/`).
    public var backendURL: String { server.httpURL + "/backend/" }

    /// A token for this platform's application, valid for `lifetime`.
    ///
    /// ```swift
    /// platform.token(.publish, tag: .channelAlias("lobby"))
    /// platform.token(.stream, originStreamId: publisher.streamId)
    /// ```
    public func token(_ type: TokenType, lifetime: TimeInterval = 3600, tag: RequiredTag? = nil,
                      originStreamId: String? = nil, capabilities: [String] = [], applyTags: [String] = [],
                      streamName: String? = nil) throws(DigestTokenError) -> String {
        var builder = DigestTokenBuilder()
            .expiresAt(Date().addingTimeInterval(lifetime))
            .type(type)
        for capability in capabilities { builder = builder.capability(capability) }
        if let tag { builder = builder.requiredTag(tag) }
        if let originStreamId { builder = builder.originStreamId(originStreamId) }
        for applied in applyTags { builder = builder.applyTag(applied) }
        if let streamName { builder = builder.streamName(streamName) }
        return try builder.encode(applicationId: configuration.applicationId, secret: configuration.secret)
    }

    /// Stops signaling (streams end as `maintenance`) and the relay.
    public func shutdown() async {
        await server.shutdown()
        relay.shutdown()
    }
}

/// Random secrets without pulling in SRTP: 32 bytes from the system generator, base64.
public enum SRTPFreeRandom {
    public static func secret() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }
}

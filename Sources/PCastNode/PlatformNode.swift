import Foundation
import Logging
import PCastContracts
import PCastMediaServices
import PCastRelay
import PCastServer

/// One platform node as `pcast serve` runs it: the control plane (``PlatformServer``), the relay
/// and the media services, wired together in one process.
///
/// ```swift
/// try await PlatformNode.run(configuration: configuration) { node in print(node.signalingURL) }
/// ```
public enum PlatformNode {
    /// Where a running node listens.
    public struct Listening: Sendable {
        public var host: String
        public var httpPort: Int
        public var mediaPort: UInt16
        /// The relay's ICE-over-TCP port; nil when it has none.
        public var iceTCPPort: UInt16?
        /// The RTMP push endpoint's bound port; nil when it is off.
        public var rtmpPort: Int?
        /// The RTMPS endpoint's bound port; nil when it is off.
        public var rtmpsPort: Int?
    }

    /// Why a node could not start.
    public enum StartError: Error, Sendable, CustomStringConvertible {
        case relay(RelayError)

        public var description: String {
            switch self {
            case .relay(let error): return "relay: \(error)"
            }
        }
    }

    /// Runs the node until SIGINT or SIGTERM (see ``PlatformServer/run(configuration:relay:services:logger:backendPolicy:onListening:)``).
    /// The relay listens on ``PlatformConfiguration/mediaPort``, the RTMP push endpoint on
    /// ``PlatformConfiguration/rtmpPort`` when set.
    /// `publicAddresses`: the IPv4 addresses WebRTC answers announce as the relay's candidates
    /// (`pcast serve --public-address`), for a relay bound to 0.0.0.0 behind an address it cannot see.
    public static func run(configuration: PlatformConfiguration, logger: Logger = Logger(label: "pcast.server"),
                           backendPolicy: (any BackendPolicy)? = nil, publicAddresses: [String] = [],
                           onListening: @escaping @Sendable (Listening) -> Void = { _ in }) async throws {
        let relay: Relay
        do throws(RelayError) {
            var relayConfiguration = RelayConfiguration(host: configuration.host, port: UInt16(clamping: configuration.mediaPort))
            relayConfiguration.announcedAddresses = publicAddresses
            relay = try Relay(configuration: relayConfiguration)
        } catch {
            throw StartError.relay(error)
        }
        defer { relay.shutdown() }
        let services = PlatformMediaServices(configuration: MediaServicesConfiguration(platform: configuration),
                                             authorizer: configuration.tokenAuthority, logger: logger)
        let host = configuration.host
        let mediaPort = relay.mediaPort
        try await PlatformServer.run(configuration: configuration, relay: relay, services: services, logger: logger,
                                     backendPolicy: backendPolicy) { httpPort in
            onListening(Listening(host: host, httpPort: httpPort, mediaPort: mediaPort, iceTCPPort: relay.tcpPort, rtmpPort: services.rtmpPort,
                                  rtmpsPort: services.rtmpsPort))
        }
    }
}

extension MediaServicesConfiguration {
    /// The media services' part of a node's configuration.
    public init(platform configuration: PlatformConfiguration) {
        self.init(
            applicationId: configuration.applicationId, secret: configuration.secret, ingestPolicy: configuration.ingestPolicy,
            maximumIngestsPerSession: configuration.maximumIngestsPerSession, maximumIngests: configuration.maximumIngests,
            recordingsDirectory: configuration.recordingsDirectory,
            rtmp: configuration.rtmpPort.map {
                RTMPEndpoint(host: configuration.host, port: $0,
                             maximumConnectionsPerAddress: configuration.connectionLimits.rtmpPerAddress,
                             maximumConnections: configuration.connectionLimits.rtmpTotal)
            },
            rtmps: configuration.rtmpsPort.map {
                RTMPEndpoint(host: configuration.host, port: $0,
                             maximumConnectionsPerAddress: configuration.connectionLimits.rtmpPerAddress,
                             maximumConnections: configuration.connectionLimits.rtmpTotal)
            })
    }
}

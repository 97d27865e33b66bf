import Foundation
import PCastContracts
import PCastProtocol

/// How the platform runs: credentials, addresses, limits.
///
/// Values come from four layers, each overriding the one before:
/// defaults < JSON file < environment (`PCAST_*`) < explicit overrides (the CLI's flags).
///
/// ```swift
/// var overrides = PlatformConfiguration.Overrides()
/// overrides.httpPort = 8080
/// let configuration = try PlatformConfiguration.load(
///     file: URL(fileURLWithPath: "/etc/pcast.json"),
///     environment: ProcessInfo.processInfo.environment,
///     overrides: overrides)
/// ```
public struct PlatformConfiguration: Sendable, Hashable {
    /// The application id digest tokens must carry.
    public var applicationId: String
    /// The secret digest tokens are signed with (with the application id). Also the admin password.
    public var secret: String
    /// Address HTTP and WebSocket listen on.
    public var host: String
    /// HTTP and WebSocket port; 0 picks a free one (see ``PlatformServer/httpPort``).
    public var httpPort: Int
    /// The relay's one UDP media port; 0 lets the relay pick. The platform passes it to the relay it
    /// creates and reports it; a relay handed in already bound keeps its own.
    public var mediaPort: Int
    /// Where the platform keeps its files.
    public var dataDirectory: String
    /// Largest signaling message accepted, in bytes, after decompression. Larger ones close the
    /// WebSocket with 1009.
    public var messageSizeLimit: Int
    /// Seconds between the keep-alives a client must send; a session silent for
    /// ``keepAliveTimeoutMultiplier`` intervals is closed.
    public var keepAliveInterval: Int
    /// Seconds a session whose connection was lost (or interrupted by a platform restart) keeps its
    /// room memberships, waiting to be resumed.
    public var resumeWindow: TimeInterval = Self.defaultResumeWindow
    /// Seconds a detached session's stream lives without media: its signaling dropped *and* its
    /// publisher stopped sending, so it is gone (a crash) rather than cut off from signaling.
    /// Such a stream ends as `failed` long before ``resumeWindow`` does.
    public var detachedMediaTimeout: TimeInterval = Self.defaultDetachedMediaTimeout
    /// Seconds a simulcast layer nobody watches is still encoded before its publisher is told to
    /// rest it (nil: every layer is always encoded). The layer new viewers start on never rests.
    public var unwatchedLayerRest: TimeInterval? = 5
    /// What ingest may pull: schemes, internal addresses allowed, `file://` directory.
    public var ingestPolicy = IngestURIPolicy()
    /// The RTMP push endpoint's port (`rtmp://host:port/live/<publish token>`); nil: no endpoint,
    /// 0: a free port. The RTMP endpoint is a media service: see `PlatformMediaServices`.
    public var rtmpPort: Int?

    /// Tokens expiring further ahead than this are refused; nil: no limit.
    public var maximumTokenLifetime: TimeInterval? = TokenAuthority.defaultMaximumLifetime
    /// `GET /metrics` needs HTTP Basic `applicationId:secret` or a token with the `metrics`
    /// capability (as recordings do) when true.
    public var protectMetrics = false
    /// How many connections the HTTP/WebSocket listener and the RTMP endpoint hold, and how long a
    /// request head may take (see ``ConnectionLimits``).
    public var connectionLimits = ConnectionLimits()
    /// STUN/TURN servers WHIP and WHEP clients are told about (`Link: …; rel="ice-server"`, RFC
    /// 9725 §4.6): for clients behind NATs that the relay's host candidates alone do not get through.
    public var iceServers: [ICEServer] = []
    /// TURN servers that check credentials with a secret shared with the platform (coturn's
    /// `use-auth-secret`): each WHIP/WHEP session is told them with credentials of its own.
    public var turn: TURNSettings?
    /// The most viewers this node serves at once; a subscribe beyond it is refused with the
    /// seed's `capacity` status. Nil (the default): no limit.
    public var maximumViewers: Int?
    /// Where the platform POSTs signed stream-started / stream-ended notifications (the
    /// application's backend); nil (the default): none are sent.
    public var streamNotifications: StreamNotificationSettings?
    /// Ingests running at once, per session and in all.
    public var maximumIngestsPerSession = 4
    public var maximumIngests = 32
    /// HTTPS and WSS on ``httpPort`` instead of plain HTTP: the page, WHIP, WHEP, HLS, `/metrics`
    /// and signaling all behind it. Nil (the default): plain HTTP.
    public var tls: TLSFiles?
    /// A plain-HTTP port that only redirects to HTTPS (`308`, same path); nil: none. Needs ``tls``.
    public var httpRedirectPort: Int?
    /// A PEM file of certificate authorities this node trusts, besides the system's, when it calls
    /// other nodes of its cluster over HTTPS (nodes with certificates of a private CA).
    public var clusterCertificateAuthority: String?
    /// The RTMP push endpoint over TLS (`rtmps://host:port/live/<publish token>`); nil: none,
    /// 0: a free port. Needs ``tls`` (the same certificate).
    public var rtmpsPort: Int?

    /// The token checker for this configuration.
    public var tokenAuthority: TokenAuthority {
        TokenAuthority(applicationId: applicationId, secret: secret, maximumLifetime: maximumTokenLifetime)
    }

    /// A session is closed after this many keep-alive intervals without a message.
    public static let keepAliveTimeoutMultiplier = 3

    public static let defaultApplicationId = "pcast"
    public static let defaultHost = "127.0.0.1"
    public static let defaultHTTPPort = 8080
    public static let defaultMediaPort = 10_000
    public static let defaultDataDirectory = "pcast-data"
    public static let defaultKeepAliveInterval = 10
    public static let defaultResumeWindow: TimeInterval = 60
    public static let defaultDetachedMediaTimeout: TimeInterval = 3

    public init(
        applicationId: String = Self.defaultApplicationId,
        secret: String,
        host: String = Self.defaultHost,
        httpPort: Int = Self.defaultHTTPPort,
        mediaPort: Int = Self.defaultMediaPort,
        dataDirectory: String = Self.defaultDataDirectory,
        messageSizeLimit: Int = SignalingCodec.defaultSizeLimit,
        keepAliveInterval: Int = Self.defaultKeepAliveInterval
    ) {
        self.applicationId = applicationId
        self.secret = secret
        self.host = host
        self.httpPort = httpPort
        self.mediaPort = mediaPort
        self.dataDirectory = dataDirectory
        self.messageSizeLimit = messageSizeLimit
        self.keepAliveInterval = keepAliveInterval
    }

    /// Where recordings are kept (`<stream name>.mp4`).
    public var recordingsDirectory: String { (dataDirectory as NSString).appendingPathComponent("recordings") }

    /// The SQLite file rooms, members, sessions and chat are kept in (unless ``database`` names another store).
    public var roomDatabasePath: String { (dataDirectory as NSString).appendingPathComponent("rooms.sqlite") }

    /// Where rooms, members, sessions and chat are kept: nil, the SQLite file ``roomDatabasePath``
    /// (one node); `.postgres(url)`, a database the nodes of a cluster share.
    public var database: DatabaseLocation?

    /// This node's name among the nodes sharing a store (`/admin/nodes`); random unless set.
    public var nodeId = "node-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    /// The host other nodes and clients reach this node at, when it is not ``host`` (a node
    /// listening on 0.0.0.0, or behind NAT).
    public var advertisedHost: String?
    /// A node whose last heartbeat is older than this is gone (its heartbeat comes every second).
    public var nodeExpiry: Duration = .seconds(3)
    /// An edge asks the origin again for a leg that carried nothing this long while it has viewers
    /// (a cut link; an origin that dropped the edge meanwhile), then again every as long.
    public var legSilenceLimit: Duration = .seconds(3)
    /// An origin drops an edge's flow that sent no report this long (an edge reports every second;
    /// its release may have been lost in a partition): no media is sent to a node that stopped
    /// listening, and the edge asks again when it needs the stream.
    public var edgeSilenceLimit: Duration = .seconds(10)

    /// ``database``, or the SQLite file in the data directory.
    public var storeLocation: DatabaseLocation { database ?? .sqlite(path: roomDatabasePath) }

    /// Seconds of silence after which a session is closed.
    public var keepAliveTimeout: TimeInterval {
        TimeInterval(keepAliveInterval * Self.keepAliveTimeoutMultiplier)
    }

    /// Values set explicitly (by the CLI's flags); `nil` leaves the lower layers' value.
    ///
    /// ```swift
    /// var overrides = PlatformConfiguration.Overrides()
    /// overrides.secret = "s3cret"
    /// ```
    public struct Overrides: Sendable, Hashable, Codable {
        public var applicationId: String?
        public var secret: String?
        public var host: String?
        public var httpPort: Int?
        public var mediaPort: Int?
        public var dataDirectory: String?
        public var messageSizeLimit: Int?
        public var keepAliveInterval: Int?
        public var protectMetrics: Bool?
        /// Seconds; 0 means no limit.
        public var maximumTokenLifetime: Int?
        public var maximumConnectionsPerAddress: Int?
        public var maximumConnections: Int?
        /// Hosts (names or addresses) ingest may pull from even when internal.
        public var ingestAllowHosts: [String]?
        /// The folder `file://` ingest may read from.
        public var ingestFileDirectory: String?
        /// `postgres://user@host:port/database` for a cluster's shared store; a path for SQLite.
        public var database: String?
        /// Viewers this node serves at once (see ``PlatformConfiguration/maximumViewers``).
        public var maximumViewers: Int?
        /// The backend endpoint stream notifications are POSTed to (http or https).
        public var streamNotificationURL: String?
        /// Their HMAC key (default: the application secret).
        public var streamNotificationSecret: String?
        /// Whether subscriptions are notified too (see ``StreamNotificationSettings/includeViewers``).
        public var streamNotificationViewers: Bool?
        /// PEM certificate chain (leaf first) and its PEM private key: HTTPS and WSS (both or neither).
        public var tlsCertificate: String?
        public var tlsKey: String?
        /// A plain-HTTP port that only redirects to HTTPS.
        public var httpRedirectPort: Int?
        /// PEM certificate authorities trusted for calls to other nodes over HTTPS.
        public var clusterCertificateAuthority: String?

        public init(
            applicationId: String? = nil, secret: String? = nil, host: String? = nil, httpPort: Int? = nil,
            mediaPort: Int? = nil, dataDirectory: String? = nil, messageSizeLimit: Int? = nil,
            keepAliveInterval: Int? = nil, protectMetrics: Bool? = nil, maximumTokenLifetime: Int? = nil,
            maximumConnectionsPerAddress: Int? = nil, maximumConnections: Int? = nil,
            ingestAllowHosts: [String]? = nil, ingestFileDirectory: String? = nil, database: String? = nil,
            maximumViewers: Int? = nil, streamNotificationURL: String? = nil, streamNotificationSecret: String? = nil,
            streamNotificationViewers: Bool? = nil, tlsCertificate: String? = nil, tlsKey: String? = nil,
            httpRedirectPort: Int? = nil, clusterCertificateAuthority: String? = nil
        ) {
            self.applicationId = applicationId
            self.secret = secret
            self.host = host
            self.httpPort = httpPort
            self.mediaPort = mediaPort
            self.dataDirectory = dataDirectory
            self.messageSizeLimit = messageSizeLimit
            self.keepAliveInterval = keepAliveInterval
            self.protectMetrics = protectMetrics
            self.maximumTokenLifetime = maximumTokenLifetime
            self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
            self.maximumConnections = maximumConnections
            self.ingestAllowHosts = ingestAllowHosts
            self.ingestFileDirectory = ingestFileDirectory
            self.database = database
            self.maximumViewers = maximumViewers
            self.streamNotificationURL = streamNotificationURL
            self.streamNotificationSecret = streamNotificationSecret
            self.streamNotificationViewers = streamNotificationViewers
            self.tlsCertificate = tlsCertificate
            self.tlsKey = tlsKey
            self.httpRedirectPort = httpRedirectPort
            self.clusterCertificateAuthority = clusterCertificateAuthority
        }

        /// Self, with `other`'s set values on top.
        func overlaid(by other: Overrides) -> Overrides {
            Overrides(
                applicationId: other.applicationId ?? applicationId, secret: other.secret ?? secret,
                host: other.host ?? host, httpPort: other.httpPort ?? httpPort,
                mediaPort: other.mediaPort ?? mediaPort, dataDirectory: other.dataDirectory ?? dataDirectory,
                messageSizeLimit: other.messageSizeLimit ?? messageSizeLimit,
                keepAliveInterval: other.keepAliveInterval ?? keepAliveInterval,
                protectMetrics: other.protectMetrics ?? protectMetrics,
                maximumTokenLifetime: other.maximumTokenLifetime ?? maximumTokenLifetime,
                maximumConnectionsPerAddress: other.maximumConnectionsPerAddress ?? maximumConnectionsPerAddress,
                maximumConnections: other.maximumConnections ?? maximumConnections,
                ingestAllowHosts: other.ingestAllowHosts ?? ingestAllowHosts,
                ingestFileDirectory: other.ingestFileDirectory ?? ingestFileDirectory,
                database: other.database ?? database, maximumViewers: other.maximumViewers ?? maximumViewers,
                streamNotificationURL: other.streamNotificationURL ?? streamNotificationURL,
                streamNotificationSecret: other.streamNotificationSecret ?? streamNotificationSecret,
                streamNotificationViewers: other.streamNotificationViewers ?? streamNotificationViewers,
                tlsCertificate: other.tlsCertificate ?? tlsCertificate, tlsKey: other.tlsKey ?? tlsKey,
                httpRedirectPort: other.httpRedirectPort ?? httpRedirectPort,
                clusterCertificateAuthority: other.clusterCertificateAuthority ?? clusterCertificateAuthority)
        }
    }

    /// Environment variables read by ``load(file:environment:overrides:)``.
    ///
    /// ```swift
    /// let port = ProcessInfo.processInfo.environment[PlatformConfiguration.EnvironmentKey.httpPort]
    /// ```
    public enum EnvironmentKey {
        public static let applicationId = "PCAST_APPLICATION_ID"
        public static let secret = "PCAST_SECRET"
        public static let host = "PCAST_HOST"
        public static let httpPort = "PCAST_HTTP_PORT"
        public static let mediaPort = "PCAST_MEDIA_PORT"
        public static let dataDirectory = "PCAST_DATA_DIR"
        public static let messageSizeLimit = "PCAST_MESSAGE_SIZE_LIMIT"
        public static let keepAliveInterval = "PCAST_KEEPALIVE_INTERVAL"
        /// `1` / `true`: `/metrics` needs credentials.
        public static let protectMetrics = "PCAST_PROTECT_METRICS"
        public static let maximumTokenLifetime = "PCAST_MAX_TOKEN_LIFETIME"
        public static let maximumConnectionsPerAddress = "PCAST_MAX_CONNECTIONS_PER_ADDRESS"
        public static let maximumConnections = "PCAST_MAX_CONNECTIONS"
        /// Comma-separated hosts ingest may pull from even when internal.
        public static let ingestAllowHosts = "PCAST_INGEST_ALLOW_HOSTS"
        public static let ingestFileDirectory = "PCAST_INGEST_FILE_DIR"
        /// `postgres://…`: the shared store of a cluster (default: SQLite in the data directory).
        public static let database = "PCAST_DATABASE"
        /// Viewers this node serves at once.
        public static let maximumViewers = "PCAST_MAX_VIEWERS"
        /// Where stream notifications are POSTed, and their HMAC key.
        public static let streamNotificationURL = "PCAST_STREAM_NOTIFICATION_URL"
        public static let streamNotificationSecret = "PCAST_STREAM_NOTIFICATION_SECRET"
        /// `1` / `true`: subscriptions are notified too.
        public static let streamNotificationViewers = "PCAST_STREAM_NOTIFICATION_VIEWERS"
        /// PEM files: the certificate chain and its private key (HTTPS and WSS).
        public static let tlsCertificate = "PCAST_TLS_CERTIFICATE"
        public static let tlsKey = "PCAST_TLS_KEY"
        /// A plain-HTTP port that only redirects to HTTPS.
        public static let httpRedirectPort = "PCAST_HTTP_REDIRECT_PORT"
        /// PEM certificate authorities trusted for calls to other nodes over HTTPS.
        public static let clusterCertificateAuthority = "PCAST_CLUSTER_CA_FILE"
        /// A JSON configuration file to read when the caller names none.
        public static let configFile = "PCAST_CONFIG"
    }

    /// Builds the configuration from a JSON file (optional), the environment and overrides.
    ///
    /// The file holds the same keys as ``Overrides`` (`applicationId`, `secret`, `host`, `httpPort`,
    /// `mediaPort`, `dataDirectory`, `messageSizeLimit`, `keepAliveInterval`), all optional. When
    /// `file` is nil, `PCAST_CONFIG` in `environment` may name one.
    public static func load(
        file: URL? = nil,
        environment: [String: String] = [:],
        overrides: Overrides = Overrides()
    ) throws(ConfigurationError) -> PlatformConfiguration {
        var layers = Overrides()
        let fileURL = file ?? environment[EnvironmentKey.configFile].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
        if let fileURL {
            layers = layers.overlaid(by: try fromFile(fileURL))
        }
        layers = layers.overlaid(by: try fromEnvironment(environment))
        layers = layers.overlaid(by: overrides)
        return try resolve(layers)
    }

    /// Reads a JSON configuration file.
    public static func fromFile(_ url: URL) throws(ConfigurationError) -> Overrides {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw .unreadableFile(path: url.path, reason: error.localizedDescription)
        }
        do {
            return try JSONDecoder().decode(Overrides.self, from: data)
        } catch {
            throw .invalidFile(path: url.path, reason: describe(error))
        }
    }

    /// Reads the `PCAST_*` environment variables (empty ones count as unset).
    public static func fromEnvironment(_ environment: [String: String]) throws(ConfigurationError) -> Overrides {
        func string(_ key: String) -> String? {
            guard let value = environment[key], !value.isEmpty else { return nil }
            return value
        }
        func boolean(_ key: String) throws(ConfigurationError) -> Bool? {
            guard let text = string(key)?.lowercased() else { return nil }
            switch text {
            case "1", "true", "yes", "on": return true
            case "0", "false", "no", "off": return false
            default: throw .invalidValue(name: key, value: text, reason: "not a boolean (true or false)")
            }
        }
        func integer(_ key: String) throws(ConfigurationError) -> Int? {
            guard let text = string(key) else { return nil }
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else {
                throw .invalidValue(name: key, value: text, reason: "not an integer")
            }
            return value
        }
        return Overrides(
            applicationId: string(EnvironmentKey.applicationId), secret: string(EnvironmentKey.secret),
            host: string(EnvironmentKey.host), httpPort: try integer(EnvironmentKey.httpPort),
            mediaPort: try integer(EnvironmentKey.mediaPort), dataDirectory: string(EnvironmentKey.dataDirectory),
            messageSizeLimit: try integer(EnvironmentKey.messageSizeLimit),
            keepAliveInterval: try integer(EnvironmentKey.keepAliveInterval),
            protectMetrics: try boolean(EnvironmentKey.protectMetrics),
            maximumTokenLifetime: try integer(EnvironmentKey.maximumTokenLifetime),
            maximumConnectionsPerAddress: try integer(EnvironmentKey.maximumConnectionsPerAddress),
            maximumConnections: try integer(EnvironmentKey.maximumConnections),
            ingestAllowHosts: string(EnvironmentKey.ingestAllowHosts).map {
                $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            },
            ingestFileDirectory: string(EnvironmentKey.ingestFileDirectory),
            database: string(EnvironmentKey.database), maximumViewers: try integer(EnvironmentKey.maximumViewers),
            streamNotificationURL: string(EnvironmentKey.streamNotificationURL),
            streamNotificationSecret: string(EnvironmentKey.streamNotificationSecret),
            streamNotificationViewers: try boolean(EnvironmentKey.streamNotificationViewers),
            tlsCertificate: string(EnvironmentKey.tlsCertificate), tlsKey: string(EnvironmentKey.tlsKey),
            httpRedirectPort: try integer(EnvironmentKey.httpRedirectPort),
            clusterCertificateAuthority: string(EnvironmentKey.clusterCertificateAuthority))
    }

    /// Fills defaults and checks every value.
    static func resolve(_ layers: Overrides) throws(ConfigurationError) -> PlatformConfiguration {
        guard let secret = layers.secret, !secret.isEmpty else { throw .missingSecret }
        var configuration = PlatformConfiguration(
            applicationId: layers.applicationId ?? defaultApplicationId, secret: secret,
            host: layers.host ?? defaultHost, httpPort: layers.httpPort ?? defaultHTTPPort,
            mediaPort: layers.mediaPort ?? defaultMediaPort,
            dataDirectory: layers.dataDirectory ?? defaultDataDirectory,
            messageSizeLimit: layers.messageSizeLimit ?? SignalingCodec.defaultSizeLimit,
            keepAliveInterval: layers.keepAliveInterval ?? defaultKeepAliveInterval)
        if let protect = layers.protectMetrics { configuration.protectMetrics = protect }
        if let lifetime = layers.maximumTokenLifetime {
            guard lifetime >= 0 else { throw .invalidValue(name: "maximumTokenLifetime", value: String(lifetime), reason: "negative") }
            configuration.maximumTokenLifetime = lifetime == 0 ? nil : TimeInterval(lifetime)
        }
        if let perAddress = layers.maximumConnectionsPerAddress { configuration.connectionLimits.perAddress = perAddress }
        if let total = layers.maximumConnections { configuration.connectionLimits.total = total }
        if let hosts = layers.ingestAllowHosts { configuration.ingestPolicy.allowedHosts = Set(hosts.map { $0.lowercased() }) }
        if let directory = layers.ingestFileDirectory { configuration.ingestPolicy.fileDirectory = directory }
        if let viewers = layers.maximumViewers {
            guard viewers > 0 else { throw .invalidValue(name: "maximumViewers", value: String(viewers), reason: "not positive") }
            configuration.maximumViewers = viewers
        }
        if let text = layers.streamNotificationURL {
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  url.host?.isEmpty == false
            else { throw .invalidValue(name: "streamNotificationURL", value: text, reason: "not an http(s) URL with a host") }
            let key = layers.streamNotificationSecret ?? secret
            guard !key.isEmpty else { throw .invalidValue(name: "streamNotificationSecret", value: "", reason: "empty") }
            var settings = StreamNotificationSettings(url: url, secret: key)
            settings.includeViewers = layers.streamNotificationViewers ?? false
            configuration.streamNotifications = settings
        } else if layers.streamNotificationSecret != nil {
            throw .invalidValue(name: "streamNotificationSecret", value: "…", reason: "given without streamNotificationURL")
        } else if layers.streamNotificationViewers == true {
            throw .invalidValue(name: "streamNotificationViewers", value: "true", reason: "given without streamNotificationURL")
        }
        switch (layers.tlsCertificate, layers.tlsKey) {
        case (let certificate?, let key?): configuration.tls = TLSFiles(certificateChain: certificate, privateKey: key)
        case (nil, nil): break
        case (nil, _?): throw .invalidValue(name: "tlsKey", value: "…", reason: "given without tlsCertificate")
        case (_?, nil): throw .invalidValue(name: "tlsCertificate", value: layers.tlsCertificate ?? "", reason: "given without tlsKey")
        }
        configuration.httpRedirectPort = layers.httpRedirectPort
        if let file = layers.clusterCertificateAuthority {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw .invalidValue(name: "clusterCertificateAuthority", value: file, reason: "not a readable file")
            }
            configuration.clusterCertificateAuthority = file
        }
        if let database = layers.database {
            do throws(PostgresURLError) {
                configuration.database = try DatabaseLocation(parsing: database)
            } catch {
                throw .invalidValue(name: "database", value: database, reason: error.description)
            }
        }
        try configuration.validate()
        return configuration
    }

    /// Throws when a value is out of range.
    public func validate() throws(ConfigurationError) {
        if applicationId.isEmpty { throw .invalidValue(name: "applicationId", value: "", reason: "empty") }
        if secret.isEmpty { throw .missingSecret }
        if host.isEmpty { throw .invalidValue(name: "host", value: "", reason: "empty") }
        if !(0...65_535).contains(httpPort) {
            throw .invalidValue(name: "httpPort", value: String(httpPort), reason: "not a port (0...65535)")
        }
        if !(0...65_535).contains(mediaPort) {
            throw .invalidValue(name: "mediaPort", value: String(mediaPort), reason: "not a port (0...65535)")
        }
        if let rtmpPort, !(0...65_535).contains(rtmpPort) {
            throw .invalidValue(name: "rtmpPort", value: String(rtmpPort), reason: "not a port (0...65535)")
        }
        if let rtmpsPort, !(0...65_535).contains(rtmpsPort) {
            throw .invalidValue(name: "rtmpsPort", value: String(rtmpsPort), reason: "not a port (0...65535)")
        }
        if let httpRedirectPort, !(0...65_535).contains(httpRedirectPort) {
            throw .invalidValue(name: "httpRedirectPort", value: String(httpRedirectPort), reason: "not a port (0...65535)")
        }
        if tls == nil, let httpRedirectPort {
            throw .invalidValue(name: "httpRedirectPort", value: String(httpRedirectPort), reason: "redirects to HTTPS: needs tlsCertificate and tlsKey")
        }
        if let turn {
            if turn.secret.isEmpty { throw .invalidValue(name: "turnSecret", value: "", reason: "empty") }
            if turn.servers.isEmpty { throw .invalidValue(name: "turnSecret", value: "…", reason: "given without a turn: or turns: server") }
            for server in turn.servers {
                let scheme = server.split(separator: ":", maxSplits: 1).first.map { $0.lowercased() } ?? ""
                guard scheme == "turn" || scheme == "turns", (try? ICEServer(url: server, username: "u", credential: "c")) != nil else {
                    throw .invalidValue(name: "turnServer", value: server, reason: "not a turn: or turns: URI")
                }
            }
            if !(60...(7 * 86_400)).contains(turn.lifetime) {
                throw .invalidValue(name: "turnCredentialLifetime", value: "\(turn.lifetime)", reason: "outside 60...604800 seconds")
            }
        }
        if tls == nil, let rtmpsPort {
            throw .invalidValue(name: "rtmpsPort", value: String(rtmpsPort), reason: "RTMPS needs tlsCertificate and tlsKey")
        }
        if let tls, tls.certificateChain.isEmpty || tls.privateKey.isEmpty {
            throw .invalidValue(name: "tlsCertificate", value: tls.certificateChain, reason: "empty path")
        }
        if dataDirectory.isEmpty { throw .invalidValue(name: "dataDirectory", value: "", reason: "empty") }
        // A message must at least hold a token; more than 16 MiB is not a signaling message.
        if !(1024...(16 << 20)).contains(messageSizeLimit) {
            throw .invalidValue(name: "messageSizeLimit", value: String(messageSizeLimit), reason: "outside 1024...16777216 bytes")
        }
        if !(1...3600).contains(keepAliveInterval) {
            throw .invalidValue(name: "keepAliveInterval", value: String(keepAliveInterval), reason: "outside 1...3600 seconds")
        }
        if connectionLimits.perAddress < 1 || connectionLimits.total < connectionLimits.perAddress {
            throw .invalidValue(name: "maximumConnectionsPerAddress", value: "\(connectionLimits.perAddress) of \(connectionLimits.total)",
                                reason: "must be at least 1 and at most the total")
        }
        if maximumIngestsPerSession < 1 || maximumIngests < maximumIngestsPerSession {
            throw .invalidValue(name: "maximumIngestsPerSession", value: "\(maximumIngestsPerSession) of \(maximumIngests)",
                                reason: "must be at least 1 and at most the total")
        }
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "'\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type"
        case DecodingError.dataCorrupted:
            return "not valid JSON"
        default:
            return "unreadable (\(error))"
        }
    }
}

/// What the platform's listeners hold at once, and how long a client may take to ask.
///
/// A listener that accepts every connection and waits forever for a request can be exhausted by
/// one client (descriptors, memory): each limit here keeps the platform answering others.
///
/// ```swift
/// var limits = ConnectionLimits()
/// limits.perAddress = 32
/// ```
public struct ConnectionLimits: Sendable, Hashable {
    /// Connections one remote address may hold on the HTTP/WebSocket listener; further ones get
    /// `503` and are closed.
    public var perAddress = 256
    /// Connections the HTTP/WebSocket listener holds in all.
    public var total = 10_000
    /// A connection must send its first complete request head within this time (slow-loris).
    public var requestHeadTimeout: Duration = .seconds(10)
    /// Largest request head; a larger one gets `431`.
    public var maximumHeadBytes = 32 * 1024
    /// RTMP connections one address may hold (the endpoint holds at most
    /// ``rtmpTotal``; half-open handshakes count).
    public var rtmpPerAddress = 8
    public var rtmpTotal = 64

    public init() {}
}

/// Why a configuration could not be built.
///
/// ```swift
/// do { _ = try PlatformConfiguration.load() } catch { print(error) } // missingSecret
/// ```
public enum ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No secret in the flags, the environment (`PCAST_SECRET`) or the file.
    case missingSecret
    case unreadableFile(path: String, reason: String)
    case invalidFile(path: String, reason: String)
    case invalidValue(name: String, value: String, reason: String)

    public var description: String {
        switch self {
        case .missingSecret:
            return "no application secret: pass --secret, set \(PlatformConfiguration.EnvironmentKey.secret) or put \"secret\" in the configuration file"
        case .unreadableFile(let path, let reason): return "cannot read configuration file \(path): \(reason)"
        case .invalidFile(let path, let reason): return "configuration file \(path) is invalid: \(reason)"
        case .invalidValue(let name, let value, let reason): return "invalid \(name) '\(value)': \(reason)"
        }
    }
}

/// A STUN or TURN server announced to WebRTC clients.
///
/// ```swift
/// let turn = try ICEServer(parsing: "turn:turn.example.net:3478?transport=udp,alice,secret")
/// turn.linkHeader   // <turn:turn.example.net:3478?transport=udp>; rel="ice-server"; username="alice"; credential="secret"; credential-type="password"
/// ```
public struct ICEServer: Sendable, Hashable, CustomStringConvertible {
    public var url: String
    public var username: String?
    public var credential: String?

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    public init(url: String, username: String? = nil, credential: String? = nil) throws(Invalid) {
        let scheme = url.split(separator: ":", maxSplits: 1).first.map { $0.lowercased() } ?? ""
        guard ["stun", "stuns", "turn", "turns"].contains(scheme), url.count > scheme.count + 1 else {
            throw Invalid(description: "'\(url)' is not a stun:, stuns:, turn: or turns: URI")
        }
        // Quotes and line breaks would end the header's parameters early.
        for part in [url, username ?? "", credential ?? ""] where part.contains(where: { $0 == "\"" || $0 == ">" || $0.isNewline }) {
            throw Invalid(description: "'\(part)' holds a quote, '>' or a line break")
        }
        guard (username == nil) == (credential == nil) else { throw Invalid(description: "a TURN username needs a credential, and the reverse") }
        self.url = url
        self.username = username
        self.credential = credential
    }

    /// `URL` or `URL,USERNAME,CREDENTIAL` (what `pcast serve --ice-server` takes).
    public init(parsing text: String) throws(Invalid) {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.count == 1 || parts.count == 3 else { throw Invalid(description: "'\(text)': give URL or URL,USERNAME,CREDENTIAL") }
        try self.init(url: parts[0], username: parts.count == 3 ? parts[1] : nil, credential: parts.count == 3 ? parts[2] : nil)
    }

    /// The `Link` header value (RFC 9725 §4.6).
    public var linkHeader: String {
        var value = "<\(url)>; rel=\"ice-server\""
        if let username, let credential {
            value += "; username=\"\(username)\"; credential=\"\(credential)\"; credential-type=\"password\""
        }
        return value
    }

    public var description: String { url }
}

import ArgumentParser
import Foundation
import Logging
import PCast
import PCastProtocol
import PCastNode
import PCastRelay
import PCastServer
import Synchronization
import PCastMedia

/// `pcast serve`: the platform (signaling, tokens, relay) as a server.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the platform: WebSocket signaling, tokens, the SRTP relay on one UDP port (WebRTC peers too: WHIP, WHEP and a browser page at /), /healthz /readyz /metrics.",
        discussion: "Settings come from flags, then environment (PCAST_APPLICATION_ID, PCAST_SECRET, PCAST_HOST, PCAST_HTTP_PORT, PCAST_MEDIA_PORT, PCAST_DATA_DIR, PCAST_DATABASE, PCAST_CONFIG), then a JSON file (--config), then defaults. A secret is required."
    )

    @Option(help: "JSON configuration file.") var config: String?
    @Option(help: "Application id tokens are issued for.") var applicationId: String?
    @Option(help: "Application secret (tokens are signed with it).") var secret: String?
    @Option(help: "Address to listen on: an IPv4 or IPv6 address; :: listens on both (HTTP, WebSocket and the relay's UDP port).") var host: String?
    @Option(help: "HTTP/WebSocket port (0: any free port).") var httpPort: Int?
    @Option(help: "UDP media port of the relay (0: any free port).") var mediaPort: Int?
    @Option(help: "Data directory.") var dataDir: String?
    @Option(help: "Where rooms, members, sessions and chat are kept: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require|verify-full] for a store several nodes share (its schema is migrated at start), or a SQLite file path. Default: rooms.sqlite in the data directory. PCAST_DATABASE.")
    var database: String?
    @Option(help: "This node's name among the nodes sharing a database (GET /admin/nodes); default random. PCAST_NODE_ID.")
    var nodeId: String?
    @Option(help: "Largest signaling message, bytes.") var messageSizeLimit: Int?
    @Option(help: "Seconds between client keep-alives.") var keepaliveInterval: Int?
    @Option(help: "Seconds a disconnected session keeps its streams, subscriptions and room memberships, waiting to resume.") var resumeWindow: Double?
    @Option(help: "RTMP push endpoint port (rtmp://HOST:PORT/live/<publish token>[?name=<stream name>]); 0: any free port.")
    var rtmpPort: Int = 1935
    @Flag(help: "No RTMP push endpoint.") var noRTMP = false
    @Option(help: "Log lines as text, or as json: one JSON object a line, the session, stream and room ids as fields (for log shippers). PCAST_LOG_FORMAT.")
    var logFormat: String?
    @Flag(help: "Serve the sample application backend at /backend/auth and /backend/stream (tokens for Express clients).")
    var sampleBackend = false
    @Flag(help: "GET /metrics needs HTTP Basic applicationId:secret or a token with the 'metrics' capability (PCAST_PROTECT_METRICS).")
    var protectMetrics = false
    @Option(help: "Longest token lifetime accepted, seconds (0: no limit; default a year and a day). PCAST_MAX_TOKEN_LIFETIME.")
    var maxTokenLifetime: Int?
    @Option(help: "HTTP/WebSocket connections one remote address may hold (default 256). PCAST_MAX_CONNECTIONS_PER_ADDRESS.")
    var maxConnectionsPerAddress: Int?
    @Option(help: "HTTP/WebSocket connections held in all (default 10000). PCAST_MAX_CONNECTIONS.")
    var maxConnections: Int?
    @Option(help: "A host (name or address) ingest may pull from although it is internal (repeatable). PCAST_INGEST_ALLOW_HOSTS, comma-separated.")
    var ingestAllowHost: [String] = []
    @Option(help: "A folder file:// ingest may read from (off by default). PCAST_INGEST_FILE_DIR.")
    var ingestFileDir: String?
    @Option(help: "The application backend's URL the platform POSTs signed stream-started / stream-ended notifications to (JSON; X-PCast-Signature: v1=HMAC-SHA256 of \"<X-PCast-Timestamp>.<body>\"), retried with backoff while it fails. PCAST_STREAM_NOTIFICATION_URL.")
    var streamNotificationURL: String?
    @Option(help: "The notifications' HMAC key (default: the application secret). PCAST_STREAM_NOTIFICATION_SECRET.")
    var streamNotificationSecret: String?
    @Flag(help: "Notify every subscription too (subscriber-started / subscriber-ended, with the tags it subscribed with). PCAST_STREAM_NOTIFICATION_VIEWERS.")
    var streamNotificationViewers = false
    @Option(help: "Viewers this node serves at once; one more is refused with capacity (default: no limit). PCAST_MAX_VIEWERS.")
    var maxViewers: Int?
    @Option(help: "With --sample-backend: the password a client's authentication data must carry (moderatorPassword) to get the moderator role; without it no one gets moderator. Defaults to PCAST_MODERATOR_PASSWORD.")
    var moderatorPassword: String?

    @Option(help: "IPv4 or IPv6 address browsers and other WebRTC peers reach the relay at, announced as its ICE candidate (repeatable); needed when the server is behind a one-to-one NAT or a load balancer. Default: the bound address, or every interface's (with --host ::, IPv6 ones too). PCAST_PUBLIC_ADDRESS, comma-separated.")
    var publicAddress: [String] = []

    @Option(help: "A STUN or TURN server WHIP/WHEP clients are told about with a Link header (repeatable): URL, or URL,USERNAME,CREDENTIAL for TURN. PCAST_ICE_SERVERS, semicolon-separated.")
    var iceServer: [String] = []

    @Option(help: "The secret shared with TURN servers that check time-limited credentials (coturn: use-auth-secret, static-auth-secret): each WHIP/WHEP session is told --turn-server with a username and password minted for it. PCAST_TURN_SECRET.")
    var turnSecret: String?
    @Option(help: "A turn: or turns: URI of such a TURN server (repeatable), e.g. turns:turn.example.com:443?transport=tcp. PCAST_TURN_SERVERS, semicolon-separated.")
    var turnServer: [String] = []
    @Option(help: "Seconds a minted TURN credential is valid (default 86400).")
    var turnCredentialLifetime: Int?

    @Option(help: "PEM certificate chain (leaf first): HTTPS and WSS on --http-port for the page, WHIP, WHEP, HLS, /metrics and signaling; read again on SIGHUP. Needs --tls-key. PCAST_TLS_CERTIFICATE.")
    var tlsCertificate: String?
    @Option(help: "PEM private key of --tls-certificate. PCAST_TLS_KEY.")
    var tlsKey: String?
    @Option(help: "With TLS: a plain-HTTP port that only redirects to HTTPS (308). PCAST_HTTP_REDIRECT_PORT.")
    var httpRedirectPort: Int?
    @Option(help: "PEM certificate authorities this node trusts, besides the system's, when it calls other nodes of its cluster over HTTPS (nodes with certificates of a private CA). PCAST_CLUSTER_CA_FILE.")
    var clusterCAFile: String?
    @Option(help: "With TLS: the RTMP push endpoint over TLS on this port as well (rtmps://HOST:PORT/live/<publish token>), with the same certificate; 0: any free port.")
    var rtmpsPort: Int?

    func run() async throws {
        var format: SDKLog.LineFormat?
        if let logFormat {
            guard let chosen = SDKLog.LineFormat(rawValue: logFormat) else { throw fail("--log-format must be text or json", code: 2) }
            format = chosen
        }
        SDKLog.bootstrapCommandLine(format: format)
        let json = (format ?? SDKLog.environmentFormat) == .json
        let environment = ProcessInfo.processInfo.environment
        var iceServers: [ICEServer] = []
        let iceServerTexts = Self.listSetting(iceServer, environment["PCAST_ICE_SERVERS"], separator: ";")
        for text in iceServerTexts {
            do {
                iceServers.append(try ICEServer(parsing: text))
            } catch {
                throw fail("--ice-server: \(error)", code: 2)
            }
        }
        let announced = Self.listSetting(publicAddress, environment["PCAST_PUBLIC_ADDRESS"], separator: ",")
        for address in announced where !Self.isIPv4(address) && !Self.isIPv6(address) {
            throw fail("--public-address '\(address)' is not an IPv4 or IPv6 address (e.g. 203.0.113.7 or 2001:db8::7)", code: 2)
        }
        let overrides = PlatformConfiguration.Overrides(
            applicationId: applicationId, secret: secret, host: host, httpPort: httpPort, mediaPort: mediaPort,
            dataDirectory: dataDir, messageSizeLimit: messageSizeLimit, keepAliveInterval: keepaliveInterval,
            protectMetrics: protectMetrics ? true : nil, maximumTokenLifetime: maxTokenLifetime,
            maximumConnectionsPerAddress: maxConnectionsPerAddress, maximumConnections: maxConnections,
            ingestAllowHosts: ingestAllowHost.isEmpty ? nil : ingestAllowHost, ingestFileDirectory: ingestFileDir,
            database: database, maximumViewers: maxViewers, streamNotificationURL: streamNotificationURL,
            streamNotificationSecret: streamNotificationSecret, streamNotificationViewers: streamNotificationViewers ? true : nil,
            tlsCertificate: tlsCertificate, tlsKey: tlsKey, httpRedirectPort: httpRedirectPort,
            clusterCertificateAuthority: clusterCAFile)
        var configuration: PlatformConfiguration
        do {
            configuration = try PlatformConfiguration.load(file: config.map { URL(fileURLWithPath: $0) },
                                                           environment: ProcessInfo.processInfo.environment, overrides: overrides)
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(2)
        }
        if let resumeWindow {
            guard resumeWindow >= 0 else { throw fail("--resume-window must not be negative", code: 2) }
            configuration.resumeWindow = resumeWindow
        }
        configuration.rtmpPort = noRTMP ? nil : rtmpPort
        configuration.rtmpsPort = rtmpsPort
        let turnServers = Self.listSetting(turnServer, environment["PCAST_TURN_SERVERS"], separator: ";")
        if let secret = turnSecret ?? environment["PCAST_TURN_SECRET"].flatMap({ $0.isEmpty ? nil : $0 }) {
            var turn = TURNSettings(secret: secret, servers: turnServers)
            if let turnCredentialLifetime { turn.lifetime = TimeInterval(turnCredentialLifetime) }
            configuration.turn = turn
        } else if !turnServers.isEmpty {
            throw fail("--turn-server needs --turn-secret (for a TURN server with a fixed password, use --ice-server URL,USERNAME,CREDENTIAL)", code: 2)
        }
        do {
            try configuration.validate()
        } catch {
            throw fail("\(error)", code: 2)
        }
        configuration.iceServers = iceServers
        if let id = nodeId ?? environment["PCAST_NODE_ID"], !id.isEmpty { configuration.nodeId = id }
        configuration.advertisedHost = announced.first
        let password = moderatorPassword ?? ProcessInfo.processInfo.environment["PCAST_MODERATOR_PASSWORD"]
        let policy: (any BackendPolicy)? = sampleBackend ? SampleBackendPolicy(moderatorPassword: password) : nil
        let secure = configuration.tls != nil
        let redirectPort = configuration.httpRedirectPort
        do {
            try await PlatformNode.run(configuration: configuration, logger: Logger(label: "pcast.server"), backendPolicy: policy,
                                       publicAddresses: announced) { node in
                let host = node.host.contains(":") ? "[\(node.host)]" : node.host
                let reachable = announced.first ?? (node.host == "0.0.0.0" ? "127.0.0.1" : node.host == "::" ? "::1" : node.host)
                let web = "\(secure ? "https" : "http")://\(reachable.contains(":") ? "[\(reachable)]" : reachable):\(node.httpPort)"
                let signaling = "\(secure ? "wss" : "ws")://\(host):\(node.httpPort)/ws"
                let addresses = "pcast serve: signaling \(signaling), media udp \(host):\(node.mediaPort)"
                    + (node.iceTCPPort.map { ", ice-tcp \(host):\($0)" } ?? "")
                    + (node.rtmpPort.map { ", rtmp://\(host):\($0)/live/<publish token>" } ?? "")
                    + (node.rtmpsPort.map { ", rtmps://\(host):\($0)/live/<publish token>" } ?? "")
                    + (policy != nil ? ", backend \(web)/backend/" : "")
                    + (redirectPort.map { ", http :\($0) redirects to https" } ?? "")
                let routes = "pcast serve: page \(web)/, WHIP \(web)/whip/<channel alias>, WHEP \(web)/whep/<channel alias or stream id>"
                    + (announced.isEmpty ? "" : ", WebRTC candidates \(announced.joined(separator: " "))")
                if json {
                    // Its lines too are JSON a shipper reads: the addresses as fields.
                    let fields: Logger.Metadata = ["signaling": .string(signaling), "page": .string(web + "/"),
                                                   "media": .string("\(host):\(node.mediaPort)")]
                    for message in [addresses, routes] {
                        print(JSONLogHandler.line(time: Date(), level: .notice, label: "pcast.serve", message: message, source: "pcast",
                                                  metadata: fields))
                    }
                } else {
                    print(addresses)
                    print(routes)
                }
                fflush(nil)
            }
        } catch let error as PlatformNode.StartError {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

extension ServeCommand {
    /// A repeatable flag's values, or else its environment variable's, split at `separator`.
    static func listSetting(_ flags: [String], _ environment: String?, separator: Character) -> [String] {
        guard flags.isEmpty else { return flags }
        return (environment ?? "").split(separator: separator).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    static func isIPv6(_ text: String) -> Bool {
        var address = in6_addr()
        return text.contains(":") && inet_pton(AF_INET6, text, &address) == 1
    }

    static func isIPv4(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            !part.isEmpty && part.count <= 3 && part.allSatisfy(\.isASCII) && part.allSatisfy(\.isNumber) && Int(part).map { $0 <= 255 } == true
        }
    }
}

/// Turns `http://host:port`, `https://host:port`, `host:port`, `ws://host:port/ws` or
/// `wss://host:port/ws` into the signaling URL.
func signalingURL(_ server: String) -> String {
    var text = server
    if text.hasPrefix("http://") { text = "ws://" + text.dropFirst(7) }
    if text.hasPrefix("https://") { text = "wss://" + text.dropFirst(8) }
    if !text.contains("://") { text = "ws://" + text }
    if let url = URL(string: text), url.path.isEmpty || url.path == "/" {
        text = text.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + "/ws"
    }
    return text
}

func fail(_ message: String, code: Int32 = 1) -> ExitCode {
    FileHandle.standardError.write(Data("error: \(message)\n".utf8))
    return ExitCode(code)
}

/// Waits `seconds` (0: forever), or until Ctrl-C or SIGTERM, or until `ended` finishes. The
/// waits that lose the race are left behind (an ended-wait cannot be cancelled), not awaited.
func runUntilStopped(seconds: Double, ended: @escaping @Sendable () async -> Void = {}) async {
    let interrupts = SignalWatcher(signal: SIGINT)
    let terminations = SignalWatcher(signal: SIGTERM)
    let done = Once()
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        done.set(continuation)
        Task { await interrupts.next(); done.resume() }
        Task { await terminations.next(); done.resume() }
        Task { await ended(); done.resume() }
        if seconds > 0 { Task { try? await Task.sleep(for: .seconds(seconds)); done.resume() } }
    }
}

/// A continuation resumed by whichever caller comes first.
final class Once: Sendable {
    private let continuation = Mutex<CheckedContinuation<Void, Never>?>(nil)
    func set(_ value: CheckedContinuation<Void, Never>) { continuation.withLock { $0 = value } }
    func resume() { continuation.withLock { $0.take() }?.resume() }
}

/// Where the platform is and how the session authenticates (publish and subscribe).
struct SessionOptions: ParsableArguments {
    @Option(help: "Platform address (ws://host:port/ws or host:port). Repeat it for other nodes of a cluster: tried in turn when one cannot be reached, and where the session's subscriptions move when its node goes.")
    var server: [String] = []
    @Option(help: "Auth token for the session (defaults to PCAST_AUTH_TOKEN).") var authToken: String?
    @Option(help: "For wss:// and https:// servers: a PEM file of certificate authorities to trust besides the system's (a private CA).")
    var caFile: String?
    @Option(help: "How media reaches the relay: automatic (UDP when the relay answers over it within a second, else SRTP over TCP), udp or tcp.")
    var mediaTransport: MediaTransportPolicy = .automatic

    /// Connects and authenticates, or exits with the platform's status.
    func start() async throws -> PCast {
        guard let first = server.first else { throw fail("the platform's address is needed: --server", code: 2) }
        guard let auth = authToken ?? ProcessInfo.processInfo.environment["PCAST_AUTH_TOKEN"] else {
            throw fail("an auth token is needed for the session: --auth-token or PCAST_AUTH_TOKEN", code: 2)
        }
        var options = PCastOptions(uri: signalingURL(first))
        options.fallbackURIs = server.dropFirst().map(signalingURL)
        options.certificateAuthorityFile = caFile
        options.mediaTransport = mediaTransport
        // The commands end their streams on Ctrl-C or SIGTERM themselves (`runUntilStopped`).
        options.enableProcessTerminationSignalHandling = false
        let pcast = PCast(options)
        do {
            try await pcast.start(authToken: auth)
        } catch where error.code == .refused {
            throw fail("authentication failed (\(error.status.rawValue)): \(error)")
        } catch {
            throw fail("\(error)")
        }
        return pcast
    }
}

/// `pcast publish`: capture and publish through a platform.
struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Publish a source to a platform; prints the stream id, then runs until Ctrl-C or --seconds."
    )

    @OptionGroup var session: SessionOptions
    @Option(help: "Publish token.") var token: String
    @Option(help: "Video source: test, null, screen, a device id, a URI, or a gst-launch description.") var source = "test"
    @Option(help: "Audio source (test, null, device id, URI, description); 'none' for no audio.") var audio = "test"
    @Flag(help: "A URI source plays again from the start at its end (else its end ends the stream as ended).") var loop = false
    @Option(help: "Width (exact).") var width = 1280
    @Option(help: "Height (exact).") var height = 720
    @Option(help: "Frame rate (exact).") var fps: Double = 30
    @Option(help: "Video bitrate, kbit/s.") var bitrate = 2500
    @Option(help: "Video codec: h264, vp8, vp9, av1 or h265.") var codec: VideoCodec = .h264
    @Option(help: "Tag to put on the stream (repeatable).") var tag: [String] = []
    @Option(help: "Seconds to publish (0: until Ctrl-C).") var seconds: Double = 0
    @Option(help: "Publish type: live (no recording), record (a new recording named --stream-name, replacing one), append (continue that recording).")
    var publishType: String = "live"
    @Option(help: "Stream name: the recording's name for --publish-type record/append (A-Z a-z 0-9 . _ -).") var streamName: String?
    @Flag(help: "Print an RTC stats report (outbound-rtp, remote-inbound-rtp with round-trip time) as a JSON line every second.") var stats = false

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        guard let type = PublishType(rawValue: publishType) else { throw fail("--publish-type must be live, record or append", code: 2) }
        if type != .live {
            guard let streamName else { throw fail("--publish-type \(publishType) needs --stream-name", code: 2) }
            do throws(RecordingNameError) { _ = try RecordingName(streamName) } catch { throw fail("--stream-name: \(error)", code: 2) }
        }
        var options = UserMediaOptions()
        switch PreviewCommand.parse(source, kind: .video) {
        case .id(let id): options.video.deviceId = .exact(id)
        case .override(let override): options.video.source = override
        }
        options.video.width = .exact(width)
        options.video.height = .exact(height)
        options.video.frameRate = .exact(fps)
        options.video.loop = loop
        options.audio.loop = loop
        if audio == "none" {
            options.audio.enabled = false
        } else {
            switch PreviewCommand.parse(audio, kind: .audio) {
            case .id(let id): options.audio.deviceId = .exact(id)
            case .override(let override): options.audio.source = override
            }
        }
        let pcast = try await session.start()
        let media: UserMediaStream
        do {
            media = try await pcast.getUserMedia(options)
        } catch {
            await pcast.stop()
            throw fail("getUserMedia failed (\(error.status.rawValue)): \(error)")
        }
        let publisher: Publisher
        do {
            publisher = try await pcast.publish(streamToken: token, mediaStream: media, tags: tag,
                                                settings: EncodingSettings(videoBitrate: bitrate, keyframeInterval: Int(fps * 2), videoCodec: codec),
                                                publishType: type, streamName: streamName)
        } catch {
            await media.stop()
            await pcast.stop()
            throw fail("publish failed (\(error.status.rawValue)): \(error)")
        }
        print(publisher.streamId)
        if let path = publisher.mediaPath { FileHandle.standardError.write(Data("media: \(path)\n".utf8)) }
        fflush(nil)
        let printer = stats ? Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                print(publisher.rtcStatsReport().json)
                fflush(nil)
            }
        } : nil
        await runUntilStopped(seconds: seconds) { _ = await publisher.ended() }
        printer?.cancel()
        if let (reason, description) = publisher.hasEnded ? await Optional(publisher.ended()) : nil {
            FileHandle.standardError.write(Data("stream ended: \(reason.rawValue)\(description.map { " (\($0))" } ?? "")\n".utf8))
        }
        await publisher.stop()
        await media.stop()
        await pcast.stop()
    }
}

/// `pcast subscribe`: receive a stream from a platform and render it.
struct SubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Subscribe to a stream and render it (null sink when headless); optionally save a screenshot."
    )

    @OptionGroup var session: SessionOptions
    @Option(help: "Stream token.") var token: String
    @Option(help: "Sink: auto (a window and speakers) or null.") var sink = "auto"
    @Option(help: "Write the last rendered frame as PNG here at the end.") var screenshot: String?
    @Option(help: "Seconds to watch (0: until Ctrl-C or the stream ends).") var seconds: Double = 0
    @Option(help: "Playout delay, milliseconds.") var playoutDelay: Int?
    @Option(help: "Of a simulcast: adaptive (the best layer the link carries), best, lowest, or a layer's RID.")
    var layer = "adaptive"
    @Option(help: "Show the video at WIDTHxHEIGHT (of a simulcast, no larger layer than fills it is sent).")
    var displaySize: String?
    @Flag(help: "Print the received tracks' network statistics as a JSON line every second.") var stats = false
    @Flag(help: "Print an RTC stats report (inbound-rtp) as a JSON line every second.") var rtcStats = false

    func validate() throws {
        if let displaySize, Self.dimensions(displaySize) == nil {
            throw ValidationError("--display-size takes WIDTHxHEIGHT, each 1…16384 (got '\(displaySize)')")
        }
        if layer.isEmpty { throw ValidationError("--layer takes adaptive, best, lowest or a RID") }
    }

    static func dimensions(_ text: String) -> Dimensions? {
        let parts = text.lowercased().split(separator: "x")
        guard parts.count == 2, let width = Int(parts[0]), let height = Int(parts[1]),
              ViewSize(width: width, height: height).isValid else { return nil }
        return Dimensions(width: width, height: height)
    }

    var layerSelection: LayerSelection {
        switch layer {
        case "adaptive": .adaptive
        case "best": .best
        case "lowest": .lowest
        default: .rid(layer)
        }
    }

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let pcast = try await session.start()
        let stream: MediaStream
        do {
            stream = try await pcast.subscribe(streamToken: token, playoutDelay: playoutDelay.map { .milliseconds($0) }, layer: layerSelection)
        } catch {
            await pcast.stop()
            throw fail("subscribe failed (\(error.status.rawValue)): \(error)")
        }
        let headless = ProcessInfo.processInfo.environment["DISPLAY"].map(\.isEmpty) ?? true
        let useNull = sink == "null" || headless
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: useNull, useNullAudioDevice: useNull,
                                                             displaySize: displaySize.flatMap(Self.dimensions)))
        if let path = pcast.mediaPath(of: stream) { print("media: \(path)") }
        renderer.setVideoDisplayDimensionsChangedCallback { print("video: \($0)") }
        let status = await renderer.start()
        guard status == .ok else {
            await stream.stop()
            await pcast.stop()
            throw fail("renderer: \(status)")
        }
        let printer = stats || rtcStats ? Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                if stats { print(Self.statisticsLine(stream.networkStatistics())) }
                if rtcStats { print(stream.rtcStatsReport().json) }
                fflush(nil)   // a line a second as it is measured, also into a pipe or a file
            }
        } : nil
        await runUntilStopped(seconds: seconds) { _ = await stream.ended() }
        printer?.cancel()
        switch stream.endReason {
        case .remote(let reason, let description)?:
            FileHandle.standardError.write(Data("stream ended: \(reason.rawValue)\(description.map { " (\($0))" } ?? "")\n".utf8))
        case let reason?:
            FileHandle.standardError.write(Data("stream ended: \(reason)\n".utf8))
        case nil:
            break
        }
        var failed = false
        if let screenshot {
            do {
                let frame = try await firstRenderedFrame(renderer, within: .seconds(10))
                try await frame.pngData().write(to: URL(fileURLWithPath: screenshot))
                print("screenshot: \(screenshot) (\(frame.width)x\(frame.height))")
            } catch {
                FileHandle.standardError.write(Data("error: screenshot: \(error)\n".utf8))
                failed = true
            }
        }
        await renderer.stop()
        await stream.stop()
        await pcast.stop()
        if failed { throw ExitCode(1) }
    }
}

extension SubscribeCommand {
    /// One JSON object: `{"video": {...}, "audio": {...}}` with the counters of each track.
    static func statisticsLine(_ statistics: [ReceivedTrackStatistics]) -> String {
        var object: [String: [String: Any]] = [:]
        for track in statistics {
            object[track.kind.rawValue] = [
                "packetsReceived": track.packetsReceived, "bytesReceived": track.bytesReceived, "packetsExpected": track.packetsExpected,
                "packetsMissingOnArrival": track.packetsMissingOnArrival, "packetsLost": track.packetsLost, "packetsLate": track.packetsLate,
                "nacksSent": track.nacksSent, "jitterMilliseconds": Double(track.jitter / .microseconds(1)) / 1000,
                "lossBeforeRepair": track.lossBeforeRepair, "lossAfterRepair": track.lossAfterRepair,
            ]
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// The last rendered frame, waiting up to `within` for a first one (a screenshot asked for early).
func firstRenderedFrame(_ renderer: Renderer, within deadline: Duration) async throws -> VideoFrame {
    let end = ContinuousClock.now + deadline
    while true {
        do {
            return try renderer.lastVideoFrameRendered()
        } catch {
            guard ContinuousClock.now < end else { throw error }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

extension MediaTransportPolicy: ExpressibleByArgument {}

extension VideoCodec: ExpressibleByArgument {
    public init?(argument: String) { self.init(encodingName: argument) }
    public static var allValueStrings: [String] { allCases.map { $0.encodingName.lowercased() } }
}

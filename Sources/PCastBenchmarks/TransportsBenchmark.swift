import Foundation
import PCast
import PCastContracts
import PCastNode
import PCastProtocol
import PCastRelay
import PCastServer
import PCastTestSupport

/// What the ways through a firewall cost (`pcast-bench transports`):
/// - **first frame in Chromium by WHEP over HTTPS**, from a client host behind NAT (``NATTopology``:
///   Chromium in the client namespace, the platform in this one on 198.18.40.1 over TLS with a
///   certificate of a throwaway CA the browser trusts): over UDP; over ICE-TCP with UDP dropped at
///   the router; over TURN/TLS on 443 (coturn, `iceTransportPolicy: "relay"`) with UDP and the
///   relay's TCP port dropped. A fresh browser per run, the platform's own page, from its WHEP
///   session's start (OPTIONS for ICE servers, offer, answer, ICE, DTLS, the keyframe) to the
///   first frame it presents (`requestVideoFrameCallback`);
/// - **glass to glass, SDK → SDK, over UDP and over the SDK's TCP fallback** with random loss on
///   the path each way (nftables on loopback: ``PathLoss``, which loses TCP segments too), at the
///   viewer's screen (its sink presenting the frame, the SDK's default playout delay), with the
///   freezes a viewer sees. Loss-free runs of both in the same run as the reference.
public struct TransportsBenchmark: Sendable {
    public struct FirstFrame: Sendable, Hashable, Codable {
        /// `udp`, `tcp` or `turn/tls`, as the page saw its selected candidate pair.
        public var transport: String
        /// Milliseconds, one per fresh browser, in run order.
        public var runs: [Double]
        public var p50: Double
        public var maximum: Double
        /// Runs that showed no frame within 20 s (not in `runs`).
        public var failures: Int
        public var goalP50: Double
    }

    public struct GlassToGlass: Sendable, Hashable, Codable {
        /// `udp` or `tcp`, as the SDK's flows reported (``MediaPath``).
        public var transport: String
        public var lossPercent: Int
        public var frames: Int
        public var deliveredPercent: Double
        /// Capture → presented by the viewer's sink, ms.
        public var screenP50: Double
        public var screenP90: Double
        public var screenP99: Double
        /// Gaps between presented frames beyond 100 ms: their total and the longest, ms.
        public var freezeMilliseconds: Double
        public var longestFreezeMilliseconds: Double
        /// Where the viewer's adaptive playout delay (the SDK's default) ended, ms.
        public var playoutDelayMilliseconds: Double
    }

    public struct Result: Sendable, Hashable, Codable {
        public var firstFrame: [FirstFrame]
        public var glassToGlass: [GlassToGlass]
    }

    public var firstFrameRuns: Int
    public var seconds: Double
    public var lossPercent: Int

    public init(firstFrameRuns: Int = 5, seconds: Double = 10, lossPercent: Int = 1) {
        self.firstFrameRuns = firstFrameRuns
        self.seconds = seconds
        self.lossPercent = lossPercent
    }

    public func run() async throws -> Result {
        let firstFrame = try await measureFirstFrames()
        var glass: [GlassToGlass] = []
        for transport in ["udp", "tcp"] {
            for loss in [0, lossPercent] { glass.append(try await measureGlassToGlass(transport: transport, loss: loss)) }
        }
        return Result(firstFrame: firstFrame, glassToGlass: glass)
    }

    // MARK: First frame in Chromium

    private func measureFirstFrames() async throws -> [FirstFrame] {
        guard TCPProbe.bindable(port: 443, address: "0.0.0.0") else {
            throw BenchmarkSetupError("port 443 is taken on this machine: the TURN/TLS runs put coturn there")
        }
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let topology = try NATTopology.create()
        defer { topology.remove() }
        let secret = SRTPFreeRandom.secret()
        let coturn = try CoturnServer.startTLS(secret: secret, address: topology.serverIPv4,
                                               certificate: certificates.leaf.certificate, key: certificates.leaf.key)
        defer { coturn.stop() }
        let platform = try await LocalPlatform.start(relayConfiguration: RelayConfiguration(host: "::")) { configuration in
            configuration.host = "::"
            configuration.tls = TLSFiles(certificateChain: certificates.leaf.certificate, privateKey: certificates.leaf.key)
            configuration.turn = TURNSettings(secret: secret, servers: ["turns:\(topology.serverIPv4):443?transport=tcp"])
        }
        let port = Self.port(of: platform.httpURL)
        var results: [FirstFrame] = []
        var options = PCastOptions(uri: "wss://\(topology.serverIPv4):\(port)/ws")
        options.certificateAuthorityFile = certificates.authority
        let sdk = PCast(options)
        do {
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await sdk.getUserMedia(.synthetic(width: 1280, height: 720))
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:bench"])
            guard let tcpPort = platform.relay.tcpPort else { throw BenchmarkSetupError("the relay has no ICE-TCP port") }
            for (transport, goal) in [("udp", 300.0), ("tcp", 500.0), ("turn/tls", 800.0)] {
                if transport == "tcp" { try topology.dropUDP() }
                if transport == "turn/tls" { try topology.dropTCP(port: tcpPort) }
                var runs: [Double] = [], failures = 0
                for _ in 0..<firstFrameRuns {
                    let collector = try ReportCollector(namespace: topology.client)
                    defer { collector.close() }
                    var query = URLComponents(string: "https://pcast.test:\(port)/")!
                    query.queryItems = [
                        URLQueryItem(name: "watch", value: "bench"),
                        URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("bench"))),
                        URLQueryItem(name: "report", value: collector.url),
                    ] + (transport == "turn/tls" ? [URLQueryItem(name: "relay", value: "1")] : [])
                    let browser = try HeadlessChromium.open(query.url!.absoluteString, trusting: certificates.authority,
                                                            namespace: topology.client, hosts: ["pcast.test": topology.serverIPv4])
                    defer { browser.close() }
                    let deadline = ContinuousClock.now + .seconds(20)
                    var report: [String: any Sendable]?
                    while ContinuousClock.now < deadline {
                        if let latest = collector.latest("watch"), latest["firstFrameMs"] != nil {
                            report = latest
                            break
                        }
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    guard let report else {
                        failures += 1
                        continue
                    }
                    guard report.string("transport") == transport else {
                        throw BenchmarkSetupError("a \(transport) run went over \(report.string("transport")): \(report)")
                    }
                    runs.append(report.number("firstFrameMs"))
                }
                let sorted = runs.sorted()
                results.append(FirstFrame(transport: transport, runs: runs, p50: sorted.isEmpty ? .nan : sorted[sorted.count / 2],
                                          maximum: sorted.last ?? .nan, failures: failures, goalP50: goal))
            }
            await publisher.stop()
            await media.stop()
            await sdk.stop()
        } catch {
            await sdk.stop()
            await platform.shutdown()
            throw error
        }
        await platform.shutdown()
        return results
    }

    static func port(of url: String) -> Int {
        Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") ?? 0
    }

    // MARK: Glass to glass, SDK to SDK

    private func measureGlassToGlass(transport: String, loss: Int) async throws -> GlassToGlass {
        let platform = try await LocalPlatform.start()
        var options = PCastOptions(uri: platform.signalingURL)
        options.mediaTransport = transport == "tcp" ? .tcp : .udp
        let publisherSDK = PCast(options), viewer = PCast(options)
        do {
            guard let tcpPort = platform.relay.tcpPort else { throw BenchmarkSetupError("the relay has no ICE-TCP port") }
            try await publisherSDK.start(authToken: try platform.token(.auth))
            let media = try await publisherSDK.getUserMedia(.synthetic(width: 1280, height: 720))
            let meter = StreamMeter()
            try meter.stamp(media)
            let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
            try await viewer.start(authToken: try platform.token(.auth))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            try meter.watch(renderer, of: stream)
            try await Task.sleep(for: .seconds(1))      // warm up: first keyframe, jitter buffer
            let lossRules = loss > 0 ? try PathLoss.losing(loss, of: transport, port: transport == "tcp" ? tcpPort : platform.relay.mediaPort) : nil
            _ = meter.take()
            try await Task.sleep(for: .seconds(seconds))
            let snapshot = meter.take()
            let delay = renderer.playoutDelay.map { $0.seconds * 1000 } ?? .nan
            lossRules?.remove()
            let paths = [publisher.mediaPath?.transport ?? "none", viewer.mediaPath(of: stream)?.transport ?? "none"]
            await renderer.stop()
            await stream.stop()
            await publisher.stop()
            await media.stop()
            await viewer.stop()
            await publisherSDK.stop()
            await platform.shutdown()
            guard paths.allSatisfy({ $0 == transport }) else {
                throw BenchmarkSetupError("the \(transport) run's flows went over \(paths.joined(separator: " and "))")
            }
            return GlassToGlass(transport: transport, lossPercent: loss, frames: snapshot.frames,
                                deliveredPercent: snapshot.deliveredPercent,
                                screenP50: snapshot.screenPercentile(50) ?? .nan, screenP90: snapshot.screenPercentile(90) ?? .nan,
                                screenP99: snapshot.screenPercentile(99) ?? .nan, freezeMilliseconds: snapshot.freezeMilliseconds,
                                longestFreezeMilliseconds: snapshot.longestFreezeMilliseconds, playoutDelayMilliseconds: delay)
        } catch {
            await viewer.stop()
            await publisherSDK.stop()
            await platform.shutdown()
            throw error
        }
    }
}

extension TransportsBenchmark {
    /// The markdown section `pcast-bench transports` writes.
    public static func markdown(_ result: Result, date: Date = Date(), machine: String) -> String {
        func ms(_ value: Double) -> String { value.isNaN ? "–" : String(format: "%.0f", value) }
        var text = """
            ## Through firewalls: first frame in Chromium and glass to glass by transport

            \(ISO8601DateFormatter().string(from: date)), \(machine).

            First frame in headless Chromium behind NAT (another network namespace), by WHEP over HTTPS, a fresh \
            browser per run, from the session's start to the first presented frame:

            | transport | runs | p50 ms | max ms | goal p50 ms | no frame |
            |---|---|---|---|---|---|

            """
        for row in result.firstFrame {
            text += "| \(row.transport) | \(row.runs.map { ms($0) }.joined(separator: ", ")) | \(ms(row.p50)) | \(ms(row.maximum)) | ≤ \(ms(row.goalP50)) | \(row.failures) |\n"
        }
        text += """

            Glass to glass, SDK publisher → relay → SDK viewer (720p30 H.264), capture to the viewer's sink \
            presenting the frame at the SDK's default, adaptive playout delay (where it ended: "delay"), random \
            loss each way on the path, the publisher's leg and the viewer's (nftables on loopback; TCP loses segments \
            and retransmits them itself):

            | transport | loss % | frames | delivered % | p50 ms | p90 ms | p99 ms | freezes ms | longest freeze ms | delay ms |
            |---|---|---|---|---|---|---|---|---|---|

            """
        for row in result.glassToGlass {
            text += "| \(row.transport) | \(row.lossPercent) | \(row.frames) | \(String(format: "%.1f", row.deliveredPercent)) | \(ms(row.screenP50)) | "
                + "\(ms(row.screenP90)) | \(ms(row.screenP99)) | \(ms(row.freezeMilliseconds)) | \(ms(row.longestFreezeMilliseconds)) | \(ms(row.playoutDelayMilliseconds)) |\n"
        }
        return text
    }
}

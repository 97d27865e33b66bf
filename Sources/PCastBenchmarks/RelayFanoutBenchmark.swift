import DTLS
import Foundation
import Glibc
import PCastContracts
import PCastProtocol
import PCastRelay
import PCastTestSupport
import SRTP
import Synchronization

/// One stream fanned out to N subscribers, through the ``Relay`` and through a reference relay
/// (`gst-launch-1.0 udpsrc ! multiudpsink`: plain RTP, no crypto), with the CPU each spends and
/// the packets each loses.
///
/// The publisher is real: it sends 720p-like SRTP (1200-byte RTP packets at 2.5 Mbps, in bursts
/// of one video frame at 30 fps) from its own socket. Each subscriber is a real socket that
/// announces itself with an authenticated receiver report; a few receiver threads drain all of
/// them (`poll` + `recvmmsg`), count packets in the measured window, check sequence continuity
/// and SRTP-unprotect a sample of what arrives. Relay CPU is its threads' CPU clocks (the I/O thread
/// and the fan-out workers); the reference's is its whole process's CPU clock.
///
/// ```swift
/// let result = try RelayFanoutBenchmark(configuration: .init(subscribers: 500)).run()
/// print(result.relay.cpuPercent, result.relay.lossPercent, result.cpuRatio ?? 0)
/// ```
public struct RelayFanoutBenchmark: Sendable {
    public struct Configuration: Sendable, Hashable, Codable {
        public var subscribers: Int
        /// Seconds measured (after the warm-up).
        public var duration: Double
        /// RTP packet size before SRTP.
        public var packetSize: Int = 1200
        /// Bits per second of RTP.
        public var bitrate: Int = 2_500_000
        /// Packets go out in one burst per frame.
        public var frameRate: Int = 30
        public var receiverThreads: Int = 2
        /// Also measure `gst-launch-1.0 udpsrc ! multiudpsink`.
        public var includeReference: Bool = true
        public var gstLaunchPath: String = "/usr/bin/gst-launch-1.0"
        /// Seconds of traffic before measuring, at least (longer until every subscriber receives).
        public var warmUp: Double = 1
        /// Every n-th packet a subscriber receives from the relay is SRTP-unprotected.
        public var authenticationSampleInterval: Int = 50
        /// Subscribers are WebRTC viewers, as a browser's WHEP session makes them: each passes an
        /// ICE connectivity check and a DTLS-SRTP handshake (as client, with its own certificate)
        /// before the stream starts, and gets its packets with a rewritten payload type. The
        /// handshakes are measured too.
        public var webRTCViewers: Bool = false
        /// How WebRTC viewers reach the relay: UDP to its media port, or ICE over TCP (each viewer a
        /// TCP connection to ``Relay/tcpPort``, every packet an RFC 4571 frame). UDP only without
        /// ``webRTCViewers``.
        public var viewerTransport: ViewerTransport = .udp
        /// Edge relays between the relay and its subscribers (an origin → edge cascade): each pulls
        /// the stream over one leg and serves `subscribers / edges` of them. The CPU measured is
        /// the origin's; 0: every subscriber is the relay's own.
        public var edges: Int = 0
        /// The relay's ``RelayConfiguration/fanOutThreads`` (its default: one per core).
        public var fanOutThreads: Int = RelayConfiguration.onlineCores
        /// The relay's ``RelayConfiguration/segmentationOffload`` (UDP GSO; its default: on).
        public var segmentationOffload = true

        public init(subscribers: Int = 100, duration: Double = 5) {
            self.subscribers = subscribers
            self.duration = duration
        }
    }

    /// The figures for one relay (ours or the reference).
    public struct Leg: Sendable, Hashable, Codable {
        /// CPU used over the measured window, in % of one core.
        public var cpuPercent: Double
        /// Its user-space part (SRTP, routing) and kernel part (sending, loopback delivery), from
        /// `/proc` at clock-tick (10 ms) resolution.
        public var userCPUPercent: Double
        public var systemCPUPercent: Double
        /// Packets expected but not received in the measured window, in %.
        public var lossPercent: Double
        public var measuredSeconds: Double
        /// Packets the publisher sent in the measured window.
        public var packetsSent: Int
        /// `packetsSent × subscribers`.
        public var packetsExpected: Int
        public var packetsReceived: Int
        /// Times a subscriber's next packet was not the one after its previous one.
        public var sequenceDiscontinuities: Int
        /// Sampled packets that were SRTP-unprotected with the subscriber's serverKey, and those that failed.
        public var packetsAuthenticated: Int
        public var authenticationFailures: Int
        /// `subscribers / (cpuPercent / 100)`.
        public var subscribersPerCore: Double
        /// From the publisher's send to a subscriber's read, over the window's packets; includes
        /// up to 2 ms the receivers wait between reads to batch them.
        public var latencyP50Milliseconds: Double
        public var latencyP99Milliseconds: Double
        public var latencyMaximumMilliseconds: Double
        /// Datagrams the relay failed to send (our relay only).
        public var sendFailures: UInt64?
        /// Of the datagrams the relay sent, the share that left in segmented (GSO) messages (our relay only).
        public var segmentedShare: Double?
    }

    /// The relay's side of WebRTC viewers' ICE + DTLS handshakes, done one after another.
    public struct Handshakes: Sendable, Hashable, Codable {
        public var count: Int
        /// Relay I/O thread CPU over all the handshakes, per viewer (STUN check, DTLS with ECDHE
        /// and ECDSA, key export), milliseconds.
        public var relayCPUMillisecondsPerViewer: Double
        /// Handshakes one core could do per second at that cost.
        public var handshakesPerCoreSecond: Double
        /// From the viewer opening its socket (over TCP: connecting) to holding its keys, milliseconds.
        public var wallP50Milliseconds: Double
        public var wallMaximumMilliseconds: Double
    }

    public struct Result: Sendable, Hashable, Codable {
        public var configuration: Configuration
        public var packetsPerSecond: Double
        public var handshakes: Handshakes?
        public var relay: Leg
        public var reference: Leg?
        /// Why there is no reference figure, when there is none.
        public var referenceError: String?
        /// Relay CPU / reference CPU.
        public var cpuRatio: Double?
    }

    public enum Failure: Error, Sendable, CustomStringConvertible {
        case relay(RelayError)
        case srtp(SRTPError)
        case invalidConfiguration(String)
        /// A WebRTC viewer could not connect (its TCP connection, ICE check or DTLS handshake).
        case viewer(index: Int, String)

        public var description: String {
            switch self {
            case .viewer(let index, let why): return "WebRTC viewer \(index): \(why)"
            case .relay(let error): return "relay: \(error)"
            case .srtp(let error): return "SRTP: \(error)"
            case .invalidConfiguration(let why): return "invalid benchmark configuration: \(why)"
            }
        }
    }

    public let configuration: Configuration

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    var packetsPerSecond: Double { Double(configuration.bitrate) / Double(configuration.packetSize * 8) }

    public func run() throws(Failure) -> Result {
        let c = configuration
        guard c.subscribers >= 1, c.duration > 0, c.edges >= 0, c.edges <= c.subscribers, c.edges == 0 || !c.webRTCViewers, c.packetSize >= 64, c.packetSize <= 1400, c.bitrate > 0,
              c.frameRate > 0, c.receiverThreads >= 1, c.authenticationSampleInterval >= 1
        else { throw .invalidConfiguration("subscribers, duration, bitrate, frame rate and threads must be positive; packets 64–1400 bytes; edges 0 to subscribers, and not with WebRTC viewers") }
        guard c.viewerTransport == .udp || c.webRTCViewers else { throw .invalidConfiguration("ICE-TCP is for WebRTC viewers only") }
        guard c.viewerTransport == .udp || c.subscribers <= Self.maximumTCPViewers else {
            throw .invalidConfiguration("at most \(Self.maximumTCPViewers) ICE-TCP viewers (the relay holds 2,048 TCP connections)")
        }
        guard packetsPerSecond * c.duration < 30_000 else { throw .invalidConfiguration("the measured window must stay under 30,000 packets") }

        let (relay, handshakes) = try runRelay()
        var result = Result(configuration: c, packetsPerSecond: packetsPerSecond, handshakes: handshakes, relay: relay)
        if c.includeReference {
            do {
                let reference = try runReference()
                result.reference = reference
                if reference.cpuPercent > 0 { result.cpuRatio = relay.cpuPercent / reference.cpuPercent }
            } catch {
                result.referenceError = error.message
            }
        }
        return result
    }

    // MARK: Our relay

    private func runRelay() throws(Failure) -> (Leg, Handshakes?) {
        let c = configuration
        let relay: Relay
        var relayConfiguration = RelayConfiguration()
        // The viewers send no consent checks after connecting (browsers do, every few seconds):
        // long enough a consent window that a long run of handshakes keeps the first viewers.
        relayConfiguration.webRTCConsentTimeout = .seconds(300)
        relayConfiguration.fanOutThreads = c.fanOutThreads
        relayConfiguration.segmentationOffload = c.segmentationOffload
        do { relay = try Relay(configuration: relayConfiguration) } catch { throw .relay(error) }
        var edges: [Relay] = []
        defer {
            for edge in edges { edge.shutdown() }
            relay.shutdown()
        }
        let ssrc: UInt32 = 0x5EED_0001
        let relayAddress = RelayAddress(ipv4: 0x7F00_0001, port: relay.mediaPort)
        do {
            let publisherTransport = try relay.addPublisher(
                streamId: "bench", tracks: [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc)])
            let publisherKey = try Self.key(publisherTransport.clientKey, profile: publisherTransport.srtpProfile)
            let protector = try SRTPSession(key: publisherKey, direction: .outbound)

            var endpoints: [FanoutEndpoint] = []
            var checkers: [SRTPSession] = []
            var consent: [ConsentRefresh] = []
            var handshakes: Handshakes?
            if c.webRTCViewers {
                let (connected, figures) = try connectWebRTCViewers(relay, count: c.subscribers, relayAddress: relayAddress)
                for viewer in connected {
                    endpoints.append(viewer.endpoint)
                    checkers.append(viewer.checker)
                    consent.append(viewer.consent)
                }
                handshakes = figures
            } else {
                for index in 0..<c.edges {
                    let edge = try Relay(configuration: RelayConfiguration())
                    edges.append(edge)
                    let leg = try relay.addEdgeSubscriber(streamId: "bench", subscriberId: "edge-\(index)")
                    try edge.addUpstream(streamId: "bench", tracks: [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc)],
                                         origin: UpstreamOrigin(host: "127.0.0.1", port: relay.mediaPort, transport: leg))
                }
                for index in 0..<c.subscribers {
                    let server = c.edges > 0 ? edges[index % c.edges] : relay
                    let transport = try server.addSubscriber(streamId: "bench", subscriberId: "s\(index)")
                    let socket = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20)
                    // The first authenticated RTCP tells the relay where this subscriber is.
                    var report = try RTCPPacket.receiverReport(RTCPReceiverReport(ssrc: transport.rtcpSSRC ?? 0)).serialized()
                    try SRTPSession(key: Self.key(transport.clientKey, profile: transport.srtpProfile), direction: .outbound).protectRTCP(&report)
                    socket.send(report, to: RelayAddress(ipv4: 0x7F00_0001, port: server.mediaPort))
                    endpoints.append(.udp(socket))
                    checkers.append(try SRTPSession(key: Self.key(transport.serverKey, profile: transport.srtpProfile), direction: .inbound))
                }
            }
            let receivers = FanoutReceivers(endpoints: endpoints, checkers: checkers, consent: consent, sampleInterval: c.authenticationSampleInterval)
            let window = publish(
                to: relayAddress, ssrc: ssrc, receivers: receivers, protector: protector,
                cpuTime: {
                    let split = relay.cpuSplit
                    return CPUSample(total: relay.cpuTime.nanoseconds, user: split?.user.nanoseconds ?? 0, system: split?.system.nanoseconds ?? 0)
                }, alive: { true })
            var leg = receivers.finish(window: window, subscribers: c.subscribers)
            let statistics = relay.statistics()
            leg.sendFailures = statistics.sendFailures
            leg.segmentedShare = statistics.packetsOut > 0 ? Double(statistics.segmentedDatagrams) / Double(statistics.packetsOut) : 0
            return (leg, handshakes)
        } catch let error as RelayError {
            throw .relay(error)
        } catch let error as SRTPError {
            throw .srtp(error)
        } catch let error as Failure {
            throw error
        } catch {
            throw .invalidConfiguration("\(error)")
        }
    }

    // MARK: WebRTC viewers

    /// One connected WebRTC viewer: where its packets arrive, the SRTP session that checks them,
    /// and what keeps it alive at the relay.
    struct ConnectedViewer {
        let endpoint: FanoutEndpoint
        let checker: SRTPSession
        let consent: ConsentRefresh
    }

    /// ICE-TCP viewers connect from this many to an address of the loopback network (127.0.0.1,
    /// then 127.0.0.2, ...). The relay holds at most 64 TCP connections from one address
    /// (`TCPMediaListener.maximumPerAddress`, a constant, not a ``RelayConfiguration`` setting):
    /// hundreds of viewers from 127.0.0.1 alone would be refused past the 64th, so they come from
    /// several addresses, as viewers behind different networks do.
    static let tcpViewersPerAddress = 50
    /// The relay's cap on TCP connections in all (`TCPMediaListener.maximumConnections`, 2,048), with room to spare.
    public static let maximumTCPViewers = 2_000

    /// Opens `count` WebRTC viewers of the "bench" stream, one after another, each as a browser
    /// does after its WHEP answer: over UDP from a socket of its own, or over ICE-TCP on a
    /// connection of its own to the relay's TCP port (``Configuration/viewerTransport``), a STUN
    /// check (USE-CANDIDATE, MESSAGE-INTEGRITY with the relay's ice-pwd) until answered, then a
    /// DTLS client handshake with its own certificate. Returns each viewer with an SRTP session
    /// for what the relay sends it, and the handshakes' figures (the relay I/O thread's CPU clock
    /// around them all: over TCP, accepting and reading the connections too).
    private func connectWebRTCViewers(_ relay: Relay, count: Int, relayAddress: RelayAddress) throws -> ([ConnectedViewer], Handshakes) {
        guard let endpoint = relay.webRTC else { throw Failure.relay(.webRTCUnavailable) }
        let tcpPort: UInt16?
        switch configuration.viewerTransport {
        case .udp: tcpPort = nil
        case .tcp:
            guard let port = relay.tcpPort else { throw Failure.invalidConfiguration("the relay has no ICE-TCP port (iceTCP off, or its port could not be bound)") }
            tcpPort = port
        }
        let certificate = try DTLSCertificate(commonName: "bench-viewer")
        let context = try DTLSContext(certificate: certificate, role: .client)
        var viewers: [ConnectedViewer] = []
        var walls: [Double] = []
        let cpuBefore = relay.ioThreadCPUTime.nanoseconds
        for index in 0..<count {
            let local = ICECredentials.random()
            let remoteUfrag = "v\(index)"
            // The browser negotiated 102 for the stream's H.264 (96): the relay rewrites it.
            try relay.addWebRTCViewer(streamId: "bench", subscriberId: "s\(index)",
                                      peer: WebRTCPeerParameters(local: local, remoteUfrag: remoteUfrag,
                                                                 remoteFingerprint: certificate.fingerprint, payloadTypes: [96: 102]))
            let started = monotonicNanoseconds()
            let viewerEndpoint: FanoutEndpoint
            let transport: any ViewerPacketTransport
            if let tcpPort {
                let source = "127.0.0.\(1 + index / Self.tcpViewersPerAddress)"
                let connection: TCPViewerConnection
                do { connection = try TCPViewerConnection(port: tcpPort, source: source) } catch {
                    throw Failure.viewer(index: index, "\(error)")
                }
                viewerEndpoint = .tcp(connection)
                transport = connection
            } else {
                let socket = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20)
                viewerEndpoint = .udp(socket)
                transport = UDPViewerTransport(socket: socket, relay: relayAddress)
            }
            let keys: DTLSSRTPKeys
            do {
                keys = try WebRTCViewerHandshake(transport: transport, credentials: local, remoteUfrag: remoteUfrag,
                                                 dtls: try DTLSEndpoint(context: context, peerFingerprint: endpoint.fingerprint)).run()
            } catch let failure as WebRTCViewerHandshake.Failure {
                throw Failure.viewer(index: index, "\(failure) (over \(configuration.viewerTransport.rawValue.uppercased()))")
            }
            let ended = monotonicNanoseconds()
            walls.append(Double(ended - started) / 1e6)
            viewers.append(ConnectedViewer(endpoint: viewerEndpoint, checker: try SRTPSession(key: keys.server, direction: .inbound),
                                           consent: ConsentRefresh(credentials: local, remoteUfrag: remoteUfrag, relay: relayAddress, lastSent: ended)))
        }
        let cpu = Double(relay.ioThreadCPUTime.nanoseconds - cpuBefore) / 1e6 / Double(max(1, count))
        walls.sort()
        return (viewers, Handshakes(count: count, relayCPUMillisecondsPerViewer: cpu,
                                    handshakesPerCoreSecond: cpu > 0 ? 1_000 / cpu : 0,
                                    wallP50Milliseconds: walls.isEmpty ? 0 : walls[walls.count / 2],
                                    wallMaximumMilliseconds: walls.last ?? 0))
    }

    static func key(_ base64: String, profile: String) throws(SRTPError) -> SRTPKey {
        guard let profile = SRTPProfile(rawValue: profile) else { throw .malformed }
        return try SRTPKey(profile: profile, base64: base64)
    }

    // MARK: Reference relay

    struct ReferenceError: Error {
        let message: String
    }

    private func runReference() throws(ReferenceError) -> Leg {
        let c = configuration
        guard FileManager.default.isExecutableFile(atPath: c.gstLaunchPath) else {
            throw ReferenceError(message: "\(c.gstLaunchPath) is not installed")
        }
        var sockets: [UDPSocket] = []
        let inputPort: UInt16
        do {
            for _ in 0..<c.subscribers { sockets.append(try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20)) }
            // A free port for udpsrc: bind one, note it, let it go.
            let probe = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 0)
            inputPort = probe.localAddress.port
            probe.close()
        } catch {
            throw ReferenceError(message: "sockets: \(error)")
        }
        let clients = sockets.map { "127.0.0.1:\($0.localAddress.port)" }.joined(separator: ",")
        let bufferSize = 4 << 20
        let process: ChildProcess
        do {
            process = try ChildProcess.spawn(URL(fileURLWithPath: c.gstLaunchPath), [
                "-q", "udpsrc", "address=127.0.0.1", "port=\(inputPort)", "buffer-size=\(bufferSize)",
                "!", "multiudpsink", "clients=\(clients)", "sync=false", "async=false", "buffer-size=\(bufferSize)",
            ], environment: ProcessInfo.processInfo.environment)
        } catch {
            throw ReferenceError(message: "\(c.gstLaunchPath) did not start: \(error)")
        }
        defer { process.interrupt() }
        let receivers = FanoutReceivers(sockets: sockets, checkers: [], sampleInterval: c.authenticationSampleInterval)
        let window = publish(
            to: RelayAddress(ipv4: 0x7F00_0001, port: inputPort), ssrc: 0x5EED_0002, receivers: receivers, protector: nil,
            cpuTime: {
                let split = procStatCPU(path: "/proc/\(process.pid)/stat")
                // The process's CPU clock is exact; /proc's ticks (10 ms) only give the split.
                var clock = clockid_t()
                let total = clock_getcpuclockid(process.pid, &clock) == 0 ? cpuNanoseconds(clock) : (split.map { $0.user + $0.system } ?? 0)
                return CPUSample(total: total, user: split?.user ?? 0, system: split?.system ?? 0)
            }, alive: { process.isRunning })
        let leg = receivers.finish(window: window, subscribers: c.subscribers)
        guard process.isRunning else { throw ReferenceError(message: "gst-launch-1.0 exited early") }
        return leg
    }

    // MARK: Publisher

    /// CPU time of the relay under test: total (as precise as available) and its user/system split.
    struct CPUSample {
        var total: UInt64 = 0
        var user: UInt64 = 0
        var system: UInt64 = 0
    }

    /// What the publisher measured around the window it sent.
    struct Window {
        var packets: Int
        var seconds: Double
        var cpu: CPUSample
    }

    /// Sends the stream: a warm-up until every receiver has had a packet (at least `warmUp`
    /// seconds, at most 10 more), the measured window, then a short tail so the window's last
    /// packets are not the stream's last. Runs on the calling thread.
    private func publish(
        to destination: RelayAddress, ssrc: UInt32, receivers: FanoutReceivers, protector: SRTPSession?,
        cpuTime: () -> CPUSample, alive: () -> Bool
    ) -> Window {
        let c = configuration
        let socket: UDPSocket
        do { socket = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20) } catch {
            return Window(packets: 0, seconds: 0, cpu: CPUSample())
        }
        receivers.start(threads: c.receiverThreads)

        var buffer = [UInt8](repeating: 0, count: c.packetSize + SRTPSession.maximumOverhead)
        buffer[0] = 0x80
        buffer[1] = 96
        for i in 0..<4 { buffer[8 + i] = UInt8(truncatingIfNeeded: ssrc >> (24 - 8 * i)) }
        for i in 12..<c.packetSize { buffer[i] = UInt8(truncatingIfNeeded: i &* 7) }
        var sequence: UInt16 = 0
        var drain = [UInt8](repeating: 0, count: 2048)
        let perFrame = packetsPerSecond / Double(c.frameRate)
        let frameNanoseconds = 1_000_000_000 / UInt64(c.frameRate)

        // Sends frames from `start` until `done` says stop, `limit` packets at most (the last frame
        // cut short); returns the packets sent.
        func sendFrames(limit: Int = .max, _ done: (Int, UInt64) -> Bool) -> Int {
            let start = monotonicNanoseconds()
            var frame: UInt64 = 0
            var sent = 0
            while true {
                let now = monotonicNanoseconds()
                if done(sent, now - start) || !alive() { return sent }
                let due = Int((Double(frame + 1) * perFrame).rounded(.down))
                let count = min(due, limit) - sent
                // The RTP timestamp (90 kHz) is the send time, so receivers can tell each packet's latency.
                let timestamp = UInt32(truncatingIfNeeded: (now &- receivers.clockBase) * 9 / 100_000)
                for index in 0..<count {
                    buffer[1] = index == count - 1 ? 0x80 | 96 : 96
                    buffer[2] = UInt8(sequence >> 8)
                    buffer[3] = UInt8(sequence & 0xFF)
                    for i in 0..<4 { buffer[4 + i] = UInt8(truncatingIfNeeded: timestamp >> (24 - 8 * i)) }
                    var length = c.packetSize
                    if let protector {
                        let protected = buffer.withUnsafeMutableBytes { try? protector.protect($0, length: c.packetSize) }
                        guard let protected else { continue }
                        length = protected
                    }
                    buffer.withUnsafeBytes { raw in
                        _ = destination.withSocketAddress { sendto(socket.descriptor, raw.baseAddress, length, 0, $0, $1) }
                    }
                    // protect encrypted the payload in place: restore it for the next packet.
                    if protector != nil { for i in 12..<c.packetSize { buffer[i] = UInt8(truncatingIfNeeded: i &* 7) } }
                    sequence &+= 1
                    sent += 1
                }
                frame += 1
                // Whatever the relay sends the publisher (PLI, receiver reports) is read and dropped.
                while recv(socket.descriptor, &drain, drain.count, Int32(MSG_DONTWAIT)) > 0 {}
                var wake = timespec()
                let target = start + frame * frameNanoseconds
                wake.tv_sec = Int(target / 1_000_000_000)
                wake.tv_nsec = Int(target % 1_000_000_000)
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, nil) == EINTR {}
            }
        }

        let warmUp = UInt64(c.warmUp * 1e9)
        _ = sendFrames { _, elapsed in
            elapsed >= warmUp && (receivers.readyCount == receivers.count || elapsed >= warmUp + 10_000_000_000)
        }
        let measured = Int((c.duration * packetsPerSecond).rounded())
        receivers.beginWindow(firstSequence: sequence, length: measured)
        let cpuStart = cpuTime()
        let wallStart = monotonicNanoseconds()
        // Exactly the window's packets: the receivers count those, and the loss is against them.
        let sent = sendFrames(limit: measured) { sent, _ in sent >= measured }
        let cpuEnd = cpuTime()
        let wallEnd = monotonicNanoseconds()
        _ = sendFrames { _, elapsed in elapsed >= 300_000_000 }
        let used = CPUSample(total: cpuEnd.total &- cpuStart.total, user: cpuEnd.user &- cpuStart.user, system: cpuEnd.system &- cpuStart.system)
        return Window(packets: sent, seconds: Double(wallEnd - wallStart) / 1e9, cpu: used)
    }
}

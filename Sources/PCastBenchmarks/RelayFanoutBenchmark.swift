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
        /// Edge relays between the relay and its subscribers (an origin → edge cascade): each pulls
        /// the stream over one leg and serves `subscribers / edges` of them. The CPU measured is
        /// the origin's; 0: every subscriber is the relay's own.
        public var edges: Int = 0
        /// The relay's ``RelayConfiguration/fanOutThreads`` (its default: one per core).
        public var fanOutThreads: Int = RelayConfiguration.onlineCores

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
    }

    /// The relay's side of WebRTC viewers' ICE + DTLS handshakes, done one after another.
    public struct Handshakes: Sendable, Hashable, Codable {
        public var count: Int
        /// Relay I/O thread CPU over all the handshakes, per viewer (STUN check, DTLS with ECDHE
        /// and ECDSA, key export), milliseconds.
        public var relayCPUMillisecondsPerViewer: Double
        /// Handshakes one core could do per second at that cost.
        public var handshakesPerCoreSecond: Double
        /// From the first connectivity check to the viewer holding its keys, milliseconds.
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

        public var description: String {
            switch self {
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

            var sockets: [UDPSocket] = []
            var checkers: [SRTPSession] = []
            var handshakes: Handshakes?
            if c.webRTCViewers {
                let (connected, figures) = try connectWebRTCViewers(relay, count: c.subscribers, relayAddress: relayAddress)
                for (socket, checker) in connected {
                    sockets.append(socket)
                    checkers.append(checker)
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
                    sockets.append(socket)
                    checkers.append(try SRTPSession(key: Self.key(transport.serverKey, profile: transport.srtpProfile), direction: .inbound))
                }
            }
            let receivers = FanoutReceivers(sockets: sockets, checkers: checkers, sampleInterval: c.authenticationSampleInterval)
            let window = publish(
                to: relayAddress, ssrc: ssrc, receivers: receivers, protector: protector,
                cpuTime: {
                    let split = relay.cpuSplit
                    return CPUSample(total: relay.cpuTime.nanoseconds, user: split?.user.nanoseconds ?? 0, system: split?.system.nanoseconds ?? 0)
                }, alive: { true })
            var leg = receivers.finish(window: window, subscribers: c.subscribers)
            leg.sendFailures = relay.statistics().sendFailures
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

    /// Opens `count` WebRTC viewers of the "bench" stream, one after another, each as a browser
    /// does after its WHEP answer: a STUN check (USE-CANDIDATE, MESSAGE-INTEGRITY with the relay's
    /// ice-pwd) until answered, then a DTLS client handshake with its own certificate. Returns
    /// each viewer's socket with an SRTP session for what the relay sends it, and the handshakes'
    /// figures (the relay I/O thread's CPU clock around them all).
    private func connectWebRTCViewers(_ relay: Relay, count: Int, relayAddress: RelayAddress) throws -> ([(UDPSocket, SRTPSession)], Handshakes) {
        guard let endpoint = relay.webRTC else { throw Failure.relay(.webRTCUnavailable) }
        let certificate = try DTLSCertificate(commonName: "bench-viewer")
        let context = try DTLSContext(certificate: certificate, role: .client)
        var viewers: [(UDPSocket, SRTPSession)] = []
        var walls: [Double] = []
        let cpuBefore = relay.ioThreadCPUTime.nanoseconds
        for index in 0..<count {
            let local = ICECredentials.random()
            let remoteUfrag = "v\(index)"
            // The browser negotiated 102 for the stream's H.264 (96): the relay rewrites it.
            try relay.addWebRTCViewer(streamId: "bench", subscriberId: "s\(index)",
                                      peer: WebRTCPeerParameters(local: local, remoteUfrag: remoteUfrag,
                                                                 remoteFingerprint: certificate.fingerprint, payloadTypes: [96: 102]))
            let socket = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20)
            let started = monotonicNanoseconds()
            let keys = try WebRTCViewerHandshake(socket: socket, relay: relayAddress, credentials: local, remoteUfrag: remoteUfrag,
                                                 dtls: try DTLSEndpoint(context: context, peerFingerprint: endpoint.fingerprint)).run()
            walls.append(Double(monotonicNanoseconds() - started) / 1e6)
            viewers.append((socket, try SRTPSession(key: keys.server, direction: .inbound)))
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

        // Sends frames from `start` until `done` says stop; returns the packets sent.
        func sendFrames(_ done: (Int, UInt64) -> Bool) -> Int {
            let start = monotonicNanoseconds()
            var frame: UInt64 = 0
            var sent = 0
            while true {
                let now = monotonicNanoseconds()
                if done(sent, now - start) || !alive() { return sent }
                let due = Int((Double(frame + 1) * perFrame).rounded(.down))
                let count = due - sent
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
        let sent = sendFrames { sent, _ in sent >= measured }
        let cpuEnd = cpuTime()
        let wallEnd = monotonicNanoseconds()
        _ = sendFrames { _, elapsed in elapsed >= 300_000_000 }
        let used = CPUSample(total: cpuEnd.total &- cpuStart.total, user: cpuEnd.user &- cpuStart.user, system: cpuEnd.system &- cpuStart.system)
        return Window(packets: sent, seconds: Double(wallEnd - wallStart) / 1e9, cpu: used)
    }
}

/// The subscribers' sockets and the few threads that drain them.
///
/// Per-socket tallies live in one unsafe buffer: each socket belongs to exactly one thread, and
/// the publisher reads the tallies only after `stop()` has joined those threads.
final class FanoutReceivers: @unchecked Sendable {
    struct Tally {
        var received = 0
        var total = 0
        var lastSequence = -1
        var discontinuities = 0
        var authenticated = 0
        var failures = 0
    }

    let sockets: [UDPSocket]
    /// The monotonic time RTP timestamp 0 stands for.
    let clockBase = monotonicNanoseconds()
    /// Latency buckets of 0.1 ms up to 1 s, then one for anything later.
    static let buckets = 10_001
    private var histograms: UnsafeMutablePointer<Int>?
    private var maximumLatency: UnsafeMutablePointer<UInt64>?
    /// Packets read so far, all sockets together; tells when stragglers stop coming.
    private let arrivals = Atomic<Int>(0)
    private let checkers: [SRTPSession]
    private let sampleInterval: Int
    private let tallies: UnsafeMutablePointer<Tally>
    private let ready = Atomic<Int>(0)
    private let windowStart = Atomic<Int>(-1)
    private let windowLength = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private var threads: [pthread_t] = []

    init(sockets: [UDPSocket], checkers: [SRTPSession], sampleInterval: Int) {
        self.sockets = sockets
        self.checkers = checkers
        self.sampleInterval = sampleInterval
        tallies = .allocate(capacity: sockets.count)
        tallies.initialize(repeating: Tally(), count: sockets.count)
    }

    deinit {
        stop()
        tallies.deallocate()
        histograms?.deallocate()
        maximumLatency?.deallocate()
    }

    var count: Int { sockets.count }
    var readyCount: Int { ready.load(ordering: .relaxed) }

    func beginWindow(firstSequence: UInt16, length: Int) {
        windowLength.store(length, ordering: .relaxed)
        windowStart.store(Int(firstSequence), ordering: .releasing)
    }

    func start(threads count: Int) {
        let perThread = (sockets.count + count - 1) / count
        let ranges = stride(from: 0, to: sockets.count, by: perThread).map { $0..<min(sockets.count, $0 + perThread) }
        let histograms = UnsafeMutablePointer<Int>.allocate(capacity: ranges.count * Self.buckets)
        histograms.initialize(repeating: 0, count: ranges.count * Self.buckets)
        let maximumLatency = UnsafeMutablePointer<UInt64>.allocate(capacity: ranges.count)
        maximumLatency.initialize(repeating: 0, count: ranges.count)
        self.histograms = histograms
        self.maximumLatency = maximumLatency
        for (index, range) in ranges.enumerated() {
            if let thread = startThread({ [self] in drain(range, thread: index) }) { threads.append(thread) }
        }
        threadCount = ranges.count
    }

    /// Receiver threads started (their histograms stay after they are joined).
    private var threadCount = 0

    func stop() {
        stopping.store(true, ordering: .releasing)
        for thread in threads { pthread_join(thread, nil) }
        threads = []
    }

    /// Totals over every subscriber, once stragglers have stopped coming (300 ms without a
    /// packet, or 3 s): a packet that arrives late is late, not lost.
    func finish(window: RelayFanoutBenchmark.Window, subscribers: Int) -> RelayFanoutBenchmark.Leg {
        let deadline = monotonicNanoseconds() + 3_000_000_000
        var last = arrivals.load(ordering: .relaxed)
        while monotonicNanoseconds() < deadline {
            usleep(300_000)
            let now = arrivals.load(ordering: .relaxed)
            if now == last { break }
            last = now
        }
        stop()
        var histogram = [Int](repeating: 0, count: Self.buckets)
        var maximum: UInt64 = 0
        if let histograms, let maximumLatency {
            for thread in 0..<((threadCount)) {
                for bucket in 0..<Self.buckets { histogram[bucket] += histograms[thread * Self.buckets + bucket] }
                maximum = max(maximum, maximumLatency[thread])
            }
        }
        func percentile(_ fraction: Double) -> Double {
            let total = histogram.reduce(0, +)
            guard total > 0 else { return 0 }
            var seen = 0
            for (bucket, count) in histogram.enumerated() {
                seen += count
                if Double(seen) >= fraction * Double(total) { return Double(bucket + 1) / 10 }
            }
            return Double(Self.buckets) / 10
        }
        var total = Tally()
        for index in 0..<sockets.count {
            let tally = tallies[index]
            total.received += tally.received
            total.discontinuities += tally.discontinuities
            total.authenticated += tally.authenticated
            total.failures += tally.failures
        }
        let expected = window.packets * subscribers
        func percent(_ nanoseconds: UInt64) -> Double { window.seconds > 0 ? Double(nanoseconds) / 1e9 / window.seconds * 100 : 0 }
        let cpu = percent(window.cpu.total)
        return RelayFanoutBenchmark.Leg(
            cpuPercent: cpu, userCPUPercent: percent(window.cpu.user), systemCPUPercent: percent(window.cpu.system),
            lossPercent: expected > 0 ? max(0, Double(expected - total.received) / Double(expected) * 100) : 100,
            measuredSeconds: window.seconds, packetsSent: window.packets, packetsExpected: expected,
            packetsReceived: total.received, sequenceDiscontinuities: total.discontinuities,
            packetsAuthenticated: total.authenticated, authenticationFailures: total.failures,
            subscribersPerCore: cpu > 0 ? Double(subscribers) / (cpu / 100) : 0,
            latencyP50Milliseconds: percentile(0.5), latencyP99Milliseconds: percentile(0.99),
            latencyMaximumMilliseconds: Double(maximum) / 1e6, sendFailures: nil)
    }

    private func drain(_ range: Range<Int>, thread: Int) {
        guard let histograms, let maximumLatency else { return }
        let histogram = histograms + thread * Self.buckets
        let maximum = maximumLatency + thread
        var descriptors = range.map { pollfd(fd: sockets[$0].descriptor, events: Int16(POLLIN), revents: 0) }
        let batch = ReceiveBatch(capacity: 16, slotSize: 2048)
        while !stopping.load(ordering: .acquiring) {
            let ready = descriptors.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), 20) }
            guard ready > 0 else { continue }
            for (offset, descriptor) in descriptors.enumerated() where descriptor.revents != 0 {
                descriptors[offset].revents = 0
                while true {
                    let n = batch.receive(from: descriptor.fd)
                    guard n > 0 else { break }
                    arrivals.add(n, ordering: .relaxed)
                    let now = monotonicNanoseconds()
                    for i in 0..<n {
                        guard let datagram = batch.datagram(i),
                              let latency = count(datagram, socket: range.lowerBound + offset, now: now)
                        else { continue }
                        histogram[min(Int(latency / 100_000), Self.buckets - 1)] += 1
                        maximum.pointee = max(maximum.pointee, latency)
                    }
                    if n < batch.capacity { break }
                }
            }
            // Let a few packets gather per socket so each poll and recvmmsg does more work.
            usleep(2_000)
        }
    }

    /// Tallies one datagram; returns its latency in nanoseconds if it is one of the window's packets.
    private func count(_ datagram: UnsafeRawBufferPointer, socket index: Int, now: UInt64) -> UInt64? {
        guard datagram.count >= 12, !(192...223).contains(datagram[1]) else { return nil }
        let sequence = Int(datagram[2]) << 8 | Int(datagram[3])
        let tally = tallies + index
        if tally.pointee.total == 0 { ready.add(1, ordering: .relaxed) }
        tally.pointee.total += 1
        if tally.pointee.lastSequence >= 0 && sequence != (tally.pointee.lastSequence + 1) & 0xFFFF {
            tally.pointee.discontinuities += 1
        }
        tally.pointee.lastSequence = sequence
        let start = windowStart.load(ordering: .acquiring)
        var latency: UInt64?
        if start >= 0 && (sequence - start) & 0xFFFF < windowLength.load(ordering: .relaxed) {
            tally.pointee.received += 1
            let timestamp = UInt32(datagram[4]) << 24 | UInt32(datagram[5]) << 16 | UInt32(datagram[6]) << 8 | UInt32(datagram[7])
            let elapsed = UInt32(truncatingIfNeeded: (now &- clockBase) * 9 / 100_000)
            latency = UInt64(max(0, Int32(bitPattern: elapsed &- timestamp))) * 100_000 / 9
        }
        if !checkers.isEmpty && tally.pointee.total % sampleInterval == 0 {
            var packet = [UInt8](datagram)
            do {
                try checkers[index].unprotect(&packet)
                tally.pointee.authenticated += 1
            } catch {
                tally.pointee.failures += 1
            }
        }
        return latency
    }
}

/// What `startThread` hands to the new thread.
private final class ThreadBody: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// Starts a joinable thread running `body` (outside Swift's cooperative pool).
func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t? {
    var thread = pthread_t()
    let context = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    let created = pthread_create(&thread, nil, { context in
        guard let context else { return nil }
        Unmanaged<ThreadBody>.fromOpaque(context).takeRetainedValue().body()
        return nil
    }, context)
    guard created == 0 else {
        Unmanaged<ThreadBody>.fromOpaque(context).release()
        return nil
    }
    return thread
}

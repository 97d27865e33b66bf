import Glibc
import PCastProtocol
import PCastRelay
import SRTP
import Synchronization

/// Where one subscriber's packets arrive: its UDP socket (one datagram per packet), or its ICE-TCP
/// connection (one RFC 4571 frame per packet, split from the stream by the connection).
enum FanoutEndpoint {
    case udp(UDPSocket)
    case tcp(TCPViewerConnection)

    var descriptor: Int32 {
        switch self {
        case .udp(let socket): socket.descriptor
        case .tcp(let connection): connection.descriptor
        }
    }
}

/// What a WebRTC viewer sends the relay now and then so that it keeps the viewer, as a browser's
/// consent freshness checks do (RFC 7675): the relay drops a WebRTC peer silent past its consent
/// timeout, and closes an ICE-TCP connection it has read nothing from for 30 s.
struct ConsentRefresh {
    /// A viewer that has sent nothing this long sends a check (browsers: every 5 s or so). Past
    /// any default run's window, so that a 5 s run measures the stream alone, and well inside the
    /// relay's 30 s for TCP.
    static let interval: UInt64 = 10_000_000_000
    let credentials: ICECredentials
    let remoteUfrag: String
    /// Where a UDP viewer sends it (a TCP viewer frames it onto its connection).
    let relay: RelayAddress
    /// When the viewer last sent the relay something (the end of its handshake).
    let lastSent: UInt64
}

/// The subscribers' sockets (or ICE-TCP connections) and the few threads that drain them.
///
/// @unchecked Sendable: per-endpoint tallies live in one unsafe buffer and each endpoint (with a TCP
/// connection's buffered bytes and its last consent check) belongs to exactly one receiver thread;
/// the publisher reads the tallies only after `stop()` has joined those threads. What other
/// threads share is atomic.
/// Unchecked: each endpoint's tally belongs to one receiver thread; they are read after `stop()` joins them; shared counters are atomic.
final class FanoutReceivers: @unchecked Sendable {
    struct Tally {
        var received = 0
        var total = 0
        var lastSequence = -1
        var discontinuities = 0
        var authenticated = 0
        var failures = 0
    }

    let endpoints: [FanoutEndpoint]
    /// The monotonic time RTP timestamp 0 stands for.
    let clockBase = monotonicNanoseconds()
    /// Latency buckets of 0.1 ms up to 1 s, then one for anything later.
    static let buckets = 10_001
    private var histograms: UnsafeMutablePointer<Int>?
    private var maximumLatency: UnsafeMutablePointer<UInt64>?
    /// Packets read so far, all sockets together; tells when stragglers stop coming.
    private let arrivals = Atomic<Int>(0)
    private let checkers: [SRTPSession]
    /// Per endpoint, for WebRTC viewers (empty otherwise).
    private let consent: [ConsentRefresh]
    /// When each endpoint last sent the relay something (its handshake, then consent checks).
    private let lastSent: UnsafeMutablePointer<UInt64>
    private let sampleInterval: Int
    private let tallies: UnsafeMutablePointer<Tally>
    private let ready = Atomic<Int>(0)
    private let windowStart = Atomic<Int>(-1)
    private let windowLength = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private var threads: [pthread_t] = []

    convenience init(sockets: [UDPSocket], checkers: [SRTPSession], sampleInterval: Int) {
        self.init(endpoints: sockets.map { .udp($0) }, checkers: checkers, consent: [], sampleInterval: sampleInterval)
    }

    /// `consent`: empty, or one per endpoint.
    init(endpoints: [FanoutEndpoint], checkers: [SRTPSession], consent: [ConsentRefresh], sampleInterval: Int) {
        self.endpoints = endpoints
        self.checkers = checkers
        self.consent = consent.count == endpoints.count ? consent : []
        self.sampleInterval = sampleInterval
        tallies = .allocate(capacity: endpoints.count)
        tallies.initialize(repeating: Tally(), count: endpoints.count)
        lastSent = .allocate(capacity: endpoints.count)
        let now = monotonicNanoseconds()
        for index in 0..<endpoints.count { (lastSent + index).initialize(to: self.consent.isEmpty ? now : self.consent[index].lastSent) }
    }

    deinit {
        stop()
        tallies.deallocate()
        lastSent.deallocate()
        histograms?.deallocate()
        maximumLatency?.deallocate()
    }

    var count: Int { endpoints.count }
    var readyCount: Int { ready.load(ordering: .relaxed) }

    func beginWindow(firstSequence: UInt16, length: Int) {
        windowLength.store(length, ordering: .relaxed)
        windowStart.store(Int(firstSequence), ordering: .releasing)
    }

    func start(threads count: Int) {
        let perThread = (endpoints.count + count - 1) / count
        let ranges = stride(from: 0, to: endpoints.count, by: perThread).map { $0..<min(endpoints.count, $0 + perThread) }
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
        for index in 0..<endpoints.count {
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
        var descriptors = range.map { pollfd(fd: endpoints[$0].descriptor, events: Int16(POLLIN), revents: 0) }
        let batch = ReceiveBatch(capacity: 16, slotSize: 2048)
        func record(_ packet: UnsafeRawBufferPointer, endpoint index: Int, now: UInt64) {
            guard let latency = count(packet, socket: index, now: now) else { return }
            histogram[min(Int(latency / 100_000), Self.buckets - 1)] += 1
            maximum.pointee = max(maximum.pointee, latency)
        }
        while !stopping.load(ordering: .acquiring) {
            let ready = descriptors.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), 20) }
            if ready > 0 {
                for (offset, descriptor) in descriptors.enumerated() where descriptor.revents != 0 {
                    descriptors[offset].revents = 0
                    let index = range.lowerBound + offset
                    switch endpoints[index] {
                    case .udp:
                        while true {
                            let n = batch.receive(from: descriptor.fd)
                            guard n > 0 else { break }
                            arrivals.add(n, ordering: .relaxed)
                            let now = monotonicNanoseconds()
                            for i in 0..<n {
                                guard let datagram = batch.datagram(i) else { continue }
                                record(datagram, endpoint: index, now: now)
                            }
                            if n < batch.capacity { break }
                        }
                    case .tcp(let connection):
                        // Each whole frame is counted as a datagram is; a partial one waits in the
                        // connection for the rest.
                        let frames = connection.drain { frame, now in record(frame, endpoint: index, now: now) }
                        if frames > 0 { arrivals.add(frames, ordering: .relaxed) }
                        // An ended connection would report POLLHUP at every poll: poll skips -1.
                        if connection.ended { descriptors[offset].fd = -1 }
                    }
                }
            }
            refreshConsent(range)
            // Let a few packets gather per socket so each poll and recvmmsg does more work.
            usleep(2_000)
        }
    }

    /// Sends a consent check for each viewer of `range` that has sent nothing for ``ConsentRefresh/interval``.
    private func refreshConsent(_ range: Range<Int>) {
        guard !consent.isEmpty else { return }
        let now = monotonicNanoseconds()
        for index in range where now &- lastSent[index] >= ConsentRefresh.interval {
            let refresh = consent[index]
            let check = WebRTCViewerHandshake.connectivityCheck(credentials: refresh.credentials, remoteUfrag: refresh.remoteUfrag).bytes
            switch endpoints[index] {
            case .udp(let socket): _ = socket.send(check, to: refresh.relay)
            case .tcp(let connection): _ = connection.send(check)
            }
            lastSent[index] = now
        }
    }

    /// Tallies one datagram (or TCP frame); returns its latency in nanoseconds if it is one of the
    /// window's packets. Only RTP counts: not RTCP, nor the answer to a consent check (STUN).
    private func count(_ datagram: UnsafeRawBufferPointer, socket index: Int, now: UInt64) -> UInt64? {
        guard datagram.count >= 12, datagram[0] & 0xC0 == 0x80, !(192...223).contains(datagram[1]) else { return nil }
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

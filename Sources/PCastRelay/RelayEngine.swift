import DTLS
import Glibc
import PCastContracts
import PCastProtocol
import SRTP
import Synchronization

/// A control request, carried from the calling thread to the I/O thread.
enum RelayCommand: Sendable {
    case addStream(id: String, tracks: [MediaTrackDescription], crypto: FlowCrypto, upstream: UpstreamLeg?)
    case addSubscriber(streamId: String, subscriberId: String, rtcpSSRC: UInt32, crypto: FlowCrypto, isEdge: Bool, receiveBoundEstimate: Bool)
    case removeSubscriber(streamId: String, subscriberId: String)
    case removeStream(id: String)
    /// A pulled stream's new leg (``Relay/replaceUpstream(streamId:origin:)``).
    case replaceUpstream(id: String, crypto: FlowCrypto, upstream: UpstreamLeg)
    /// A WebRTC peer's transport (after the flow it keys was added).
    case addWebRTC(WebRTCSetup)
    /// A simulcast viewer's own bandwidth limit (``Relay/limitSubscriber(streamId:subscriberId:bitsPerSecond:)``).
    case limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?)
    /// The size a simulcast viewer shows the video at (``Relay/setSubscriberViewSize(streamId:subscriberId:size:)``).
    case viewSize(streamId: String, subscriberId: String, size: ViewSize?)
    /// A simulcast viewer kept on one layer (``Relay/pinSubscriberLayer(streamId:subscriberId:layer:)``).
    case pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?)
}

/// Counters written by the I/O thread after each batch, read by anyone.
final class SharedCounters: Sendable {
    let packetsIn = Atomic<UInt64>(0)
    let bytesIn = Atomic<UInt64>(0)
    let packetsOut = Atomic<UInt64>(0)
    let bytesOut = Atomic<UInt64>(0)
    let srtpFailures = Atomic<UInt64>(0)
    let duplicates = Atomic<UInt64>(0)
    let unknownPackets = Atomic<UInt64>(0)
    let nacksServed = Atomic<UInt64>(0)
    let nacksMissed = Atomic<UInt64>(0)
    let keyframeRequests = Atomic<UInt64>(0)
    let sendFailures = Atomic<UInt64>(0)
    let layerSwitches = Atomic<UInt64>(0)
    let nacksThrottled = Atomic<UInt64>(0)
    let videoSuspensions = Atomic<UInt64>(0)
    let videoProbes = Atomic<UInt64>(0)
    let videoResumptions = Atomic<UInt64>(0)
    let rembsSent = Atomic<UInt64>(0)
    let nacksForwarded = Atomic<UInt64>(0)
    let gapRequests = Atomic<UInt64>(0)
    let upstreamRetransmissions = Atomic<UInt64>(0)
    let webRTCPeers = Atomic<Int>(0)
    let stunRefusals = Atomic<UInt64>(0)
    let dtlsFailures = Atomic<UInt64>(0)
    let sharedFanOuts = Atomic<UInt64>(0)
    let segmentedDatagrams = Atomic<UInt64>(0)
    let webRTCPeersOverTCP = Atomic<Int>(0)
    /// The router's histograms, copied when they gained observations.
    let histograms = Mutex((join: HistogramCounts(bounds: HistogramCounts.joinBounds), loss: HistogramCounts(bounds: HistogramCounts.lossBounds)))
}

/// The I/O side of the relay: the socket, the thread's loop, and the router it feeds.
///
/// Everything below "I/O thread only" is touched by the relay thread alone, from `run()`'s start
/// to its return; other threads talk to it through `enqueue` (a locked queue and a wake-up pipe)
/// and read `counters`. That is why the class may be `@unchecked Sendable`.
///
/// The WebRTC peers' handling is in `RelayEngine+WebRTC.swift`; the state it shares with the
/// packet path here is internal rather than private for that.
/// Unchecked: its mutable state is the I/O thread's alone; other threads use the locked command queue and the atomic counters.
final class RelayEngine: @unchecked Sendable {
    let socket: UDPSocket
    /// ICE over TCP (``RelayConfiguration/iceTCP``); nil when off or its port could not be bound.
    let tcp: TCPMediaListener?
    private var wakeReader: Int32
    private var wakeWriter: Int32
    private let stopping = Atomic<Bool>(false)
    private let commands = Mutex<[RelayCommand]>([])
    private let hasCommands = Atomic<Bool>(false)
    let counters = SharedCounters()
    /// Audio-only fallback events, moved here from the router after each batch.
    private let videoEvents = Mutex<[SubscriberVideoEvent]>([])
    /// Simulcast viewers' layers (stream id → subscriber id → layer), copied from the router when
    /// they change.
    let layers = Mutex<[String: [String: SubscriberLayer]]>([:])
    /// Each simulcast stream's layers some viewer is sent or awaits (all of them while an edge pulls it).
    let watchedLayers = Mutex<[String: Set<String>]>([:])
    /// Called on this thread when a stream's watched layers gain one (``Relay/onWatchedLayersGrew(_:)``).
    let watchedLayersGrew = Mutex<(@Sendable () -> Void)?>(nil)
    /// CPU nanoseconds the thread had used when it ended.
    let finalCPUTime = Atomic<UInt64>(0)
    /// The I/O thread's kernel id once it runs (0 before).
    let threadID = Atomic<Int32>(0)
    /// The DTLS identity WebRTC peers are answered with; nil: no WebRTC.
    let dtlsContext: DTLSContext?
    /// WebRTC peers' connections and ends, moved here by the I/O thread as they happen.
    let webRTCEvents = Mutex<[WebRTCPeerEvent]>([])

    // I/O thread only.
    var router: RelayRouter<FlowCrypto>
    private let receive: ReceiveBatch
    let send: SendBatch
    private var nextTick: UInt64 = 0
    /// Whether the last poll found a TCP descriptor ready, and when TCP is served at the latest.
    private var tcpReady = true
    private var nextTCPService: UInt64 = 0
    private var packetsIn: UInt64 = 0
    private var bytesIn: UInt64 = 0
    private var packetsOut: UInt64 = 0
    private var bytesOut: UInt64 = 0
    var unknownPackets: UInt64 = 0
    private var sendFailures: UInt64 = 0
    private var segmentedDatagrams: UInt64 = 0
    var stunRefusals: UInt64 = 0
    let webRTCConsentTimeout: Duration
    let webRTCConnectTimeout: Duration
    var dtlsFailures: UInt64 = 0
    /// WebRTC peers (ICE-lite + DTLS-SRTP), and when their timers were last looked at.
    var webrtc = WebRTCPeerTable()
    /// Whether a WebRTC peer came, went or moved since ``SharedCounters/webRTCPeersOverTCP`` was set.
    var webRTCTransportsChanged = false
    /// The router histograms' observations when last copied to ``SharedCounters/histograms``.
    var histogramObservations: UInt64 = 0
    var nextWebRTCService: UInt64 = 0
    /// Authenticated plain publisher packets of the current receive batch, fanned out together
    /// once the batch is read (see `fanOutPending`).
    private var pending: [PendingPacket] = []
    /// Subscriber slots of the stream being fanned out whose video is not forwarded as it is.
    private var gatedSlots: [Int] = []
    /// The subscribers of the stream being fanned out that get every packet as it is.
    private var targets: [FanOutTarget] = []
    /// Threads that take shares of a large fan-out; nil when the relay has one thread.
    private let workers: FanOutWorkers?

    init(configuration: RelayConfiguration, relaySSRC: UInt32, dtlsContext: DTLSContext?) throws(RelayError) {
        webRTCConsentTimeout = configuration.webRTCConsentTimeout
        webRTCConnectTimeout = configuration.webRTCConnectTimeout
        self.dtlsContext = dtlsContext
        socket = try UDPSocket(host: configuration.host, port: configuration.port, bufferSize: configuration.socketBufferSize)
        // Best effort: a relay without its TCP port still serves every peer that has UDP.
        tcp = configuration.iceTCP ? try? TCPMediaListener(host: configuration.host, port: socket.localAddress.port) : nil
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            let code = errno
            socket.close()
            throw .socket(operation: "pipe", errno: code)
        }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeReader = ends[0]
        wakeWriter = ends[1]
        // Sizes and times are clamped to sane ranges so no setting can exhaust memory or overflow a clock.
        let packetSize = min(max(64, configuration.maximumPacketSize), 65_535)
        let hour: UInt64 = 3_600_000_000_000
        // A received datagram is a protected packet: room for the plain packet plus SRTP's overhead.
        receive = ReceiveBatch(capacity: min(max(1, configuration.receiveBatchSize), 1_024), slotSize: packetSize + SRTPSession.maximumOverhead)
        // An outgoing slot holds any received packet (plain is never longer) plus what protect adds.
        let segmentation = configuration.segmentationOffload && SegmentationControl.supported(on: socket.descriptor)
        send = SendBatch(capacity: min(max(1, configuration.sendBatchSize), 1_024), slotSize: receive.slotSize + SRTPSession.maximumOverhead,
                         segmentation: segmentation)
        let settings = RouterSettings(
            relaySSRC: relaySSRC,
            keyframeInterval: min(configuration.keyframeRequestInterval.nanoseconds, hour),
            packetCacheCapacity: min(max(1, configuration.packetCacheCapacity), 65_536),
            packetCacheDuration: min(configuration.packetCacheDuration.nanoseconds, hour),
            reportInterval: min(max(1_000_000, configuration.receiverReportInterval.nanoseconds), hour))
        router = RelayRouter(settings: settings, now: monotonicNanoseconds())
        let threads = min(max(1, configuration.fanOutThreads), 64)
        workers = threads > 1 ? FanOutWorkers(count: threads - 1, capacity: send.capacity, slotSize: send.slotSize, segmentation: segmentation) : nil
    }

    deinit {
        workers?.stop()
        closeDescriptors()
    }

    /// CPU nanoseconds the fan-out workers have used (0 without workers).
    var workersCPUNanoseconds: UInt64 { workers?.cpuTime ?? 0 }

    /// The kernel ids of the relay's threads that run: the I/O thread's, then the workers'.
    var threadIDs: [Int32] {
        let io = threadID.load(ordering: .acquiring)
        return (io != 0 ? [io] : []) + (workers?.threadIDs ?? [])
    }

    /// Closes the socket and the wake-up pipe. Only once the I/O thread has been joined (or never
    /// ran): nothing else writes to the pipe by then, since control calls stop at `.stopped`.
    func closeDescriptors() {
        socket.close()
        tcp?.close()
        if wakeReader >= 0 { Glibc.close(wakeReader) }
        if wakeWriter >= 0 { Glibc.close(wakeWriter) }
        wakeReader = -1
        wakeWriter = -1
    }

    /// Hands a command to the I/O thread and wakes it.
    func enqueue(_ command: RelayCommand) {
        commands.withLock {
            $0.append(command)
            hasCommands.store(true, ordering: .releasing)
        }
        wake()
    }

    /// The audio-only fallback events since the last call.
    func takeVideoEvents() -> [SubscriberVideoEvent] {
        videoEvents.withLock { events in
            defer { events.removeAll() }
            return events
        }
    }

    /// WebRTC peers' transport changes since the last call.
    func takeWebRTCEvents() -> [WebRTCPeerEvent] {
        webRTCEvents.withLock { events in
            defer { events.removeAll() }
            return events
        }
    }

    /// Asks the loop to end; `run()` returns soon after.
    func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
    }

    private func wake() {
        var byte: UInt8 = 1
        // A full pipe already means "wake up": EAGAIN is fine.
        _ = write(wakeWriter, &byte, 1)
    }

    // MARK: The loop (I/O thread)

    func run() {
        ThreadIdentity.name("pcast-relay")
        threadID.store(ThreadIdentity.current() ?? 0, ordering: .releasing)
        var clock = clockid_t()
        let hasClock = pthread_getcpuclockid(pthread_self(), &clock) == 0
        defer {
            send.flush(descriptor: socket.descriptor)
            workers?.stop()
            publish()
            if hasClock { finalCPUTime.store(cpuNanoseconds(clock), ordering: .releasing) }
        }
        let fd = socket.descriptor
        var descriptors = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeReader, events: Int16(POLLIN), revents: 0)]
        nextTick = router.nextDeadline
        while !stopping.load(ordering: .acquiring) {
            // Read first, then apply commands: a control call that returned before a packet was
            // sent is then always in effect when that packet is handled.
            let received = receive.receive(from: fd)
            applyCommands()
            let now = monotonicNanoseconds()
            if received > 0 {
                for index in 0..<received { handleDatagram(index, now: now) }
                fanOutPending()
            }
            var framed = 0
            // TCP is served when a poll said it was ready, and at least every millisecond while
            // datagrams keep the loop from polling: not an accept and a read per connection for
            // every batch of UDP.
            if let tcp, tcpReady || now >= nextTCPService {
                tcpReady = false
                nextTCPService = now &+ 1_000_000
                framed = tcp.service(now: now) { data, source in
                    packetsIn &+= 1
                    bytesIn &+= UInt64(data.count)
                    handleDatagram(data, from: source, now: now)
                }
                if framed > 0 { fanOutPending() }
            }
            if now >= nextTick { runTimers(now: now) }
            if !webrtc.isEmpty, now >= nextWebRTCService { serviceWebRTC(now: now) }
            send.flush(descriptor: fd)
            publish()
            if received > 0 || framed > 0 { continue }

            let deadline = webrtc.isEmpty ? nextTick : min(nextTick, nextWebRTCService)
            let wait = deadline > now ? min((deadline - now) / 1_000_000 + 1, 1_000) : 0
            descriptors[0].revents = 0
            descriptors[1].revents = 0
            if let tcp {
                var all = descriptors + tcp.pollDescriptors()
                _ = poll(&all, nfds_t(all.count), Int32(wait))
                if all[1].revents != 0 { drainWakeups() }
                tcpReady = all[2...].contains { $0.revents != 0 }
            } else {
                _ = poll(&descriptors, 2, Int32(wait))
                if descriptors[1].revents != 0 { drainWakeups() }
            }
        }
    }

    private func drainWakeups() {
        var buffer = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while withUnsafeMutableBytes(of: &buffer, { read(wakeReader, $0.baseAddress, $0.count) }) > 0 {}
    }

    private func applyCommands() {
        guard hasCommands.load(ordering: .acquiring) else { return }
        let pending = commands.withLock { queue -> [RelayCommand] in
            hasCommands.store(false, ordering: .relaxed)
            defer { queue.removeAll() }
            return queue
        }
        let now = monotonicNanoseconds()
        for command in pending {
            switch command {
            case .addStream(let id, let tracks, let crypto, let upstream):
                router.addStream(id: id, tracks: tracks, publisher: crypto, upstream: upstream)
                // An edge speaks first: its report tells the origin where to send.
                if upstream != nil, let handle = router.handle(streamId: id), let report = router.receiverReport(stream: handle, now: now) {
                    perform([report])
                }
            case .replaceUpstream(let id, let crypto, let upstream):
                // As on a new leg, the edge speaks first.
                if router.replaceUpstream(id: id, publisher: crypto, upstream: upstream), let handle = router.handle(streamId: id),
                   let report = router.receiverReport(stream: handle, now: now) {
                    perform([report])
                }
            case .addSubscriber(let streamId, let subscriberId, let rtcpSSRC, let crypto, let isEdge, let receiveBound):
                if let actions = router.addSubscriber(
                    streamId: streamId, subscriberId: subscriberId, rtcpSSRC: rtcpSSRC, context: crypto, now: now, isEdge: isEdge,
                    receiveBoundEstimate: receiveBound) {
                    perform(actions)
                }
            case .removeSubscriber(let streamId, let subscriberId):
                router.removeSubscriber(streamId: streamId, subscriberId: subscriberId)
                if let peer = webrtc.peer(WebRTCPeerKey(streamId: streamId, subscriberId: subscriberId)) { close(peer) }
            case .removeStream(let id):
                router.removeStream(id: id)
                for peer in webrtc.peers(ofStream: id) { close(peer) }
            case .addWebRTC(let setup):
                openWebRTC(setup)
            case .limitSubscriber(let streamId, let subscriberId, let bitsPerSecond):
                if let action = router.setSubscriberLimit(streamId: streamId, subscriberId: subscriberId, bitsPerSecond: bitsPerSecond, now: now) {
                    perform([action])
                }
            case .viewSize(let streamId, let subscriberId, let size):
                if let action = router.setSubscriberViewSize(streamId: streamId, subscriberId: subscriberId, size, now: now) {
                    perform([action])
                }
            case .pinSubscriberLayer(let streamId, let subscriberId, let layer):
                if let action = router.pinSubscriberLayer(streamId: streamId, subscriberId: subscriberId, layer: layer, now: now) {
                    perform([action])
                }
            }
        }
        nextTick = min(nextTick, router.nextDeadline)
    }

    private func runTimers(now: UInt64) {
        perform(router.tick(now: now))
        nextTick = router.nextDeadline
    }

    private func publish() {
        tally(send.takeOutcome())
        if let workers { tally(workers.takeOutcome()) }
        let c = counters
        c.packetsIn.store(packetsIn, ordering: .relaxed)
        c.bytesIn.store(bytesIn, ordering: .relaxed)
        c.packetsOut.store(packetsOut, ordering: .relaxed)
        c.bytesOut.store(bytesOut, ordering: .relaxed)
        let routed = router.counters
        c.srtpFailures.store(routed.srtpFailures, ordering: .relaxed)
        c.duplicates.store(routed.duplicates, ordering: .relaxed)
        // The engine's own (datagrams it could not read, DTLS from nobody) and the router's.
        c.unknownPackets.store(unknownPackets &+ routed.unknownPackets, ordering: .relaxed)
        c.sendFailures.store(sendFailures, ordering: .relaxed)
        c.nacksServed.store(routed.nacksServed, ordering: .relaxed)
        c.nacksMissed.store(routed.nacksMissed, ordering: .relaxed)
        c.keyframeRequests.store(routed.keyframeRequests, ordering: .relaxed)
        c.videoSuspensions.store(routed.videoSuspensions, ordering: .relaxed)
        c.videoProbes.store(routed.videoProbes, ordering: .relaxed)
        c.videoResumptions.store(routed.videoResumptions, ordering: .relaxed)
        c.rembsSent.store(routed.rembsSent, ordering: .relaxed)
        c.nacksForwarded.store(routed.nacksForwarded, ordering: .relaxed)
        c.gapRequests.store(routed.gapRequests, ordering: .relaxed)
        c.upstreamRetransmissions.store(routed.upstreamRetransmissions, ordering: .relaxed)
        c.webRTCPeers.store(webrtc.count, ordering: .relaxed)
        if webRTCTransportsChanged {
            webRTCTransportsChanged = false
            c.webRTCPeersOverTCP.store(webrtc.overTCP, ordering: .relaxed)
        }
        let observations = routed.viewerJoin.count &+ routed.viewerLoss.count
        if observations != histogramObservations {
            histogramObservations = observations
            c.histograms.withLock { $0 = (routed.viewerJoin, routed.viewerLoss) }
        }
        c.stunRefusals.store(stunRefusals, ordering: .relaxed)
        c.dtlsFailures.store(dtlsFailures, ordering: .relaxed)
        c.sharedFanOuts.store(workers?.shared ?? 0, ordering: .relaxed)
        c.segmentedDatagrams.store(segmentedDatagrams, ordering: .relaxed)
        c.layerSwitches.store(routed.layerSwitches, ordering: .relaxed)
        c.nacksThrottled.store(routed.nacksThrottled, ordering: .relaxed)
        if router.layersChanged {
            let taken = router.takeLayers()
            layers.withLock { $0 = taken.viewers }
            let grew = watchedLayers.withLock { watched -> Bool in
                defer { watched = taken.watched }
                return taken.watched.contains { streamId, rids in !rids.isSubset(of: watched[streamId] ?? []) }
            }
            if grew { watchedLayersGrew.withLock { $0 }?() }
        }
        if !router.videoEvents.isEmpty {
            let events = router.takeVideoEvents()
            videoEvents.withLock { queue in
                // Bounded: nobody may be collecting them (a relay without a platform).
                queue.append(contentsOf: events)
                if queue.count > 4_096 { queue.removeFirst(queue.count - 4_096) }
            }
        }
    }

    private func tally(_ outcome: SendBatch.Outcome) {
        packetsOut &+= UInt64(outcome.packets)
        bytesOut &+= UInt64(outcome.bytes)
        sendFailures &+= UInt64(outcome.failures)
        segmentedDatagrams &+= UInt64(outcome.segmented)
    }

    // MARK: Packets (I/O thread)

    private func handleDatagram(_ index: Int, now: UInt64) {
        packetsIn &+= 1
        bytesIn &+= UInt64(receive.length(index))
        guard let data = receive.datagram(index), let source = receive.source(index) else {
            unknownPackets &+= 1
            return
        }
        handleDatagram(data, from: source, now: now)
    }

    /// One packet from `source`: a datagram, or a frame of a TCP connection (its address from
    /// ``TCPMediaFlows``); handled alike. STUN and DTLS go to the WebRTC peers, RTP and RTCP to
    /// the router, whose answer is carried out: a publisher packet waits for the batch's fan-out.
    private func handleDatagram(_ data: UnsafeRawBufferPointer, from source: RelayAddress, now: UInt64) {
        guard !data.isEmpty else {
            unknownPackets &+= 1
            return
        }
        // RFC 7983: the first byte tells STUN (0–3) and DTLS (20–63) from RTP/RTCP (128–191).
        switch data[0] {
        case 0...3:
            handleSTUN(data, from: source, now: now)
        case 20...63:
            handleDTLS(data, from: source, now: now)
        default:
            perform(router.receive(datagram: data, from: source, now: now, peer: webrtc.peer(at: source)?.source))
            // A gap makes a NACK due after the reordering allowance: the timer must wake for it (it
            // waited for the next report or subscriber RTCP, up to 100 ms late).
            nextTick = min(nextTick, router.nextDeadline)
        }
    }

    /// Re-protects the batch's publisher packets for every reachable subscriber, straight into
    /// send slots, subscriber by subscriber: each SRTP session's state is then used for all the
    /// packets of a frame's burst while it is in cache, rather than once per packet across
    /// hundreds of sessions. A subscriber still gets its packets in arrival order. A large
    /// fan-out is shared with the workers (``FanOutWorkers``).
    private func fanOutPending() {
        guard !pending.isEmpty else { return }
        let fd = socket.descriptor
        var first = 0
        while first < pending.count {
            let stream = pending[first].stream
            // Packets of one stream are adjacent in the common case; others wait for their turn.
            var end = first + 1
            while end < pending.count && pending[end].stream == stream { end += 1 }
            gatedSlots.removeAll(keepingCapacity: true)
            targets.removeAll(keepingCapacity: true)
            router.forEachReachableSlot(of: stream) { subscriber, crypto, address, transparent in
                if transparent {
                    targets.append(FanOutTarget(crypto: crypto, address: address))
                } else {
                    gatedSlots.append(subscriber)
                }
            }
            if let workers {
                workers.fanOut(pending, first..<end, to: targets, send: send, descriptor: fd)
            } else {
                send.fanOut(pending, first..<end, to: targets[...], descriptor: fd)
            }
            // Where a subscriber's numbering continues if its video is held back later.
            if let last = pending[first..<end].last(where: \.video), last.packet.count >= 4 {
                router.noteForwarded(stream: stream, track: last.track, sequence: UInt16(last.packet[2]) << 8 | UInt16(last.packet[3]))
            }
            // Subscribers on audio-only fallback, or renumbered since: each video packet is asked about.
            for subscriber in gatedSlots {
                guard let (crypto, address) = router.reachableSubscriber(stream: stream, slot: subscriber) else { continue }
                for index in first..<end {
                    var rewrite: PacketRewrite?
                    if pending[index].video {
                        switch router.forwardVideo(stream: stream, track: pending[index].track, slot: subscriber, packet: pending[index].packet,
                                                   layers: pending[index].layers, now: pending[index].arrival) {
                        case .unchanged: break
                        case .renumbered(let sequence): rewrite = PacketRewrite(sequence: sequence, ssrc: nil)
                        case .layered(let sequence, let marker): rewrite = PacketRewrite(sequence: sequence, ssrc: nil, marker: marker)
                        case .rewritten(let ssrc, let sequence): rewrite = PacketRewrite(sequence: sequence, ssrc: ssrc)
                        case .dropped: continue
                        }
                    }
                    send.protectAndQueue(pending[index].packet, rewrite: rewrite, crypto: crypto, to: address, descriptor: fd)
                }
            }
            first = end
        }
        targets.removeAll(keepingCapacity: true)
        pending.removeAll(keepingCapacity: true)
    }

    func perform(_ actions: [RelayAction<FlowCrypto>]) {
        let fd = socket.descriptor
        for action in actions {
            switch action {
            case .toPublisher(let crypto, let address, let rtcp), .toSubscriber(let crypto, let address, let rtcp):
                var packet = rtcp
                do {
                    try crypto.outbound.protectRTCP(&packet)
                    send.append(packet, to: address, descriptor: fd)
                } catch {
                    sendFailures &+= 1
                }
            case .retransmit(let crypto, let address, let rtp):
                send.protectAndQueue(rtp, rewrite: nil, crypto: crypto, to: address, descriptor: fd)
            case .forward(let packet):
                pending.append(packet)
            }
        }
    }
}

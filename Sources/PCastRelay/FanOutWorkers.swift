import Dispatch
import Glibc
import SRTP
import Synchronization

/// What one subscriber's copy of a packet gets: another sequence number (its numbering), and for a
/// simulcast layer the SSRC the viewer knows the video by.
struct PacketRewrite {
    let sequence: UInt16
    let ssrc: UInt32?
    /// Sets the marker bit (the last packet a scalable video's viewer gets of a picture).
    var marker = false
}

/// A subscriber a fan-out sends to: its flow's keys and where it is.
struct FanOutTarget {
    let crypto: FlowCrypto
    let address: RelayAddress
}

extension SendBatch {
    /// Protects a plain RTP packet for `crypto` straight into the next slot (with another sequence
    /// number if asked) and queues it for `address`; a packet that cannot be protected (or would
    /// not fit a slot once protected) is counted as a failure.
    @inline(__always)
    func protectAndQueue(_ packet: [UInt8], rewrite: PacketRewrite?, crypto: FlowCrypto, to address: RelayAddress, descriptor fd: Int32) {
        guard packet.count + SRTPSession.maximumOverhead <= slotSize else {
            countFailure()
            return
        }
        packet.withUnsafeBytes { plain in
            let slot = nextSlot(descriptor: fd)
            slot.copyMemory(from: plain)
            crypto.mapPayloadType(slot)
            if let rewrite {
                RTPRewrite.setSequence(rewrite.sequence, ssrc: rewrite.ssrc, in: slot)
                if rewrite.marker { slot[1] |= 0x80 }
            }
            do {
                let length = try crypto.outbound.protect(slot, length: plain.count)
                commit(length: length, to: address)
            } catch {
                countFailure()
            }
        }
    }

    /// `packets[range]`, each to every one of `targets`, subscriber by subscriber (each SRTP
    /// session's state is used for a whole burst while it is in cache).
    @inline(__always)
    func fanOut(_ packets: [PendingPacket], _ range: Range<Int>, to targets: ArraySlice<FanOutTarget>, descriptor fd: Int32) {
        for target in targets {
            for index in range { protectAndQueue(packets[index].packet, rewrite: nil, crypto: target.crypto, to: target.address, descriptor: fd) }
        }
    }
}

/// Threads that share a large fan-out with the relay's I/O thread.
///
/// What costs in a relay is the fan-out: one SRTP protect and one datagram per subscriber and
/// packet (the kernel's send and AES-GCM took 91 % of the single thread at 1,000 subscribers).
/// The I/O thread keeps everything else (receiving, unprotecting, routing, timers, NACKs, WebRTC
/// peers), and when one batch of a stream's packets is to go to enough subscribers it splits the
/// subscriber list into contiguous shares: it wakes a worker for each share after the first, sends
/// the first itself, and waits for the workers before it goes on (fork–join).
///
/// - Each subscriber's SRTP session is used by one thread at a time (its share's), and nothing
///   else touches it until the join.
/// - A subscriber's packets leave in order: each worker flushes its own `sendmmsg` batch before it
///   reports, so a batch is wholly sent before the I/O thread sends anything that follows it.
/// - The per-packet path takes no lock and allocates nothing: the job is the I/O thread's own
///   arrays, lent for the duration of the fork; a wake-up is a semaphore per share.
///
/// Why not `SO_REUSEPORT` sockets, one per core: the kernel spreads datagrams over such sockets by
/// their source, that is by publisher; one stream watched by 1,000 viewers arrives on one socket
/// and its whole fan-out would stay on one core. Splitting the fan-out spreads exactly the work
/// that grows with viewers, whatever the number of publishers.
///
/// Shares smaller than ``minimumShare`` datagrams are not worth a wake-up (a futex wake and the
/// worker's cache misses cost about as much as 30 protects): a small fan-out stays on the I/O thread.
/// Unchecked: the job is written by the I/O thread before the workers are woken and read by them until the join (semaphores order it).
final class FanOutWorkers: @unchecked Sendable {
    /// The least number of datagrams (subscribers × packets) a share must have.
    static let minimumShare = 32

    /// One worker thread and what it owns.
    /// Unchecked: `share` is set by the I/O thread before `go` is signalled; `thread` in the pool's init; the rest are lets and atomics.
    fileprivate final class Worker: @unchecked Sendable {
        let send: SendBatch
        let go = DispatchSemaphore(value: 0)
        /// Its share of the current job's targets (written by the I/O thread before `go`).
        var share: Range<Int> = 0..<0
        /// CPU nanoseconds the thread had used at the end of its latest job (or at its exit).
        let cpuTime = Atomic<UInt64>(0)
        /// The thread's kernel id once it runs (0 before).
        let threadID = Atomic<Int32>(0)
        var thread = pthread_t()

        init(send: SendBatch) { self.send = send }
    }

    /// The workers whose thread started (set in `init` only).
    private var workers: [Worker] = []
    private let done = DispatchSemaphore(value: 0)
    private let stopping = Atomic<Bool>(false)
    private let stopped = Mutex<Bool>(false)

    // The job, written by the I/O thread before it wakes the workers and cleared after the join;
    // read by the workers in between.
    private var packets: [PendingPacket] = []
    private var range: Range<Int> = 0..<0
    private var targets: [FanOutTarget] = []
    private var descriptor: Int32 = -1
    /// Fan-outs split so far (I/O thread).
    private(set) var shared: UInt64 = 0

    /// Starts `count` worker threads (the I/O thread is one more sharer), each with a send batch of
    /// `capacity` slots of `slotSize` bytes. Fewer start if the system refuses threads.
    init(count: Int, capacity: Int, slotSize: Int, segmentation: Bool) {
        for index in 0..<max(0, count) {
            let worker = Worker(send: SendBatch(capacity: capacity, slotSize: slotSize, segmentation: segmentation))
            var thread = pthread_t()
            let context = Unmanaged.passRetained(WorkerContext(pool: self, worker: worker, number: index + 1)).toOpaque()
            if pthread_create(&thread, nil, fanOutWorkerMain, context) == 0 {
                worker.thread = thread
                workers.append(worker)
            } else {
                Unmanaged<WorkerContext>.fromOpaque(context).release()
            }
        }
    }

    /// Threads that can take a share, the I/O thread included.
    var sharers: Int { workers.count + 1 }

    /// Sends `packets[range]` to every one of `targets`, through `send` on the I/O thread and the
    /// workers' batches, and returns once every share is sent (I/O thread only).
    func fanOut(_ packets: [PendingPacket], _ range: Range<Int>, to targets: [FanOutTarget], send: SendBatch, descriptor fd: Int32) {
        let split = Self.split(targets: targets.count, packets: range.count, sharers: sharers)
        guard split.count > 1 else {
            send.fanOut(packets, range, to: targets[...], descriptor: fd)
            return
        }
        shared &+= 1
        self.packets = packets
        self.range = range
        self.targets = targets
        descriptor = fd
        for (index, worker) in workers.prefix(split.count - 1).enumerated() {
            let start = (index + 1) * split.size
            worker.share = start..<min(targets.count, start + split.size)
            worker.go.signal()
        }
        send.fanOut(packets, range, to: targets[0..<split.size], descriptor: fd)
        for _ in 1..<split.count { done.wait() }
        // Give the arrays back whole: the I/O thread's next append must not copy them.
        self.packets = []
        self.targets = []
    }

    /// How `targets` subscribers are split for `packets` packets among at most `sharers` threads:
    /// contiguous, equal but for the last, none empty, each of at least ``minimumShare`` datagrams
    /// but the last (one share: not worth splitting).
    static func shares(targets: Int, packets: Int, sharers: Int) -> [Range<Int>] {
        let split = split(targets: targets, packets: packets, sharers: sharers)
        return (0..<split.count).map { $0 * split.size..<min(targets, ($0 + 1) * split.size) }
    }

    /// The shares' size and number (what ``shares(targets:packets:sharers:)`` lists, without an
    /// array: a fan-out allocates nothing).
    @inline(__always)
    static func split(targets: Int, packets: Int, sharers: Int) -> (size: Int, count: Int) {
        guard targets > 0 else { return (0, 0) }
        let wanted = max(1, min(sharers, targets * packets / minimumShare, targets))
        // Rounding the size up can leave fewer shares than wanted.
        let size = (targets + wanted - 1) / wanted
        return (size, (targets + size - 1) / size)
    }

    /// What the workers sent and failed to send since the last call (I/O thread, between fan-outs).
    func takeOutcome() -> SendBatch.Outcome {
        var total = SendBatch.Outcome()
        for worker in workers {
            let outcome = worker.send.takeOutcome()
            total.packets += outcome.packets
            total.bytes += outcome.bytes
            total.failures += outcome.failures
            total.segmented += outcome.segmented
        }
        return total
    }

    /// CPU nanoseconds the workers have used, as of their latest job.
    var cpuTime: UInt64 {
        workers.reduce(0) { $0 &+ $1.cpuTime.load(ordering: .relaxed) }
    }

    /// The workers' kernel thread ids (for `/proc`'s user / system split).
    var threadIDs: [Int32] {
        workers.map { $0.threadID.load(ordering: .acquiring) }.filter { $0 != 0 }
    }

    /// Ends and joins the workers. Idempotent; not during a fan-out.
    func stop() {
        stopped.withLock { stopped in
            guard !stopped else { return }
            stopped = true
            stopping.store(true, ordering: .releasing)
            for worker in workers { worker.go.signal() }
            for worker in workers { pthread_join(worker.thread, nil) }
        }
    }

    // MARK: Worker threads

    fileprivate func work(_ worker: Worker, number: Int) {
        ThreadIdentity.name("pcast-fanout-\(number)")
        worker.threadID.store(ThreadIdentity.current() ?? 0, ordering: .releasing)
        var clock = clockid_t()
        let hasClock = pthread_getcpuclockid(pthread_self(), &clock) == 0
        while true {
            worker.go.wait()
            if stopping.load(ordering: .acquiring) { break }
            worker.send.fanOut(packets, range, to: targets[worker.share], descriptor: descriptor)
            worker.send.flush(descriptor: descriptor)
            if hasClock { worker.cpuTime.store(cpuNanoseconds(clock), ordering: .relaxed) }
            done.signal()
        }
        if hasClock { worker.cpuTime.store(cpuNanoseconds(clock), ordering: .relaxed) }
    }
}

/// What a worker thread starts with.
private final class WorkerContext {
    let pool: FanOutWorkers
    let worker: FanOutWorkers.Worker
    let number: Int
    init(pool: FanOutWorkers, worker: FanOutWorkers.Worker, number: Int) {
        self.pool = pool
        self.worker = worker
        self.number = number
    }
}

/// A worker thread's entry point; a C function, so it captures nothing.
private func fanOutWorkerMain(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let context else { return nil }
    let start = Unmanaged<WorkerContext>.fromOpaque(context).takeRetainedValue()
    start.pool.work(start.worker, number: start.number)
    return nil
}

import PCastProtocol

/// The last `capacity` plain RTP packets of one SSRC, by sequence number, for answering NACKs.
///
/// Storage is one flat buffer allocated up front (`capacity` slots of `slotSize` bytes) so storing
/// a packet is a copy, never an allocation. A slot is found by `sequenceNumber % capacity`, so a
/// packet stays until `capacity` newer sequence numbers have been stored — and, for `lookup`, while
/// it is younger than `maximumAge`. A class: its buffer is shared, never copied, and it belongs to
/// the one thread that runs the router.
///
/// ```swift
/// let cache = PacketCache(capacity: 512, slotSize: 1500, maximumAge: 1_000_000_000)
/// cache.store(sequenceNumber: 7, packet: bytes, now: now)
/// cache.lookup(sequenceNumber: 7, now: now) { packet in resend(packet) }   // true
/// ```
final class PacketCache {
    let capacity: Int
    let slotSize: Int
    /// Nanoseconds after which a stored packet no longer answers a NACK.
    let maximumAge: UInt64
    private let storage: UnsafeMutableRawBufferPointer
    private let sequenceNumbers: UnsafeMutablePointer<UInt16>
    /// 0 = empty slot.
    private let lengths: UnsafeMutablePointer<Int32>
    private let times: UnsafeMutablePointer<UInt64>

    init(capacity: Int, slotSize: Int, maximumAge: UInt64) {
        self.capacity = max(1, capacity)
        self.slotSize = slotSize
        self.maximumAge = maximumAge
        storage = .allocate(byteCount: self.capacity * slotSize, alignment: 16)
        sequenceNumbers = .allocate(capacity: self.capacity)
        sequenceNumbers.initialize(repeating: 0, count: self.capacity)
        lengths = .allocate(capacity: self.capacity)
        lengths.initialize(repeating: 0, count: self.capacity)
        times = .allocate(capacity: self.capacity)
        times.initialize(repeating: 0, count: self.capacity)
    }

    deinit {
        storage.deallocate()
        sequenceNumbers.deallocate()
        lengths.deallocate()
        times.deallocate()
    }

    /// Keeps a copy of `packet`; packets larger than a slot are not kept (a later NACK misses).
    func store(sequenceNumber: UInt16, packet: UnsafeRawBufferPointer, now: UInt64) {
        let slot = Int(sequenceNumber) % capacity
        guard packet.count > 0, packet.count <= slotSize else {
            // Forget whatever older packet occupied the slot so a lookup cannot return it.
            lengths[slot] = 0
            return
        }
        UnsafeMutableRawBufferPointer(rebasing: storage[(slot * slotSize)..<(slot * slotSize + packet.count)])
            .copyMemory(from: packet)
        sequenceNumbers[slot] = sequenceNumber
        lengths[slot] = Int32(packet.count)
        times[slot] = now
    }

    /// Calls `body` with the cached packet and returns true, or returns false if it is gone.
    func lookup(sequenceNumber: UInt16, now: UInt64, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        let slot = Int(sequenceNumber) % capacity
        let length = Int(lengths[slot])
        guard length > 0, sequenceNumbers[slot] == sequenceNumber,
              now &- times[slot] <= maximumAge || times[slot] > now
        else { return false }
        body(UnsafeRawBufferPointer(start: storage.baseAddress! + slot * slotSize, count: length))
        return true
    }

    /// A copy of the cached packet, if present (for tests and low-rate paths).
    func packet(sequenceNumber: UInt16, now: UInt64) -> [UInt8]? {
        var result: [UInt8]?
        _ = lookup(sequenceNumber: sequenceNumber, now: now) { result = Array($0) }
        return result
    }
}

/// Keyframe requests for one video SSRC, throttled: at most one per `interval`.
///
/// A request when none went out in the last `interval` is sent at once (a joining subscriber does
/// not wait); requests inside the window are coalesced into one more at the window's end. A FIR
/// among coalesced requests wins over PLI.
///
/// ```swift
/// var throttle = KeyframeThrottle(interval: 300_000_000)
/// throttle.request(.pli, now: 0)              // .pli: send now
/// throttle.request(.pli, now: 100_000_000)    // nil: pending until 300 ms
/// throttle.due(now: 300_000_000)              // .pli
/// ```
struct KeyframeThrottle: Sendable, Equatable {
    enum Kind: Sendable, Equatable, Comparable { case pli, fir }

    let interval: UInt64
    private(set) var lastSent: UInt64?
    private(set) var pending: Kind?

    init(interval: UInt64) {
        self.interval = interval
    }

    /// Returns what to send now, or nil if the request was coalesced into a pending one.
    mutating func request(_ kind: Kind, now: UInt64) -> Kind? {
        if let lastSent, now &- lastSent < interval, now >= lastSent {
            pending = max(pending ?? kind, kind)
            return nil
        }
        lastSent = now
        // A request sent now also answers any older pending one.
        let sent = max(pending ?? kind, kind)
        pending = nil
        return sent
    }

    /// When a pending request becomes due, if any.
    var deadline: UInt64? {
        guard pending != nil, let lastSent else { return nil }
        return lastSent &+ interval
    }

    /// The pending request, if its window has ended.
    mutating func due(now: UInt64) -> Kind? {
        guard let pending, let deadline, now >= deadline else { return nil }
        self.pending = nil
        lastSent = now
        return pending
    }
}

/// What the relay measures on the publisher→relay leg of one SSRC (RFC 3550 A.1, A.3, A.8).
struct ReceptionStatistics: Sendable {
    let clockRate: UInt32
    private(set) var started = false
    private var baseSequence: UInt32 = 0
    private var maximumSequence: UInt16 = 0
    private var cycles: UInt32 = 0
    private(set) var received: UInt32 = 0
    private var expectedPrior: UInt32 = 0
    private var receivedPrior: UInt32 = 0
    private var lastTransit: Int32?
    /// Interarrival jitter in timestamp units, as a float (RFC 3550 keeps it ×16 in integers).
    private var jitter: Double = 0
    /// Middle 32 bits of the NTP timestamp of the last SR, and when it arrived.
    private var lastSenderReport: (ntpMiddle: UInt32, arrival: UInt64)?

    init(clockRate: UInt32) {
        self.clockRate = max(1, clockRate)
    }

    var extendedHighestSequence: UInt32 { cycles &+ UInt32(maximumSequence) }

    mutating func update(sequenceNumber: UInt16, rtpTimestamp: UInt32, arrival: UInt64) {
        if !started {
            started = true
            baseSequence = UInt32(sequenceNumber)
            maximumSequence = sequenceNumber
        } else {
            let delta = sequenceNumber &- maximumSequence
            // Forward (allowing for gaps); anything else is a late or duplicate packet.
            if delta != 0 && delta < 0x8000 {
                if sequenceNumber < maximumSequence { cycles &+= 0x1_0000 }
                maximumSequence = sequenceNumber
            }
        }
        received &+= 1

        let arrivalUnits = UInt32(truncatingIfNeeded: UInt64(Double(arrival) * Double(clockRate) / 1e9))
        let transit = Int32(bitPattern: arrivalUnits &- rtpTimestamp)
        if let lastTransit {
            let d = abs(Double(Int32(bitPattern: UInt32(bitPattern: transit) &- UInt32(bitPattern: lastTransit))))
            jitter += (d - jitter) / 16
        }
        lastTransit = transit
    }

    mutating func senderReport(ntpTimestamp: UInt64, arrival: UInt64) {
        lastSenderReport = (UInt32(truncatingIfNeeded: ntpTimestamp >> 16), arrival)
    }

    /// The report block for now; advances the "prior" counters used for the fraction lost.
    mutating func reportBlock(ssrc: UInt32, now: UInt64) -> RTCPReportBlock {
        let extendedMaximum = extendedHighestSequence
        let expected = Int64(extendedMaximum) - Int64(baseSequence) + 1
        let lost = max(-0x80_0000, min(0x7F_FFFF, expected - Int64(received)))
        let expectedInterval = Int64(extendedMaximum &- baseSequence &+ 1) - Int64(expectedPrior)
        let receivedInterval = Int64(received) - Int64(receivedPrior)
        expectedPrior = extendedMaximum &- baseSequence &+ 1
        receivedPrior = received
        let lostInterval = expectedInterval - receivedInterval
        let fraction: UInt8 = expectedInterval <= 0 || lostInterval <= 0 ? 0 : UInt8(min(255, (lostInterval << 8) / expectedInterval))
        var lsr: UInt32 = 0
        var dlsr: UInt32 = 0
        if let last = lastSenderReport {
            lsr = last.ntpMiddle
            // Delay since the last SR in 1/65536 s.
            dlsr = UInt32(truncatingIfNeeded: min(UInt64(UInt32.max), (now &- last.arrival) * 65_536 / 1_000_000_000))
        }
        return RTCPReportBlock(
            ssrc: ssrc, fractionLost: fraction, cumulativeLost: Int32(lost),
            extendedHighestSequenceNumber: extendedMaximum, jitter: UInt32(min(jitter, Double(UInt32.max))),
            lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }
}

import PCastProtocol

/// The last `capacity` plain RTP packets of one SSRC, by sequence number, for answering NACKs.
///
/// A slot is found by `sequenceNumber % capacity`, so a packet stays until `capacity` newer
/// sequence numbers have been stored — and answers a NACK only while younger than `maximumAge`.
/// Packets are kept by reference: the relay stores the array SRTP unprotected into, so caching
/// costs neither a copy nor an allocation, and memory follows the packets' real sizes (an audio
/// track's cache stays small). A class, owned by the one thread that runs the router.
///
/// ```swift
/// let cache = PacketCache(capacity: 512, maximumAge: 1_000_000_000)
/// cache.store(sequenceNumber: 7, packet: bytes, now: now)
/// cache.packet(sequenceNumber: 7, now: now)   // bytes
/// ```
final class PacketCache {
    private struct Entry {
        var sequenceNumber: UInt16 = 0
        var time: UInt64 = 0
        var packet: [UInt8]? = nil
    }

    let capacity: Int
    /// Nanoseconds after which a stored packet no longer answers a NACK.
    let maximumAge: UInt64
    private var entries: [Entry]

    init(capacity: Int, maximumAge: UInt64) {
        self.capacity = max(1, capacity)
        self.maximumAge = maximumAge
        entries = Array(repeating: Entry(), count: self.capacity)
    }

    func store(sequenceNumber: UInt16, packet: [UInt8], now: UInt64) {
        entries[Int(sequenceNumber) % capacity] = Entry(sequenceNumber: sequenceNumber, time: now, packet: packet)
    }

    /// The cached packet, if it is still there and was stored at `since` or later.
    func packet(sequenceNumber: UInt16, storedSince since: UInt64) -> [UInt8]? {
        let entry = entries[Int(sequenceNumber) % capacity]
        guard let packet = entry.packet, entry.sequenceNumber == sequenceNumber, entry.time >= since else { return nil }
        return packet
    }

    /// Whether `sequenceNumber` was stored and not yet overwritten (however old).
    func holds(sequenceNumber: UInt16) -> Bool {
        let entry = entries[Int(sequenceNumber) % capacity]
        return entry.packet != nil && entry.sequenceNumber == sequenceNumber
    }

    /// The cached packet, if it is still there and young enough.
    func packet(sequenceNumber: UInt16, now: UInt64) -> [UInt8]? {
        let entry = entries[Int(sequenceNumber) % capacity]
        guard let packet = entry.packet, entry.sequenceNumber == sequenceNumber,
              now &- entry.time <= maximumAge || entry.time > now
        else { return nil }
        return packet
    }
}

/// Keyframe requests for one video SSRC, throttled: at most one per `interval` while the
/// keyframe asked for has not come.
///
/// A request when none went out in the last `interval` is sent at once (a joining subscriber does
/// not wait); requests inside the window are coalesced into one more at the window's end. A FIR
/// among coalesced requests wins over PLI.
///
/// A keyframe from the publisher answers the requests made before it (their viewers get it), and
/// shortens the window to ``answeredSpacing`` after it: a viewer that lost a packet of that very
/// keyframe asks again within a round trip, and waiting out the whole window froze its picture for
/// 450 ms at 10 % loss. The spacing still bounds the keyframes a lossy viewer can cost the
/// publisher. (mediasoup's keyframe request manager likewise waits for the keyframe, not a clock.)
///
/// ```swift
/// var throttle = KeyframeThrottle(interval: 300_000_000)
/// throttle.request(.pli, now: 0)              // .pli: send now
/// throttle.request(.pli, now: 100_000_000)    // nil: pending until 300 ms
/// throttle.due(now: 300_000_000)              // .pli
/// throttle.keyframeArrived(now: 320_000_000)  // answered: the window ends at 420 ms
/// ```
struct KeyframeThrottle: Sendable, Equatable {
    enum Kind: Sendable, Equatable, Comparable { case pli, fir }

    let interval: UInt64
    /// The least time between a keyframe and the next request it lets through.
    let answeredSpacing: UInt64
    private(set) var lastSent: UInt64?
    private(set) var pending: Kind?
    /// When a keyframe answered the latest request sent.
    private(set) var answered: UInt64?

    init(interval: UInt64, answeredSpacing: UInt64 = 100_000_000) {
        self.interval = interval
        self.answeredSpacing = min(answeredSpacing, interval)
    }

    /// When the current window ends (nothing was sent yet: none).
    private var windowEnd: UInt64? {
        guard let lastSent else { return nil }
        if let answered { return min(lastSent &+ interval, answered &+ answeredSpacing) }
        return lastSent &+ interval
    }

    /// Returns what to send now, or nil if the request was coalesced into a pending one.
    mutating func request(_ kind: Kind, now: UInt64) -> Kind? {
        if let lastSent, let end = windowEnd, now < end, now >= lastSent {
            pending = max(pending ?? kind, kind)
            return nil
        }
        lastSent = now
        answered = nil
        // A request sent now also answers any older pending one.
        let sent = max(pending ?? kind, kind)
        pending = nil
        return sent
    }

    /// A keyframe began from the publisher: it answers every request made so far.
    mutating func keyframeArrived(now: UInt64) {
        guard let lastSent, now >= lastSent, answered == nil else { return }
        answered = now
        pending = nil
    }

    /// When a pending request becomes due, if any.
    var deadline: UInt64? {
        guard pending != nil else { return nil }
        return windowEnd
    }

    /// The pending request, if its window has ended.
    mutating func due(now: UInt64) -> Kind? {
        guard let pending, let deadline, now >= deadline else { return nil }
        self.pending = nil
        lastSent = now
        answered = nil
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

    /// The furthest sequence number received so far; nil before the first packet.
    var highestSequence: UInt16? { started ? maximumSequence : nil }

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

        // Wall time in timestamp units, modulo 2^32 like the timestamps themselves.
        let arrivalUnits = UInt32((Double(arrival) / 1e9 * Double(clockRate)).truncatingRemainder(dividingBy: 4_294_967_296))
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
            // Clamped first: the field tops out at 65,536 s, and the product must not overflow.
            let delay = min(now &- last.arrival, 65_536_000_000_000)
            dlsr = UInt32(min(UInt64(UInt32.max), delay * 65_536 / 1_000_000_000))
        }
        return RTCPReportBlock(
            ssrc: ssrc, fractionLost: fraction, cumulativeLost: Int32(lost),
            extendedHighestSequenceNumber: extendedMaximum, jitter: UInt32(min(jitter, Double(UInt32.max))),
            lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }
}

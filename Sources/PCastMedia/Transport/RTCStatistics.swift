import Foundation
import GStreamer
import PCastProtocol
import Synchronization

/// One entry of an ``RTCStatsReport``, named as WebRTC's statistics are (`inbound-rtp`,
/// `outbound-rtp`, `remote-inbound-rtp`). Times are in seconds; fields a side cannot know are absent.
public struct RTCStats: Sendable, Hashable, Codable {
    public var type: String
    public var id: String
    public var kind: String
    public var ssrc: UInt32
    // inbound-rtp
    public var packetsReceived: Int?
    public var bytesReceived: Int?
    public var packetsLost: Int?
    public var jitter: Double?
    public var framesDecoded: Int?
    public var keyFramesDecoded: Int?
    /// Video frames whose packets arrived (distinct RTP timestamps), and those of them never
    /// decoded: incomplete, or discarded while waiting for a keyframe after a loss.
    public var framesReceived: Int?
    public var framesDropped: Int?
    public var jitterBufferTargetDelay: Double?
    /// Seconds spent in the jitter buffer, summed over `jitterBufferEmittedCount` units: video
    /// frames (from their first packet's arrival to its leaving the jitter buffer), audio packets.
    public var jitterBufferDelay: Double?
    public var jitterBufferEmittedCount: Int?
    public var nackCount: Int?
    public var pliCount: Int?
    public var firCount: Int?
    // outbound-rtp
    public var packetsSent: Int?
    public var bytesSent: Int?
    public var targetBitrate: Int?
    public var keyFramesEncoded: Int?
    // remote-inbound-rtp (what the relay reports about what it received from us)
    public var fractionLost: Double?
    public var roundTripTime: Double?

    public init(type: String, id: String, kind: String, ssrc: UInt32) {
        self.type = type
        self.id = id
        self.kind = kind
        self.ssrc = ssrc
    }
}

/// Statistics in the shape of WebRTC's `RTCStatsReport`, encodable as JSON.
///
/// ```swift
/// let report = publisher.rtcStatsReport()
/// print(String(decoding: try JSONEncoder().encode(report), as: UTF8.self))
/// ```
public struct RTCStatsReport: Sendable, Hashable, Codable {
    /// Milliseconds since 1970.
    public var timestamp: Double
    public var stats: [RTCStats]

    public init(timestamp: Date = Date(), stats: [RTCStats]) {
        self.timestamp = (timestamp.timeIntervalSince1970 * 1000).rounded()
        self.stats = stats
    }

    /// One line of compact JSON (sorted keys).
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}

/// What a sender learns from the RTCP that comes back: receiver reports (loss, jitter, and with
/// the send times of its own sender reports, the round trip), NACKs, PLIs and FIRs, per SSRC.
/// Fed by the publisher's RTCP in and out; read from any thread.
final class RTCPFeedbackRecorder: Sendable {
    struct Remote: Sendable, Hashable {
        var fractionLost: Double?
        var packetsLost: Int?
        /// In RTP timestamp units.
        var jitter: UInt32?
        var roundTripTime: Duration?
        var nacks = 0
        var plis = 0
        var firs = 0
    }

    private struct State {
        /// Middle 32 bits of the NTP time of sender reports we sent → when.
        var sentReports: [(ntpMiddle: UInt32, at: ContinuousClock.Instant)] = []
        var remotes: [UInt32: Remote] = [:]
    }

    private let state = Mutex(State())

    func remote(_ ssrc: UInt32) -> Remote { state.withLock { $0.remotes[ssrc] ?? Remote() } }

    /// RTCP we send: remembers our sender reports' NTP times.
    func sent(_ packet: Buffer) {
        guard let compound = Self.parse(packet) else { return }
        let now = ContinuousClock.now
        for case .senderReport(let report) in compound.packets {
            let middle = UInt32(truncatingIfNeeded: report.ntpTimestamp >> 16)
            state.withLock { state in
                state.sentReports.append((middle, now))
                if state.sentReports.count > 32 { state.sentReports.removeFirst(state.sentReports.count - 32) }
            }
        }
    }

    /// RTCP we receive.
    func received(_ packet: Buffer) {
        if let compound = Self.parse(packet) { received(compound) }
    }

    /// RTCP we receive, already parsed.
    func received(_ compound: RTCPCompoundPacket) {
        let now = ContinuousClock.now
        state.withLock { state in
            for item in compound.packets {
                switch item {
                case .receiverReport(let report): record(report.reportBlocks, now: now, in: &state)
                case .senderReport(let report): record(report.reportBlocks, now: now, in: &state)
                default:
                    RTCPFeedbackCounter.count(item) { ssrc, counts in
                        state.remotes[ssrc, default: Remote()].nacks += counts.nacks
                        state.remotes[ssrc, default: Remote()].plis += counts.plis
                        state.remotes[ssrc, default: Remote()].firs += counts.firs
                    }
                }
            }
        }
    }

    private func record(_ blocks: [RTCPReportBlock], now: ContinuousClock.Instant, in state: inout State) {
        for block in blocks {
            var remote = state.remotes[block.ssrc] ?? Remote()
            remote.fractionLost = Double(block.fractionLost) / 256
            remote.packetsLost = Int(block.cumulativeLost)
            remote.jitter = block.jitter
            // RFC 3550 §6.4.1: round trip = arrival − LSR − DLSR; the arrival is read on our clock
            // against the moment we sent that report, so no NTP clock is needed.
            if block.lastSenderReport != 0, let sent = state.sentReports.last(where: { $0.ntpMiddle == block.lastSenderReport }) {
                let delay = Duration.nanoseconds(Int64(block.delaySinceLastSenderReport) * 1_000_000_000 / 65_536)
                let rtt = now - sent.at - delay
                remote.roundTripTime = rtt > .zero ? rtt : .zero
            }
            state.remotes[block.ssrc] = remote
        }
    }

    static func parse(_ packet: Buffer) -> RTCPCompoundPacket? {
        try? packet.withUnsafeBytes { bytes in try? RTCPCompoundPacket(parsing: bytes) }
    }
}

/// Counts the feedback a receiver sends (NACKed packets, PLIs, FIRs), per media SSRC.
final class RTCPFeedbackCounter: Sendable {
    struct Counts: Sendable, Hashable {
        var nacks = 0
        var plis = 0
        var firs = 0
    }

    private let counts = Mutex<[UInt32: Counts]>([:])

    func counts(_ ssrc: UInt32) -> Counts { counts.withLock { $0[ssrc] ?? Counts() } }

    func sent(_ packet: Buffer) {
        guard let compound = RTCPFeedbackRecorder.parse(packet) else { return }
        counts.withLock { counts in
            for item in compound.packets {
                Self.count(item) { ssrc, added in
                    counts[ssrc, default: Counts()].nacks += added.nacks
                    counts[ssrc, default: Counts()].plis += added.plis
                    counts[ssrc, default: Counts()].firs += added.firs
                }
            }
        }
    }

    /// The feedback one RTCP packet carries, per media SSRC: NACKed packets (each PID and every
    /// bit of its BLP), PLIs, FIR entries. Other packets carry none.
    static func count(_ packet: RTCPPacket, _ add: (UInt32, Counts) -> Void) {
        switch packet {
        case .genericNACK(let nack): add(nack.mediaSSRC, Counts(nacks: nack.items.reduce(0) { $0 + 1 + $1.lostBitmask.nonzeroBitCount }))
        case .pictureLossIndication(let pli): add(pli.mediaSSRC, Counts(plis: 1))
        case .fullIntraRequest(let fir): for entry in fir.entries { add(entry.ssrc, Counts(firs: 1)) }
        default: break
        }
    }
}

/// WebRTC's `jitterBufferDelay`: how long packets wait between arriving from the network and
/// leaving the jitter buffer. Arrival times are kept by sequence number in a ring of 1,024; a
/// packet is measured when it leaves, once (a late duplicate or a packet older than the ring is not).
final class JitterBufferDelayMeter: Sendable {
    private struct Ring {
        var sequences = [UInt16](repeating: 0, count: 1_024)
        var arrivals = [UInt64](repeating: 0, count: 1_024)
    }
    private let ring = Mutex(Ring())
    private let totalNanoseconds = Atomic<UInt64>(0)
    private let emittedCount = Atomic<Int>(0)

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    func arrived(sequence: UInt16) {
        let now = Self.now()
        ring.withLock { ring in
            let slot = Int(sequence & 1_023)
            ring.sequences[slot] = sequence
            ring.arrivals[slot] = now
        }
    }

    func emitted(sequence: UInt16) {
        let now = Self.now()
        let arrival = ring.withLock { ring -> UInt64 in
            let slot = Int(sequence & 1_023)
            guard ring.sequences[slot] == sequence else { return 0 }
            defer { ring.arrivals[slot] = 0 }
            return ring.arrivals[slot]
        }
        guard arrival != 0, now >= arrival else { return }
        totalNanoseconds.add(now - arrival, ordering: .relaxed)
        emittedCount.add(1, ordering: .relaxed)
    }

    /// Seconds in total, and how many were measured.
    var totals: (seconds: Double, count: Int) {
        (Double(totalNanoseconds.load(ordering: .relaxed)) / 1e9, emittedCount.load(ordering: .relaxed))
    }
}

import Foundation
import Synchronization

/// The protected RTP packets a publisher sent in the last second, by SSRC and sequence number, so
/// that a retransmission request from the relay (a generic NACK: the relay saw a gap in what
/// arrived from us) is answered with the very datagram: its SRTP index is the original's, so the
/// relay accepts it only if the original never came (a duplicate fails its replay check, counted
/// apart from forgeries). Bounded: ``capacity`` packets per SSRC, each answered at most once per
/// ``resendSpacing``.
final class SentPacketCache: Sendable {
    static let capacity = 1024
    /// Packets older than this are not sent again: too late to be played.
    static let lifetime: UInt64 = 1_000_000_000
    /// The same packet is not sent again sooner than this (repeated NACKs of one loss).
    static let resendSpacing: UInt64 = 20_000_000

    private struct Slot {
        var sequence: UInt16
        var sentAt: UInt64
        var resentAt: UInt64 = 0
        var bytes: [UInt8]
    }

    private let rings = Mutex<[UInt32: [Slot?]]>([:])

    /// Keeps `bytes`, a protected RTP packet (its header is in the clear).
    func store(_ bytes: [UInt8], now: UInt64) {
        guard bytes.count >= 12 else { return }
        let sequence = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
        let ssrc = UInt32(bytes[8]) << 24 | UInt32(bytes[9]) << 16 | UInt32(bytes[10]) << 8 | UInt32(bytes[11])
        rings.withLock { rings in
            if rings[ssrc] == nil {
                // A publisher has a handful of SSRCs (audio, video, simulcast layers): keep it so.
                guard rings.count < 8 else { return }
                rings[ssrc] = [Slot?](repeating: nil, count: Self.capacity)
            }
            rings[ssrc]![Int(sequence) % Self.capacity] = Slot(sequence: sequence, sentAt: now, bytes: bytes)
        }
    }

    /// The packets of `ssrc` with these sequence numbers still kept and due for a resend, marked resent.
    func resend(ssrc: UInt32, sequences: [UInt16], now: UInt64) -> [[UInt8]] {
        rings.withLock { rings -> [[UInt8]] in
            guard rings[ssrc] != nil else { return [] }
            var found: [[UInt8]] = []
            for sequence in sequences {
                let index = Int(sequence) % Self.capacity
                guard let slot = rings[ssrc]![index], slot.sequence == sequence, now &- slot.sentAt <= Self.lifetime,
                      slot.resentAt == 0 || now &- slot.resentAt >= Self.resendSpacing else { continue }
                rings[ssrc]![index]!.resentAt = now
                found.append(slot.bytes)
            }
            return found
        }
    }
}

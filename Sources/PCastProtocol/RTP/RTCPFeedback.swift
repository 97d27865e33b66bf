// RTCP feedback messages (RFC 4585 §6): generic NACK and PLI, RFC 5104 FIR, and REMB
// (draft-alvestrand-rmcat-remb), parsed as strictly as the rest of RTCP (see RTCP.swift).

/// Generic NACK (RTPFB, FMT 1; RFC 4585 §6.2.1).
///
/// ```swift
/// let nack = RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [100, 101, 117])
/// nack.items.count           // 2: PID 100 covers 101..116, 117 needs a new entry
/// nack.lostSequenceNumbers   // [100, 101, 117]
/// ```
public struct RTCPGenericNACK: Sendable, Equatable {
    /// One PID/BLP pair: `packetID` is lost, and bit i of `lostBitmask` marks `packetID + i + 1`.
    ///
    /// ```swift
    /// let item = RTCPGenericNACK.Item(packetID: 10, lostBitmask: 0b101) // 10, 11 and 13 lost
    /// ```
    public struct Item: Sendable, Equatable {
        public var packetID: UInt16
        public var lostBitmask: UInt16

        public init(packetID: UInt16, lostBitmask: UInt16) {
            self.packetID = packetID
            self.lostBitmask = lostBitmask
        }
    }

    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    /// At least one entry is required on the wire.
    public var items: [Item]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32, items: [Item]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.items = items
    }

    /// Packs sequence numbers into PID/BLP entries. Each number either joins the last entry
    /// (if within the 16 following sequence numbers, modulo 2^16) or starts a new one, so a list
    /// in ascending, wrap-aware order packs optimally; any order is still encoded losslessly.
    public init(senderSSRC: UInt32, mediaSSRC: UInt32, lostSequenceNumbers: [UInt16]) {
        var items: [Item] = []
        for seq in lostSequenceNumbers {
            if let last = items.last {
                let delta = seq &- last.packetID
                if delta == 0 { continue }
                if delta <= 16 {
                    items[items.count - 1].lostBitmask |= 1 << (delta - 1)
                    continue
                }
            }
            items.append(Item(packetID: seq, lostBitmask: 0))
        }
        self.init(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC, items: items)
    }

    /// Every sequence number the entries mark as lost, in entry then bit order (duplicates are
    /// possible if entries overlap).
    public var lostSequenceNumbers: [UInt16] {
        var out: [UInt16] = []
        out.reserveCapacity(items.count * 2)
        for item in items {
            out.append(item.packetID)
            var mask = item.lostBitmask
            while mask != 0 {
                let bit = UInt16(mask.trailingZeroBitCount)
                out.append(item.packetID &+ bit &+ 1)
                mask &= mask - 1
            }
        }
        return out
    }
}

/// Picture loss indication (PSFB, FMT 1; RFC 4585 §6.3.1).
///
/// ```swift
/// let pli = RTCPPictureLossIndication(senderSSRC: 1, mediaSSRC: 2)
/// ```
public struct RTCPPictureLossIndication: Sendable, Equatable {
    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32

    public init(senderSSRC: UInt32, mediaSSRC: UInt32) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
    }
}

/// Full intra request (PSFB, FMT 4; RFC 5104 §4.3.1).
///
/// ```swift
/// let fir = RTCPFullIntraRequest(senderSSRC: 1, entries: [.init(ssrc: 2, sequenceNumber: 5)])
/// ```
public struct RTCPFullIntraRequest: Sendable, Equatable {
    /// Target SSRC and the request's command sequence number.
    ///
    /// ```swift
    /// let entry = RTCPFullIntraRequest.Entry(ssrc: 0x1234, sequenceNumber: 1)
    /// ```
    public struct Entry: Sendable, Equatable {
        public var ssrc: UInt32
        public var sequenceNumber: UInt8

        public init(ssrc: UInt32, sequenceNumber: UInt8) {
            self.ssrc = ssrc
            self.sequenceNumber = sequenceNumber
        }
    }

    public var senderSSRC: UInt32
    /// RFC 5104 says 0; kept as received.
    public var mediaSSRC: UInt32
    /// At least one entry is required on the wire.
    public var entries: [Entry]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32 = 0, entries: [Entry]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.entries = entries
    }
}

/// Receiver estimated maximum bitrate (PSFB, FMT 15 "REMB").
///
/// The bitrate is `mantissa << exponent` bits per second with an 18-bit mantissa and a 6-bit
/// exponent; both raw fields are kept so that any received value round-trips exactly.
///
/// ```swift
/// let remb = RTCPReceiverEstimatedMaxBitrate(senderSSRC: 1, bitrate: 1_500_000, ssrcs: [2, 3])
/// remb.bitrate // 1_500_000 (values needing more than 18 significant bits are rounded down)
/// ```
public struct RTCPReceiverEstimatedMaxBitrate: Sendable, Equatable {
    public static let maximumMantissa: UInt32 = 0x3_FFFF
    public static let maximumExponent: UInt8 = 63

    public var senderSSRC: UInt32
    /// Always 0 per the draft; kept as received.
    public var mediaSSRC: UInt32
    /// 0...63.
    public var exponent: UInt8
    /// 0...0x3FFFF.
    public var mantissa: UInt32
    /// At most 255.
    public var ssrcs: [UInt32]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32 = 0, exponent: UInt8, mantissa: UInt32, ssrcs: [UInt32]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.exponent = exponent
        self.mantissa = mantissa
        self.ssrcs = ssrcs
    }

    /// Encodes `bitrate` with the smallest exponent that fits, truncating low bits (an estimate
    /// should never be rounded up).
    public init(senderSSRC: UInt32, mediaSSRC: UInt32 = 0, bitrate: UInt64, ssrcs: [UInt32]) {
        var mantissa = bitrate
        var exponent: UInt8 = 0
        while mantissa > UInt64(Self.maximumMantissa) {
            mantissa >>= 1
            exponent += 1
        }
        self.init(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC, exponent: exponent,
                  mantissa: UInt32(mantissa), ssrcs: ssrcs)
    }

    /// Bits per second; saturates at `UInt64.max` for exponents that overflow 64 bits.
    public var bitrate: UInt64 {
        let m = UInt64(mantissa)
        if m == 0 { return 0 }
        guard Int(exponent) <= m.leadingZeroBitCount else { return .max }
        return m << UInt64(exponent)
    }

    static let identifier: [UInt8] = Array("REMB".utf8)
    static let identifierWord: UInt32 = 0x5245_4D42  // "REMB" big-endian
}

/// A transport-layer (PT 205) or payload-specific (PT 206) feedback message this module does not
/// model in detail, e.g. transport-wide congestion control (RTPFB FMT 15), TMMBR, SLI, RPSI or a
/// non-REMB application-layer message. The feedback control information is kept verbatim.
///
/// ```swift
/// let twcc = RTCPFeedbackPacket(payloadType: 205, format: 15, senderSSRC: 1, mediaSSRC: 2,
///                               feedbackControlInformation: [0, 1, 0, 0])
/// ```
public struct RTCPFeedbackPacket: Sendable, Equatable {
    /// 205 (RTPFB) or 206 (PSFB).
    public var payloadType: UInt8
    /// 5-bit FMT.
    public var format: UInt8
    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    public var feedbackControlInformation: [UInt8]

    public init(payloadType: UInt8, format: UInt8, senderSSRC: UInt32, mediaSSRC: UInt32,
                feedbackControlInformation: [UInt8]) {
        self.payloadType = payloadType
        self.format = format
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.feedbackControlInformation = feedbackControlInformation
    }
}

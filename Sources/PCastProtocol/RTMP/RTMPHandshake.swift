// The RTMP "simple" handshake, server side (Adobe RTMP specification 1.0, section 5.2):
//
//   client → C0 (version, 1 byte) C1 (time 4, zero 4, random 1528)
//   server → S0 (version 3) S1 (time 4, zero 4, random 1528) S2 (echo of C1)
//   client → C2 (echo of S1)
//
// ffmpeg and OBS (librtmp) put a version and an HMAC digest into C1 (the "complex" Flash Player 9
// handshake) but complete the simple one when S1 carries a zero version field, which ours does.
// C2 is not required to match S1 (clients differ); whether it did is reported.

/// Server side of the RTMP handshake as a byte-in / bytes-out state machine.
///
/// ```swift
/// var rng = SystemRandomNumberGenerator()
/// var handshake = RTMPServerHandshake(using: &rng)
/// let step = try handshake.feed(bytesFromSocket)
/// send(step.bytesToSend)
/// if handshake.isComplete {
///     // bytesFromSocket[step.bytesConsumed...] already belong to the chunk stream
/// }
/// ```
public struct RTMPServerHandshake: Sendable {
    /// The only version we speak (plain RTMP).
    public static let version: UInt8 = 3
    /// Size of C1/S1/C2/S2.
    public static let packetLength = 1536

    public enum State: Sendable, Equatable {
        case awaitingC0, awaitingC1, awaitingC2, complete
    }

    /// What one `feed` produced.
    public struct Step: Sendable, Equatable {
        /// Bytes to send to the client (S0+S1 after C0, S2 after C1).
        public var bytesToSend: [UInt8]
        /// How many of the fed bytes the handshake consumed; the rest are chunk stream bytes.
        public var bytesConsumed: Int
    }

    public private(set) var state = State.awaitingC0
    /// The time field of the client's C1.
    public private(set) var clientTime: UInt32?
    /// Bytes 4..<8 of C1: zero for a simple-handshake client, a Flash version for a complex one.
    public private(set) var clientVersion: UInt32?
    /// Whether C2 echoed S1's random bytes (`nil` until C2 arrived).
    public private(set) var clientEchoMatched: Bool?

    public var isComplete: Bool { state == .complete }

    /// S1 as sent.
    public let s1: [UInt8]
    private var pending: [UInt8] = []

    /// Builds S1 from `time` (our epoch, milliseconds) and 1528 bytes from `generator`.
    public init<G: RandomNumberGenerator>(time: UInt32 = 0, using generator: inout G) {
        var w = ByteWriter(reserving: Self.packetLength)
        w.u32(time)
        w.u32(0)  // zero version: the simple handshake
        while w.count < Self.packetLength {
            let r = generator.next()
            for shift in stride(from: 0, to: 64, by: 8) where w.count < Self.packetLength {
                w.u8(UInt8(truncatingIfNeeded: r >> UInt64(shift)))
            }
        }
        s1 = w.bytes
    }

    /// Builds S1 with the system random number generator.
    public init(time: UInt32 = 0) {
        var rng = SystemRandomNumberGenerator()
        self.init(time: time, using: &rng)
    }

    /// Feeds bytes; see the type documentation. Once complete, consumes nothing more.
    public mutating func feed(_ bytes: [UInt8]) throws(RTMPError) -> Step {
        try feed(bytes[...])
    }

    /// Feeds bytes; see the type documentation. Once complete, consumes nothing more.
    public mutating func feed(_ bytes: ArraySlice<UInt8>) throws(RTMPError) -> Step {
        var out: [UInt8] = []
        var i = bytes.startIndex
        loop: while i < bytes.endIndex {
            switch state {
            case .awaitingC0:
                let version = bytes[i]
                guard version == Self.version else { throw .unsupportedVersion(version) }
                i += 1
                out.reserveCapacity(1 + 2 * Self.packetLength)
                out.append(Self.version)
                out.append(contentsOf: s1)
                state = .awaitingC1
            case .awaitingC1, .awaitingC2:
                let n = min(Self.packetLength - pending.count, bytes.endIndex - i)
                pending.append(contentsOf: bytes[i..<(i + n)])
                i += n
                guard pending.count == Self.packetLength else { break }
                if state == .awaitingC1 {
                    clientTime = Self.u32(pending, 0)
                    clientVersion = Self.u32(pending, 4)
                    out.append(contentsOf: pending)  // S2 echoes C1
                    state = .awaitingC2
                } else {
                    clientEchoMatched = pending[8...] == s1[8...]
                    state = .complete
                }
                pending = []
            case .complete:
                break loop
            }
        }
        return Step(bytesToSend: out, bytesConsumed: i - bytes.startIndex)
    }

    private static func u32(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
    }
}

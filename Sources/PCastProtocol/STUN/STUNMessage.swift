import Crypto

/// What a datagram on the relay's one UDP port carries, told by its first byte (RFC 9443, which
/// updates RFC 7983): STUN for ICE connectivity checks, DTLS for the key exchange, RTP or RTCP for
/// media. Anything else (TURN channels, ZRTP, garbage) is `other` and is dropped.
public enum DatagramKind: Sendable, Hashable {
    case stun
    case dtls
    /// RTP or RTCP (told apart by the payload type, RFC 5761).
    case rtp
    case other

    public init(firstByte: UInt8) {
        switch firstByte {
        case 0...3: self = .stun
        case 20...63: self = .dtls
        case 128...191: self = .rtp
        default: self = .other
        }
    }
}

/// Why bytes are not a STUN message the relay accepts.
public enum STUNError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Fewer than the 20 bytes of a header, or a length field that disagrees with the datagram.
    case truncated(Int)
    /// Not STUN at all: the two top bits are set, or the magic cookie is wrong.
    case notSTUN
    /// The length field is not a multiple of four.
    case unalignedLength(Int)
    /// An attribute whose length runs past the message.
    case attributeOverrun(type: UInt16)
    /// FINGERPRINT that is not the last attribute, or an attribute whose value has the wrong size.
    case malformedAttribute(type: UInt16, String)

    public var description: String {
        switch self {
        case .truncated(let count): return "truncated STUN message (\(count) bytes)"
        case .notSTUN: return "not a STUN message (top bits or magic cookie)"
        case .unalignedLength(let length): return "STUN length \(length) is not a multiple of 4"
        case .attributeOverrun(let type): return "STUN attribute 0x\(String(type, radix: 16)) runs past the message"
        case .malformedAttribute(let type, let why): return "malformed STUN attribute 0x\(String(type, radix: 16)): \(why)"
        }
    }
}

/// A transport address as STUN carries it: an IPv4 (4 bytes) or IPv6 (16 bytes) address and a port.
public struct STUNAddress: Sendable, Hashable, CustomStringConvertible {
    /// Network order: 4 bytes for IPv4, 16 for IPv6.
    public var address: [UInt8]
    public var port: UInt16

    public init(address: [UInt8], port: UInt16) {
        self.address = address
        self.port = port
    }

    /// An IPv4 address from its dotted form (`"192.0.2.1"`), nil if it is not one.
    public init?(ipv4 dotted: String, port: UInt16) {
        let parts = dotted.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard let byte = UInt8(part), part.count <= 3 else { return nil }
            bytes.append(byte)
        }
        self.init(address: bytes, port: port)
    }

    /// The address alone: `192.0.2.1`, or IPv6 as eight groups (`fd00:5043:0:0:0:0:0:2`), the
    /// form SDP candidates and URLs take.
    public var host: String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        var groups: [String] = []
        for index in stride(from: 0, to: address.count - 1, by: 2) {
            groups.append(String(UInt16(address[index]) << 8 | UInt16(address[index + 1]), radix: 16))
        }
        return groups.joined(separator: ":")
    }

    public var description: String {
        address.count == 4 ? "\(host):\(port)" : "[\(host)]:\(port)"
    }
}

/// One attribute, its value as sent (without padding).
public struct STUNAttribute: Sendable, Hashable {
    public var type: UInt16
    public var value: [UInt8]

    public init(type: UInt16, value: [UInt8]) {
        self.type = type
        self.value = value
    }

    public static let mappedAddress: UInt16 = 0x0001
    public static let username: UInt16 = 0x0006
    public static let messageIntegrity: UInt16 = 0x0008
    public static let errorCode: UInt16 = 0x0009
    public static let unknownAttributes: UInt16 = 0x000A
    public static let xorMappedAddress: UInt16 = 0x0020
    public static let priority: UInt16 = 0x0024
    public static let useCandidate: UInt16 = 0x0025
    public static let software: UInt16 = 0x8022
    public static let fingerprint: UInt16 = 0x8028
    public static let iceControlled: UInt16 = 0x8029
    public static let iceControlling: UInt16 = 0x802A
}

/// A STUN message (RFC 8489) with what ICE (RFC 8445) puts in a connectivity check: decoded
/// strictly from a datagram, encoded with MESSAGE-INTEGRITY (HMAC-SHA1 under the short-term
/// credential) and FINGERPRINT (CRC-32).
///
/// ```swift
/// let request = try STUNMessage(decoding: datagram)
/// guard request.kind == .request, request.method == .binding,
///       STUNMessage.fingerprintIsValid(datagram),
///       STUNMessage.integrityIsValid(datagram, key: Array(localPassword.utf8)) else { return }
/// var response = STUNMessage(kind: .successResponse, method: .binding, transactionID: request.transactionID)
/// response.xorMappedAddress = sender
/// send(response.encoded(integrityKey: Array(localPassword.utf8)))
/// ```
public struct STUNMessage: Sendable, Hashable {
    /// The message class (RFC 8489 §5).
    public enum Kind: UInt16, Sendable, Hashable {
        case request = 0x0000
        case indication = 0x0010
        case successResponse = 0x0100
        case errorResponse = 0x0110
    }

    /// A STUN method (12 bits). ICE uses only Binding.
    public struct Method: RawRepresentable, Sendable, Hashable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue & 0x0FFF }
        public static let binding = Method(rawValue: 0x001)
    }

    public static let magicCookie: UInt32 = 0x2112_A442
    static let fingerprintXOR: UInt32 = 0x5354_554E

    public var kind: Kind
    public var method: Method
    /// 12 bytes.
    public var transactionID: [UInt8]
    /// In order, as sent; MESSAGE-INTEGRITY and FINGERPRINT are kept when decoded and added by
    /// ``encoded(integrityKey:fingerprint:padding:)``, not by the caller.
    public var attributes: [STUNAttribute]

    public init(kind: Kind, method: Method = .binding, transactionID: [UInt8], attributes: [STUNAttribute] = []) {
        precondition(transactionID.count == 12, "a STUN transaction id is 12 bytes")
        self.kind = kind
        self.method = method
        self.transactionID = transactionID
        self.attributes = attributes
    }

    /// A fresh random transaction id.
    public static func newTransactionID() -> [UInt8] {
        (0..<12).map { _ in UInt8.random(in: 0...255) }
    }

    // MARK: Decoding

    /// Decodes one datagram strictly: header, cookie, a length that matches, attributes within
    /// bounds and padded, FINGERPRINT last. Attributes after MESSAGE-INTEGRITY other than
    /// FINGERPRINT are ignored, as RFC 8489 §14.5 says.
    public init(decoding bytes: some Collection<UInt8>) throws(STUNError) {
        let bytes = Array(bytes)
        guard bytes.count >= 20 else { throw .truncated(bytes.count) }
        guard bytes[0] & 0xC0 == 0, Self.readUInt32(bytes, 4) == Self.magicCookie else { throw .notSTUN }
        let type = Self.readUInt16(bytes, 0)
        let length = Int(Self.readUInt16(bytes, 2))
        guard length % 4 == 0 else { throw .unalignedLength(length) }
        guard 20 + length == bytes.count else { throw .truncated(bytes.count) }
        // The class bits sit at 0x0100 and 0x0010; the method's 12 bits around them (§5).
        kind = Kind(rawValue: type & 0x0110)!
        method = Method(rawValue: (type & 0x000F) | ((type & 0x00E0) >> 1) | ((type & 0x3E00) >> 2))
        transactionID = Array(bytes[8..<20])
        var attributes: [STUNAttribute] = []
        var offset = 20
        var afterIntegrity = false
        while offset < bytes.count {
            guard offset + 4 <= bytes.count else { throw .attributeOverrun(type: 0) }
            let attributeType = Self.readUInt16(bytes, offset)
            let valueLength = Int(Self.readUInt16(bytes, offset + 2))
            let valueEnd = offset + 4 + valueLength
            guard valueEnd <= bytes.count else { throw .attributeOverrun(type: attributeType) }
            let next = offset + 4 + (valueLength + 3) / 4 * 4
            guard next <= bytes.count else { throw .attributeOverrun(type: attributeType) }
            let value = Array(bytes[(offset + 4)..<valueEnd])
            switch attributeType {
            case STUNAttribute.fingerprint:
                guard valueLength == 4 else { throw .malformedAttribute(type: attributeType, "FINGERPRINT is 4 bytes") }
                guard next == bytes.count else { throw .malformedAttribute(type: attributeType, "FINGERPRINT is not last") }
                attributes.append(STUNAttribute(type: attributeType, value: value))
            case STUNAttribute.messageIntegrity:
                guard valueLength == 20 else { throw .malformedAttribute(type: attributeType, "MESSAGE-INTEGRITY is 20 bytes") }
                if !afterIntegrity { attributes.append(STUNAttribute(type: attributeType, value: value)) }
                afterIntegrity = true
            default:
                if !afterIntegrity { attributes.append(STUNAttribute(type: attributeType, value: value)) }
            }
            offset = next
        }
        self.attributes = attributes
    }

    /// Whether the datagram's FINGERPRINT (if it has one, it must be valid) is right: CRC-32 of the
    /// message before it, XOR 0x5354554E. False when there is none.
    public static func fingerprintIsValid(_ bytes: [UInt8]) -> Bool {
        guard let offset = attributeOffset(STUNAttribute.fingerprint, in: bytes), offset + 8 == bytes.count else { return false }
        let expected = CRC32.checksum(bytes[0..<offset]) ^ fingerprintXOR
        return readUInt32(bytes, offset + 4) == expected
    }

    /// Whether the datagram's MESSAGE-INTEGRITY is the HMAC-SHA1 of the message before it under
    /// `key` (the short-term password's bytes), with the length field as it was when it was
    /// computed (up to the end of MESSAGE-INTEGRITY, FINGERPRINT excluded). False when absent.
    public static func integrityIsValid(_ bytes: [UInt8], key: [UInt8]) -> Bool {
        guard let offset = attributeOffset(STUNAttribute.messageIntegrity, in: bytes), offset + 24 <= bytes.count else { return false }
        var covered = Array(bytes[0..<offset])
        let length = UInt16(offset + 24 - 20)
        covered[2] = UInt8(length >> 8)
        covered[3] = UInt8(length & 0xFF)
        let mac = Array(HMAC<Insecure.SHA1>.authenticationCode(for: covered, using: SymmetricKey(data: key)))
        // Constant time: a timing side channel must not reveal how much of a forged MAC matched.
        var difference: UInt8 = 0
        for index in 0..<20 { difference |= mac[index] ^ bytes[offset + 4 + index] }
        return difference == 0
    }

    /// The offset of the first attribute of `type`, walking the attributes with bounds checks.
    static func attributeOffset(_ type: UInt16, in bytes: [UInt8]) -> Int? {
        var offset = 20
        while offset + 4 <= bytes.count {
            if readUInt16(bytes, offset) == type { return offset }
            offset += 4 + (Int(readUInt16(bytes, offset + 2)) + 3) / 4 * 4
        }
        return nil
    }

    // MARK: Encoding

    /// The datagram: the attributes (MESSAGE-INTEGRITY and FINGERPRINT among them are dropped and
    /// made anew), then MESSAGE-INTEGRITY under `integrityKey` if given, then FINGERPRINT if asked.
    /// Padding bytes are `padding` (any value is allowed; RFC 5769's vectors use spaces).
    public func encoded(integrityKey: [UInt8]? = nil, fingerprint: Bool = true, padding: UInt8 = 0) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(20 + attributes.reduce(0) { $0 + 4 + ($1.value.count + 3) / 4 * 4 } + 32)
        let method = self.method.rawValue
        let type = (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | kind.rawValue
        Self.append(type, to: &out)
        Self.append(UInt16(0), to: &out)
        Self.append(Self.magicCookie, to: &out)
        out += transactionID
        for attribute in attributes where attribute.type != STUNAttribute.messageIntegrity && attribute.type != STUNAttribute.fingerprint {
            Self.append(attribute.type, to: &out)
            Self.append(UInt16(attribute.value.count), to: &out)
            out += attribute.value
            out += [UInt8](repeating: padding, count: (4 - attribute.value.count % 4) % 4)
        }
        if let integrityKey {
            Self.setLength(out.count + 24 - 20, in: &out)
            let mac = HMAC<Insecure.SHA1>.authenticationCode(for: out, using: SymmetricKey(data: integrityKey))
            Self.append(STUNAttribute.messageIntegrity, to: &out)
            Self.append(UInt16(20), to: &out)
            out += Array(mac)
        }
        if fingerprint {
            Self.setLength(out.count + 8 - 20, in: &out)
            let crc = CRC32.checksum(out[...]) ^ Self.fingerprintXOR
            Self.append(STUNAttribute.fingerprint, to: &out)
            Self.append(UInt16(4), to: &out)
            Self.append(crc, to: &out)
        }
        Self.setLength(out.count - 20, in: &out)
        return out
    }

    // MARK: Attributes ICE uses

    public func attribute(_ type: UInt16) -> [UInt8]? {
        attributes.first { $0.type == type }?.value
    }

    public mutating func set(_ type: UInt16, _ value: [UInt8]?) {
        attributes.removeAll { $0.type == type }
        if let value { attributes.append(STUNAttribute(type: type, value: value)) }
    }

    /// USERNAME: in a connectivity check, `<receiver's ufrag>:<sender's ufrag>`.
    public var username: String? {
        get { attribute(STUNAttribute.username).flatMap { String(validating: $0, as: UTF8.self) } }
        set { set(STUNAttribute.username, newValue.map { Array($0.utf8) }) }
    }

    public var software: String? {
        get { attribute(STUNAttribute.software).flatMap { String(validating: $0, as: UTF8.self) } }
        set { set(STUNAttribute.software, newValue.map { Array($0.utf8) }) }
    }

    /// PRIORITY of the peer-reflexive candidate the check would create (RFC 8445 §7.1.1).
    public var priority: UInt32? {
        get { attribute(STUNAttribute.priority).flatMap { $0.count == 4 ? Self.readUInt32($0, 0) : nil } }
        set { set(STUNAttribute.priority, newValue.map(Self.bytes)) }
    }

    /// USE-CANDIDATE: the controlling agent nominates this pair.
    public var useCandidate: Bool {
        get { attribute(STUNAttribute.useCandidate) != nil }
        set { set(STUNAttribute.useCandidate, newValue ? [] : nil) }
    }

    /// ICE-CONTROLLING's tie-breaker, if the sender is controlling.
    public var iceControlling: UInt64? {
        get { attribute(STUNAttribute.iceControlling).flatMap { $0.count == 8 ? Self.readUInt64($0) : nil } }
        set { set(STUNAttribute.iceControlling, newValue.map(Self.bytes)) }
    }

    /// ICE-CONTROLLED's tie-breaker, if the sender is controlled.
    public var iceControlled: UInt64? {
        get { attribute(STUNAttribute.iceControlled).flatMap { $0.count == 8 ? Self.readUInt64($0) : nil } }
        set { set(STUNAttribute.iceControlled, newValue.map(Self.bytes)) }
    }

    /// ERROR-CODE: the code (300–699) and its reason phrase.
    public var errorCode: (code: Int, reason: String)? {
        get {
            guard let value = attribute(STUNAttribute.errorCode), value.count >= 4, (3...6).contains(Int(value[2] & 0x07)),
                  value[3] < 100 else { return nil }
            let reason = String(validating: value[4...], as: UTF8.self) ?? ""
            return (Int(value[2] & 0x07) * 100 + Int(value[3]), reason)
        }
        set {
            set(STUNAttribute.errorCode, newValue.map { [0, 0, UInt8($0.code / 100), UInt8($0.code % 100)] + Array($0.reason.utf8) })
        }
    }

    /// XOR-MAPPED-ADDRESS: where the request came from, as the responder saw it (§14.2).
    public var xorMappedAddress: STUNAddress? {
        get {
            guard let value = attribute(STUNAttribute.xorMappedAddress), value.count >= 8 else { return nil }
            let port = Self.readUInt16(value, 2) ^ UInt16(Self.magicCookie >> 16)
            let mask = Self.bytes(Self.magicCookie) + transactionID
            switch (value[1], value.count) {
            case (0x01, 8): return STUNAddress(address: (0..<4).map { value[4 + $0] ^ mask[$0] }, port: port)
            case (0x02, 20): return STUNAddress(address: (0..<16).map { value[4 + $0] ^ mask[$0] }, port: port)
            default: return nil
            }
        }
        set {
            set(STUNAttribute.xorMappedAddress, newValue.map { address in
                let mask = Self.bytes(Self.magicCookie) + transactionID
                let family: UInt8 = address.address.count == 4 ? 0x01 : 0x02
                return [0, family] + Self.bytes(address.port ^ UInt16(Self.magicCookie >> 16))
                    + address.address.enumerated().map { $0.element ^ mask[$0.offset] }
            })
        }
    }

    // MARK: Bytes

    static func readUInt16(_ bytes: [UInt8], _ offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    static func readUInt32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(readUInt16(bytes, offset)) << 16 | UInt32(readUInt16(bytes, offset + 2))
    }

    static func readUInt64(_ bytes: [UInt8]) -> UInt64 {
        UInt64(readUInt32(bytes, 0)) << 32 | UInt64(readUInt32(bytes, 4))
    }

    static func bytes<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        (0..<(T.bitWidth / 8)).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
    }

    static func append<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        out += bytes(value)
    }

    static func setLength(_ length: Int, in out: inout [UInt8]) {
        out[2] = UInt8(truncatingIfNeeded: length >> 8)
        out[3] = UInt8(truncatingIfNeeded: length)
    }
}

/// CRC-32 (ISO-HDLC: reflected polynomial 0xEDB88320, as zlib), for STUN's FINGERPRINT.
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}

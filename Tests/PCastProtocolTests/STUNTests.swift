import PCastProtocol
import Testing

/// STUN as ICE-lite needs it, checked against RFC 5769's test vectors (the IETF's own bytes, made
/// by another implementation) and against hostile datagrams.
@Suite("STUN messages (RFC 8489) against RFC 5769's vectors")
struct STUNTests {
    static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.filter { !$0.isWhitespace })
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
    }

    static let password = Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)
    static let transactionID = bytes("b7e7a701 bc34d686 fa87dfae")

    /// RFC 5769 §2.1: a Binding request with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME,
    /// MESSAGE-INTEGRITY and FINGERPRINT (padding bytes are spaces).
    static let sampleRequest = bytes("""
        0001 0058 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 0010 5354554e 20746573 7420636c 69656e74
        0024 0004 6e0001ff
        8029 0008 932ff9b1 51263b36
        0006 0009 6576746a 3a683676 59202020
        0008 0014 9aeaa70c bfd8cb56 781ef2b5 b2d3f249 c1b571a2
        8028 0004 e57a3bcf
        """)

    /// RFC 5769 §2.2: a Binding success response, XOR-MAPPED-ADDRESS 192.0.2.1:32853.
    static let sampleIPv4Response = bytes("""
        0101 003c 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 000b 74657374 20766563 746f7220
        0020 0008 0001a147 e112a643
        0008 0014 2b91f599 fd9e90c3 8c7489f9 2af9ba53 f06be7d7
        8028 0004 c07d4c96
        """)

    /// RFC 5769 §2.3: the same with XOR-MAPPED-ADDRESS [2001:db8:1234:5678:11:2233:4455:6677]:32853.
    static let sampleIPv6Response = bytes("""
        0101 0048 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 000b 74657374 20766563 746f7220
        0020 0014 0002a147 0113a9fa a5d3f179 bc25f4b5 bed2b9d9
        0008 0014 a382954e 4be67bf1 1784c97c 8292c275 bfe3ed41
        8028 0004 c8fb0b4c
        """)

    @Test("§2.1 request: decoded (class, method, ICE attributes), its integrity and fingerprint verify, and re-encoding gives the same bytes")
    func sampleRequest() throws {
        let message = try STUNMessage(decoding: Self.sampleRequest)
        #expect(message.kind == .request && message.method == .binding && message.transactionID == Self.transactionID)
        #expect(message.software == "STUN test client" && message.username == "evtj:h6vY")
        #expect(message.priority == 0x6e00_01ff && message.iceControlled == 0x932f_f9b1_5126_3b36 && message.iceControlling == nil)
        #expect(!message.useCandidate)
        #expect(STUNMessage.fingerprintIsValid(Self.sampleRequest))
        #expect(STUNMessage.integrityIsValid(Self.sampleRequest, key: Self.password))
        #expect(message.encoded(integrityKey: Self.password, fingerprint: true, padding: 0x20) == Self.sampleRequest)
    }

    @Test("§2.2 and §2.3 responses: the XOR-mapped IPv4 and IPv6 addresses, integrity and fingerprint; re-encoded byte for byte")
    func sampleResponses() throws {
        let v4 = try STUNMessage(decoding: Self.sampleIPv4Response)
        #expect(v4.kind == .successResponse && v4.method == .binding && v4.software == "test vector")
        #expect(v4.xorMappedAddress == STUNAddress(ipv4: "192.0.2.1", port: 32853))
        #expect(v4.xorMappedAddress?.description == "192.0.2.1:32853")
        let v6 = try STUNMessage(decoding: Self.sampleIPv6Response)
        #expect(v6.xorMappedAddress?.description == "[2001:db8:1234:5678:11:2233:4455:6677]:32853")
        for (message, datagram) in [(v4, Self.sampleIPv4Response), (v6, Self.sampleIPv6Response)] {
            #expect(STUNMessage.fingerprintIsValid(datagram) && STUNMessage.integrityIsValid(datagram, key: Self.password))
            #expect(message.encoded(integrityKey: Self.password, fingerprint: true, padding: 0x20) == datagram)
        }
        // Building the address attribute from the address gives the vector's bytes.
        var built = STUNMessage(kind: .successResponse, transactionID: Self.transactionID)
        built.software = "test vector"
        built.xorMappedAddress = v6.xorMappedAddress
        #expect(built.encoded(integrityKey: Self.password, padding: 0x20) == Self.sampleIPv6Response)
    }

    @Test("a wrong password, one changed byte or a missing attribute fails verification")
    func refusals() throws {
        #expect(!STUNMessage.integrityIsValid(Self.sampleRequest, key: Array("VOkJxbRl1RmTxUk/WvJxBu".utf8)))
        for index in [0, 3, 8, 25, 60, 90] {
            var changed = Self.sampleRequest
            changed[index] ^= 0x01
            #expect(!STUNMessage.fingerprintIsValid(changed), "byte \(index)")
        }
        // A byte inside the integrity-covered region breaks MESSAGE-INTEGRITY (its length field
        // excludes FINGERPRINT, so changing the fingerprint does not).
        var username = Self.sampleRequest
        username[64] ^= 0x01
        #expect(!STUNMessage.integrityIsValid(username, key: Self.password))
        let bare = STUNMessage(kind: .request, transactionID: Self.transactionID).encoded(fingerprint: false)
        #expect(!STUNMessage.fingerprintIsValid(bare) && !STUNMessage.integrityIsValid(bare, key: Self.password))
    }

    @Test("hostile datagrams are refused with a typed error: short, bad cookie, top bits, unaligned or lying lengths, overruns, FINGERPRINT not last")
    func hostile() throws {
        let request = Self.sampleRequest
        #expect(throws: STUNError.truncated(19)) { try STUNMessage(decoding: request.prefix(19)) }
        #expect(throws: STUNError.truncated(request.count - 4)) { try STUNMessage(decoding: request.dropLast(4)) }
        var cookie = request
        cookie[5] = 0
        #expect(throws: STUNError.notSTUN) { try STUNMessage(decoding: cookie) }
        var rtp = request
        rtp[0] = 0x80
        #expect(throws: STUNError.notSTUN) { try STUNMessage(decoding: rtp) }
        var unaligned = request
        unaligned[3] = 0x57
        #expect(throws: STUNError.unalignedLength(0x57)) { try STUNMessage(decoding: unaligned) }
        // SOFTWARE claiming 0xFFF0 bytes.
        var overrun = request
        overrun[22] = 0xFF
        overrun[23] = 0xF0
        #expect(throws: STUNError.attributeOverrun(type: 0x8022)) { try STUNMessage(decoding: overrun) }
        // FINGERPRINT first, USERNAME after it.
        #expect(throws: STUNError.malformedAttribute(type: STUNAttribute.fingerprint, "FINGERPRINT is not last")) {
            try STUNMessage(decoding: Self.withFingerprintFirst())
        }
    }

    /// A request whose first attribute is a FINGERPRINT, followed by a USERNAME.
    static func withFingerprintFirst() -> [UInt8] {
        var out = bytes("0001 0010 2112a442") + transactionID
        out += bytes("8028 0004 00000000")
        out += bytes("0006 0004 61626364")
        return out
    }

    @Test("attributes after MESSAGE-INTEGRITY other than FINGERPRINT are ignored (RFC 8489 §14.5)")
    func afterIntegrity() throws {
        var datagram = Self.sampleIPv4Response.dropLast(8).map { $0 }
        datagram += Self.bytes("8022 0004 65766c21")   // SOFTWARE "evl!" after MESSAGE-INTEGRITY
        datagram[3] = UInt8(datagram.count - 20)
        let message = try STUNMessage(decoding: datagram)
        #expect(message.software == "test vector")
        #expect(STUNMessage.integrityIsValid(datagram, key: Self.password))
    }

    @Test("the first byte tells STUN, DTLS and RTP apart on one port (RFC 9443)")
    func demultiplexing() {
        #expect(DatagramKind(firstByte: Self.sampleRequest[0]) == .stun)
        #expect(DatagramKind(firstByte: 22) == .dtls)             // a handshake record
        #expect(DatagramKind(firstByte: 0x80) == .rtp && DatagramKind(firstByte: 0xBF) == .rtp)
        #expect(DatagramKind(firstByte: 64) == .other && DatagramKind(firstByte: 200 + 50) == .other)
        #expect((0...255).filter { DatagramKind(firstByte: UInt8($0)) == .stun }.count == 4)
    }

    @Test("a Binding success response the relay would send round-trips: USE-CANDIDATE, ICE-CONTROLLING, ERROR-CODE")
    func roundTrip() throws {
        var request = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
        request.username = "relay:browser"
        request.useCandidate = true
        request.iceControlling = 0x0102_0304_0506_0708
        request.priority = 1_845_501_695
        let key = Array("a-32-character-ice-password-here".utf8)
        let datagram = request.encoded(integrityKey: key)
        let decoded = try STUNMessage(decoding: datagram)
        #expect(decoded.useCandidate && decoded.iceControlling == 0x0102_0304_0506_0708 && decoded.priority == 1_845_501_695)
        #expect(decoded.username == "relay:browser")
        #expect(STUNMessage.integrityIsValid(datagram, key: key) && STUNMessage.fingerprintIsValid(datagram))

        var error = STUNMessage(kind: .errorResponse, transactionID: request.transactionID)
        error.errorCode = (401, "Unauthorized")
        let refused = try STUNMessage(decoding: error.encoded())
        #expect(refused.kind == .errorResponse && refused.errorCode?.code == 401 && refused.errorCode?.reason == "Unauthorized")
    }
}

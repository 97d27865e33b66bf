import Glibc
import DTLS
import PCastContracts
import PCastProtocol
import SRTP

/// What a control call hands the I/O thread to open a WebRTC peer's transport.
struct WebRTCSetup: Sendable {
    let streamId: String
    /// Nil for a publisher.
    let subscriberId: String?
    /// A viewer's relay-assigned RTCP route (its own RTCP SSRCs are the browser's choice).
    let rtcpSSRC: UInt32?
    let parameters: WebRTCPeerParameters
    /// The flow's SRTP sessions, keyed again once DTLS finishes.
    let crypto: FlowCrypto
}

/// One WebRTC peer's transport on the I/O thread: its ICE-lite agent, its DTLS server and the
/// flow it keys. I/O thread only.
final class WebRTCPeer {
    let setup: WebRTCSetup
    var agent: ICELiteAgent
    let dtls: DTLSEndpoint
    /// Addresses that passed a connectivity check: DTLS is accepted from them (a peer may start
    /// DTLS on a checked pair before it nominates one).
    var checked: Set<RelayAddress> = []
    /// Where media goes: the nominated address (or the one DTLS came from, if never nominated).
    var address: RelayAddress?
    var connected = false

    init(setup: WebRTCSetup, context: DTLSContext, now: ContinuousClock.Instant,
         consentTimeout: Duration, connectTimeout: Duration) throws(DTLSError) {
        self.setup = setup
        agent = ICELiteAgent(local: setup.parameters.local, remoteUfrag: setup.parameters.remoteUfrag, now: now,
                             consentTimeout: consentTimeout, connectTimeout: connectTimeout)
        dtls = try DTLSEndpoint(context: context, peerFingerprint: setup.parameters.remoteFingerprint)
    }

    /// What the router is told of packets from the peer's address once its DTLS ended (see
    /// ``RelayRouter/receive(datagram:from:now:peer:)``); nil before, and for a publisher without
    /// simulcast RIDs.
    var source: WebRTCSource? {
        guard connected else { return nil }
        if setup.subscriberId != nil {
            return setup.rtcpSSRC.map { .viewer(streamId: setup.streamId, rtcpSSRC: $0) }
        }
        return setup.parameters.rtpStreamIDExtension.map { .publisher(streamId: setup.streamId, ridExtension: $0) }
    }

    /// The key the engine files it under: one publisher per stream, one viewer per subscriber id.
    var key: WebRTCPeerKey { WebRTCPeerKey(streamId: setup.streamId, subscriberId: setup.subscriberId) }
}

struct WebRTCPeerKey: Hashable {
    let streamId: String
    let subscriberId: String?
}

/// The I/O thread's index of WebRTC peers: by ICE ufrag (a check from a new address), by address
/// (DTLS, and a viewer's RTCP), by flow (removal).
struct WebRTCPeerTable {
    private(set) var byFlow: [WebRTCPeerKey: WebRTCPeer] = [:]
    private var byUfrag: [String: WebRTCPeer] = [:]
    private(set) var byAddress: [RelayAddress: WebRTCPeer] = [:]

    var isEmpty: Bool { byFlow.isEmpty }
    var count: Int { byFlow.count }
    /// Peers whose media comes over TCP (ICE-TCP).
    var overTCP: Int { byFlow.values.filter { $0.address.map(TCPMediaFlows.isTCP) ?? false }.count }

    func peer(ufrag: Substring) -> WebRTCPeer? { byUfrag[String(ufrag)] }

    @inline(__always)
    func peer(at address: RelayAddress) -> WebRTCPeer? { byAddress.isEmpty ? nil : byAddress[address] }

    mutating func insert(_ peer: WebRTCPeer) {
        if let old = byFlow[peer.key] { remove(old) }
        byFlow[peer.key] = peer
        byUfrag[peer.setup.parameters.local.ufrag] = peer
    }

    /// A peer is reachable at `address` (a check passed there).
    mutating func bind(_ peer: WebRTCPeer, to address: RelayAddress) {
        guard byFlow[peer.key] === peer else { return }
        if let other = byAddress[address], other !== peer { other.checked.remove(address) }
        peer.checked.insert(address)
        byAddress[address] = peer
    }

    @discardableResult
    mutating func remove(_ peer: WebRTCPeer) -> Bool {
        guard byFlow[peer.key] === peer else { return false }
        byFlow[peer.key] = nil
        if byUfrag[peer.setup.parameters.local.ufrag] === peer { byUfrag[peer.setup.parameters.local.ufrag] = nil }
        for address in peer.checked where byAddress[address] === peer { byAddress[address] = nil }
        return true
    }

    /// Peers of one stream (its publisher and every viewer).
    func peers(ofStream streamId: String) -> [WebRTCPeer] {
        byFlow.values.filter { $0.setup.streamId == streamId }
    }

    func peer(_ key: WebRTCPeerKey) -> WebRTCPeer? { byFlow[key] }

    var all: [WebRTCPeer] { Array(byFlow.values) }
}

extension STUNAddress {
    /// 4 bytes for an IPv4 (or IPv4-mapped) address, 16 for IPv6.
    init(_ address: RelayAddress) {
        if let v = address.ipv4 {
            self.init(address: [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)], port: address.port)
        } else {
            self.init(address: address.ipv6Bytes, port: address.port)
        }
    }
}

extension RelayAddress {
    init?(_ address: STUNAddress) {
        let a = address.address
        if a.count == 4 {
            self.init(ipv4: UInt32(a[0]) << 24 | UInt32(a[1]) << 16 | UInt32(a[2]) << 8 | UInt32(a[3]), port: address.port)
        } else {
            self.init(ipv6: a, port: address.port)
        }
    }
}

/// RTP header surgery for WebRTC flows, on plain packets.
enum RTPRewrite {
    /// Removes the header extension (RFC 8285) of a plain RTP packet, in place: a WebRTC
    /// publisher's extension ids (mid, abs-send-time) are its negotiation's, and mean nothing, or
    /// the wrong thing, to viewers that negotiated their own.
    static func stripHeaderExtension(_ packet: inout [UInt8]) {
        guard packet.count >= 12, packet[0] & 0x10 != 0 else { return }
        let csrcEnd = 12 + Int(packet[0] & 0x0F) * 4
        guard packet.count >= csrcEnd + 4 else { return }
        let words = Int(packet[csrcEnd + 2]) << 8 | Int(packet[csrcEnd + 3])
        let extensionEnd = csrcEnd + 4 + words * 4
        guard packet.count >= extensionEnd else { return }
        packet.removeSubrange(csrcEnd..<extensionEnd)
        packet[0] &= ~0x10
    }

    /// Sets the sender SSRC of each packet of a plain RTCP compound that has `ssrc` there (a
    /// sender report, a source description's first chunk) to `replacement`.
    static func replaceSenderSSRC(_ packet: inout [UInt8], _ ssrc: UInt32, with replacement: UInt32) {
        packet.withUnsafeMutableBytes { bytes in
            var offset = 0
            while offset + 8 <= bytes.count {
                let words = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
                if UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)) == ssrc {
                    bytes.storeBytes(of: replacement.bigEndian, toByteOffset: offset + 4, as: UInt32.self)
                }
                offset += (words + 1) * 4
            }
        }
    }

    /// Sets a plain RTP header's sequence number, and its SSRC when given (a subscriber's own
    /// numbering; a simulcast layer under the viewer's one video SSRC). At least 12 bytes.
    @inline(__always)
    static func setSequence(_ sequence: UInt16, ssrc: UInt32?, in header: UnsafeMutableRawBufferPointer) {
        header.storeBytes(of: sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
        if let ssrc { header.storeBytes(of: ssrc.bigEndian, toByteOffset: 8, as: UInt32.self) }
    }

    /// A 128-entry payload type table from a mapping (entries not named map to themselves).
    static func table(_ mapping: [UInt8: UInt8]) -> [UInt8]? {
        guard mapping.contains(where: { $0.key != $0.value }) else { return nil }
        var table = (0..<128).map { UInt8($0) }
        for (from, to) in mapping where from < 128 && to < 128 { table[Int(from)] = to }
        return table
    }
}

/// The addresses a relay announces as WebRTC host candidates.
enum HostCandidates {
    /// The configured announced addresses (IPv4 or IPv6); else the bound address; else (`0.0.0.0`)
    /// every IPv4 interface's address that is up, loopback last; for `::`, the IPv6 ones (global
    /// and unique-local, not link-local) after them.
    static func addresses(configuration: RelayConfiguration) -> [RelayAddress] {
        let announced = configuration.announcedAddresses.compactMap { RelayAddress(host: $0, port: 0) }
        if !announced.isEmpty { return announced }
        let bound = RelayAddress(host: configuration.host, port: 0)
        if let bound, !bound.isUnspecified { return [bound] }
        let wantsIPv6 = bound.map { $0.ipv4 == nil } ?? false
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [RelayAddress(ipv4: 0x7F00_0001, port: 0)] }
        defer { freeifaddrs(list) }
        var found: [RelayAddress] = []
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr, entry.pointee.ifa_flags & UInt32(IFF_UP) != 0 else { continue }
            var candidate: RelayAddress?
            if address.pointee.sa_family == sa_family_t(AF_INET) {
                candidate = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { RelayAddress($0.pointee) }
            } else if wantsIPv6, address.pointee.sa_family == sa_family_t(AF_INET6) {
                let v6 = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { RelayAddress($0.pointee) }
                // Link-local addresses (fe80::/10) need a scope no candidate carries.
                if v6.high >> 54 != 0x3FA { candidate = RelayAddress(ipv6: v6.ipv6Bytes, port: 0) }
            }
            if let candidate, !found.contains(candidate) { found.append(candidate) }
        }
        let isLoopback = { (address: RelayAddress) in
            (address.ipv4.map { $0 >> 24 == 127 } ?? false) || (address.high == 0 && address.low == 1)
        }
        let loopback = found.filter(isLoopback)
        let others = found.filter { !isLoopback($0) }
        let ordered = others.sorted { ($0.ipv4 != nil ? 0 : 1) < ($1.ipv4 != nil ? 0 : 1) }
        return ordered + (loopback.isEmpty ? [RelayAddress(ipv4: 0x7F00_0001, port: 0)] : loopback)
    }
}

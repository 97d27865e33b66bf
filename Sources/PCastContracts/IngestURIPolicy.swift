import Foundation
import PCastProtocol

/// Why the platform refuses to pull a URI.
public enum IngestURIError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Not a URI, or no host where one is needed.
    case malformed(String)
    /// The scheme is not on the allow-list (`file` only when the operator enables it).
    case schemeNotAllowed(String)
    /// The URI carries credentials (`user@host`) or a fragment (`#…`): parsers disagree about
    /// where the host of such a URI is, so none is pulled.
    case ambiguous(String)
    /// The host resolves to a loopback, private, link-local or otherwise internal address.
    case addressNotAllowed(host: String, address: String)
    /// The host does not resolve.
    case unresolvable(String)
    /// A `file://` path outside the allowed directory (or with `..`).
    case pathNotAllowed(String)

    public var description: String {
        switch self {
        case .malformed(let uri): return "'\(SignalingError.clipped(uri, limit: 256))' is not a URI the platform can pull"
        case .schemeNotAllowed(let scheme):
            return "scheme '\(SignalingError.clipped(scheme))' is not allowed (allowed: http, https, rtmp, rtmps, rtsp)"
        case .ambiguous(let why): return "the URI is refused: \(why)"
        case .addressNotAllowed(let host, let address):
            return "'\(SignalingError.clipped(host))' resolves to \(address), an address the platform does not pull from"
        case .unresolvable(let host): return "'\(SignalingError.clipped(host))' does not resolve"
        case .pathNotAllowed(let path): return "file path '\(SignalingError.clipped(path, limit: 256))' is not allowed"
        }
    }
}

/// What the platform actually pulls once a URI passed ``IngestURIPolicy``: the URI rebuilt from
/// the checked parts, with the host replaced by the address that was checked (so GStreamer connects
/// where the policy looked, and no second DNS answer can point it elsewhere).
///
/// ```swift
/// let target = try policy.check("http://media.example.com:8000/clip.mp4")
/// target.uri          // "http://198.51.100.20:8000/clip.mp4"
/// target.hostHeader   // "media.example.com:8000" (sent as Host:)
/// ```
public struct IngestTarget: Sendable, Hashable {
    public let scheme: String
    /// The host as written (lowercased, IPv6 without brackets); empty for `file`.
    public let host: String
    public let port: Int?
    /// The checked address the source connects to; nil for `file`, and for TLS schemes, whose
    /// certificate check needs the name (see ``IngestURIPolicy``).
    public let pinnedAddress: String?
    /// What the ingest pipeline opens.
    public let uri: String
    /// The `Host` header for a pinned `http` URI (the name the server expects).
    public let hostHeader: String?
}

/// What the platform may pull for ingest: an allow-list of schemes, and no internal or
/// special-purpose targets (IANA's IPv4 and IPv6 special-purpose address registries: loopback,
/// private, link-local — cloud metadata lives at 169.254.169.254 —, CGNAT, documentation,
/// benchmarking, NAT64, Teredo, 6to4, ULA, multicast…) after DNS resolution, unless the operator
/// allows them. Every address a name resolves to must pass, so a name cannot smuggle an internal
/// address behind a public one.
///
/// The URI is parsed once, here, strictly: credentials (`user@`), fragments (`#`), backslashes,
/// percent-encoded or non-canonical numeric hosts (`0x7f.1`, `2130706433`) are refused, because
/// GStreamer's URI parsers do not read such URIs the way this one would (`rtsp://a.b#:x@127.0.0.1/`
/// is a public host to one parser and loopback to another). The URI handed on is rebuilt from the
/// checked parts with the checked address in place of the name (``IngestTarget``), so the
/// connection goes where the policy looked (no DNS rebinding between check and connect). TLS
/// schemes (`https`, `rtmps`) keep the name, which the certificate check needs: a rebinding answer
/// then fails the TLS handshake instead of yielding data. HTTP redirects are not followed by the
/// ingest (a redirect ends it with an error), so a public URI cannot bounce the platform inward.
///
/// ```swift
/// var policy = IngestURIPolicy()
/// policy.allowedHosts = ["127.0.0.1"]          // tests pull from loopback on purpose
/// let target = try policy.check("http://127.0.0.1:8000/clip.mp4")
/// ```
public struct IngestURIPolicy: Sendable, Hashable {
    public static let defaultSchemes: Set<String> = ["http", "https", "rtmp", "rtmps", "rtsp"]
    /// Schemes whose connections are TLS: the name is kept for the certificate check.
    static let tlsSchemes: Set<String> = ["https", "rtmps"]
    public var schemes: Set<String> = Self.defaultSchemes
    /// Allow `file://` URIs under this directory (off when nil).
    public var fileDirectory: String?
    /// Hosts (names or addresses) allowed even when internal.
    public var allowedHosts: Set<String> = []
    /// Allow every internal address (a lab platform on a private network).
    public var allowInternalAddresses = false

    public init() {}

    /// Checks `uri`, resolving its host once, and returns what to pull.
    ///
    /// The policy does no I/O: `resolve` says what a host resolves to (every address), and
    /// `realPath` where a `file://` path leads once its symbolic links are followed (nil when it
    /// cannot be followed, a path that does not exist). A link under ``fileDirectory`` that leads
    /// out of it is refused.
    ///
    /// - Throws: ``IngestURIError``.
    public func check(_ uri: String, resolve: (String) -> [String]?,
                      realPath: (String) -> String?) throws(IngestURIError) -> IngestTarget {
        guard uri.utf8.count <= 8192, uri.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }),
              !uri.contains("\"") else {
            throw .malformed(uri)
        }
        if uri.contains("\\") { throw .ambiguous("it contains a backslash") }
        if uri.contains("#") { throw .ambiguous("it has a fragment ('#')") }
        guard let schemeEnd = uri.range(of: ":") else { throw .malformed(uri) }
        let scheme = uri[..<schemeEnd.lowerBound].lowercased()
        guard let first = scheme.unicodeScalars.first, CharacterSet.letters.contains(first),
              scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+.-".contains($0) }) else { throw .malformed(uri) }
        let afterScheme = uri[schemeEnd.upperBound...]
        guard afterScheme.hasPrefix("//") else { throw .malformed(uri) }
        let rest = afterScheme.dropFirst(2)
        if scheme == "file" { return try checkFile(rest, realPath: realPath) }
        guard schemes.contains(scheme) else { throw .schemeNotAllowed(scheme) }

        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let pathAndQuery = String(rest[authorityEnd...])
        if authority.contains("@") { throw .ambiguous("it carries credentials ('user@host')") }
        guard !authority.isEmpty else { throw .malformed(uri) }
        let (host, port) = try Self.hostAndPort(String(authority), uri: uri)
        guard pathAndQuery.unicodeScalars.allSatisfy({ Self.pathCharacters.contains($0) }) else { throw .malformed(uri) }

        let literal = Self.isAddress(host)
        let bypass = allowInternalAddresses || allowedHosts.contains(host)
        let addresses: [String]
        if literal {
            addresses = [host]
        } else {
            guard let resolved = resolve(host), !resolved.isEmpty else { throw .unresolvable(host) }
            addresses = resolved
        }
        if !bypass {
            for address in addresses where !allowedHosts.contains(address) && Self.isInternal(address) {
                throw .addressNotAllowed(host: host, address: address)
            }
        }
        let portText = port.map { ":\($0)" } ?? ""
        let bracketed: (String) -> String = { $0.contains(":") ? "[\($0)]" : $0 }
        if Self.tlsSchemes.contains(scheme) {
            return IngestTarget(scheme: scheme, host: host, port: port, pinnedAddress: nil,
                                uri: "\(scheme)://\(bracketed(host))\(portText)\(pathAndQuery)", hostHeader: nil)
        }
        let pinned = addresses[0]
        return IngestTarget(scheme: scheme, host: host, port: port, pinnedAddress: pinned,
                            uri: "\(scheme)://\(bracketed(pinned))\(portText)\(pathAndQuery)",
                            hostHeader: scheme == "http" && !literal ? "\(host)\(portText)" : nil)
    }

    /// RFC 3986 path, query and their percent-escapes; no fragment, no quote, no backslash.
    private static let pathCharacters = CharacterSet(charactersIn:
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?%")

    private static func hostAndPort(_ authority: String, uri: String) throws(IngestURIError) -> (String, Int?) {
        var host: String
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .malformed(uri) }
            host = String(authority[authority.index(after: authority.startIndex)..<close]).lowercased()
            var v6 = in6_addr()
            guard inet_pton(AF_INET6, host, &v6) == 1 else { throw .malformed(uri) }
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .malformed(uri) }
                portText = after.dropFirst()
            }
        } else {
            let parts = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = String(parts[0]).lowercased()
            if parts.count == 2 { portText = parts[1] }
            guard !host.isEmpty, host.utf8.count <= 253,
                  host.allSatisfy({ ($0.isASCII && ($0.isLetter || $0.isNumber)) || $0 == "-" || $0 == "." || $0 == "_" }) else {
                throw .malformed(uri)
            }
            // Anything a resolver might read as a number must be a canonical dotted quad:
            // `127.1`, `0x7f.0.0.1`, `017700000001` and `2130706433` are all loopback to inet_aton.
            let labels = host.split(separator: ".", omittingEmptySubsequences: false)
            let numericLike = labels.allSatisfy { label in
                !label.isEmpty && (label.allSatisfy(\.isNumber) || label.lowercased().hasPrefix("0x"))
            }
            if numericLike || host.hasSuffix(".") && labels.dropLast().allSatisfy({ $0.allSatisfy(\.isNumber) }) {
                var v4 = in_addr()
                guard inet_pton(AF_INET, host, &v4) == 1 else {
                    throw .ambiguous("'\(SignalingError.clipped(host))' is not a canonical IPv4 address")
                }
            }
        }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy(\.isNumber), let value = Int(portText), (1...65_535).contains(value) else {
                throw .malformed(uri)
            }
            port = value
        }
        return (host, port)
    }

    private func checkFile(_ rest: Substring, realPath: (String) -> String?) throws(IngestURIError) -> IngestTarget {
        guard let directory = fileDirectory else { throw .schemeNotAllowed("file") }
        // `file:///path` or `file://localhost/path`; nothing escaped, no query.
        var path = rest
        if path.lowercased().hasPrefix("localhost/") { path = path.dropFirst("localhost".count) }
        guard path.hasPrefix("/"), !path.contains("%"), !path.contains("?"), !path.split(separator: "/").contains("..") else {
            throw .pathNotAllowed(String(path))
        }
        let root = URL(fileURLWithPath: directory).standardizedFileURL.path
        let written = URL(fileURLWithPath: String(path)).standardizedFileURL.path
        // Both the path as written and where its links lead must be inside: a link under the
        // directory to /etc is refused, and so is a path outside it whatever it leads to.
        func inside(_ candidate: String, _ folder: String) -> Bool {
            candidate == folder || candidate.hasPrefix(folder.hasSuffix("/") ? folder : folder + "/")
        }
        let resolved = realPath(written) ?? written
        let resolvedRoot = realPath(root) ?? root
        guard inside(written, root), inside(resolved, root) || inside(resolved, resolvedRoot) else { throw .pathNotAllowed(String(path)) }
        return IngestTarget(scheme: "file", host: "", port: nil, pinnedAddress: nil, uri: "file://\(resolved)", hostHeader: nil)
    }

    /// Whether `text` is a numeric IPv4 or IPv6 address.
    static func isAddress(_ text: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }

    /// IANA IPv4 Special-Purpose Address Registry, every entry (plus multicast and the reserved
    /// 240/4): none is a place the platform pulls media from.
    static let specialIPv4: [(UInt32, UInt32)] = [
        (0x0000_0000, 8),    // 0.0.0.0/8 "this network"
        (0x0A00_0000, 8),    // 10/8 private
        (0x6440_0000, 10),   // 100.64/10 shared address space (CGNAT)
        (0x7F00_0000, 8),    // 127/8 loopback
        (0xA9FE_0000, 16),   // 169.254/16 link-local (cloud metadata)
        (0xAC10_0000, 12),   // 172.16/12 private
        (0xC000_0000, 24),   // 192.0.0/24 IETF protocol assignments (DS-Lite, PCP/TURN anycast…)
        (0xC000_0200, 24),   // 192.0.2/24 TEST-NET-1
        (0xC01F_C400, 24),   // 192.31.196/24 AS112-v4
        (0xC034_C100, 24),   // 192.52.193/24 AMT
        (0xC058_6300, 24),   // 192.88.99/24 deprecated 6to4 relay anycast
        (0xC0A8_0000, 16),   // 192.168/16 private
        (0xC0AF_3000, 24),   // 192.175.48/24 direct delegation AS112
        (0xC612_0000, 15),   // 198.18/15 benchmarking
        (0xC633_6400, 24),   // 198.51.100/24 TEST-NET-2
        (0xCB00_7100, 24),   // 203.0.113/24 TEST-NET-3
        (0xE000_0000, 4),    // 224/4 multicast
        (0xF000_0000, 4),    // 240/4 reserved, 255.255.255.255 broadcast
    ]

    /// IANA IPv6 Special-Purpose Address Registry inside 2000::/3 (the only globally routed
    /// unicast space; everything outside it — ::, ::1, 64:ff9b::/96 and 64:ff9b:1::/48 NAT64,
    /// 100::/64 discard, 5f00::/16 SRv6, fc00::/7 ULA, fe80::/10 link-local, fec0::/10, ff00::/8
    /// multicast — is refused whole, IPv4-mapped addresses being judged as IPv4).
    static let specialIPv6: [([UInt8], Int)] = [
        ([0x20, 0x01, 0x00, 0x00], 23),            // 2001::/23 IETF protocol assignments (Teredo 2001::/32, benchmarking, ORCHID…)
        ([0x20, 0x01, 0x0D, 0xB8], 32),            // 2001:db8::/32 documentation
        ([0x20, 0x02], 16),                        // 2002::/16 6to4
        ([0x26, 0x20, 0x00, 0x4F, 0x80, 0x00], 48), // 2620:4f:8000::/48 direct delegation AS112
        ([0x3F, 0xFF, 0x00], 20),                  // 3fff::/20 documentation
    ]

    /// Whether a numeric address is one the platform must not be made to reach.
    public static func isInternal(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            let a = UInt32(bigEndian: v4.s_addr)
            return specialIPv4.contains { base, bits in (a >> (32 - bits)) == (base >> (32 - bits)) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address.split(separator: "%").first.map(String.init) ?? address, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            // IPv4-mapped (::ffff:a.b.c.d): judge the IPv4 address.
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
                return isInternal("\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])")
            }
            guard bytes[0] & 0xE0 == 0x20 else { return true }   // outside 2000::/3
            return specialIPv6.contains { prefix, bits in
                var remaining = bits
                for (index, byte) in prefix.enumerated() where remaining > 0 {
                    let take = min(8, remaining)
                    let mask: UInt8 = take == 8 ? 0xFF : ~(0xFF >> UInt8(take))
                    if bytes[index] & mask != byte & mask { return false }
                    remaining -= take
                }
                return true
            }
        }
        return true   // not an address at all: refuse
    }
}

import Foundation

/// Why the platform refuses to pull a URI.
public enum IngestURIError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Not a URI, or no host where one is needed.
    case malformed(String)
    /// The scheme is not on the allow-list (`file` only when the operator enables it).
    case schemeNotAllowed(String)
    /// The host resolves to a loopback, private, link-local or otherwise internal address.
    case addressNotAllowed(host: String, address: String)
    /// The host does not resolve.
    case unresolvable(String)
    /// A `file://` path outside the allowed directory (or with `..`).
    case pathNotAllowed(String)

    public var description: String {
        switch self {
        case .malformed(let uri): return "'\(uri)' is not a URI the platform can pull"
        case .schemeNotAllowed(let scheme): return "scheme '\(scheme)' is not allowed (allowed: http, https, rtmp, rtmps, rtsp)"
        case .addressNotAllowed(let host, let address): return "'\(host)' resolves to \(address), an address the platform does not pull from"
        case .unresolvable(let host): return "'\(host)' does not resolve"
        case .pathNotAllowed(let path): return "file path '\(path)' is not allowed"
        }
    }
}

/// What the platform may pull for ingest: an allow-list of schemes, and no internal targets
/// (loopback, RFC 1918 private, link-local — cloud metadata lives at 169.254.169.254 —, CGNAT,
/// multicast, unspecified, IPv6 ULA and link-local) after DNS resolution, unless the operator
/// allows them. Every address a name resolves to must pass, so a name cannot smuggle an internal
/// address behind a public one.
///
/// ```swift
/// var policy = IngestURIPolicy()
/// policy.allowedHosts = ["127.0.0.1"]          // tests pull from loopback on purpose
/// let url = try policy.check("http://127.0.0.1:8000/clip.mp4")
/// ```
public struct IngestURIPolicy: Sendable, Hashable {
    public static let defaultSchemes: Set<String> = ["http", "https", "rtmp", "rtmps", "rtsp"]
    public var schemes: Set<String> = Self.defaultSchemes
    /// Allow `file://` URIs under this directory (off when nil).
    public var fileDirectory: String?
    /// Hosts (names or addresses) allowed even when internal.
    public var allowedHosts: Set<String> = []
    /// Allow every internal address (a lab platform on a private network).
    public var allowInternalAddresses = false

    public init() {}

    /// Checks `uri`, resolving its host.
    ///
    /// - Throws: ``IngestURIError``.
    public func check(_ uri: String, resolve: (String) -> [String]? = IngestURIPolicy.resolve) throws(IngestURIError) -> URL {
        guard uri.utf8.count <= 8192, !uri.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }),
              let url = URL(string: uri), let scheme = url.scheme?.lowercased() else {
            throw .malformed(uri)
        }
        if scheme == "file" {
            guard let directory = fileDirectory else { throw .schemeNotAllowed(scheme) }
            let path = url.path
            guard !path.isEmpty, !path.split(separator: "/").contains(".."), !path.contains("\0") else { throw .pathNotAllowed(path) }
            let root = URL(fileURLWithPath: directory).standardizedFileURL.path
            let resolved = URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
            guard resolved == root || resolved.hasPrefix(root.hasSuffix("/") ? root : root + "/") else { throw .pathNotAllowed(path) }
            return url
        }
        guard schemes.contains(scheme) else { throw .schemeNotAllowed(scheme) }
        guard let rawHost = url.host, !rawHost.isEmpty else { throw .malformed(uri) }
        let host = rawHost.hasPrefix("[") && rawHost.hasSuffix("]") ? String(rawHost.dropFirst().dropLast()) : rawHost
        if allowInternalAddresses || allowedHosts.contains(host.lowercased()) { return url }
        guard let addresses = resolve(host), !addresses.isEmpty else { throw .unresolvable(host) }
        for address in addresses {
            if allowedHosts.contains(address) { continue }
            if Self.isInternal(address) { throw .addressNotAllowed(host: host, address: address) }
        }
        return url
    }

    /// Every address `host` resolves to (IPv4 and IPv6, numeric), or nil.
    public static func resolve(_ host: String) -> [String]? {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return nil }
        defer { freeaddrinfo(first) }
        var addresses: [String] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(entry.pointee.ai_addr, entry.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if !addresses.contains(text) { addresses.append(text) }
            }
            cursor = entry.pointee.ai_next
        }
        return addresses
    }

    /// Whether a numeric address is one the platform must not be made to reach.
    public static func isInternal(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            let a = UInt32(bigEndian: v4.s_addr)
            func within(_ base: UInt32, _ bits: UInt32) -> Bool { bits == 0 || (a >> (32 - bits)) == (base >> (32 - bits)) }
            return within(0x0000_0000, 8)       // 0.0.0.0/8 "this network"
                || within(0x0A00_0000, 8)       // 10/8
                || within(0x6440_0000, 10)      // 100.64/10 CGNAT
                || within(0x7F00_0000, 8)       // loopback
                || within(0xA9FE_0000, 16)      // link-local (cloud metadata)
                || within(0xAC10_0000, 12)      // 172.16/12
                || within(0xC000_0000, 24)      // 192.0.0/24 protocol assignments
                || within(0xC0A8_0000, 16)      // 192.168/16
                || within(0xC612_0000, 15)      // 198.18/15 benchmarking
                || within(0xE000_0000, 4)       // multicast
                || within(0xF000_0000, 4)       // reserved, broadcast
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address.split(separator: "%").first.map(String.init) ?? address, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            if bytes.allSatisfy({ $0 == 0 }) { return true }                                   // ::
            if bytes.dropLast().allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }      // ::1
            if bytes[0] & 0xFE == 0xFC { return true }                                         // fc00::/7 ULA
            if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 { return true }                     // fe80::/10 link-local
            if bytes[0] == 0xFF { return true }                                                // multicast
            // IPv4-mapped / compatible: judge the IPv4 address.
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && ((bytes[10] == 0xFF && bytes[11] == 0xFF) || (bytes[10] == 0 && bytes[11] == 0)) {
                return isInternal("\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])")
            }
            if bytes[0] == 0x20 && bytes[1] == 0x02 { return isInternal("\(bytes[2]).\(bytes[3]).\(bytes[4]).\(bytes[5])") } // 6to4
            return false
        }
        return true   // not an address at all: refuse
    }
}

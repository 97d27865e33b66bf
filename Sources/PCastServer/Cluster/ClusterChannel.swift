import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NIOSSL
import PCastHTTPClient
import PCastProtocol
import Synchronization

/// The authenticated channel between the nodes of a cluster, over their HTTP ports.
///
/// Nodes share the application secret (they all verify the same tokens); a key derived from it
/// with HKDF-SHA256, kept apart from the token and admin uses by its label, does two things:
/// - every request carries the calling node's id, the time and an HMAC-SHA256 over method,
///   path, time, node id and body: a request made without the secret, changed on the way, older
///   than ``clockSkew`` or seen before is refused;
/// - every successful answer is sealed with AES-256-GCM, bound to the request's signature, so
///   the SRTP keys of a cascade leg are read by the node that asked and by no one else on the path.
///
/// ```swift
/// let channel = ClusterChannel(nodeId: "node-2", secret: secret)
/// let grant: EdgeGrant = try await channel.call("/cluster/edges", on: origin, EdgeRequest(streamId: id))
/// ```
struct ClusterChannel: Sendable {
    let nodeId: String
    /// The derived key's bytes (SymmetricKey is not Sendable).
    private let keyBytes: [UInt8]
    private var key: SymmetricKey { SymmetricKey(data: keyBytes) }
    /// How far a request's time may be from the receiver's clock.
    static let clockSkew: TimeInterval = 30
    /// How long a call waits for the other node.
    static let timeout: TimeInterval = 3
    static let nodeHeader = "PCast-Node"
    static let timeHeader = "PCast-Time"
    static let signatureHeader = "PCast-Signature"

    /// Certificate authorities trusted besides the system's for nodes served over HTTPS
    /// (``PlatformConfiguration/clusterCertificateAuthority``): calls then go through
    /// ``OneShotHTTP``, which can be told them, rather than URLSession.
    let certificateAuthorityFile: String?

    init(nodeId: String, secret: String, certificateAuthorityFile: String? = nil) {
        self.nodeId = nodeId
        self.certificateAuthorityFile = certificateAuthorityFile
        let derived = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Data(secret.utf8)), salt: Data("pcast-cluster".utf8),
                                             info: Data("node-to-node v1".utf8), outputByteCount: 32)
        keyBytes = derived.withUnsafeBytes { Array($0) }
    }

    /// The signature of one request (raw HMAC bytes).
    func signature(method: String, path: String, time: Int64, nodeId: String, body: Data) -> Data {
        var mac = HMAC<SHA256>(key: key)
        mac.update(data: Data("\(method)\n\(path)\n\(time)\n\(nodeId)\n".utf8))
        mac.update(data: body)
        return Data(mac.finalize())
    }

    /// The headers that authenticate a request from this node.
    func headers(method: String, path: String, body: Data, now: Date) -> (headers: [String: String], signature: Data) {
        let time = Int64((now.timeIntervalSince1970 * 1000).rounded())
        let signature = signature(method: method, path: path, time: time, nodeId: nodeId, body: body)
        return ([Self.nodeHeader: nodeId, Self.timeHeader: String(time), Self.signatureHeader: signature.base64EncodedString()], signature)
    }

    /// Checks a request's headers: the calling node's id and the request's signature, or why not.
    func verify(method: String, path: String, body: Data, node: String?, time: String?, signature: String?, now: Date,
                replays: ReplayWindow) -> Result<(nodeId: String, signature: Data), ClusterChannelError> {
        guard let node, !node.isEmpty, let time, let milliseconds = Int64(time), let signature,
              let given = Data(base64Encoded: signature)
        else { return .failure(.unauthenticated("the request is not signed by a node of this cluster")) }
        let expected = self.signature(method: method, path: path, time: milliseconds, nodeId: node, body: body)
        guard AdminCredentials.constantTimeEquals(Array(given), Array(expected)) else {
            return .failure(.unauthenticated("bad signature"))
        }
        let age = now.timeIntervalSince1970 - Double(milliseconds) / 1000
        guard abs(age) <= Self.clockSkew else {
            return .failure(.unauthenticated("the request's time is \(Int(age)) s from this node's clock"))
        }
        guard replays.firstUse(of: expected, now: now) else { return .failure(.unauthenticated("a replayed request")) }
        return .success((node, expected))
    }

    /// Seals an answer for the request with `signature`.
    func seal(_ plain: Data, for signature: Data) throws(ClusterChannelError) -> Data {
        do {
            guard let combined = try AES.GCM.seal(plain, using: key, authenticating: signature).combined else {
                throw ClusterChannelError.invalidAnswer("cannot seal")
            }
            return combined
        } catch let error as ClusterChannelError {
            throw error
        } catch {
            throw .invalidAnswer("cannot seal: \(error)")
        }
    }

    /// Opens an answer to the request with `signature`.
    func open(_ sealed: Data, for signature: Data) throws(ClusterChannelError) -> Data {
        do {
            return try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key, authenticating: signature)
        } catch {
            throw .invalidAnswer("the answer does not open with the cluster's key")
        }
    }

    /// Calls `path` on `node` with `request` (JSON); the sealed JSON answer, decoded.
    func call<Request: Encodable, Answer: Decodable>(_ path: String, on node: NodeRecord, _ request: Request) async throws(ClusterChannelError) -> Answer {
        guard let base = Self.httpBase(signalingURL: node.signalingURL), let url = URL(string: base + path) else {
            throw .unreachable("node \(node.nodeId) has no usable address ('\(node.signalingURL)')")
        }
        let body: Data
        do { body = try JSONEncoder().encode(request) } catch { throw .invalidAnswer("cannot encode the request: \(error)") }
        let (headers, signature) = headers(method: "POST", path: path, body: body, now: Date())
        let (data, status) = try await post(url, body: body, headers: headers, node: node, base: base)
        guard status == 200 else {
            let message = (try? JSONDecoder().decode([String: String].self, from: data))?["error"] ?? "HTTP \(status)"
            throw .refused(status: status, message)
        }
        let plain = try open(data, for: signature)
        do {
            return try JSONDecoder().decode(Answer.self, from: plain)
        } catch {
            throw .invalidAnswer("cannot decode the answer: \(error)")
        }
    }

    /// POSTs `body` to `url`: through URLSession (the system's trust store), or with a cluster CA
    /// through ``OneShotHTTP``.
    private func post(_ url: URL, body: Data, headers: [String: String], node: NodeRecord, base: String) async throws(ClusterChannelError) -> (Data, Int) {
        if let authority = certificateAuthorityFile, url.scheme == "https" {
            do {
                let answer = try await OneShotHTTP.send("POST", url, headers: [("Content-Type", "application/json")] + headers.sorted { $0.key < $1.key },
                                                        body: body, timeout: .seconds(Int64(Self.timeout))) { host in
                    var configuration = TLSConfiguration.makeClientConfiguration()
                    configuration.additionalTrustRoots = [.file(authority)]
                    let context = try NIOSSLContext(configuration: configuration)
                    // An address is checked against the certificate's IP names; SNI carries names only.
                    return try NIOSSLClientHandler(context: context, serverHostname: host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host)
                }
                return (answer.body, answer.status)
            } catch {
                throw .unreachable("node \(node.nodeId) at \(base): \(error)")
            }
        }
        var http = URLRequest(url: url, timeoutInterval: Self.timeout)
        http.httpMethod = "POST"
        http.httpBody = body
        http.setValue("application/json", forHTTPHeaderField: "Content-Type")
        for (name, value) in headers { http.setValue(value, forHTTPHeaderField: name) }
        do {
            let (data, response) = try await URLSession.shared.data(for: http)
            return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
        } catch {
            throw .unreachable("node \(node.nodeId) at \(base): \(error.localizedDescription)")
        }
    }

    /// `http://host:port` of a signaling URL `ws://host:port/ws`.
    static func httpBase(signalingURL: String) -> String? {
        guard let components = URLComponents(string: signalingURL), let host = components.host, let port = components.port else { return nil }
        let scheme = components.scheme == "wss" ? "https" : "http"
        let bracketed = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(bracketed):\(port)"
    }
}

/// Why a node-to-node call failed.
enum ClusterChannelError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request is not from a node of this cluster (unsigned, bad signature, stale, replayed).
    case unauthenticated(String)
    /// The other node did not answer.
    case unreachable(String)
    /// The other node answered with an error.
    case refused(status: Int, String)
    /// An answer that does not open or decode.
    case invalidAnswer(String)

    var description: String {
        switch self {
        case .unauthenticated(let why): "not authenticated: \(why)"
        case .unreachable(let why): "unreachable: \(why)"
        case .refused(let status, let why): "refused (\(status)): \(why)"
        case .invalidAnswer(let why): "invalid answer: \(why)"
        }
    }
}

/// Signatures seen within the clock-skew window, so a captured request cannot be sent again.
final class ReplayWindow: Sendable {
    private let seen = Mutex<[Data: Date]>([:])
    static let limit = 100_000

    /// True the first time `signature` is presented (within the window).
    func firstUse(of signature: Data, now: Date) -> Bool {
        seen.withLock { seen in
            if seen.count >= Self.limit / 2 { seen = seen.filter { now.timeIntervalSince($0.value) <= 2 * ClusterChannel.clockSkew } }
            guard seen.count < Self.limit, seen[signature] == nil else { return false }
            seen[signature] = now
            return true
        }
    }
}

/// An edge asks the origin for a leg of a stream (the calling node is the edge).
struct EdgeRequest: Codable, Sendable {
    var streamId: String
}

/// The origin's answer: the subscriber flow it opened for the edge, and where its relay is.
struct EdgeGrant: Codable, Sendable {
    var streamId: String
    var transport: MediaTransport
    /// The origin relay's `host:port`.
    var relayAddress: String
    var tracks: [MediaTrackDescription]
}

/// A node asks the stream's origin to end it (the operator's end, from any node).
struct EndRequest: Codable, Sendable {
    var streamId: String
    var reason: StreamEndedReason
    var description: String?
}

/// An edge tells the origin the lowest video bitrate its viewers of a stream ask for (nil: none).
struct ViewerLimitRequest: Codable, Sendable {
    var streamId: String
    var bitsPerSecond: Int?
}

/// A node asks another for the recordings it keeps.
struct RecordingsRequest: Codable, Sendable {}

/// What a call that needs no data answers.
struct ClusterDone: Codable, Sendable {
    var streamId: String
}

import CDTLSShim
import Foundation
import Glibc
import PCastRelay

// The client side of the TLS listener benchmark, over the system's OpenSSL 3 (the library the
// relay's DTLS uses, reached through CDTLSShim's headers): a plain blocking client, as curl or a
// load tester is, so that each connection costs this process one socket and one SSL object and
// no event loop. Every blocking step has a timeout (SO_RCVTIMEO, SO_SNDTIMEO, poll).

/// Why a benchmark client connection failed.
enum TLSBenchClientError: Error, CustomStringConvertible {
    case setup(String)
    /// The server did not take the connection, or closed it before the handshake completed (the
    /// listener closes a connection over its caps at once, before any handshake work).
    case refused(String)
    case timedOut(String)
    case failed(String)

    var description: String {
        switch self {
        case .setup(let why): "TLS client setup: \(why)"
        case .refused(let why): "refused: \(why)"
        case .timedOut(let what): "timed out: \(what)"
        case .failed(let why): why
        }
    }

    var isRefusal: Bool {
        if case .refused = self { return true }
        return false
    }
}

/// An SSL_CTX for the benchmark's clients: TLS 1.2 or later, ALPN http/1.1, and, when given the
/// authority, the server's certificate checked against it and against 127.0.0.1.
///
/// @unchecked Sendable: an SSL_CTX may be used by many threads at once to make SSL objects
/// (OpenSSL locks its reference count and session cache); nothing changes it after `init`.
/// Unchecked: the SSL_CTX is configured in `init` and only read after (OpenSSL shares a configured context between threads).
final class TLSBenchClientContext: @unchecked Sendable {
    let context: OpaquePointer
    let verifies: Bool

    init(authority: String?) throws(TLSBenchClientError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw .setup("SSL_CTX_new: \(lastOpenSSLError())") }
        self.context = context
        verifies = authority != nil
        _ = pcast_ssl_ctx_set_min_proto_version(context, TLS1_2_VERSION)
        // Each connection is a new session: the client keeps none to resume.
        _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_SESS_CACHE_MODE, Int(SSL_SESS_CACHE_OFF), nil)
        // Idle connections hold no read or write buffer between records.
        _ = SSL_CTX_ctrl(context, SSL_CTRL_MODE, Int(SSL_MODE_RELEASE_BUFFERS), nil)
        let alpn: [UInt8] = [8] + Array("http/1.1".utf8)
        _ = SSL_CTX_set_alpn_protos(context, alpn, UInt32(alpn.count))
        if let authority {
            guard SSL_CTX_load_verify_locations(context, authority, nil) == 1 else {
                SSL_CTX_free(context)
                throw .setup("cannot load the authority \(authority): \(lastOpenSSLError())")
            }
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        } else {
            SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        }
    }

    deinit { SSL_CTX_free(context) }
}

/// One TLS connection to 127.0.0.1. Used by one thread at a time.
final class TLSBenchConnection {
    let descriptor: Int32
    private let ssl: OpaquePointer
    /// Bytes read and not parsed yet (after the TLS layer).
    private var input: [UInt8] = []
    /// The server ended the connection (or it broke).
    private(set) var ended = false

    /// Connects from `source` (a loopback address) to 127.0.0.1:`port` and completes a full TLS
    /// handshake; each step within `timeoutMilliseconds`.
    init(_ context: TLSBenchClientContext, port: Int, source: String, timeoutMilliseconds: Int = 10_000) throws(TLSBenchClientError) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .failed("socket: \(String(cString: strerror(errno)))") }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = UInt16(clamping: port).bigEndian
        _ = inet_pton(AF_INET, source, &local.sin_addr)
        _ = inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            throw .failed("bind(\(source)): \(String(cString: strerror(code)))")
        }
        let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) } }
        if connected != 0 {
            let code = errno
            guard code == EINPROGRESS else {
                Glibc.close(fd)
                throw code == ECONNREFUSED ? .refused("connect: connection refused") : .failed("connect: \(String(cString: strerror(code)))")
            }
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&poller, 1, Int32(timeoutMilliseconds)) == 1 else {
                Glibc.close(fd)
                throw .timedOut("TCP connect")
            }
            var failure: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size)
            guard failure == 0 else {
                Glibc.close(fd)
                throw failure == ECONNREFUSED ? .refused("connect: connection refused") : .failed("connect: \(String(cString: strerror(failure)))")
            }
        }
        // Blocking from here on, every read and write bounded by the timeout.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var limit = timeval(tv_sec: timeoutMilliseconds / 1000, tv_usec: (timeoutMilliseconds % 1000) * 1000)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var on: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        guard let ssl = SSL_new(context.context) else {
            Glibc.close(fd)
            throw .setup("SSL_new: \(lastOpenSSLError())")
        }
        descriptor = fd
        self.ssl = ssl
        // From here `deinit` frees both.
        _ = SSL_set_fd(ssl, fd)
        if context.verifies { _ = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1") }
        ERR_clear_error()
        errno = 0
        let result = SSL_connect(ssl)
        guard result == 1 else { throw classify(result, during: "the TLS handshake") }
    }

    deinit {
        SSL_free(ssl)
        Glibc.close(descriptor)
    }

    /// What was negotiated: protocol version, cipher suite, key exchange group.
    var negotiated: (version: String, cipher: String, group: String) {
        let version = SSL_get_version(ssl).map { String(cString: $0) } ?? "?"
        let cipher = SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? "?"
        let nid = Int32(truncatingIfNeeded: SSL_ctrl(ssl, SSL_CTRL_GET_NEGOTIATED_GROUP, 0, nil))
        let group = SSL_group_to_name(ssl, nid).map { String(cString: $0) } ?? "?"
        return (version, cipher, group)
    }

    /// Sends close_notify (without waiting for the server's) and lets `deinit` close the socket.
    func shutdown() {
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ended = true
    }

    /// Writes all of `bytes` (blocking, bounded by the timeout; a held connection's writes are a
    /// few hundred bytes, which a socket buffer always takes).
    func write(_ bytes: [UInt8]) throws(TLSBenchClientError) {
        guard !ended else { throw .failed("write on an ended connection") }
        ERR_clear_error()
        let written = bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) }
        guard written == Int32(bytes.count) else { throw classify(written, during: "a write") }
    }

    /// Reads what is available without waiting (non-blocking socket) into the input; false once
    /// the connection has ended.
    @discardableResult
    func readAvailable() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while !ended {
            ERR_clear_error()
            let count = chunk.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if count > 0 {
                input.append(contentsOf: chunk[0..<Int(count)])
                continue
            }
            let code = SSL_get_error(ssl, count)
            if code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE { return true }
            ended = true
        }
        return false
    }

    /// Reads (blocking, within the socket's timeout) until `complete` finds what it needs in the
    /// input: it returns how many bytes it took, or nil to read on.
    func read<T>(until complete: (inout [UInt8]) -> T?) throws(TLSBenchClientError) -> T {
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while true {
            if let value = complete(&input) { return value }
            guard !ended else { throw .failed("the server closed the connection") }
            ERR_clear_error()
            errno = 0
            let count = chunk.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            guard count > 0 else { throw classify(count, during: "a read") }
            input.append(contentsOf: chunk[0..<Int(count)])
        }
    }

    /// From here on reads and writes do not wait (a held connection).
    func makeNonBlocking() {
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    }

    /// Takes the input's bytes (what a caller parses itself).
    func takeInput(_ body: (inout [UInt8]) -> Void) { body(&input) }

    private func classify(_ result: Int32, during what: String) -> TLSBenchClientError {
        let code = SSL_get_error(ssl, result)
        let systemError = errno
        ended = true
        switch code {
        case SSL_ERROR_SYSCALL where systemError == EAGAIN || systemError == EWOULDBLOCK:
            return .timedOut(what)
        case SSL_ERROR_SYSCALL, SSL_ERROR_ZERO_RETURN:
            // The server closed (or reset) the connection: before the handshake completed, it refused it.
            let why = systemError == 0 ? "the server closed the connection" : String(cString: strerror(systemError))
            return what == "the TLS handshake" ? .refused("\(why) during \(what)") : .failed("\(why) during \(what)")
        default:
            return .failed("\(what): \(lastOpenSSLError())")
        }
    }
}

/// The text of OpenSSL's oldest queued error (and clears the queue).
func lastOpenSSLError() -> String {
    let code = ERR_get_error()
    ERR_clear_error()
    guard code != 0 else { return "no OpenSSL error queued" }
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(code, &buffer, buffer.count)
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

// MARK: WebSocket (RFC 6455), the client's side

extension TLSBenchConnection {
    /// The GUID RFC 6455 §1.3 appends to the key to make Sec-WebSocket-Accept.
    private static let webSocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Asks for the WebSocket upgrade of `path` and checks the 101 answer and its
    /// Sec-WebSocket-Accept; bytes after the answer stay in the input.
    func upgradeToWebSocket(path: String, port: Int) throws(TLSBenchClientError) {
        let key = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        try write(Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n".utf8))
        let head = try read { input -> String? in
            let end: [UInt8] = [13, 10, 13, 10]
            guard input.count >= 4, let at = (0...(input.count - 4)).first(where: { input[$0..<($0 + 4)].elementsEqual(end) }) else {
                return nil
            }
            let text = String(decoding: input[0..<at], as: UTF8.self)
            input.removeFirst(at + 4)
            return text
        }
        let lines = head.split(separator: "\r\n")
        guard let status = lines.first, status.hasPrefix("HTTP/1.1 101") else {
            throw .failed("no WebSocket upgrade: \(lines.first.map(String.init) ?? "an empty answer")")
        }
        let accept = lines.dropFirst().first { $0.lowercased().hasPrefix("sec-websocket-accept:") }
            .map { $0.dropFirst("sec-websocket-accept:".count).trimmingCharacters(in: .whitespaces) }
        guard accept == Self.sha1Base64(key + Self.webSocketGUID) else { throw .failed("a wrong Sec-WebSocket-Accept") }
    }

    /// Sends one masked frame (a client's frames are masked, RFC 6455 §5.3).
    func sendFrame(opcode: UInt8, _ payload: [UInt8]) throws(TLSBenchClientError) {
        var frame: [UInt8] = [0x80 | opcode]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8(truncatingIfNeeded: payload.count >> shift)) }
        }
        let mask = (0..<4).map { _ in UInt8.random(in: 0...255) }
        frame += mask
        for (index, byte) in payload.enumerated() { frame.append(byte ^ mask[index & 3]) }
        try write(frame)
    }

    /// The next whole frame from the server (unmasked) in the input, taken out of it, or nil.
    static func takeFrame(_ input: inout [UInt8]) -> (opcode: UInt8, payload: [UInt8])? {
        guard input.count >= 2 else { return nil }
        var length = Int(input[1] & 0x7F)
        var offset = 2
        if length == 126 {
            guard input.count >= 4 else { return nil }
            length = Int(input[2]) << 8 | Int(input[3])
            offset = 4
        } else if length == 127 {
            guard input.count >= 10 else { return nil }
            length = input[2..<10].reduce(0) { $0 << 8 | Int($1) }
            offset = 10
        }
        guard length >= 0, input.count - offset >= length else { return nil }
        let frame = (opcode: input[0] & 0x0F, payload: Array(input[offset..<(offset + length)]))
        input.removeFirst(offset + length)
        return frame
    }

    /// Reads (blocking) until the server's next frame.
    func readFrame() throws(TLSBenchClientError) -> (opcode: UInt8, payload: [UInt8]) {
        try read { Self.takeFrame(&$0) }
    }

    private static func sha1Base64(_ text: String) -> String {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var size: UInt32 = 0
        let bytes = Array(text.utf8)
        guard EVP_Digest(bytes, bytes.count, &digest, &size, EVP_sha1(), nil) == 1 else { return "" }
        return Data(digest.prefix(Int(size))).base64EncodedString()
    }
}

import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOSSL
import PCastContracts
import PCastTLS
import Synchronization

/// The first handler of every HTTP/WebSocket connection, below the HTTP codec (raw bytes), so it
/// acts before anything is parsed or allocated for a request:
///
/// - **Connection caps.** At most ``ConnectionLimits/perAddress`` connections from one remote
///   address and ``ConnectionLimits/total`` in all; one more gets a plain `503` and is closed, so
///   one client holding thousands of sockets cannot take the descriptors everyone else needs.
/// - **Request-head deadline.** The first request head must be complete within
///   ``ConnectionLimits/requestHeadTimeout`` whatever trickles in meanwhile (slow-loris); later
///   requests on a kept-alive connection are bounded by the idle timeout, which counts whole
///   requests, not bytes.
/// - **Head size.** A first request head over ``ConnectionLimits/maximumHeadBytes`` gets `431`.
/// - **Masked frames.** Once the connection switched to WebSocket (`101` went out), every client
///   frame must be masked (RFC 6455 §5.1); an unmasked one closes it with 1002.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private enum Phase {
        case awaitingHead(bytes: Int, tail: [UInt8])
        case http
        case webSocket(WebSocketMaskCheck)
        case refused
    }

    private let connections: ActiveConnections
    private let limits: ConnectionLimits
    private let logger: Logger
    private var phase: Phase = .awaitingHead(bytes: 0, tail: [])
    private let address: String
    /// Whether this connection holds a place in `connections` (it was admitted and not released).
    private var counted: Bool
    private var started = false
    private var deadline: Scheduled<Void>?

    /// Whether a refused connection is closed without a `503` (TLS: no handshake is spent on it,
    /// and a plain-text answer would mean nothing to a TLS client).
    private let closesRefusedAtOnce: Bool

    /// `admitted`: the caller took a place for `address` in `connections` (released here when the
    /// connection ends); false: the connection is refused with `503` as soon as it is active.
    init(connections: ActiveConnections, limits: ConnectionLimits, address: String, admitted: Bool,
         closesRefusedAtOnce: Bool = false, logger: Logger) {
        self.connections = connections
        self.limits = limits
        self.address = address
        self.counted = admitted
        self.closesRefusedAtOnce = closesRefusedAtOnce
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        let address = self.address
        guard counted else {
            logger.debug("http connection refused: too many connections", metadata: ["pcast.remote": .string(address)])
            if closesRefusedAtOnce {
                phase = .refused
                context.close(promise: nil)
                return
            }
            refuse(context, status: "503 Service Unavailable", body: "too many connections\n", extra: "Retry-After: 5\r\n")
            return
        }
        let timeout = TimeAmount.nanoseconds(Int64(limits.requestHeadTimeout / .nanoseconds(1)))
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            if case .awaitingHead = self.phase {
                self.logger.debug("http connection closed: no complete request in time", metadata: ["pcast.remote": .string(address)])
                self.phase = .refused
                // The slot is free now, not once a TLS layer has given up waiting for its close_notify.
                self.release()
                context.close(promise: nil)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
    }

    private func release() {
        deadline?.cancel()
        deadline = nil
        if counted {
            counted = false
            connections.leave(address)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        switch phase {
        case .refused:
            return
        case .awaitingHead(let bytes, let tail):
            let view = buffer.readableBytesView
            var window = tail
            var complete = false
            var read = bytes
            for byte in view {
                read += 1
                window.append(byte)
                if window.count > 4 { window.removeFirst() }
                if window == [13, 10, 13, 10] {
                    complete = true
                    break
                }
            }
            if complete {
                phase = .http
                deadline?.cancel()
                deadline = nil
            } else if read > limits.maximumHeadBytes {
                refuse(context, status: "431 Request Header Fields Too Large", body: "the request head is larger than \(limits.maximumHeadBytes) bytes\n")
                return
            } else {
                phase = .awaitingHead(bytes: read, tail: window)
            }
        case .http:
            break
        case .webSocket(var check):
            let masked = check.consume(buffer.readableBytesView)
            phase = .webSocket(check)
            if !masked {
                logger.notice("websocket closed: an unmasked client frame", metadata: ["pcast.remote": .string(address)])
                phase = .refused
                // Close frame, status 1002 (protocol error); server frames are not masked.
                context.writeAndFlush(wrapOutboundOut(.byteBuffer(ByteBuffer(bytes: [0x88, 0x02, 0x03, 0xEA]))), promise: nil)
                context.close(promise: nil)
                return
            }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .http = phase, case .byteBuffer(let buffer) = unwrapOutboundIn(data),
           buffer.readableBytesView.starts(with: Self.switchingProtocols) {
            phase = .webSocket(WebSocketMaskCheck())
        }
        context.write(data, promise: promise)
    }

    private static let switchingProtocols = Array("HTTP/1.1 101".utf8)

    private func refuse(_ context: ChannelHandlerContext, status: String, body: String, extra: String = "") {
        phase = .refused
        deadline?.cancel()
        deadline = nil
        let text = "HTTP/1.1 \(status)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n\(extra)Connection: close\r\n\r\n\(body)"
        context.writeAndFlush(wrapOutboundOut(.byteBuffer(ByteBuffer(string: text))), promise: nil)
        context.close(promise: nil)
    }
}

/// Follows WebSocket frame boundaries in a client's byte stream and says whether every frame is
/// masked (RFC 6455 §5.2: the MASK bit, then 7-, 16- or 64-bit lengths, then the key).
struct WebSocketMaskCheck: Sendable, Hashable {
    private var header: [UInt8] = []
    private var payloadLeft: UInt64 = 0

    /// False as soon as a frame header without the MASK bit is seen.
    mutating func consume(_ bytes: some Collection<UInt8>) -> Bool {
        var index = bytes.startIndex
        while index != bytes.endIndex {
            if payloadLeft > 0 {
                let available = UInt64(bytes.distance(from: index, to: bytes.endIndex))
                let skip = min(payloadLeft, available)
                index = bytes.index(index, offsetBy: Int(skip))
                payloadLeft -= skip
                continue
            }
            header.append(bytes[index])
            index = bytes.index(after: index)
            guard header.count >= 2 else { continue }
            guard header[1] & 0x80 != 0 else { return false }
            let short = header[1] & 0x7F
            let extended = short == 126 ? 2 : short == 127 ? 8 : 0
            guard header.count == 2 + extended + 4 else { continue }
            var length = UInt64(short)
            if extended > 0 { length = header[2..<(2 + extended)].reduce(0) { $0 << 8 | UInt64($1) } }
            payloadLeft = length
            header.removeAll(keepingCapacity: true)
        }
        return true
    }
}

/// Puts a ``ConnectionGuardHandler`` in front of another child channel's pipeline, deciding at
/// accept whether the connection is admitted.
///
/// With TLS the pipeline is TLS → guard → HTTP: the guard's request-head deadline starts at
/// accept, so it bounds the handshake too (a handshake that never finishes holds its slot no
/// longer than a silent plain connection), and it reads the decrypted request head. A connection
/// refused for the caps is closed at once, before any handshake work.
struct GuardedChildChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner
    let connections: ActiveConnections
    let limits: ConnectionLimits
    let logger: Logger
    let refused: RefusedChannels
    /// HTTPS and WSS: the certificate each new connection is served with; nil: plain HTTP.
    var tls: TLSCertificateStore? = nil

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let address = channel.remoteAddress?.ipAddress ?? "?"
        let admitted = connections.enter(address, perAddress: limits.perAddress, total: limits.total)
        if !admitted { refused.insert(channel) }
        do {
            try channel.pipeline.syncOperations.addHandler(
                ConnectionGuardHandler(connections: connections, limits: limits, address: address, admitted: admitted,
                                       closesRefusedAtOnce: tls != nil, logger: self.logger),
                position: .first)
            if let tls, admitted {
                try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls.context), position: .first)
            }
        } catch {
            if admitted { connections.leave(address) }
            return channel.eventLoop.makeFailedFuture(error)
        }
        return inner.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        // A refused connection is answered `503` and closed by the guard: nothing to serve, and
        // nothing to log per refusal (a flood must not become a log flood).
        if refused.remove(value.channel) { return }
        await inner.handle(value: value, logger: logger)
    }
}

/// The channels the guard refused, between their setup and their handling.
final class RefusedChannels: Sendable {
    private let channels = Mutex<Set<ObjectIdentifier>>([])
    func insert(_ channel: any Channel) { _ = channels.withLock { $0.insert(ObjectIdentifier(channel)) } }
    func remove(_ channel: any Channel) -> Bool { channels.withLock { $0.remove(ObjectIdentifier(channel)) != nil } }
}

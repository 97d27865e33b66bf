import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import PCastMedia
import PCastProtocol
import Synchronization

/// The client side of signaling: one WebSocket to the platform carrying ``SignalingCodec`` messages.
/// Requests get their reply by id; events (stream ended) go to `onEvent`; `onClose` reports the
/// end of the connection with the platform's close code.
final class SignalingClient: Sendable {
    private let outgoing: AsyncStream<WebSocketFrame>.Continuation
    private struct State {
        var nextID: UInt64 = 1
        var pending: [UInt64: Pending] = [:]
        var closed: UInt16?? = .none
    }
    /// A request waiting for its reply.
    private struct Pending {
        let waiter: CheckedContinuation<Result<ServerMessage, PCastError>, Never>
        /// Run in the reader, in order with events, before the waiter resumes.
        let inOrder: (@Sendable (ServerMessage) -> Void)?
        /// When it times out (see `sweepDeadlines`).
        let deadline: ContinuousClock.Instant
    }
    private let state = Mutex(State())
    private let task = Mutex<Task<Void, Never>?>(nil)
    /// Wakes the deadline sweeper when a request is added (it waits for one when none is pending).
    private let wakeSweeper: AsyncStream<Void>.Continuation
    /// The longest the sweeper sleeps while requests are pending: a request added with an earlier
    /// deadline than those it sleeps towards times out at most this late.
    static let sweepTick = Duration.milliseconds(250)
    private let onEvent: @Sendable (ServerMessage) -> Void
    private let onClose: @Sendable (UInt16?) -> Void
    private let logger: Logger

    private init(outgoing: AsyncStream<WebSocketFrame>.Continuation, wakeSweeper: AsyncStream<Void>.Continuation, logger: Logger,
                 onEvent: @escaping @Sendable (ServerMessage) -> Void, onClose: @escaping @Sendable (UInt16?) -> Void) {
        self.outgoing = outgoing
        self.wakeSweeper = wakeSweeper
        self.logger = logger
        self.onEvent = onEvent
        self.onClose = onClose
    }

    private enum Upgrade: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case notUpgraded
    }

    /// How long the WebSocket upgrade may take once TCP is connected.
    static let upgradeDeadline = TimeAmount.seconds(5)

    /// Connects to `ws://host:port/path`, or `wss://host[:port]/path` over TLS trusting `trust`.
    static func connect(to url: URL, trust: SignalingTrust = SignalingTrust(), logger: Logger,
                        onEvent: @escaping @Sendable (ServerMessage) -> Void,
                        onClose: @escaping @Sendable (UInt16?) -> Void) async throws(PCastError) -> SignalingClient {
        guard let scheme = url.scheme?.lowercased(), scheme == "ws" || scheme == "wss", let named = url.host, !named.isEmpty else {
            throw .invalidURI(url.absoluteString)
        }
        // An IPv6 literal comes bracketed from some URL parsers.
        let host = named.hasPrefix("[") && named.hasSuffix("]") ? String(named.dropFirst().dropLast()) : named
        let secure = scheme == "wss"
        let port = url.port ?? (secure ? 443 : 80)
        let path = url.path.isEmpty ? "/ws" : url.path
        // Over TLS, a handler per connection attempt; its diagnosis tells a rejected certificate's reason.
        let diagnosis = secure ? CertificateDiagnosis() : nil
        if secure { try trust.check() }
        let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
        do {
            let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(5))
                .connect(host: host, port: port) { channel in
                    // A path that accepts the connection and then goes silent must not hold the
                    // upgrade forever: past the deadline the channel closes and connect fails.
                    let deadline = channel.eventLoop.scheduleTask(in: Self.upgradeDeadline) { channel.close(promise: nil) }
                    return channel.eventLoop.makeCompletedFuture {
                        if let diagnosis { try channel.pipeline.syncOperations.addHandler(try trust.makeHandler(host: host, diagnosis: diagnosis)) }
                        let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: SignalingCodec.serverMessageSizeLimit) { channel, _ in
                            deadline.cancel()
                            return channel.eventLoop.makeCompletedFuture {
                                .websocket(try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel))
                            }
                        }
                        var headers = HTTPHeaders()
                        headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
                        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
                        let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                            upgradeRequestHead: head, upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in
                                deadline.cancel()
                                return channel.eventLoop.makeCompletedFuture { .notUpgraded }
                            })
                        return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                            configuration: .init(upgradeConfiguration: configuration))
                    }
                }
            guard case .websocket(let upgraded) = try await upgrade.get() else {
                throw PCastError.connectionFailed("\(url) did not accept a WebSocket upgrade")
            }
            channel = upgraded
        } catch let error as PCastError {
            throw error
        } catch {
            if secure, let rejected = SignalingTrust.error(error, url: url, diagnosis: diagnosis) { throw rejected }
            throw .connectionFailed("\(url): \(error)")
        }
        let (frames, outgoing) = AsyncStream<WebSocketFrame>.makeStream()
        let (wakeups, wakeSweeper) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let client = SignalingClient(outgoing: outgoing, wakeSweeper: wakeSweeper, logger: logger, onEvent: onEvent, onClose: onClose)
        Task { await client.sweepDeadlines(wakeups) }
        let task = Task<Void, Never> {
            let code: UInt16?? = try? await channel.executeThenClose { inbound, outbound in
                await withTaskGroup(of: UInt16??.self) { group in
                    group.addTask {
                        for await frame in frames {
                            do { try await outbound.write(frame) } catch { break }
                        }
                        return .none
                    }
                    group.addTask { .some(await client.read(inbound)) }
                    let first = await group.next() ?? .none
                    group.cancelAll()
                    return first
                }
            }
            client.finish(code: code.flatMap { $0 } ?? nil)
        }
        client.task.withLock { $0 = task }
        return client
    }

    /// Reads until the connection ends; returns the close code the platform sent.
    private func read(_ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>) async -> UInt16? {
        var pending = ByteBuffer()
        do {
            for try await frame in inbound {
                switch frame.opcode {
                case .text, .binary, .continuation:
                    var data = frame.unmaskedData
                    pending.writeBuffer(&data)
                    guard frame.fin else { continue }
                    let bytes = Data(pending.readableBytesView)
                    pending.clear()
                    do throws(SignalingError) {
                        deliver(try SignalingCodec.decodeServerMessage(bytes, sizeLimit: SignalingCodec.serverMessageSizeLimit))
                    } catch {
                        logger.warning("undecodable signaling message: \(error)")
                    }
                case .connectionClose:
                    var data = frame.unmaskedData
                    let code = data.readInteger(as: UInt16.self)
                    var payload = ByteBuffer()
                    payload.writeInteger(code ?? 1000)
                    outgoing.yield(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload))
                    return code
                case .ping:
                    outgoing.yield(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData))
                default:
                    break
                }
            }
        } catch {
            logger.debug("signaling connection failed: \(error)")
        }
        return nil
    }

    private func deliver(_ envelope: Envelope<ServerMessage>) {
        guard let id = envelope.id else {
            onEvent(envelope.message)
            return
        }
        guard let pending = state.withLock({ $0.pending.removeValue(forKey: id) }) else {
            logger.debug("reply to an unknown request \(id)")
            return
        }
        let waiter = pending.waiter
        pending.inOrder?(envelope.message)
        if case .failure(let failure) = envelope.message {
            waiter.resume(returning: .failure(.refused(failure.status, failure.message)))
        } else {
            waiter.resume(returning: .success(envelope.message))
        }
    }

    private func finish(code: UInt16?) {
        let waiters = state.withLock { state -> [CheckedContinuation<Result<ServerMessage, PCastError>, Never>] in
            state.closed = .some(code)
            defer { state.pending = [:] }
            return state.pending.values.map(\.waiter)
        }
        outgoing.finish()
        wakeSweeper.finish()
        for waiter in waiters { waiter.resume(returning: .failure(.disconnected)) }
        onClose(code)
    }

    var isClosed: Bool { state.withLock { $0.closed != nil } }

    /// Sends a request and waits for its reply; a typed error reply throws ``PCastError/refused(_:_:)``.
    /// `inOrder` sees the reply in the reader, in order with the events around it, before this returns.
    func request(_ message: ClientMessage, timeout: Duration = .seconds(10),
                 inOrder: (@Sendable (ServerMessage) -> Void)? = nil) async throws(PCastError) -> ServerMessage {
        let id: UInt64? = state.withLock { state in
            guard state.closed == nil else { return nil }
            defer { state.nextID += 1 }
            return state.nextID
        }
        guard let id else { throw .disconnected }
        let data: Data
        do { data = try SignalingCodec.encode(.request(id: id, message)) } catch { throw .invalidRequest("\(error)") }
        let deadline = ContinuousClock.now + timeout
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<ServerMessage, PCastError>, Never>) in
            let accepted = state.withLock { state -> Bool in
                guard state.closed == nil else { return false }
                state.pending[id] = Pending(waiter: continuation, inOrder: inOrder, deadline: deadline)
                return true
            }
            guard accepted else {
                continuation.resume(returning: .failure(.disconnected))
                return
            }
            wakeSweeper.yield()
            outgoing.yield(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(bytes: data)))
        }
        return try result.get()
    }

    /// Times out the requests whose deadline passed, for as long as the connection lives: one task
    /// per connection rather than a sleeping task per request. A cancelled `Task.sleep` frees its
    /// timer only at its original deadline, so a timer task per request kept each request's
    /// memory for its whole timeout (10 s) after the reply came; this sleeps only while requests
    /// are pending, never longer than ``sweepTick``, and is never cancelled.
    private func sweepDeadlines(_ wakeups: AsyncStream<Void>) async {
        var iterator = wakeups.makeAsyncIterator()
        while true {
            // nil: the connection ended; .some(nil): nothing pending.
            let earliest = state.withLock { state -> ContinuousClock.Instant?? in
                state.closed != nil ? .none : .some(state.pending.values.lazy.map(\.deadline).min())
            }
            guard let earliest else { return }
            if let deadline = earliest {
                try? await Task.sleep(until: min(deadline, .now + Self.sweepTick), clock: .continuous)
            } else if await iterator.next() == nil {
                return
            }
            let now = ContinuousClock.now
            let expired = state.withLock { state -> [CheckedContinuation<Result<ServerMessage, PCastError>, Never>] in
                let due = state.pending.filter { $0.value.deadline <= now }
                for id in due.keys { state.pending[id] = nil }
                return due.values.map(\.waiter)
            }
            for waiter in expired { waiter.resume(returning: .failure(.timeout)) }
        }
    }

    /// Drops the connection at once, without a close handshake (it is dead: a keep-alive went
    /// unanswered). `onClose` follows as for any other end.
    func abort() {
        task.withLock { $0 }?.cancel()
    }

    /// Closes the connection (a close frame, then the socket).
    func close() async {
        var payload = ByteBuffer()
        payload.writeInteger(UInt16(1000))
        outgoing.yield(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload))
        let task = self.task.withLock { $0 }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await task?.value }
            group.addTask { try? await Task.sleep(for: .seconds(5)) }
            await group.next()
            task?.cancel()
            group.cancelAll()
        }
    }
}

extension WebSocketMaskingKey {
    static func random() -> WebSocketMaskingKey {
        WebSocketMaskingKey((0..<4).map { _ in UInt8.random(in: 0...255) })!
    }
}

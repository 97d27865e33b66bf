import CompressNIO
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import PCastProtocol
import PCastTestSupport
import Synchronization

/// A small WebSocket client on NIO for the tests: sends whatever frames a test wants (also
/// oversized and compressed ones) and records what the server sends, including its close code.
final class TestSocket: Sendable {
    enum Received: Sendable, Equatable {
        case message(Envelope<ServerMessage>)
        case undecodable(String)
        case closed(code: UInt16?)
    }

    struct NotUpgraded: Error {}

    private let outgoing: AsyncStream<WebSocketFrame>.Continuation
    private let received = Mutex<[Received]>([])
    private let task = Mutex<Task<Void, Never>?>(nil)
    /// Whether the server agreed to permessage-deflate.
    let deflateNegotiated: Bool

    private init(outgoing: AsyncStream<WebSocketFrame>.Continuation, deflateNegotiated: Bool) {
        self.outgoing = outgoing
        self.deflateNegotiated = deflateNegotiated
    }

    private enum Upgrade: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, HTTPResponseHead)
        case notUpgraded
    }

    static func connect(port: Int, path: String = "/ws", deflate: Bool = false) async throws -> TestSocket {
        let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: 1 << 24) { channel, head in
                        channel.eventLoop.makeCompletedFuture {
                            .websocket(try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel), head)
                        }
                    }
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: "127.0.0.1:\(port)")
                    if deflate { headers.add(name: "Sec-WebSocket-Extensions", value: "permessage-deflate") }
                    let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: head, upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in channel.eventLoop.makeCompletedFuture { .notUpgraded } })
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: .init(upgradeConfiguration: configuration))
                }
            }
        guard case .websocket(let channel, let head) = try await upgrade.get() else { throw NotUpgraded() }
        let negotiated = head.headers["Sec-WebSocket-Extensions"].contains { $0.contains("permessage-deflate") }
        let (frames, outgoing) = AsyncStream<WebSocketFrame>.makeStream()
        let socket = TestSocket(outgoing: outgoing, deflateNegotiated: negotiated)
        let task = Task<Void, Never> {
            _ = try? await channel.executeThenClose { inbound, outbound in
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await frame in frames {
                            do { try await outbound.write(frame) } catch { return }
                        }
                    }
                    group.addTask { await socket.read(inbound) }
                    await group.next()
                    group.cancelAll()
                }
            }
        }
        socket.task.withLock { $0 = task }
        return socket
    }

    private func read(_ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>) async {
        let decompressor = try? ZlibDecompressor(algorithm: .deflate, windowSize: 15)
        var pending = ByteBuffer()
        var compressed = false
        do {
            for try await frame in inbound {
                switch frame.opcode {
                case .text, .binary, .continuation:
                    if frame.opcode != .continuation { compressed = frame.rsv1 }
                    var data = frame.unmaskedData
                    pending.writeBuffer(&data)
                    guard frame.fin else { continue }
                    if compressed, let decompressor {
                        pending.writeBytes([0, 0, 0xFF, 0xFF])
                        pending = (try? pending.decompressStream(with: decompressor, maxSize: 1 << 24)) ?? ByteBuffer()
                    }
                    let bytes = Data(pending.readableBytesView)
                    pending.clear()
                    do throws(SignalingError) {
                        let envelope = try SignalingCodec.decodeServerMessage(bytes)
                        received.withLock { $0.append(.message(envelope)) }
                    } catch {
                        received.withLock { $0.append(.undecodable(String(decoding: bytes, as: UTF8.self))) }
                    }
                case .connectionClose:
                    var data = frame.unmaskedData
                    let code = data.readInteger(as: UInt16.self)
                    received.withLock { $0.append(.closed(code: code)) }
                    // Answer the close handshake; the server then closes the TCP connection.
                    var payload = ByteBuffer()
                    payload.writeInteger(code ?? 1000)
                    outgoing.yield(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload))
                case .ping:
                    outgoing.yield(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData))
                default:
                    break
                }
            }
        } catch {}
        received.withLock { items in
            if !items.contains(where: { if case .closed = $0 { return true } else { return false } }) {
                items.append(.closed(code: nil))
            }
        }
    }

    // MARK: Sending

    func send(_ envelope: Envelope<ClientMessage>) throws {
        let data = try SignalingCodec.encode(envelope)
        sendText(String(decoding: data, as: UTF8.self))
    }

    func sendText(_ text: String) {
        outgoing.yield(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: text)))
    }

    /// A text message compressed per RFC 7692 (raw deflate, sync flush, trailer removed), RSV1 set.
    func sendCompressedText(_ text: String) throws {
        let compressor = try ZlibCompressor(algorithm: .deflate)
        var input = ByteBuffer(string: text)
        var output = try input.compressStream(with: compressor, flush: .sync)
        output.moveWriterIndex(to: output.writerIndex - 4)
        outgoing.yield(WebSocketFrame(fin: true, rsv1: true, opcode: .text, maskKey: .random(), data: output))
    }

    /// A message split into `parts` frames.
    func sendFragmentedText(_ text: String, parts: Int) {
        let bytes = Array(text.utf8)
        let size = max(1, (bytes.count + parts - 1) / parts)
        var index = 0
        var first = true
        while index < bytes.count {
            let end = min(bytes.count, index + size)
            outgoing.yield(WebSocketFrame(
                fin: end == bytes.count, opcode: first ? .text : .continuation, maskKey: .random(),
                data: ByteBuffer(bytes: bytes[index..<end])))
            first = false
            index = end
        }
    }

    // MARK: Receiving

    /// Everything received so far.
    var all: [Received] { received.withLock { $0 } }

    /// The next thing received, waiting for it with a generous deadline.
    func next(within deadline: Duration = .seconds(20)) async throws -> Received {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: deadline)
        while clock.now < end {
            if let item = received.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return item }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TimedOut(what: "a message from the server")
    }

    /// The next server message; a close instead is an error.
    func nextMessage() async throws -> Envelope<ServerMessage> {
        switch try await next() {
        case .message(let envelope): return envelope
        case let other: throw Unexpected(received: other)
        }
    }

    /// Sends a request and returns the next message (its reply, when nothing else is in flight).
    func request(_ id: UInt64, _ message: ClientMessage) async throws -> Envelope<ServerMessage> {
        try send(.request(id: id, message))
        return try await nextMessage()
    }

    /// Waits for the server's close frame and returns its code.
    func closeCode() async throws -> UInt16? {
        while true {
            if case .closed(let code) = try await next() { return code }
        }
    }

    /// Sends a close frame and waits for the connection to end.
    func close() async {
        var payload = ByteBuffer()
        payload.writeInteger(UInt16(1000))
        outgoing.yield(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload))
        await waitUntilClosed()
    }

    /// Waits (at most a generous deadline, then gives up on the connection) for it to end.
    func waitUntilClosed() async {
        let task = self.task.withLock { $0 }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await task?.value }
            group.addTask { try? await Task.sleep(for: .seconds(20)) }
            await group.next()
            task?.cancel()
            group.cancelAll()
        }
        outgoing.finish()
    }

    struct Unexpected: Error, CustomStringConvertible {
        let received: Received
        var description: String { "unexpected \(received)" }
    }
}

extension WebSocketMaskingKey {
    static func random() -> WebSocketMaskingKey {
        WebSocketMaskingKey([UInt8.random(in: 0...255), UInt8.random(in: 0...255), UInt8.random(in: 0...255), UInt8.random(in: 0...255)])!
    }
}

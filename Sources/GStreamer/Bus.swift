import CGStreamer
import Dispatch
import Synchronization

/// A state a pipeline or element can be in.
public enum PipelineState: String, Sendable, Hashable, Comparable, CustomStringConvertible {
    case voidPending = "VOID_PENDING"
    case null = "NULL"
    case ready = "READY"
    case paused = "PAUSED"
    case playing = "PLAYING"

    init(_ state: GstState) {
        switch state {
        case GST_STATE_NULL: self = .null
        case GST_STATE_READY: self = .ready
        case GST_STATE_PAUSED: self = .paused
        case GST_STATE_PLAYING: self = .playing
        default: self = .voidPending
        }
    }

    var gst: GstState {
        switch self {
        case .voidPending: return GST_STATE_VOID_PENDING
        case .null: return GST_STATE_NULL
        case .ready: return GST_STATE_READY
        case .paused: return GST_STATE_PAUSED
        case .playing: return GST_STATE_PLAYING
        }
    }

    private var order: Int { [.voidPending: 0, .null: 1, .ready: 2, .paused: 3, .playing: 4][self]! }
    public static func < (lhs: PipelineState, rhs: PipelineState) -> Bool { lhs.order < rhs.order }
    public var description: String { rawValue }
}

/// One message from a pipeline's bus, copied into Swift.
public struct BusMessage: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        case endOfStream
        case error(StreamError)
        case warning(StreamError)
        case info(StreamError)
        case stateChanged(old: PipelineState, new: PipelineState, pending: PipelineState)
        /// An element-specific message (`GST_MESSAGE_ELEMENT`), for example from `level` or `rtpbin`.
        case element(Structure)
        case application(Structure)
        /// An element's latency changed; the pipeline recalculates it.
        case latency
        /// Quality of service: a sink dropped or was late with buffers.
        case qos(QualityOfService)
        case asyncDone
        case streamStart
        case buffering(percent: Int)
        case clockLost
        /// Any other message type, by GStreamer's name for it.
        case other(String)
    }

    /// The name of the element (or pipeline) that posted it.
    public let source: String
    public let kind: Kind
    /// GStreamer's sequence number; increases in posting order.
    public let sequenceNumber: UInt32

    public var description: String { "\(source): \(kind)" }
}

/// Figures from a QoS message.
public struct QualityOfService: Sendable, Hashable {
    public let live: Bool
    public let runningTime: Duration?
    /// Buffers processed and dropped so far by the posting element.
    public let processed: UInt64
    public let dropped: UInt64
    /// How late the buffer was (negative: early).
    public let jitter: Duration
    public let proportion: Double
}

/// A pipeline's bus as an ordered, lossless `AsyncSequence` of messages.
///
/// Each iteration receives every message posted from the moment it starts, in posting order.
/// Messages posted while nobody iterates are kept (up to ``backlogLimit``, oldest dropped first
/// and counted in ``droppedBacklog``) and handed to the next iteration, as GStreamer's own bus does.
///
/// ```swift
/// for await message in pipeline.bus {
///     if case .endOfStream = message.kind { break }
/// }
/// ```
public struct Bus: AsyncSequence, Sendable {
    public typealias Element = BusMessage
    public static let backlogLimit = 1024

    let router: BusRouter

    public func makeAsyncIterator() -> AsyncStream<BusMessage>.Iterator {
        router.subscribe().makeAsyncIterator()
    }

    /// Messages dropped from the backlog because nobody was iterating.
    public var droppedBacklog: Int { router.droppedBacklog }

    /// The first error posted since the pipeline last started, nil when none was. Recorded on the
    /// posting thread, before any subscriber sees the message: a streaming thread that runs after
    /// an element failed (the end-of-stream a failed source pushes after its error) can tell.
    public var firstError: StreamError? { router.firstError }
}

/// Receives every bus message on the posting thread (sync handler) and fans it out in order.
/// Unchecked: all of its state is in `Mutex`es.
final class BusRouter: @unchecked Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<BusMessage>.Continuation] = [:]
        var nextID = 0
        var backlog: [BusMessage] = []
        var droppedBacklog = 0
        var endOfStream = false
        var error: StreamError?
        /// Errors in posting order, with a running count, so a state change can find its own.
        var recentErrors: [StreamError] = []
        var errorCount = 0
        var endWaiters: [Int: CheckedContinuation<Result<Void, GStreamerError>, Never>] = [:]
        var observers: [Int: @Sendable (BusMessage) -> Void] = [:]
        var closed = false
    }

    private let state = Mutex(State())
    /// Held while a message is handed to the subscribers, so every subscriber sees the same order.
    /// Never held together with a task's status lock the other way round: yielding may resume a
    /// task (and wait for its status lock) while `state` is free, so a cancellation that holds the
    /// task's lock and ends a subscription (which takes `state`) cannot deadlock with it.
    private let delivery = Mutex(())

    var droppedBacklog: Int { state.withLock { $0.droppedBacklog } }
    var firstError: StreamError? { state.withLock { $0.error } }
    /// How many errors have been posted so far.
    var errorCount: Int { state.withLock { $0.errorCount } }

    /// The first error posted after `count` errors had been seen, if it is still remembered.
    func firstError(after count: Int) -> StreamError? {
        state.withLock { state in
            let index = state.recentErrors.count - (state.errorCount - count)
            return state.recentErrors.indices.contains(index) ? state.recentErrors[index] : state.recentErrors.last
        }
    }

    func deliver(_ message: BusMessage) {
        let (waiters, observers) = delivery.withLock { _ in deliverInOrder(message) }
        for waiter in waiters {
            if case .error(let error) = message.kind { waiter.resume(returning: .failure(.stream(error))) } else { waiter.resume(returning: .success(())) }
        }
        for observer in observers { observer(message) }
    }

    /// Under `delivery`: updates the state, then yields to the subscribers outside `state`.
    private func deliverInOrder(_ message: BusMessage) -> ([CheckedContinuation<Result<Void, GStreamerError>, Never>], [@Sendable (BusMessage) -> Void]) {
        let (subscribers, waiters, observers) = state.withLock { state -> ([AsyncStream<BusMessage>.Continuation], [CheckedContinuation<Result<Void, GStreamerError>, Never>], [@Sendable (BusMessage) -> Void]) in
            guard !state.closed else { return ([], [], []) }
            var ends = false
            switch message.kind {
            case .endOfStream:
                state.endOfStream = true
                ends = true
            case .error(let error):
                state.errorCount += 1
                state.recentErrors.append(error)
                if state.recentErrors.count > 16 { state.recentErrors.removeFirst() }
                if state.error == nil { state.error = error }
                ends = true
            default: break
            }
            if state.subscribers.isEmpty {
                state.backlog.append(message)
                if state.backlog.count > Bus.backlogLimit {
                    state.backlog.removeFirst()
                    state.droppedBacklog += 1
                }
            }
            var waiters: [CheckedContinuation<Result<Void, GStreamerError>, Never>] = []
            if ends {
                waiters = Array(state.endWaiters.values)
                state.endWaiters.removeAll()
            }
            return (Array(state.subscribers.values), waiters, Array(state.observers.values))
        }
        // A subscriber that ended meanwhile ignores the yield.
        for continuation in subscribers { continuation.yield(message) }
        return (waiters, observers)
    }

    func subscribe() -> AsyncStream<BusMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: BusMessage.self, bufferingPolicy: .unbounded)
        let id = state.withLock { state -> Int? in
            guard !state.closed else { return nil }
            for message in state.backlog { continuation.yield(message) }
            state.backlog.removeAll()
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Calls `observer` with every later message, on the posting thread. Returns a token for removal.
    func observe(_ observer: @escaping @Sendable (BusMessage) -> Void) -> Int {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.observers[id] = observer
            return id
        }
    }

    func removeObserver(_ id: Int) {
        state.withLock { _ = $0.observers.removeValue(forKey: id) }
    }

    /// Forgets a previous end of stream or error, for a pipeline started again.
    func resetEnd() {
        state.withLock { state in
            state.endOfStream = false
            state.error = nil
        }
    }

    /// Waits for end of stream (success) or the first error (failure).
    func waitForEnd(timeout: Duration?) async -> Result<Void, GStreamerError> {
        let id = state.withLock { state -> Int in
            let id = state.nextID
            state.nextID += 1
            return id
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let immediate = state.withLock { state -> Result<Void, GStreamerError>? in
                    if let error = state.error { return .failure(.stream(error)) }
                    if state.endOfStream { return .success(()) }
                    if state.closed { return .failure(.flow("pipeline torn down")) }
                    state.endWaiters[id] = continuation
                    return nil
                }
                if let immediate {
                    continuation.resume(returning: immediate)
                    return
                }
                if let timeout {
                    let deadline = DispatchTime.now() + .nanoseconds(Int(clamping: timeout.nanoseconds))
                    DispatchQueue.global().asyncAfter(deadline: deadline) { [weak self] in
                        self?.resumeWaiter(id, with: .failure(.timeout(timeout)))
                    }
                }
            }
        } onCancel: {
            resumeWaiter(id, with: .failure(.cancelled))
        }
    }

    private func resumeWaiter(_ id: Int, with result: Result<Void, GStreamerError>) {
        let waiter = state.withLock { $0.endWaiters.removeValue(forKey: id) }
        waiter?.resume(returning: result)
    }

    /// Ends every iteration and wait; later messages are dropped.
    func close() {
        let (subscribers, waiters) = state.withLock { state in
            state.closed = true
            defer {
                state.subscribers.removeAll()
                state.endWaiters.removeAll()
                state.observers.removeAll()
                state.backlog.removeAll()
            }
            return (Array(state.subscribers.values), Array(state.endWaiters.values))
        }
        for subscriber in subscribers { subscriber.finish() }
        for waiter in waiters { waiter.resume(returning: .failure(.flow("pipeline torn down"))) }
    }
}

// MARK: - Copying GstMessage

extension BusMessage {
    init(copying message: UnsafeMutablePointer<GstMessage>) {
        // No lock: the posting thread may hold the source's object lock (GST_MESSAGE_SRC_NAME does the same).
        source = message.pointee.src.flatMap { $0.pointee.name.map { String(cString: $0) } } ?? ""
        sequenceNumber = gst_message_get_seqnum(message)
        let type = message.pointee.type
        switch type {
        case GST_MESSAGE_EOS:
            kind = .endOfStream
        case GST_MESSAGE_ERROR, GST_MESSAGE_WARNING, GST_MESSAGE_INFO:
            var error: UnsafeMutablePointer<GError>?
            var debug: UnsafeMutablePointer<gchar>?
            if type == GST_MESSAGE_ERROR { gst_message_parse_error(message, &error, &debug) }
            else if type == GST_MESSAGE_WARNING { gst_message_parse_warning(message, &error, &debug) }
            else { gst_message_parse_info(message, &error, &debug) }
            let detail = StreamError(
                domain: error.map { String(cString: g_quark_to_string($0.pointee.domain)) } ?? "",
                code: Int(error?.pointee.code ?? 0),
                message: error.map { String(cString: $0.pointee.message) } ?? "",
                debug: debug.map { String(cString: $0) },
                source: source)
            if let error { g_error_free(error) }
            g_free(debug)
            kind = type == GST_MESSAGE_ERROR ? .error(detail) : type == GST_MESSAGE_WARNING ? .warning(detail) : .info(detail)
        case GST_MESSAGE_STATE_CHANGED:
            var old = GST_STATE_VOID_PENDING, new = GST_STATE_VOID_PENDING, pending = GST_STATE_VOID_PENDING
            gst_message_parse_state_changed(message, &old, &new, &pending)
            kind = .stateChanged(old: PipelineState(old), new: PipelineState(new), pending: PipelineState(pending))
        case GST_MESSAGE_ELEMENT, GST_MESSAGE_APPLICATION:
            let structure = gst_message_get_structure(message).map { Structure(copying: $0) }
                ?? Structure(name: "", fields: [], serialized: "")
            kind = type == GST_MESSAGE_ELEMENT ? .element(structure) : .application(structure)
        case GST_MESSAGE_LATENCY:
            kind = .latency
        case GST_MESSAGE_QOS:
            var live: gboolean = 0
            var runningTime: guint64 = 0, streamTime: guint64 = 0, timestamp: guint64 = 0, duration: guint64 = 0
            gst_message_parse_qos(message, &live, &runningTime, &streamTime, &timestamp, &duration)
            var format = GST_FORMAT_UNDEFINED
            var processed: guint64 = 0, dropped: guint64 = 0
            gst_message_parse_qos_stats(message, &format, &processed, &dropped)
            var jitter: gint64 = 0, proportion: Double = 0
            var quality: Int32 = 0
            gst_message_parse_qos_values(message, &jitter, &proportion, &quality)
            kind = .qos(QualityOfService(
                live: live != 0, runningTime: Duration(clockTime: runningTime),
                processed: UInt64(processed), dropped: UInt64(dropped), jitter: .nanoseconds(Int64(jitter)), proportion: proportion))
        case GST_MESSAGE_ASYNC_DONE:
            kind = .asyncDone
        case GST_MESSAGE_STREAM_START:
            kind = .streamStart
        case GST_MESSAGE_BUFFERING:
            var percent: Int32 = 0
            gst_message_parse_buffering(message, &percent)
            kind = .buffering(percent: Int(percent))
        case GST_MESSAGE_CLOCK_LOST:
            kind = .clockLost
        default:
            kind = .other(String(cString: gst_message_type_get_name(type)))
        }
    }
}

extension Structure {
    init(name: String, fields: [Field], serialized: String) {
        self.name = name
        self.fields = fields
        self.serialized = serialized
    }
}

import Foundation
import PCastMedia
import PCastProtocol
import Synchronization

/// Options of ``PCast/publishRemote(_:)`` (the PCast iOS SDK's publish-remote options).
public typealias RemotePublishRequest = ClientMessage.PublishRemote
/// How far a remote publish got (the platform's progress reports).
public typealias IngestProgress = ServerMessage.IngestProgress

/// A remote source the platform pulls and publishes (the PCast iOS SDK's publish remote media): the
/// platform runs the ingest; this handle follows it. Releasing it does not stop the ingest (the
/// platform ends it with the source, or when this session ends); ``stop()`` does.
///
/// ```swift
/// let remote = try await pcast.publishRemote(.init(streamToken: token, streamURI: "https://cdn.example/clip.mp4"))
/// let watching = remote.progress.subscribe { print($0?.positionMilliseconds ?? 0) }
/// let (reason, _) = await remote.ended()      // .ended at the end of the file
/// ```
public final class RemotePublisher: Sendable {
    public let streamId: String
    /// Whether the platform passes the video through without re-encoding.
    public let passthrough: Bool
    /// Position and duration, updated about once a second (nil before the first report).
    public let progress: ObservableValue<IngestProgress?>
    private weak let pcast: PCast?
    private let ending = Mutex<(ended: (StreamEndedReason, String?)?, waiters: [CheckedContinuation<(StreamEndedReason, String?), Never>])>((nil, []))
    private let listener = Mutex<Disposable?>(nil)

    init(streamId: String, passthrough: Bool, pcast: PCast) {
        self.streamId = streamId
        self.passthrough = passthrough
        self.progress = ObservableValue(nil)
        self.pcast = pcast
        let listener = pcast.addEventListener { [weak self] event in
            guard let self else { return }
            switch event {
            case .ingestProgress(let progress) where progress.streamId == streamId:
                self.progress.setValue(progress)
            case .streamEnded(let ended) where ended.streamId == streamId:
                self.finish(ended.reason, ended.description)
            default:
                break
            }
        }
        self.listener.withLock { $0 = listener }
    }

    public var hasEnded: Bool { ending.withLock { $0.ended != nil } }

    /// Waits until the ingest ends; returns why.
    public func ended() async -> (StreamEndedReason, String?) {
        await withCheckedContinuation { continuation in
            let ended: (StreamEndedReason, String?)? = ending.withLock { state in
                if let ended = state.ended { return ended }
                state.waiters.append(continuation)
                return nil
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// Asks the platform to stop the ingest (its stream ends as `ended`).
    public func stop() async throws(PCastError) {
        guard let pcast, !hasEnded else { return }
        do throws(PCastError) {
            _ = try await pcast.request(.stopIngest(.init(streamId: streamId)))
        } catch {
            if error.code == .refused, error.status == .notFound { return }
            throw error
        }
    }

    func finish(_ reason: StreamEndedReason, _ description: String?) {
        let waiters = ending.withLock { state -> [CheckedContinuation<(StreamEndedReason, String?), Never>] in
            guard state.ended == nil else { return [] }
            state.ended = (reason, description)
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(returning: (reason, description)) }
        listener.withLock { $0 = nil }
    }
}

extension PCast {
    /// Asks the platform to pull a remote source (http(s) mp4, rtmp, rtsp) and publish it with the
    /// given publish token. H.264 passes through unless frame-rate constraints ask otherwise.
    ///
    /// - Throws: ``PCastError/refused(_:_:)``: `unauthorized` for a refused URI (scheme, internal
    ///   address) or token, `failed` when the source cannot be opened, `not-supported` for unknown
    ///   connect options.
    public func publishRemote(_ request: RemotePublishRequest) async throws(PCastError) -> RemotePublisher {
        let reply = try await self.request(.publishRemote(request))
        guard case .ingestStarted(let started) = reply else { throw .invalidRequest("unexpected reply to publish-remote: \(reply.type)") }
        return RemotePublisher(streamId: started.streamId, passthrough: started.passthrough, pcast: self)
    }
}

import Synchronization

/// Where a media engine reports its end, handed to it when it is made. The media stream that
/// must hear of it is made after the engine (it needs the engine), so it attaches later; an end
/// reported before that is delivered when it attaches. Only the first end is delivered.
///
/// ```swift
/// let ends = EndSignal()
/// let engine = try CaptureEngine(plan: plan, ends: ends)
/// let stream = MediaStream(engine: engine, tracks: tracks)
/// ends.attach { [weak stream] reason in stream?.finish(reason) }
/// ```
final class EndSignal: Sendable {
    private enum State {
        case waiting
        case attached(@Sendable (MediaStreamEndReason) -> Void)
        case ended(MediaStreamEndReason)
        case delivered
    }
    private let state = Mutex(State.waiting)

    init() {}

    /// Who is told of the end; told at once if it has already come.
    func attach(_ handler: @escaping @Sendable (MediaStreamEndReason) -> Void) {
        let pending = state.withLock { state -> MediaStreamEndReason? in
            switch state {
            case .waiting, .attached:
                state = .attached(handler)
                return nil
            case .ended(let reason):
                state = .delivered
                return reason
            case .delivered:
                return nil
            }
        }
        if let pending { handler(pending) }
    }

    /// The end reported before anyone attached (nil otherwise): an engine that waits for its
    /// start can give up on it.
    var pendingReason: MediaStreamEndReason? {
        state.withLock { state in
            if case .ended(let reason) = state { return reason }
            return nil
        }
    }

    /// The engine ended (or failed); the first call is delivered, later ones are ignored.
    func fire(_ reason: MediaStreamEndReason) {
        let handler = state.withLock { state -> (@Sendable (MediaStreamEndReason) -> Void)? in
            switch state {
            case .waiting:
                state = .ended(reason)
                return nil
            case .attached(let handler):
                state = .delivered
                return handler
            case .ended, .delivered:
                return nil
            }
        }
        handler?(reason)
    }
}

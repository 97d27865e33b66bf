import Synchronization

/// The first of a store call's outcomes (its work, its deadline, the caller's cancellation) wins;
/// the others are cancelled.
final class Race<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<T, any Error>, Never>?
        var early: Result<T, any Error>?
        var tasks: [Task<Void, Never>] = []
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<Result<T, any Error>, Never>, work: Task<Void, Never>, deadline: Task<Void, Never>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            state.tasks = [work, deadline]
            if let early = state.early { return early }
            state.continuation = continuation
            return nil
        }
        if let early {
            work.cancel()
            deadline.cancel()
            continuation.resume(returning: early)
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<Result<T, any Error>, Never>?, [Task<Void, Never>]) in
            if state.continuation == nil {
                // Not started yet (cancelled before it began) or already finished.
                if state.early == nil, state.tasks.isEmpty { state.early = result }
                return (nil, [])
            }
            defer { state.continuation = nil }
            return (state.continuation, state.tasks)
        }
        guard let continuation else { return }
        for task in tasks { task.cancel() }
        continuation.resume(returning: result)
    }
}

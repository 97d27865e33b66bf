import Foundation
import Synchronization

/// The PCast iOS SDK's process termination signal handling: on SIGTERM or SIGINT, each ``PCast`` that
/// asked for it (``PCastOptions/enableProcessTerminationSignalHandling``) ends its streams, their
/// viewers told `ended` with the signal named, and closes its session; then the signal takes its
/// default course, and the process ends as it would have without the SDK.
///
/// Only a signal the application left at its default disposition is handled: an application
/// that catches or ignores SIGINT or SIGTERM itself keeps its own handling (the `pcast` command
/// line does, and so does `gst-launch-1.0` for SIGINT). The handlers are installed with the first
/// such ``PCast`` and removed with the last.
///
/// A plain signal handler that writes the signal's number to a pipe, read by a thread of ours:
/// a dispatch signal source needs the signal ignored, and the kernel discards an ignored signal
/// sent to a process whose main thread does not block it (a host's main thread, as
/// `gst-launch-1.0`'s, never heard it).
final class TerminationSignals: Sendable {
    static let shared = TerminationSignals()
    /// How long the streams are given to end before the signal goes on.
    static let grace: Duration = .seconds(3)
    static let handled: [Int32] = [SIGTERM, SIGINT]

    // Unchecked: its weak reference is read and written only inside `state`'s `Mutex`.
    private final class Weak: @unchecked Sendable {
        weak var pcast: PCast?
        init(_ pcast: PCast) { self.pcast = pcast }
    }
    // Unchecked: holds the `Weak` boxes, reached only inside the `Mutex` `state`.
    private struct State: @unchecked Sendable {
        var instances: [ObjectIdentifier: Weak] = [:]
        var installed: [Int32] = []
        var readerStarted = false
        var terminating = false
    }
    private let state = Mutex(State())

    func register(_ pcast: PCast) {
        state.withLock { state in
            state.instances[ObjectIdentifier(pcast)] = Weak(pcast)
            state.instances = state.instances.filter { $0.value.pcast != nil }
            guard state.installed.isEmpty else { return }
            if !state.readerStarted {
                guard Self.openPipe() else { return }
                state.readerStarted = true
                let thread = Thread { [weak self] in self?.readSignals() }
                thread.name = "pcast-termination-signals"
                thread.start()
            }
            for number in Self.handled where Self.isDefault(number) {
                var action = sigaction()
                action.__sigaction_handler.sa_handler = signalToPipe
                sigemptyset(&action.sa_mask)
                action.sa_flags = SA_RESTART
                if sigaction(number, &action, nil) == 0 { state.installed.append(number) }
            }
        }
    }

    /// Called as an instance goes (from its deinit: it is named, not referred to).
    func unregister(_ instance: ObjectIdentifier) {
        state.withLock { state in
            state.instances[instance] = nil
            state.instances = state.instances.filter { $0.value.pcast != nil }
            guard state.instances.isEmpty, !state.terminating else { return }
            for number in state.installed { signal(number, SIG_DFL) }
            state.installed = []
        }
    }

    /// Whether `number`'s disposition is the default (nobody catches or ignores it).
    private static func isDefault(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0 else { return false }
        return current.__sigaction_handler.sa_handler == nil && current.sa_flags & SA_SIGINFO == 0
    }

    private static func openPipe() -> Bool {
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else { return false }
        for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        signalPipe = (descriptors[0], descriptors[1])
        return true
    }

    /// The reader thread: one byte per signal received.
    private func readSignals() {
        var byte: UInt8 = 0
        while true {
            let count = read(signalPipe.read, &byte, 1)
            if count == 1 { received(Int32(byte)) } else if count < 0 && errno != EINTR { return }
        }
    }

    private func received(_ number: Int32) {
        let instances = state.withLock { state -> [PCast] in
            guard !state.terminating else { return [] }
            state.terminating = true
            return state.instances.values.compactMap(\.pcast)
        }
        guard !instances.isEmpty else { return Self.proceed(number) }
        let name = number == SIGTERM ? "SIGTERM" : "SIGINT"
        // Whichever comes first: every instance stopped, or the grace period over (a stop that
        // hangs must not keep the process from ending).
        Task.detached {
            await withTaskGroup(of: Void.self) { stops in
                for pcast in instances {
                    stops.addTask { await pcast.terminate(description: "the publishing process received \(name)") }
                }
            }
            Self.proceed(number)
        }
        Task.detached {
            try? await Task.sleep(for: Self.grace)
            Self.proceed(number)
        }
    }

    /// The signal's default course: the process ends by it. Sent to the process, not raised in
    /// this thread: the threads of Swift's task pool block SIGINT and SIGTERM.
    private static func proceed(_ number: Int32) {
        signal(number, SIG_DFL)
        kill(getpid(), number)
    }
}

/// Written once, before the first handler is installed; read by the handler and the reader.
/// Unchecked: written once before the first handler is installed; read-only after, by the handler and the reader.
nonisolated(unsafe) private var signalPipe: (read: Int32, write: Int32) = (-1, -1)

/// The signal handler: async-signal-safe, it only writes the signal's number to the pipe.
private let signalToPipe: @convention(c) (Int32) -> Void = { number in
    var byte = UInt8(truncatingIfNeeded: number)
    let saved = errno
    _ = write(signalPipe.write, &byte, 1)
    errno = saved
}

import Dispatch
import Foundation
import GStreamer

/// Plays a pipeline, shows its status, and ends it on EOS, error, Ctrl-C or a deadline.
struct PipelineRunner {
    let description: String
    let seconds: Double?
    let statusLine: Bool

    private enum Ending: Sendable {
        case endOfStream
        case failed(GStreamerError)
        case deadline
        case interrupted
    }

    /// Returns the process exit code.
    func run() async -> Int32 {
        let pipeline: Pipeline
        do {
            pipeline = try Pipeline(description: description)
        } catch {
            report(error)
            return 1
        }
        let counters = pipeline.sinks.compactMap { sink -> (String, BufferCounter)? in
            guard let pad = try? sink.staticPad("sink") else { return nil }
            return (sink.name, pad.countBuffers())
        }
        let interrupts = SignalWatcher(signal: SIGINT)
        let status = StatusPrinter(enabled: statusLine)

        do {
            try await pipeline.play()
        } catch {
            report(error)
            await pipeline.stop()
            return 1
        }

        let started = ContinuousClock.now
        let ending: Ending = await withTaskGroup(of: Ending.self) { group in
            group.addTask {
                do throws(GStreamerError) {
                    try await pipeline.waitUntilEnd()
                    return .endOfStream
                } catch {
                    return .failed(error)
                }
            }
            if let seconds {
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
                    return Task.isCancelled ? .endOfStream : .deadline
                }
            }
            group.addTask {
                await interrupts.next()
                return .interrupted
            }
            group.addTask {
                var previous = counters.map { $0.1.value }
                var last = ContinuousClock.now
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    let now = ContinuousClock.now
                    let elapsed = (now - last).seconds
                    last = now
                    let current = counters.map { $0.1.value }
                    let rates = zip(counters, zip(current, previous)).map { entry, values in
                        (entry.0, Double(values.0 - values.1) / max(elapsed, 0.001))
                    }
                    previous = current
                    status.show(state: pipeline.currentState, runningTime: pipeline.runningTime, rates: rates)
                }
                return .endOfStream
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
        status.finish()

        if case .interrupted = ending {
            // Let the sources finish cleanly (files get their headers written), briefly.
            pipeline.sendEndOfStream()
            _ = try? await pipeline.waitUntilEnd(timeout: .seconds(2))
        }
        await pipeline.stop()
        let elapsed = ContinuousClock.now - started
        let totals = counters.map { "\($0.0)=\($0.1.value)" }.joined(separator: " ")
        let summary = "ran \(formatDuration(elapsed)); buffers at sinks: \(totals.isEmpty ? "none" : totals)"
        switch ending {
        case .failed(let error):
            report(error)
            FileHandle.standardError.write(Data((summary + "\n").utf8))
            return 1
        case .endOfStream:
            print("end of stream; " + summary)
        case .deadline:
            print("time limit reached; " + summary)
        case .interrupted:
            print("interrupted; " + summary)
        }
        return 0
    }

    private func report(_ error: any Error) {
        printError("\(error)")
        if case GStreamerError.missingElements(let missing, _) = error {
            let packages = Set(missing.compactMap(\.debianPackage)).sorted()
            if !packages.isEmpty {
                FileHandle.standardError.write(Data("hint: apt-get install \(packages.joined(separator: " "))\n".utf8))
            }
        }
    }
}

func formatDuration(_ duration: Duration?) -> String {
    guard let duration else { return "--:--:--.-" }
    let total = duration.seconds
    let hours = Int(total) / 3600, minutes = (Int(total) / 60) % 60
    let seconds = total - Double(hours * 3600 + minutes * 60)
    return String(format: "%02d:%02d:%04.1f", hours, minutes, seconds)
}

extension Duration {
    /// Seconds as a floating-point number, for display and rates.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// One status line, rewritten in place on a terminal and printed once a second otherwise.
final class StatusPrinter: Sendable {
    let enabled: Bool
    let terminal: Bool

    init(enabled: Bool) {
        self.enabled = enabled
        terminal = isatty(STDERR_FILENO) != 0
    }

    func show(state: PipelineState, runningTime: Duration?, rates: [(String, Double)]) {
        guard enabled else { return }
        let sinks = rates.map { String(format: "%@ %.1f buf/s", $0.0, $0.1) }.joined(separator: "  ")
        let line = "\(state.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) \(formatDuration(runningTime))  \(sinks)"
        let text = terminal ? "\r\u{1B}[2K" + line : line + "\n"
        FileHandle.standardError.write(Data(text.utf8))
    }

    func finish() {
        if enabled && terminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// Turns a Unix signal into something a task can await.
final class SignalWatcher: Sendable {
    private let stream: AsyncStream<Void>
    // Unchecked: a dispatch source is thread-safe, only not marked Sendable; set in `init`, never reassigned.
    private nonisolated(unsafe) let source: DispatchSourceSignal

    init(signal number: Int32) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        self.stream = stream
        signal(number, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { continuation.yield() }
        source.resume()
    }

    func next() async {
        var iterator = stream.makeAsyncIterator()
        _ = await iterator.next()
    }
}

import ArgumentParser
import Foundation
import PCast
import PCastMedia

/// `pcast nettest`: the pre-publish network test (``PCast/startNetworkTest(streamToken:options:progress:)``).
struct NetTestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nettest",
        abstract: "Publish a short test stream to the platform's relay and judge the connection for a target quality: round trip, loss, jitter, the bandwidth the estimate reaches, and a verdict (good / fair / poor).",
        discussion: """
            Prints one line per second while the test runs, then the report. With --json, prints the \
            report as one JSON object instead (durations in seconds, bitrates in bits per second). \
            Ctrl-C stops the test and unpublishes its stream.
            """
    )

    @OptionGroup var session: SessionOptions
    @Option(help: "Publish token for the test stream.") var token: String
    @Option(help: "Target quality: 720p (2.5 Mbit/s), 360p (800 kbit/s) or 180p (200 kbit/s).") var target = "720p"
    @Option(help: "Video bitrate of the target, kbit/s (default: the target's).") var bitrate: Int?
    @Option(help: "Seconds the test stream is published (3 or more).") var seconds: Double = 10
    @Flag(help: "No audio in the test stream.") var noAudio = false
    @Flag(help: "Print the report as JSON.") var json = false

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        var quality: NetworkTestTarget
        switch target {
        case "720p": quality = .hd720
        case "360p": quality = .sd360
        case "180p": quality = .low180
        default: throw fail("--target must be 720p, 360p or 180p", code: 2)
        }
        if let bitrate { quality.videoBitrate = bitrate * 1000 }
        let options = NetworkTestOptions(duration: .milliseconds(Int(seconds * 1000)), target: quality, includeAudio: !noAudio)
        let pcast = try await session.start()
        let printsProgress = !json
        let test = Task { () async throws -> NetworkTestReport in
            try await pcast.startNetworkTest(streamToken: token, options: options) { sample in
                guard printsProgress else { return }
                print("\(Self.seconds(sample.elapsed)) s: sent \(sample.sentBitrate / 1000) kbit/s, estimate \(sample.estimatedBandwidth.map { "\($0 / 1000) kbit/s" } ?? "-"), "
                      + "lost \(sample.fractionLost.map { Self.percent($0) } ?? "-"), round trip \(sample.roundTripTime.map(Self.milliseconds) ?? "-"), "
                      + "jitter \(sample.jitter.map(Self.milliseconds) ?? "-")")
                fflush(nil)
            }
        }
        let interrupts = SignalWatcher(signal: SIGINT)
        let terminations = SignalWatcher(signal: SIGTERM)
        let watcher = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await interrupts.next() }
                group.addTask { await terminations.next() }
                await group.next()
                group.cancelAll()
            }
            test.cancel()
        }
        let result = await test.result
        watcher.cancel()
        await pcast.stop()
        let report: NetworkTestReport
        switch result {
        case .success(let value): report = value
        case .failure(let error):
            let status = (error as? PCastError)?.status.rawValue ?? "failed"
            throw fail("network test failed (\(status)): \(error)")
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(JSONReport(report)), as: UTF8.self))
        } else {
            print("""
                target: \(report.target)
                verdict: \(report.verdict.rawValue)\(report.limitedBy.isEmpty ? "" : " (limited by \(report.limitedBy.map(\.rawValue).joined(separator: ", ")))")
                bandwidth estimate: \(report.estimatedBandwidth / 1000) kbit/s; sent \(report.sentBitrate / 1000) kbit/s
                loss: \(Self.percent(report.loss)); round trip: \(report.roundTripTime.map(Self.milliseconds) ?? "-"); jitter: \(report.jitter.map(Self.milliseconds) ?? "-")
                recommended video bitrate: \(report.recommendedVideoBitrate / 1000) kbit/s
                """)
        }
        fflush(nil)
    }

    static func seconds(_ duration: Duration) -> String { String(format: "%.0f", duration / .seconds(1)) }
    static func milliseconds(_ duration: Duration) -> String { String(format: "%.1f ms", duration / .milliseconds(1)) }
    static func percent(_ fraction: Double) -> String { String(format: "%.1f %%", fraction * 100) }

    /// The report with plain numbers (seconds, bits per second), for scripts.
    struct JSONReport: Encodable {
        struct Target: Encodable { let width: Int, height: Int, frameRate: Double, videoBitrate: Int }
        struct Sample: Encodable {
            let elapsed: Double, sentBitrate: Int, estimatedBandwidth: Int?, fractionLost: Double?, roundTripTime: Double?, jitter: Double?
        }
        let target: Target
        let verdict: String
        let limitedBy: [String]
        let estimatedBandwidth: Int
        let sentBitrate: Int
        let loss: Double
        let roundTripTime: Double?
        let jitter: Double?
        let recommendedVideoBitrate: Int
        let samples: [Sample]

        init(_ report: NetworkTestReport) {
            let seconds = { (duration: Duration) in duration / .seconds(1) }
            target = Target(width: report.target.width, height: report.target.height, frameRate: report.target.frameRate, videoBitrate: report.target.videoBitrate)
            verdict = report.verdict.rawValue
            limitedBy = report.limitedBy.map(\.rawValue)
            estimatedBandwidth = report.estimatedBandwidth
            sentBitrate = report.sentBitrate
            loss = report.loss
            roundTripTime = report.roundTripTime.map(seconds)
            jitter = report.jitter.map(seconds)
            recommendedVideoBitrate = report.recommendedVideoBitrate
            samples = report.samples.map {
                Sample(elapsed: seconds($0.elapsed), sentBitrate: $0.sentBitrate, estimatedBandwidth: $0.estimatedBandwidth,
                       fractionLost: $0.fractionLost, roundTripTime: $0.roundTripTime.map(seconds), jitter: $0.jitter.map(seconds))
            }
        }
    }
}

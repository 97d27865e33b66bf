import Foundation
import Logging
@testable import PCast
import PCastMedia
import PCastNode
import Synchronization
import Testing

/// A swift-log handler an application could give the SDK: keeps every message with its label.
final class CapturedLog: Sendable {
    struct Entry: Sendable {
        let label: String
        let level: Logger.Level
        let message: String
    }
    private let entries = Mutex<[Entry]>([])

    var all: [Entry] { entries.withLock { $0 } }
    func clear() { entries.withLock { $0 = [] } }

    func handler(label: String) -> any LogHandler { Handler(log: self, label: label) }

    struct Handler: LogHandler {
        let log: CapturedLog
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            log.entries.withLock { $0.append(Entry(label: label, level: event.level, message: "\(event.message)")) }
        }
    }
}

extension OneAtATime {
    /// Logging is the process's (as the seed's initialize): one test at a time, so no other
    /// test's `PCast` changes it meanwhile.
    @Suite("SDK logging: the seed's initialize options", .serialized)
    struct SDKLoggingTests {
        @Test("a log handler given at initialize gets the SDK's messages at its own level (the session's, as pcast.sdk); with configureLogging off it gets none, while collectLogMessages still keeps the session's")
        func handlerGetsTheMessages() async throws {
            let platform = try await LocalPlatform.start()
            let captured = CapturedLog()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL), logHandler: { captured.handler(label: $0) })
            try await sdk.start(authToken: try platform.token(.auth))
            await sdk.stop()
            let messages = captured.all
            #expect(messages.contains { $0.label == "pcast.sdk" && $0.level == .info && $0.message == "authenticated" }, "\(messages)")
            #expect(!messages.contains { $0.level < .debug }, "trace is under the handler's level")

            captured.clear()
            var options = PCastOptions(uri: platform.signalingURL)
            options.configureLogging = false
            let quiet = PCast(options, logHandler: { captured.handler(label: $0) })
            try await quiet.start(authToken: try platform.token(.auth))
            await quiet.stop()
            #expect(captured.all.isEmpty, "\(captured.all)")
            #expect(quiet.collectLogMessages().contains { $0.contains("authenticated") })
            await platform.shutdown()
        }

        @Test("the console level: PCAST_LOG_LEVEL's names in any case, warn for warning; unset, off or unknown is no console")
        func consoleLevelNames() {
            #expect(SDKLog.level(named: "debug") == .debug)
            #expect(SDKLog.level(named: "INFO") == .info)
            #expect(SDKLog.level(named: "warn") == .warning && SDKLog.level(named: "Warning") == .warning)
            #expect(SDKLog.level(named: nil) == nil && SDKLog.level(named: "off") == nil && SDKLog.level(named: "loud") == nil)
        }
    }
}

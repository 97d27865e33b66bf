import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import PCastProtocol
@testable import PCastServer
import Synchronization
import Testing

/// The notifier with a transport of the test's own: what it sends, and how it retries.
@Suite("Stream notifications to the backend")
struct StreamNotifierTests {
    static func notification(_ kind: StreamNotification.Kind, _ streamId: String) -> StreamNotification {
        StreamNotification(type: kind, id: "notification-\(streamId)-\(kind.rawValue)", applicationId: "app", streamId: streamId,
                           sessionId: "session-1", tags: ["channelAlias:news"], publishType: .live,
                           reason: kind == .ended ? .ended : nil, timestamp: 1_764_230_400_000)
    }

    static func settings(_ delays: [Duration] = [.milliseconds(10), .milliseconds(10)]) -> StreamNotificationSettings {
        var settings = StreamNotificationSettings(url: URL(string: "http://127.0.0.1:9/hook")!, secret: "hook-secret")
        settings.retryDelays = delays
        return settings
    }

    /// Answers each request with the next status (the last one repeated), recording the requests.
    final class ScriptedBackend: Sendable {
        let requests = Mutex<[URLRequest]>([])
        let answers: [Int?]
        init(_ answers: [Int?]) { self.answers = answers }
        var transport: StreamNotifier.Transport {
            { request in
                let index = self.requests.withLock { requests in requests.append(request); return requests.count - 1 }
                guard let status = self.answers[min(index, self.answers.count - 1)] else { throw URLError(.cannotConnectToHost) }
                return status
            }
        }
        var all: [URLRequest] { requests.withLock { $0 } }
    }

    @Test("a notification is POSTed as JSON with its event, delivery id, timestamp and a signature over \"<timestamp>.<body>\" that verifies with the secret and not with another, nor over another body")
    func signedPost() async throws {
        let backend = ScriptedBackend([204])
        let notifier = StreamNotifier(settings: Self.settings(), logger: Logger(label: "test"), transport: backend.transport)
        notifier.enqueue(Self.notification(.started, "stream-a"))
        await notifier.idle()
        let request = try #require(backend.all.first)
        #expect(request.httpMethod == "POST" && request.url?.absoluteString == "http://127.0.0.1:9/hook")
        #expect(request.value(forHTTPHeaderField: "Content-Type") == "application/json")
        #expect(request.value(forHTTPHeaderField: "X-PCast-Event") == "stream-started")
        #expect(request.value(forHTTPHeaderField: "X-PCast-Delivery") == "notification-stream-a-stream-started")
        let body = try #require(request.httpBody)
        let json = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
        #expect(json["type"] as? String == "stream-started" && json["streamId"] as? String == "stream-a" && json["applicationId"] as? String == "app")
        #expect(json["tags"] as? [String] == ["channelAlias:news"] && json["publishType"] as? String == "live" && json["reason"] == nil)
        let timestamp = try #require(request.value(forHTTPHeaderField: "X-PCast-Timestamp").flatMap { Int64($0) })
        #expect(abs(Double(timestamp) - Date().timeIntervalSince1970) < 5)
        let signature = try #require(request.value(forHTTPHeaderField: "X-PCast-Signature"))
        #expect(signature.hasPrefix("v1=") && signature.count == 3 + 64)
        #expect(StreamNotificationSignature.verify(signature: signature, body: body, timestamp: timestamp, secret: "hook-secret"))
        #expect(!StreamNotificationSignature.verify(signature: signature, body: body, timestamp: timestamp, secret: "other"))
        #expect(!StreamNotificationSignature.verify(signature: signature, body: body, timestamp: timestamp + 1, secret: "hook-secret"))
        #expect(!StreamNotificationSignature.verify(signature: signature, body: Data("{}".utf8), timestamp: timestamp, secret: "hook-secret"))
        #expect(notifier.statistics() == .init(delivered: 1, failed: 0, dropped: 0, attempts: 1))
    }

    @Test("no answer, 503 and 429 are retried until the backend takes it; notifications go in order, each after the previous one")
    func retriesInOrder() async {
        let backend = ScriptedBackend([nil, 503, 429, 200])
        let notifier = StreamNotifier(settings: Self.settings([.milliseconds(10), .milliseconds(10), .milliseconds(10)]),
                                      logger: Logger(label: "test"), transport: backend.transport)
        notifier.enqueue(Self.notification(.started, "stream-a"))
        notifier.enqueue(Self.notification(.ended, "stream-a"))
        await notifier.idle()
        let events = backend.all.map { $0.value(forHTTPHeaderField: "X-PCast-Event") ?? "" }
        #expect(events == ["stream-started", "stream-started", "stream-started", "stream-started", "stream-ended"])
        #expect(notifier.statistics() == .init(delivered: 2, failed: 0, dropped: 0, attempts: 5))
    }

    @Test("a 4xx other than 408/429 is the backend's refusal: not retried; a backend that keeps failing is given up after the last delay; a full queue drops and counts")
    func givesUp() async {
        let refusing = ScriptedBackend([403])
        let notifier = StreamNotifier(settings: Self.settings(), logger: Logger(label: "test"), transport: refusing.transport)
        notifier.enqueue(Self.notification(.started, "stream-a"))
        await notifier.idle()
        #expect(refusing.all.count == 1 && notifier.statistics().failed == 1)

        let down = ScriptedBackend([500])
        let failing = StreamNotifier(settings: Self.settings(), logger: Logger(label: "test"), transport: down.transport)
        failing.enqueue(Self.notification(.started, "stream-b"))
        await failing.idle()
        #expect(down.all.count == 3, "one attempt and one after each of the two delays")
        #expect(failing.statistics().failed == 1 && failing.statistics().delivered == 0)

        var small = Self.settings()
        small.queueLimit = 2
        let slow = ScriptedBackend([200])
        let bounded = StreamNotifier(settings: small, logger: Logger(label: "test"), transport: { request in
            try await Task.sleep(for: .milliseconds(50))
            return try await slow.transport(request)
        })
        for index in 0..<5 { bounded.enqueue(Self.notification(.started, "stream-\(index)")) }
        await bounded.idle()
        #expect(bounded.statistics().dropped >= 2 && bounded.statistics().delivered + bounded.statistics().dropped == 5)
    }

    @Test("the URL and secret come from flags, environment or file; a URL that is not http(s) with a host, or a secret without a URL, is refused")
    func configuration() throws {
        let base = ["PCAST_SECRET": "s3cret"]
        let none = try PlatformConfiguration.load(environment: base)
        #expect(none.streamNotifications == nil)
        let fromEnvironment = try PlatformConfiguration.load(environment: base.merging(["PCAST_STREAM_NOTIFICATION_URL": "https://backend.example/hooks"]) { $1 })
        #expect(fromEnvironment.streamNotifications?.url.absoluteString == "https://backend.example/hooks")
        #expect(fromEnvironment.streamNotifications?.secret == "s3cret", "the application secret by default")
        let fromFlags = try PlatformConfiguration.load(environment: base, overrides: .init(streamNotificationURL: "http://127.0.0.1:8081/h",
                                                                                           streamNotificationSecret: "hooks"))
        #expect(fromFlags.streamNotifications?.secret == "hooks")
        for bad in ["ftp://backend/h", "not a url", "http:///nohost"] {
            #expect(throws: ConfigurationError.self) {
                try PlatformConfiguration.load(environment: base, overrides: .init(streamNotificationURL: bad))
            }
        }
        #expect(throws: ConfigurationError.self) {
            try PlatformConfiguration.load(environment: base, overrides: .init(streamNotificationSecret: "orphan"))
        }
    }
}

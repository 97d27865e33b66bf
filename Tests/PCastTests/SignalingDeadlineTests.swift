import Foundation
@testable import PCast
import PCastImpairment
import PCastNode
import PCastProtocol
import PCastTestSupport
import Testing

/// Request timeouts of the signaling client: one deadline sweeper per connection.
@Suite("Signaling request deadlines")
struct SignalingDeadlineTests {
    @Test("requests a silent path never answers time out at their own deadlines (0.4 s and 1.2 s, in that order, at most a sweep tick late); answered ones do not; requests after the outage are answered")
    func deadlines() async throws {
        let platform = try await LocalPlatform.start()
        let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: platform.server.httpPort)
        defer { proxy.stop() }
        let client = try await SignalingClient.connect(to: URL(string: "ws://127.0.0.1:\(proxy.port)/ws")!, logger: .init(label: "test"),
                                                       onEvent: { _ in }, onClose: { _ in })
        // Answered (a keep-alive before authenticating is refused: a reply all the same).
        let answered = await Self.outcome(client, timeout: .milliseconds(400))
        #expect(answered.error != .timeout && answered.elapsed < .milliseconds(400))

        proxy.setOutage(true, mode: .silent)
        async let short = Self.outcome(client, timeout: .milliseconds(400))
        async let long = Self.outcome(client, timeout: .milliseconds(1_200))
        let (first, second) = await (short, long)
        #expect(first.error == .timeout && second.error == .timeout)
        #expect(first.elapsed >= .milliseconds(400) && first.elapsed < .milliseconds(400) + SignalingClient.sweepTick + .milliseconds(300),
                "the 0.4 s request timed out after \(first.elapsed)")
        #expect(second.elapsed >= .milliseconds(1_200) && second.elapsed < .milliseconds(1_200) + SignalingClient.sweepTick + .milliseconds(300),
                "the 1.2 s request timed out after \(second.elapsed)")

        proxy.setOutage(false)
        let again = await Self.outcome(client, timeout: .seconds(5))
        #expect(again.error != .timeout, "answered once the path is back")
        await client.close()
        await platform.shutdown()
    }

    /// A keep-alive's outcome and how long it took.
    static func outcome(_ client: SignalingClient, timeout: Duration) async -> (error: PCastError?, elapsed: Duration) {
        let start = ContinuousClock.now
        do {
            _ = try await client.request(.keepAlive, timeout: timeout)
            return (nil, ContinuousClock.now - start)
        } catch {
            return (error, ContinuousClock.now - start)
        }
    }
}

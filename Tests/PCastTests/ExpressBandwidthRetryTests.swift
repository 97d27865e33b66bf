import Foundation
@testable import PCast
import PCastNode
import PCastServer
import PCastTestSupport
import Testing

extension OneAtATime {
    /// The API guide's claim that an Express publisher's bandwidth limit survives its monitor's retry.
    @Suite("Express: a bandwidth limit carried over to the republished stream", .serialized)
    struct ExpressBandwidthRetryTests {
        @Test("an Express publisher limited to 300 kbit/s whose stream the platform ends as maintenance publishes again under a new stream id whose video encoder targets 300 kbit/s too; releasing the limit lifts it on the new stream")
        func limitCarriesOver() async throws {
            let platform = try await LocalPlatform.start()
            let publishing = express(platform)
            let endings = Values<StreamEndedReason>()
            var options = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
            options.monitor = MonitorOptions(streamEnded: { reason, _, retry in
                endings.append(reason)
                if retry.isPresent { try? retry.perform() }
            })
            let publisher = try await publishing.publish(options)
            @Sendable func target() -> Int? {
                publisher.publisher?.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.targetBitrate
            }
            var limit: Disposable? = publisher.limitBandwidth(300_000)
            #expect(await eventually { target() == 300_000 }, "the first stream: \(String(describing: target()))")
            let first = publisher.streamId

            #expect(await platform.server.endStream(first, reason: .maintenance, description: "drill"))
            #expect(await eventually(.seconds(15)) { !publisher.streamId.isEmpty && publisher.streamId != first && !publisher.hasEnded },
                    "published again under a new stream id")
            #expect(endings.all == [.maintenance])
            #expect(await eventually { target() == 300_000 }, "the new stream keeps the limit: \(String(describing: target()))")

            limit?.dispose()
            limit = nil
            #expect(await eventually { target() != nil && target() != 300_000 }, "released: \(String(describing: target()))")
            await publisher.stop()
            await publishing.shutdown()
            await platform.shutdown()
        }
    }
}

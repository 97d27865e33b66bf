@testable import PCast
import PCastMediaServices
import PCastNode
import PCastServer
import Testing

/// Claims of the API guide (PCast.docc/APIGuide.md) that are settings: the SDK's REMB interval and
/// WebSocket upgrade deadline, and the platform's default ingest caps.
@Suite("API guide claims: the SDK's REMB interval and upgrade deadline, the platform's ingest caps")
struct PCastAPIGuideClaimsTests {
    @Test("the interval a subscriber's flow sends its downlink estimate (REMB) at is set to 250 ms (the setting only: the sending itself is checked end to end by the simulcast and bitrate tests)")
    func rembInterval() {
        #expect(MediaSocket.estimateInterval == 250_000_000)
    }

    @Test("the deadline for the signaling connection's WebSocket upgrade once TCP is connected is set to 5 s (the setting only)")
    func upgradeDeadline() {
        #expect(SignalingClient.upgradeDeadline.nanoseconds == 5_000_000_000)
    }

    @Test("a platform configured with only its secret caps ingests at 4 per session and 32 in all, and hands its media services those caps")
    func ingestCapDefaults() throws {
        let configuration = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s3cret"])
        #expect(configuration.maximumIngestsPerSession == 4)
        #expect(configuration.maximumIngests == 32)
        let services = MediaServicesConfiguration(platform: configuration)
        #expect(services.maximumIngestsPerSession == 4)
        #expect(services.maximumIngests == 32)
    }
}

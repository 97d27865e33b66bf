import Foundation
@testable import PCast
@testable import PCastMedia
import PCastTestSupport
import Testing

extension Bursts {
    /// Publishers come and go on a running media stream while another keeps publishing it. Attaching
    /// a branch to a running tee before the branch could take data answered `flushing`, which the tee
    /// passed upstream: the live source paused for good and the track went silent for every consumer
    /// (within about 50 attaches). Runs apart from the realtime suites (x264 instances start and stop).
    @Suite("Consumers attach and detach on a running stream", .serialized)
    struct ConsumerChurnTests {
        @Test("150 publishers attached and detached beside a long-lived one: its audio and video keep flowing")
        func churnKeepsTheOtherPublisherFlowing() async throws {
            let media = try await stampedMedia(audio: true)
            let main = try await RTPPublisher.start(stream: media.mediaStream) { _ in }
            for _ in 0..<150 {
                let extra = try await RTPPublisher.start(stream: media.mediaStream) { _ in }
                try await Task.sleep(for: .milliseconds(100))
                await extra.stop()
            }
            let before = (main.packetsSent(.audio), main.packetsSent(.video))
            #expect(await eventually(.seconds(10)) {
                main.packetsSent(.audio) > before.0 + 20 && main.packetsSent(.video) > before.1 + 20
            }, "the long-lived publisher stopped sending: audio \(before.0) → \(main.packetsSent(.audio)), video \(before.1) → \(main.packetsSent(.video))")
            await main.stop()
            await media.stop()
        }
    }
}

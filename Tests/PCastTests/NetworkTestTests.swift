import Foundation
@testable import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import PCastTestSupport
import Testing

/// The verdict's rules, on made-up samples.
@Suite("Network test: the verdict")
struct NetworkTestAssessmentTests {
    static func samples(_ count: Int = 10, estimate: Int?, lost: Double = 0, roundTrip: Duration? = .milliseconds(20),
                        jitter: Duration? = .milliseconds(2)) -> [NetworkTestSample] {
        (1...count).map {
            NetworkTestSample(elapsed: .seconds($0), sentBitrate: estimate ?? 0, estimatedBandwidth: estimate, fractionLost: lost,
                              roundTripTime: roundTrip, jitter: jitter)
        }
    }

    @Test("the target reached with little loss, a short round trip and little jitter is good; the recommendation is the target")
    func good() {
        let report = NetworkTestAssessment.report(target: .hd720, samples: Self.samples(estimate: 2_500_000), packetsSent: 3000, packetsLost: 10)
        #expect(report.verdict == .good && report.limitedBy.isEmpty)
        #expect(report.estimatedBandwidth == 2_500_000 && report.recommendedVideoBitrate == 2_500_000)
        #expect(abs(report.loss - 10.0 / 3000) < 1e-9)
        #expect(report.roundTripTime == .milliseconds(20) && report.jitter == .milliseconds(2))
    }

    @Test("an estimate between 40 and 85 % of the target is fair, below 40 % poor; the recommendation leaves headroom under the estimate; the verdict reads the second half of the test")
    func bandwidth() {
        // The first half starts at the target and falls: only the second half counts.
        let falling = Self.samples(5, estimate: 2_500_000) + Self.samples(5, estimate: 1_500_000)
        let fair = NetworkTestAssessment.report(target: .hd720, samples: falling, packetsSent: 3000, packetsLost: 0)
        #expect(fair.verdict == .fair && fair.limitedBy == [.bandwidth])
        #expect(fair.estimatedBandwidth == 1_500_000 && fair.recommendedVideoBitrate == 1_275_000)
        let poor = NetworkTestAssessment.report(target: .hd720, samples: Self.samples(estimate: 240_000), packetsSent: 3000, packetsLost: 0)
        #expect(poor.verdict == .poor && poor.limitedBy == [.bandwidth])
        #expect(poor.recommendedVideoBitrate == 204_000)
        // An estimate above the target counts as the target: the test measures what it sends.
        let above = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: 5_000_000), packetsSent: 3000, packetsLost: 0)
        #expect(above.estimatedBandwidth == 800_000 && above.verdict == .good)
    }

    @Test("loss, round trip and jitter each lower the verdict and are named; a test no report came back from is poor")
    func otherLimits() {
        let lossy = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: 800_000), packetsSent: 1000, packetsLost: 50)
        #expect(lossy.verdict == .fair && lossy.limitedBy == [.loss])
        let veryLossy = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: 800_000), packetsSent: 1000, packetsLost: 120)
        #expect(veryLossy.verdict == .poor)
        let far = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: 800_000, roundTrip: .milliseconds(500)),
                                               packetsSent: 1000, packetsLost: 0)
        #expect(far.verdict == .fair && far.limitedBy == [.roundTrip])
        let jittery = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: 800_000, jitter: .milliseconds(150)),
                                                   packetsSent: 1000, packetsLost: 0)
        #expect(jittery.verdict == .poor && jittery.limitedBy == [.jitter])
        let silent = NetworkTestAssessment.report(target: .sd360, samples: Self.samples(estimate: nil, roundTrip: nil, jitter: nil),
                                                  packetsSent: 0, packetsLost: 0)
        #expect(silent.verdict == .poor && Set(silent.limitedBy) == [.bandwidth, .loss, .roundTrip])
        #expect(NetworkTestVerdict.poor < .fair && NetworkTestVerdict.fair < .good)
    }
}

extension OneAtATime {
    /// Through the embedded platform, with the test stream's media going through an impairment proxy.
    @Suite("Network test: through the relay", .serialized)
    struct NetworkTestTests {
        @Test("a clear link is good for 360p (the estimate at the target, no loss, a round trip measured); a 300 kbit/s cap on the uplink makes it poor, limited by bandwidth, with a recommendation under the cap; the test stream is unpublished after each; bad options and tokens are refused")
        func verdictFollowsTheLink() async throws {
            let platform = try await LocalPlatform.start()
            let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: 40)
            var options = PCastOptions(uri: platform.signalingURL)
            options.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
            let sdk = PCast(options)
            try await sdk.start(authToken: try platform.token(.auth))

            let samples = Values<NetworkTestSample>()
            let clear = try await sdk.startNetworkTest(streamToken: try platform.token(.publish),
                                                       options: NetworkTestOptions(duration: .seconds(6), target: .sd360)) { samples.append($0) }
            print("network test, clear: \(clear.verdict) \(clear.limitedBy), estimate \(clear.estimatedBandwidth), sent \(clear.sentBitrate), "
                  + "loss \(clear.loss), rtt \(String(describing: clear.roundTripTime)), jitter \(String(describing: clear.jitter))")
            #expect(clear.verdict == .good && clear.limitedBy.isEmpty, "\(clear.limitedBy)")
            #expect(clear.estimatedBandwidth >= 680_000 && clear.recommendedVideoBitrate == 800_000)
            #expect(clear.sentBitrate > 400_000, "the noise pattern fills the bitrate: \(clear.sentBitrate)")
            #expect(clear.loss < 0.02)
            #expect(clear.roundTripTime.map { $0 < .milliseconds(100) } == true)
            #expect(samples.all.count >= 5 && samples.all == clear.samples, "one sample a second, each passed to progress")
            #expect(proxy.counters(for: .toServer).delivered > 300, "the test stream went through the proxy")
            #expect(await eventually(.seconds(5)) { platform.relay.statistics().streams == 0 }, "the test stream is unpublished")

            var capped = ImpairmentProfile(bandwidth: 300_000)
            capped.queueLimit = .milliseconds(100)
            proxy.setProfile(capped, for: .toServer)
            let poor = try await sdk.startNetworkTest(streamToken: try platform.token(.publish),
                                                      options: NetworkTestOptions(duration: .seconds(10), target: .sd360))
            print("network test, 300 kbit/s: \(poor.verdict) \(poor.limitedBy), estimate \(poor.estimatedBandwidth), sent \(poor.sentBitrate), "
                  + "loss \(poor.loss), rtt \(String(describing: poor.roundTripTime)), samples \(poor.samples.map { ($0.estimatedBandwidth ?? 0) / 1000 })")
            #expect(poor.verdict == .poor && poor.limitedBy.contains(.bandwidth), "\(poor.limitedBy)")
            #expect(poor.estimatedBandwidth < 320_000, "the estimate settles under the cap")
            #expect(poor.recommendedVideoBitrate < 300_000)
            #expect(await eventually(.seconds(5)) { platform.relay.statistics().streams == 0 })
            proxy.setProfile(.clear, for: .toServer)

            await #expect(throws: PCastError.invalidRequest("a network test lasts 3 s or more")) {
                try await sdk.startNetworkTest(streamToken: try platform.token(.publish), options: NetworkTestOptions(duration: .seconds(1)))
            }
            await #expect { try await sdk.startNetworkTest(streamToken: "DIGEST:forged", options: NetworkTestOptions(duration: .seconds(3), target: .low180)) }
                throws: { ($0 as? PCastError)?.code == .refused || ($0 as? PCastError)?.code == .invalidRequest }
            #expect(platform.relay.statistics().streams == 0, "a refused test leaves nothing published")

            // Cancelling the task ends the test at once and unpublishes.
            let cancelled = Task { try await sdk.startNetworkTest(streamToken: try platform.token(.publish), options: NetworkTestOptions(duration: .seconds(30), target: .low180)) }
            #expect(await eventually(.seconds(10)) { platform.relay.statistics().streams == 1 })
            cancelled.cancel()
            let outcome = await cancelled.result
            #expect(throws: PCastError.self) { try outcome.get() }
            if case .failure(let error) = outcome { #expect((error as? PCastError)?.code == .cancelled) }
            #expect(await eventually(.seconds(5)) { platform.relay.statistics().streams == 0 })

            await sdk.stop()
            proxy.stop()
            await platform.shutdown()
        }
    }
}

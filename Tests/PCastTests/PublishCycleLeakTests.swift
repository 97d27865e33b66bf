import Foundation
import PCastBenchmarks
import PCast
import PCastNode
import PCastServer
import Testing

extension Leaks {
    /// Runs in the leak process of `make test` (its name ends in LeakTests), alone, so other suites'
    /// threads and memory do not blur the figures.
    @Suite("Publish / unpublish cycles leak nothing", .serialized)
    struct PublishCycleLeakTests {
        @Test("1,000 publish / unpublish cycles (SDK and platform in one process) grow RSS by at most 5 MB and keep no threads or descriptors")
        func thousandCycles() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(audio: true)
            let result = try await PublishCycleBenchmark(cycles: 1_000, warmUpCycles: 200).run(sdk: sdk, media: media) {
                try platform.token(.publish)
            }
            print("publish cycles: \(result.cycles) cycles, median \(String(format: "%.1f", result.cycleMedianMilliseconds)) ms; "
                  + "RSS +\(result.residentGrowthKiB) KiB; threads \(result.before.threads) → \(result.after.threads); "
                  + "descriptors \(result.before.openDescriptors) → \(result.after.openDescriptors)")
            #expect(result.residentGrowthKiB <= PublishCycleBenchmark.Result.goalGrowthKiB, "RSS grew by \(result.residentGrowthKiB) KiB")
            #expect(result.after.threads <= result.before.threads + 4)
            #expect(result.after.openDescriptors <= result.before.openDescriptors + 4)
            #expect(platform.relay.statistics().streams == 0, "every stream was removed from the relay")
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }
    }
}

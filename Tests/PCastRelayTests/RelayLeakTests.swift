import PCastContracts
@testable import PCastRelay
import PCastTestSupport
import Testing

extension Leaks {
    /// Descriptor and thread counts are per process: this suite runs in the leak group's process.
    @Suite("Relay leaks")
    struct RelayLeakTests {
        @Test("creating and destroying 200 relays leaks no descriptor and no thread")
        func noLeaks() throws {
            // Warm up libsrtp and the test machinery, then compare.
            try Relay().shutdown()
            let descriptors = ProcessFootprint.current().openDescriptors
            let threads = ProcessFootprint.current().threads
            for index in 0..<200 {
                let relay = try Relay()
                _ = try relay.addPublisher(streamId: "s", tracks: [videoTrack(ssrc: 7)])
                _ = try relay.addSubscriber(streamId: "s", subscriberId: "x")
                // Half are shut down explicitly, half only released (deinit shuts them down).
                if index.isMultiple(of: 2) { relay.shutdown() }
            }
            // Other suites run concurrently and open sockets of their own, so allow a little slack;
            // a leak here would be at least 200 (3 descriptors and a thread per relay).
            #expect(waitUntil { ProcessFootprint.current().openDescriptors < descriptors + 40 }, "descriptors: \(descriptors) → \(ProcessFootprint.current().openDescriptors)")
            #expect(waitUntil { ProcessFootprint.current().threads < threads + 20 }, "threads: \(threads) → \(ProcessFootprint.current().threads)")
        }
    }
}

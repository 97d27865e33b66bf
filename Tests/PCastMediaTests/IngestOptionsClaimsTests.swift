@testable import PCastMedia
import Testing

/// Claims of the API guide (PCast.docc/APIGuide.md) about ingest: when video is re-encoded, and
/// how long a passed-through file waits for its first viewer.
@Suite("API guide claims: ingest passes H.264 through unless a frame rate is asked for")
struct IngestOptionsClaimsTests {
    @Test("an ingest passes its video through unless a maximum or exact frame rate is set (each of those alone turns re-encoding on), and a passed-through file waits 10 s by default for its first viewer's keyframe request")
    func passthroughAndFirstViewerWait() {
        let plain = IngestOptions()
        #expect(plain.passthrough)
        #expect(plain.firstViewerWait == .seconds(10))
        #expect(!IngestOptions(maximumFrameRate: 15).passthrough)
        #expect(!IngestOptions(exactFrameRate: 25).passthrough)
        #expect(IngestOptions(prerollSkip: .zero, loop: true).passthrough, "other options leave the video passed through")
    }
}

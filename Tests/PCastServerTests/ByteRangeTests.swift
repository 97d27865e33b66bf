@testable import PCastServer
import Testing

@Suite("HTTP byte ranges")
struct ByteRangeTests {
    @Test("single ranges, suffixes, open ends and clamping")
    func ranges() {
        #expect(ByteRange(header: nil, size: 1000) == .whole)
        #expect(ByteRange(header: "bytes=0-99", size: 1000) == .partial(0...99))
        #expect(ByteRange(header: "Bytes = 10-10", size: 1000) == .whole)
        #expect(ByteRange(header: "bytes=10-10", size: 1000) == .partial(10...10))
        #expect(ByteRange(header: "bytes=500-", size: 1000) == .partial(500...999))
        #expect(ByteRange(header: "bytes=900-5000", size: 1000) == .partial(900...999))
        #expect(ByteRange(header: "bytes=-100", size: 1000) == .partial(900...999))
        #expect(ByteRange(header: "bytes=-5000", size: 1000) == .partial(0...999))
    }

    @Test("past the end or empty is unsatisfiable; anything malformed or multi-range gets the whole file")
    func refusals() {
        #expect(ByteRange(header: "bytes=1000-", size: 1000) == .unsatisfiable)
        #expect(ByteRange(header: "bytes=2000-2100", size: 1000) == .unsatisfiable)
        #expect(ByteRange(header: "bytes=-0", size: 1000) == .unsatisfiable)
        #expect(ByteRange(header: "bytes=0-", size: 0) == .unsatisfiable)
        for header in ["bytes=0-1,5-6", "items=0-1", "bytes=abc", "bytes=5-2", "bytes=1-2-3", "bytes=99999999999999999999-", "bytes=-", "bytes=+1-2"] {
            #expect(ByteRange(header: header, size: 1000) == .whole, "\(header)")
        }
    }
}

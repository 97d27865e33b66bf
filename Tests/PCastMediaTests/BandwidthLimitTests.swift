import PCastMedia
import Synchronization
import Testing

@Suite("Bandwidth limits: the most recent wins")
struct BandwidthLimitTests {
    @Test("a later limit supersedes; releasing a superseded one does nothing; releasing the latest lifts the limit")
    func rule() {
        var limits = BandwidthLimit()
        #expect(limits.current == nil)
        let a = limits.limit(200_000)
        #expect(limits.current == 200_000)
        let b = limits.limit(400_000)
        #expect(limits.current == 400_000)
        do { let released = limits.release(a); #expect(!released) }
        #expect(limits.current == 400_000)
        do { let released = limits.release(b); #expect(released) }
        #expect(limits.current == nil)
        do { let released = limits.release(b); #expect(!released) }
        do { let released = limits.release(a); #expect(!released) }
        let c = limits.limit(0)
        #expect(limits.current == 1)
        do { let released = limits.release(c); #expect(released) }
    }

    @Test("the limiter applies each change once, and dropping a disposable releases it")
    func limiter() {
        let applied = Mutex<[Int?]>([])
        let limiter = BandwidthLimiter { value in applied.withLock { $0.append(value) } }
        let first = limiter.limit(300_000)
        var second: Disposable? = limiter.limit(100_000)
        first.dispose()
        #expect(limiter.current == 100_000)
        second = nil
        #expect(second == nil && limiter.current == nil)
        first.dispose()
        #expect(applied.withLock { $0 } == [300_000, 100_000, nil])
    }
}

@testable import PCastMedia
import PCastTestSupport
import Testing

@Suite("Event sequences beside the seed's callbacks")
struct EventBroadcastTests {
    @Test("every consumer hears every event yielded after it arrived, in order; finish ends them all")
    func consumers() async {
        let events = EventBroadcast<Int>()
        events.yield(0)   // nobody listens: dropped
        let first = events.stream(), second = events.stream()
        let firstAll = Task { await first.reduce(into: [Int]()) { $0.append($1) } }
        let secondAll = Task { await second.reduce(into: [Int]()) { $0.append($1) } }
        for value in 1...5 { events.yield(value) }
        events.finish()
        #expect(await firstAll.value == [1, 2, 3, 4, 5])
        #expect(await secondAll.value == [1, 2, 3, 4, 5])
        // Closed for good: a later consumer's sequence ends at once, and nothing is delivered.
        events.yield(6)
        #expect(await events.stream().reduce(into: [Int]()) { $0.append($1) } == [])
        #expect(!events.hasConsumers)
    }

    @Test("finish without closing ends today's consumers only: a later one hears later events (a renderer started again)")
    func restart() async {
        let events = EventBroadcast<String>()
        let before = events.stream()
        events.yield("a")
        events.finish(closing: false)
        #expect(await before.reduce(into: [String]()) { $0.append($1) } == ["a"])
        let after = events.stream()
        events.yield("b")
        events.finish()
        #expect(await after.reduce(into: [String]()) { $0.append($1) } == ["b"])
    }

    @Test("a consumer that stops iterating is forgotten; the first consumer to arrive starts the producer, once per quiet period")
    func cancellationAndFirstConsumer() async {
        let events = EventBroadcast<Int>()
        let starts = Counter()
        events.onFirstConsumer { _ = starts.increment() }
        let consumer = Task {
            for await value in events.stream() where value == 2 { return value }
            return -1
        }
        #expect(await eventually { events.hasConsumers })
        events.yield(1)
        events.yield(2)
        #expect(await consumer.value == 2)
        #expect(await eventually { !events.hasConsumers })
        _ = events.stream()   // dropped at once: its termination removes it
        #expect(await eventually { !events.hasConsumers })
        #expect(starts.value == 2)
    }

    @Test("a slow consumer keeps the newest events, up to its buffer")
    func bufferingNewest() async {
        let events = EventBroadcast<Int>()
        let stream = events.stream(bufferingNewest: 3)
        for value in 1...10 { events.yield(value) }
        events.finish()
        #expect(await stream.reduce(into: [Int]()) { $0.append($1) } == [8, 9, 10])
    }
}

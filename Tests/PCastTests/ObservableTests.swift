import Foundation
@testable import PCast
import Synchronization
import Testing

/// The values a callback was given, in order, and whether two of its calls ever overlapped.
private final class CallLog<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])
    private let inCall = Atomic<Bool>(false)
    private let overlap = Atomic<Bool>(false)

    func record(_ item: T) {
        if inCall.exchange(true, ordering: .acquiring) { overlap.store(true, ordering: .relaxed) }
        items.withLock { $0.append(item) }
        inCall.store(false, ordering: .releasing)
    }

    var all: [T] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
    var overlapped: Bool { overlap.load(ordering: .relaxed) }
}

/// A value shared between threads.
private final class Shared<T: Sendable>: Sendable {
    private let value: Mutex<T>
    init(_ value: T) { self.value = Mutex(value) }
    var get: T { value.withLock { $0 } }
    func set(_ newValue: T) { value.withLock { $0 = newValue } }
    func modify(_ body: (inout T) -> Void) { value.withLock { body(&$0) } }
}

/// A subscription a callback can reach (to dispose of it, or of another).
private final class Holder: Sendable {
    private let disposable = Mutex<Disposable?>(nil)
    func set(_ newValue: Disposable) { disposable.withLock { $0 = newValue } }
    func take() -> Disposable? { disposable.withLock { value in defer { value = nil }; return value } }
}

private final class Canary: Sendable {}

private struct Stamp: Sendable, Equatable {
    let writer: Int
    let seq: Int
}

/// Runs `body(0..<count)` on `count` threads of their own, released together; returns when all
/// are done. (Threads, not tasks: the bodies may block, and preemption makes the races real.)
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
        let arrived = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0), done = DispatchGroup()
        for index in 0..<count {
            done.enter()
            Thread {
                arrived.signal()
                go.wait()
                body(index)
                done.leave()
            }.start()
        }
        Thread {
            for _ in 0..<count { arrived.wait() }
            for _ in 0..<count { go.signal() }
            done.wait()
            finished.resume()
        }.start()
    }
}

/// Whether `values` goes up by exactly one each time.
private func consecutive(_ values: [Int]) -> Bool {
    zip(values, values.dropFirst()).allSatisfy { $1 == $0 + 1 }
}

extension ManyClients {
    @Suite(.timeLimit(.minutes(1)))
    struct ObservableTests {
        // MARK: Hot observables

        @Test func subscribeCallsAtOnceWithTheCurrentValueThenOnEachChange() {
            let observable = ObservableValue(1)
            let log = CallLog<Int>()
            let watching = observable.subscribe { log.record($0) }
            #expect(log.all == [1])   // before subscribe returned
            observable.setValue(2)
            observable.setValue(3)
            #expect(log.all == [1, 2, 3])
            #expect(observable.value == 3)
            #expect(observable.getValue() == 3)
            watching.dispose()
        }

        @Test func settingAnEqualValueNotifiesNobody() {
            let observable = ObservableValue("a")
            let first = CallLog<String>(), second = CallLog<String>()
            let watching = [observable.subscribe { first.record($0) }, observable.subscribe { second.record($0) }]
            observable.setValue("a")
            observable.update { $0 = "a" }
            observable.setValue("b")
            observable.setValue("b")
            #expect(first.all == ["a", "b"])
            #expect(second.all == ["a", "b"])
            watching.forEach { $0.dispose() }
        }

        @Test func updateChangesTheValueFromTheCurrentOne() {
            let observable = ObservableValue<[Int]>([])
            let log = CallLog<[Int]>()
            let watching = observable.subscribe { log.record($0) }
            observable.update { $0.append(1) }
            observable.update { $0.append(2) }
            observable.update { _ in }   // unchanged: nothing
            #expect(observable.value == [1, 2])
            #expect(log.all == [[], [1], [1, 2]])
            watching.dispose()
        }

        @Test func anOptionalValueStartsAtNil() {
            let observable = ObservableValue<Int?>(nil)
            let log = CallLog<Int?>()
            let watching = observable.subscribe { log.record($0) }
            observable.setValue(nil)
            observable.setValue(1)
            observable.setValue(nil)
            #expect(log.all == [nil, 1, nil])
            #expect(observable.value == nil)
            watching.dispose()
        }

        @Test func disposingOrDroppingTheSubscriptionStopsTheCalls() {
            let observable = ObservableValue(0)
            let disposed = CallLog<Int>(), dropped = CallLog<Int>()
            let watching = observable.subscribe { disposed.record($0) }
            _ = observable.subscribe { dropped.record($0) }   // released at once
            #expect(observable.subscriberCount == 1)
            observable.setValue(1)
            watching.dispose()
            watching.dispose()   // again: nothing
            observable.setValue(2)
            #expect(disposed.all == [0, 1])
            #expect(dropped.all == [0])
            #expect(observable.subscriberCount == 0)
        }

        @Test func aChangeMadeByACallbackComesAfterTheCurrentRound() {
            let observable = ObservableValue(0)
            let log = CallLog<String>()
            let first = observable.subscribe { value in
                log.record("A\(value)")
                if value == 1 { observable.setValue(2) }
            }
            let second = observable.subscribe { log.record("B\($0)") }
            observable.setValue(1)
            // Every subscriber heard of 1 before anyone heard of 2, and all of it before setValue returned.
            #expect(log.all == ["A0", "B0", "A1", "B1", "A2", "B2"])
            first.dispose()
            second.dispose()
        }

        @Test func aCallbackMaySubscribeAndDisposeOthers() {
            let observable = ObservableValue(0)
            let log = CallLog<String>()
            let second = Holder(), third = Holder()
            let first = observable.subscribe { value in
                log.record("A\(value)")
                if value == 1 {
                    second.take()?.dispose()   // before its turn in this round: B never hears of 1
                    observable.setValue(2)     // after this round
                    third.set(observable.subscribe { log.record("C\($0)") })   // 2 at once, and not again
                }
            }
            second.set(observable.subscribe { log.record("B\($0)") })
            observable.setValue(1)
            observable.setValue(3)
            #expect(log.all == ["A0", "B0", "A1", "C2", "A2", "A3", "C3"])
            #expect(observable.subscriberCount == 2)
            first.dispose()
            third.take()?.dispose()
            #expect(observable.subscriberCount == 0)
        }

        @Test func aCallbackMayDisposeItsOwnSubscription() {
            let observable = ObservableValue(0)
            let log = CallLog<Int>()
            let own = Holder()
            own.set(observable.subscribe { value in
                log.record(value)
                if value == 1 {
                    own.take()?.dispose()
                    observable.setValue(2)   // no longer for this subscriber
                }
            })
            observable.setValue(1)
            observable.setValue(3)
            #expect(log.all == [0, 1])
            #expect(observable.value == 3)
            #expect(observable.subscriberCount == 0)
        }

        @Test func aChangeMadeDuringTheImmediateCallComesAfterIt() {
            let observable = ObservableValue(0)
            let log = CallLog<String>()
            let first = observable.subscribe { log.record("A\($0)") }
            let second = observable.subscribe { value in
                log.record("B\(value)")
                if value == 0 { observable.setValue(1) }
            }
            #expect(log.all == ["A0", "B0", "A1", "B1"])
            first.dispose()
            second.dispose()
        }

        @Test func aSetterReturnsWhileAnotherThreadDeliversAndThatThreadDeliversItsChange() async {
            let observable = ObservableValue(0)
            let log = CallLog<Int>()
            let delivering = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            let seenBySetter = Shared<[Int]>([])
            let watching = observable.subscribe { value in
                log.record(value)
                // (The timeout only keeps a deadlocking implementation from hanging the run.)
                if value == 1 { delivering.signal(); _ = release.wait(timeout: .now() + 30) }
            }
            await onThreads(2) { index in
                if index == 0 {
                    observable.setValue(1)   // blocks in the callback, then delivers 2 and 3
                } else {
                    delivering.wait()
                    observable.setValue(2)   // queued for thread 0
                    observable.setValue(3)
                    seenBySetter.set(log.all)
                    release.signal()
                }
            }
            #expect(seenBySetter.get == [0, 1])
            #expect(log.all == [0, 1, 2, 3])
            watching.dispose()
        }

        @Test func changesDuringAnImmediateCallWaitForItAndComeBeforeSubscribeReturns() async {
            let observable = ObservableValue(0)
            let log = CallLog<Int>()
            let inImmediateCall = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            let seenByWriter = Shared<[Int]>([]), seenAfterSubscribe = Shared<[Int]>([])
            let subscription = Holder()
            await onThreads(2) { index in
                if index == 0 {
                    subscription.set(observable.subscribe { value in
                        log.record(value)
                        if value == 0 { inImmediateCall.signal(); _ = release.wait(timeout: .now() + 30) }
                    })
                    seenAfterSubscribe.set(log.all)
                } else {
                    inImmediateCall.wait()
                    observable.setValue(1)   // for the subscribing thread to deliver, after the immediate call
                    observable.setValue(2)
                    seenByWriter.set(log.all)
                    release.signal()
                }
            }
            #expect(seenByWriter.get == [0])
            #expect(seenAfterSubscribe.get == [0, 1, 2])
            #expect(!log.overlapped)
            subscription.take()?.dispose()
        }

        // MARK: Concurrency

        @Test func concurrentSettersDeliverEveryChangeOnceInCommitOrder() async {
            let writers = 8, changes = 1_000
            let initial = Stamp(writer: -1, seq: 0)
            let observable = ObservableValue(initial)
            let logs = (0..<3).map { _ in CallLog<Stamp>() }
            let watching = logs.map { log in observable.subscribe { log.record($0) } }
            await onThreads(writers) { writer in
                for seq in 0..<changes { observable.setValue(Stamp(writer: writer, seq: seq)) }
            }
            let final = observable.value
            let reference = logs[0].all
            for log in logs {
                let seen = log.all
                #expect(seen.count == 1 + writers * changes)   // the initial value, then each change once
                #expect(seen.first == initial)
                #expect(seen.last == final)
                #expect(seen == reference)                    // one order (the commit order) for all
                for writer in 0..<writers {
                    #expect(seen.filter { $0.writer == writer }.map(\.seq) == Array(0..<changes))
                }
                #expect(!log.overlapped)
            }
            watching.forEach { $0.dispose() }
        }

        @Test func subscribesRacingWithChangesMissNothingAndNeverGoBack() async {
            let observable = ObservableValue(0)
            let logs = Shared<[CallLog<Int>]>([])
            let subscriptions = Shared<[Disposable]>([])
            @Sendable func addSubscriber() {
                let log = CallLog<Int>()
                logs.modify { $0.append(log) }
                let subscription = observable.subscribe { log.record($0) }
                subscriptions.modify { $0.append(subscription) }
            }
            // Subscribes and changes from within callbacks too (on whichever thread is delivering).
            let reentrant = CallLog<Int>()
            logs.modify { $0.append(reentrant) }
            let watching = observable.subscribe { value in
                reentrant.record(value)
                if value % 250 == 0 { addSubscriber() }
                if value % 1_000 == 0 { observable.update { $0 += 1 } }
            }
            await onThreads(10) { index in
                if index < 8 {
                    for _ in 0..<1_000 { observable.update { $0 += 1 } }
                } else {
                    for _ in 0..<40 { addSubscriber() }
                }
            }
            let final = observable.value
            #expect(final > 8_000)
            let seen = logs.get.map(\.all)
            #expect(seen.count > 80)
            // Each from the value it was given first, every later change once, in order, to the end.
            #expect(seen.filter { !consecutive($0) }.isEmpty)
            #expect(seen.filter { $0.last != final }.isEmpty)
            #expect(logs.get.filter(\.overlapped).isEmpty)
            #expect(reentrant.all == Array(0...final))
            watching.dispose()
            subscriptions.get.forEach { $0.dispose() }
            #expect(observable.subscriberCount == 0)
        }

        @Test func noCallStartsAfterDisposeReturns() async {
            let observable = ObservableValue(0)
            let calls = Shared(0)
            let callsAtDispose = Shared(-1)
            let watching = observable.subscribe { _ in calls.modify { $0 += 1 } }
            await onThreads(5) { index in
                if index == 0 {
                    while calls.get < 100 { Thread.sleep(forTimeInterval: 0) }
                    watching.dispose()
                    callsAtDispose.set(calls.get)
                } else {
                    for _ in 0..<1_000 { observable.update { $0 += 1 } }
                }
            }
            // At most the one call that had started already (one call at a time) may have counted since.
            #expect(calls.get - callsAtDispose.get <= 1)
            #expect(observable.subscriberCount == 0)
            #expect(observable.value == 4_000)
        }

        // MARK: values

        @Test func valuesStartWithTheCurrentValueThenFollowTheChanges() async {
            let observable = ObservableValue(0)
            observable.setValue(5)
            var values = observable.values.makeAsyncIterator()
            #expect(await values.next() == 5)
            observable.setValue(6)
            #expect(await values.next() == 6)
            #expect(observable.subscriberCount == 1)
        }

        @Test func valuesGiveASlowConsumerTheLatestValue() async {
            let observable = ObservableValue(0)
            var values = observable.values.makeAsyncIterator()
            #expect(await values.next() == 0)
            for value in 1...100 { observable.setValue(value) }
            #expect(await values.next() == 100)   // 1...99 skipped, not queued
            observable.setValue(101)
            #expect(await values.next() == 101)
        }

        @Test func valuesEndWhenTheTaskIsCancelledAndUnsubscribe() async {
            let observable = ObservableValue(0)
            let (received, receiver) = AsyncStream<Int>.makeStream()
            let consumer = Task {
                for await value in observable.values { receiver.yield(value) }
                receiver.finish()
            }
            var seen = received.makeAsyncIterator()
            #expect(await seen.next() == 0)
            #expect(observable.subscriberCount == 1)
            observable.setValue(1)
            #expect(await seen.next() == 1)
            consumer.cancel()
            await consumer.value
            #expect(await seen.next() == nil)   // the loop ended
            #expect(observable.subscriberCount == 0)
        }

        @Test func aCancelledTaskGetsNoValues() async {
            let observable = ObservableValue(0)
            let consumer = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                var values = observable.values.makeAsyncIterator()
                return await values.next()
            }
            #expect(await consumer.value == nil)
            #expect(observable.subscriberCount == 0)
        }

        @Test func droppingTheIteratorUnsubscribes() async {
            let observable = ObservableValue(0)
            do {
                var values = observable.values.makeAsyncIterator()
                #expect(await values.next() == 0)
                #expect(observable.subscriberCount == 1)
            }
            #expect(observable.subscriberCount == 0)
        }

        @Test func valuesRiseToTheLatestUnderConcurrentChanges() async {
            let observable = ObservableValue(0)
            var values = observable.values.makeAsyncIterator()
            async let writing: Void = onThreads(4) { _ in
                for _ in 0..<1_000 { observable.update { $0 += 1 } }
            }
            var seen: [Int] = []
            while let value = await values.next() {
                seen.append(value)
                if value == 4_000 { break }   // the last change always arrives
            }
            await writing
            #expect(seen.first == 0)
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 })
            #expect(seen.last == 4_000)
        }

        // MARK: Cold observables

        @Test func aColdObservableHasNoValueToGetOrSet() {
            let cold = ColdObservable<Int>()
            #expect(throws: ObservableError.coldObservable) { try cold.getValue() }
            #expect(throws: ObservableError.coldObservable) { try cold.setValue(1) }
            cold.emit(1)
            #expect(throws: ObservableError.coldObservable) { try cold.getValue() }
            #expect(!ObservableError.coldObservable.description.isEmpty)
        }

        @Test func aColdSubscriberIsCalledOnEmissionsOnly() {
            let cold = ColdObservable<Int>()
            cold.emit(1)
            let first = CallLog<Int>()
            let watching = cold.subscribe { first.record($0) }
            #expect(first.all.isEmpty)   // no immediate call
            cold.emit(2)
            cold.emit(2)                 // unchanged for this subscriber
            cold.emit(3)
            #expect(first.all == [2, 3])
            let second = CallLog<Int>()
            let alsoWatching = cold.subscribe { second.record($0) }
            cold.emit(3)                 // the same again: new to the second subscriber only
            #expect(first.all == [2, 3])
            #expect(second.all == [3])
            #expect(cold.subscriberCount == 2)
            watching.dispose()
            cold.emit(4)
            #expect(first.all == [2, 3])
            #expect(second.all == [3, 4])
            alsoWatching.dispose()
            #expect(cold.subscriberCount == 0)
        }

        @Test func aColdEmissionFromACallbackComesAfterTheCurrentRound() {
            let cold = ColdObservable<Int>()
            let log = CallLog<String>()
            let first = cold.subscribe { value in
                log.record("A\(value)")
                if value == 1 { cold.emit(2) }
            }
            let second = cold.subscribe { log.record("B\($0)") }
            cold.emit(1)
            #expect(log.all == ["A1", "B1", "A2", "B2"])
            first.dispose()
            second.dispose()
        }

        @Test func coldValuesStartWithTheNextEmission() async {
            let cold = ColdObservable<Int>()
            cold.emit(1)
            let consumer = Task {
                var values = cold.values.makeAsyncIterator()
                cold.emit(2)
                cold.emit(3)
                return await values.next()
            }
            #expect(await consumer.value == 3)
            #expect(cold.subscriberCount == 0)
        }

        @Test func coldValuesEndWhenTheTaskIsCancelled() async {
            let cold = ColdObservable<Int>()
            let (started, starter) = AsyncStream<Void>.makeStream()
            let consumer = Task {
                var values = cold.values.makeAsyncIterator()
                starter.yield()
                return await values.next()
            }
            var waiting = started.makeAsyncIterator()
            await waiting.next()
            #expect(cold.subscriberCount == 1)
            consumer.cancel()
            #expect(await consumer.value == nil)
            #expect(cold.subscriberCount == 0)
        }

        // MARK: Lifetime

        @Test func anObservableWithSubscribersIsFreedByItsOwner() async {
            weak var weakObservable: ObservableValue<Int>?
            weak var weakCold: ColdObservable<Int>?
            weak var weakCanary: Canary?
            var subscriptions: [Disposable] = []
            var iterator: ObservableValues<Int>.AsyncIterator?
            do {
                let observable = ObservableValue(0), cold = ColdObservable<Int>(), canary = Canary()
                weakObservable = observable
                weakCold = cold
                weakCanary = canary
                subscriptions.append(observable.subscribe { _ in withExtendedLifetime(canary) {} })
                subscriptions.append(cold.subscribe { _ in withExtendedLifetime(canary) {} })
                iterator = observable.values.makeAsyncIterator()
                observable.setValue(1)
                cold.emit(1)
            }
            #expect(weakObservable == nil)
            #expect(weakCold == nil)
            #expect(weakCanary == nil)   // the callbacks went with them
            subscriptions.forEach { $0.dispose() }   // harmless afterwards
            #expect(await iterator?.next() == 1)
        }
    }
}

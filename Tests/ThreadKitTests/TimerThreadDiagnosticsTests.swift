import Foundation
import Testing
import ThreadKitTestSupport
@testable import ThreadKit

/// A tag with no string or number form: a dump shows its type's name.
private struct CustomTag: Hashable, Sendable {
    var id: Int
}

@Suite struct TimerThreadDiagnosticsTests {
    @Test func aTimerShowsItsNextCallsWithTheirTagsAndCountsItsCalls() async throws {
        let name = "dtimer.calls.\(UUID().uuidString.prefix(8))"
        let timer = TimerThread(name: name)
        defer { _ = timer.dispose() }
        try timer.schedule(after: .seconds(300), tag: CustomTag(id: 1)) {}
        try timer.schedule(after: .seconds(200), tag: 7) {}
        try timer.schedule(after: .seconds(100), tag: "a") {}
        let entry = try #require(diagnosticsComponent("TimerThread", named: name))
        #expect(entry.settings == ["shared": "false"])
        #expect(entry.pendingCount == 3)
        #expect(entry.pending.map(\.what) == ["\"a\"", "7", "CustomTag"])
        #expect(entry.pending.map(\.reason) == ["due", "due", "due"])
        let dueIn = entry.pending.map(\.dueIn)
        #expect(dueIn[0] > 90 && dueIn[0] <= 100)
        #expect(dueIn[1] > 190 && dueIn[1] <= 200)
        #expect(dueIn[2] > 290 && dueIn[2] <= 300)
        #expect(entry.metric("calls_pending") == 3)
        #expect(entry.metric("calls_scheduled_total") == 3)
        #expect(entry.metric("calls_fired_total") == 0)
        #expect(entry.metric("calls_cancelled_total") == 0)

        let cancelled = try timer.schedule(after: .seconds(50)) {}
        #expect(cancelled.cancel())
        #expect(timer.cancelAll(tag: 7) == 1)
        let fired = Latch(count: 2)
        try timer.schedule(after: .zero) { fired.countDown() }
        try timer.schedule(after: .milliseconds(1)) { fired.countDown() }
        #expect(fired.wait(timeout: .seconds(10)))
        // The counts change under the timer's lock after each call returns.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsComponent("TimerThread", named: name)?.metric("calls_fired_total") == 2 })
        let after = try #require(diagnosticsComponent("TimerThread", named: name))
        #expect(after.pendingCount == 2)
        #expect(after.pending.map(\.what) == ["\"a\"", "CustomTag"])
        #expect(after.metric("calls_scheduled_total") == 6)
        #expect(after.metric("calls_cancelled_total") == 2)
        let lateness = try #require(after.metrics.first { $0.name == "lateness_seconds" })
        #expect(lateness.kind == .histogram)
        #expect(lateness.buckets.map(\.upperBound) == [
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, .infinity,
        ])
        #expect(lateness.buckets.last?.count == 2)
        #expect(zip(lateness.buckets, lateness.buckets.dropFirst()).allSatisfy { $0.count <= $1.count })
        #expect(lateness.value >= 0)
        // Its thread sleeps until the next call, 100 s ahead.
        #expect(await eventually(pollingEvery: .milliseconds(50)) {
            diagnosticsComponent("TimerThread", named: name)?.threads.first?.state == .sleeping
        })
        let thread = try #require(diagnosticsComponent("TimerThread", named: name)?.threads.first)
        #expect(thread.name == name)
        #expect(thread.until.map { $0 > 90 && $0 <= 100 } == true)
    }

    @Test func aRepeatingCallSaysHowOftenItRepeats() async throws {
        let name = "dtimer.repeat.\(UUID().uuidString.prefix(8))"
        let timer = TimerThread(name: name)
        defer { _ = timer.dispose() }
        try timer.schedule(every: .seconds(500), tag: 2.5) {}
        try timer.schedule(after: .seconds(900)) {}
        let entry = try #require(diagnosticsComponent("TimerThread", named: name))
        #expect(entry.pending.map(\.what) == ["2.5", "untagged"])
        #expect(entry.pending.map(\.reason) == ["repeating every 500s", "due"])
    }

    @Test func anIdleTimerThreadSleepsWithNoDeadline() async throws {
        let name = "dtimer.idle.\(UUID().uuidString.prefix(8))"
        let timer = TimerThread(name: name)
        defer { _ = timer.dispose() }
        #expect(diagnosticsComponent("TimerThread", named: name)?.threads == [])
        let ran = Latch()
        try timer.schedule(after: .zero) { ran.countDown() }
        #expect(ran.wait(timeout: .seconds(10)))
        #expect(await eventually(pollingEvery: .milliseconds(50)) {
            let thread = diagnosticsComponent("TimerThread", named: name)?.threads.first
            return thread?.state == .sleeping && thread?.until == nil
        })
    }

    @Test func aTagIsShownWithoutCallingItsCode() {
        #expect(TimerCore.shown(nil) == "untagged")
        #expect(TimerCore.shown(AnyHashable("x")) == "\"x\"")
        #expect(TimerCore.shown(AnyHashable(Substring("sub"))) == "\"sub\"")
        #expect(TimerCore.shown(AnyHashable(Int8(-3))) == "-3")
        #expect(TimerCore.shown(AnyHashable(UInt64(42))) == "42")
        #expect(TimerCore.shown(AnyHashable(0.5)) == "0.5")
        #expect(TimerCore.shown(AnyHashable(CustomTag(id: 3))) == "CustomTag")
    }

    @Test func theEarliestElementsOfAHeapComeInOrderWithoutSortingIt() {
        var heap = TimerHeap<TimerHeapProbe>()
        var generator = SystemRandomNumberGenerator()
        var live: [(UInt64, TimerHeapProbe)] = []
        for index in 0..<2_000 {
            let probe = TimerHeapProbe(index)
            let deadline = UInt64.random(in: 0..<1_000, using: &generator)
            heap.insert(probe, deadline: MonotonicInstant(nanoseconds: deadline))
            live.append((deadline, probe))
        }
        // Dead entries stay inside the heap: the walk passes through them.
        for (index, entry) in live.enumerated() where index % 3 == 0 { entry.1.isCancelled = true }
        let expected = live.enumerated().filter { $0.offset % 3 != 0 }.map(\.element)
            .sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1.index < $1.1.index }
        for limit in [0, 1, 5, 50] {
            let earliest = heap.earliest(limit)
            #expect(earliest.map(\.element.index) == expected.prefix(limit).map(\.1.index))
            #expect(earliest.map(\.deadline.nanoseconds) == expected.prefix(limit).map(\.0))
        }
        #expect(heap.count == live.count)
    }

    @Test func aDumpOfAHundredThousandPendingCallsIsQuick() throws {
        let name = "dtimer.many.\(UUID().uuidString.prefix(8))"
        let timer = TimerThread(name: name)
        defer { _ = timer.dispose() }
        for index in 0..<100_000 {
            try timer.schedule(after: .seconds(1_000 + index % 977), tag: index % 10 == 0 ? index : nil) {}
        }
        var fastest = Duration.seconds(1)
        for _ in 0..<3 {
            let clock = DiagnosticsClock(now: .now())
            let started = ContinuousClock.now
            let entry = timer.core.report(clock)
            fastest = min(fastest, ContinuousClock.now - started)
            #expect(entry.pendingCount == 100_000)
            #expect(entry.pending.count == TimerCore.callsShown)
            #expect(entry.pending.first.map { $0.dueIn > 900 && $0.dueIn <= 1_000 } == true)
        }
        // The report copies five calls out of the heap's top (microseconds); the bound for a
        // whole dump with 100,000 pending calls is 50 ms, which a sort of the heap under the lock misses.
        #expect(fastest < .milliseconds(50))
    }

    @Test func aReleasedTimerLeavesTheInventory() async throws {
        let name = "dtimer.gone.\(UUID().uuidString.prefix(8))"
        do {
            let timer = TimerThread(name: name)
            try timer.schedule(after: .zero) {}
            #expect(diagnosticsComponent("TimerThread", named: name) != nil)
        }
        // A snapshot taken by another test at this moment may hold it a little longer.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsComponent("TimerThread", named: name) == nil })
    }
}

/// An element of a heap under test, numbered in the order it was inserted.
private final class TimerHeapProbe: TimerHeapElement {
    let index: Int
    var isCancelled = false

    init(_ index: Int) {
        self.index = index
    }
}

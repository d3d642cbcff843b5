import Foundation
import Testing
@testable import ThreadKit

@Suite("MonotonicInstant and Duration")
struct MonotonicInstantTests {
    @Test("now() never goes backwards and advances with real time")
    func nowIsMonotonic() {
        var previous = MonotonicInstant.now()
        for _ in 0..<100_000 {
            let next = MonotonicInstant.now()
            #expect(next >= previous)
            previous = next
        }
        let before = MonotonicInstant.now()
        Thread.sleep(forTimeInterval: 0.02)
        let after = MonotonicInstant.now()
        #expect(before.duration(to: after) >= .milliseconds(20))
        #expect(before.duration(to: after) < .milliseconds(20) + .seconds(1))
    }

    @Test("advanced(by:) adds exactly and saturates at both ends of the time line")
    func advancedSaturates() {
        let instant = MonotonicInstant(nanoseconds: 1_000)
        #expect(instant.advanced(by: .nanoseconds(500)).nanoseconds == 1_500)
        #expect(instant.advanced(by: .microseconds(2)).nanoseconds == 3_000)
        #expect(instant.advanced(by: .nanoseconds(-400)).nanoseconds == 600)
        #expect(instant.advanced(by: .nanoseconds(-1_000)).nanoseconds == 0)
        #expect(instant.advanced(by: .zero) == instant)

        // Below the origin it stops at 0, past the end at UInt64.max.
        #expect(instant.advanced(by: .nanoseconds(-1_001)).nanoseconds == 0)
        #expect(instant.advanced(by: .seconds(-5)).nanoseconds == 0)
        #expect(instant.advanced(by: .seconds(Int64.min)).nanoseconds == 0)
        let late = MonotonicInstant(nanoseconds: .max - 10)
        #expect(late.advanced(by: .nanoseconds(10)).nanoseconds == .max)
        #expect(late.advanced(by: .nanoseconds(11)).nanoseconds == .max)
        #expect(late.advanced(by: .seconds(Int64.max)).nanoseconds == .max)
        #expect(MonotonicInstant(nanoseconds: 0).advanced(by: .seconds(Int64.max)).nanoseconds == UInt64(Int64.max))
    }

    @Test("duration(to:) is the signed distance")
    func durationTo() {
        let early = MonotonicInstant(nanoseconds: 100)
        let late = MonotonicInstant(nanoseconds: 350)
        #expect(early.duration(to: late) == .nanoseconds(250))
        #expect(late.duration(to: early) == .nanoseconds(-250))
        #expect(early.duration(to: early) == .zero)
        let zero = MonotonicInstant(nanoseconds: 0)
        let end = MonotonicInstant(nanoseconds: .max)
        #expect(zero.duration(to: end) == .nanoseconds(UInt64.max))
        #expect(end.duration(to: zero) == .zero - .nanoseconds(UInt64.max))
        #expect(early.advanced(by: early.duration(to: late)) == late)
        #expect(late.advanced(by: late.duration(to: early)) == early)
    }

    @Test("ordering follows the nanoseconds")
    func ordering() {
        #expect(MonotonicInstant(nanoseconds: 1) < MonotonicInstant(nanoseconds: 2))
        #expect(!(MonotonicInstant(nanoseconds: 2) < MonotonicInstant(nanoseconds: 2)))
        #expect(MonotonicInstant(nanoseconds: 7) == MonotonicInstant(nanoseconds: 7))
        let timespec = MonotonicInstant(nanoseconds: 12_345_678_901).timespecValue
        #expect(timespec.tv_sec == 12)
        #expect(timespec.tv_nsec == 345_678_901)
    }

    @Test(
        "Conversion from ContinuousClock.Instant is never earlier than the instant",
        arguments: [Duration.seconds(-1), .milliseconds(-5), .zero, .milliseconds(30), .milliseconds(80)])
    func conversionFromContinuousClock(offset: Duration) async throws {
        let before = MonotonicInstant.now()
        let target = ContinuousClock.now.advanced(by: offset)
        let converted = MonotonicInstant(target)
        let after = MonotonicInstant.now()
        // The continuous clock was read between `before` and `after`; both clocks run at the same
        // rate, so the exact answer lies in [before + offset, after + offset] and the conversion
        // may only err late, by the time between its own two clock reads (which lie before `after`).
        #expect(converted >= before.advanced(by: offset))
        #expect(converted <= after.advanced(by: offset))

        // Seen from the other side: once the monotonic clock reaches the converted instant, the
        // continuous clock has reached the original one.
        while MonotonicInstant.now() < converted {
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(ContinuousClock.now >= target)
    }

    @Test("Duration.nanosecondsSaturated is exact in range and clamps outside it")
    func nanosecondsSaturated() {
        #expect(Duration.zero.nanosecondsSaturated == 0)
        #expect(Duration.seconds(3).nanosecondsSaturated == 3_000_000_000)
        #expect(Duration.milliseconds(-7).nanosecondsSaturated == -7_000_000)
        #expect(Duration.nanoseconds(1).nanosecondsSaturated == 1)
        // Either side of 2^63 attoseconds (about 9.2 s), where the 64-bit division gives way to the 128-bit one.
        #expect(Duration.seconds(9).nanosecondsSaturated == 9_000_000_000)
        #expect(Duration.seconds(10).nanosecondsSaturated == 10_000_000_000)
        #expect(Duration.seconds(-10).nanosecondsSaturated == -10_000_000_000)
        #expect(Duration.nanoseconds(Int64.max).nanosecondsSaturated == Int64.max)
        #expect(Duration.nanoseconds(Int64.min).nanosecondsSaturated == Int64.min)
        // Sub-nanosecond parts are cut toward zero.
        #expect(Duration(secondsComponent: 0, attosecondsComponent: 1_500_000_000).nanosecondsSaturated == 1)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: 999_999_999).nanosecondsSaturated == 0)
        #expect(Duration.nanoseconds(-1.5).nanosecondsSaturated == -1)
        // Just inside and just outside Int64's range of nanoseconds.
        let largest = Duration.seconds(9_223_372_036) + .nanoseconds(854_775_807)
        #expect(largest.nanosecondsSaturated == Int64.max)
        #expect((largest + .nanoseconds(1)).nanosecondsSaturated == Int64.max)
        #expect((largest + .seconds(1)).nanosecondsSaturated == Int64.max)
        let smallest = Duration.zero - .seconds(9_223_372_036) - .nanoseconds(854_775_808)
        #expect(smallest.nanosecondsSaturated == Int64.min)
        #expect((smallest - .nanoseconds(1)).nanosecondsSaturated == Int64.min)
        // Far outside: the multiplication overflows.
        #expect(Duration.seconds(Int64.max).nanosecondsSaturated == Int64.max)
        #expect(Duration.seconds(Int64.min).nanosecondsSaturated == Int64.min)
    }
}

/// Far-out durations and instants through the one conversion every part of ThreadKit uses. Before
/// the fix, `Duration.components` trapped on them (SIGILL), so each runs in a child process.
@Suite("MonotonicInstant and Duration, far out", .serialized)
struct FarOutConversionTests {
    @Test("Duration.nanosecondsSaturated saturates past Int64.max seconds instead of trapping", .exitTestOnOwnThreads)
    func nanosecondsSaturatedPastInt64Seconds() async {
        await #expect(processExitsWith: .success) {
            let huge = Duration.seconds(Int64.max)
            precondition((huge + .seconds(1)).nanosecondsSaturated == .max)
            precondition((huge + huge + huge).nanosecondsSaturated == .max)
            precondition((.zero - huge - .seconds(1)).nanosecondsSaturated == .min)
            precondition((.zero - huge - huge - huge).nanosecondsSaturated == .min)
            let instant = MonotonicInstant(nanoseconds: 5)
            precondition(instant.advanced(by: huge + .seconds(1)).nanoseconds == 5 + UInt64(Int64.max))
            precondition(instant.advanced(by: huge + .seconds(1)) >= .distantFuture)
            precondition(MonotonicInstant(nanoseconds: .max - 1).advanced(by: huge + huge).nanoseconds == .max)
            precondition(instant.advanced(by: .zero - huge - .seconds(1)).nanoseconds == 0)
        }
    }

    @Test("A ContinuousClock instant past either end of the time line saturates, in an aged process", .exitTestOnOwnThreads)
    func continuousInstantsSaturate() async {
        await #expect(processExitsWith: .success) {
            // The conversion's reference is taken at the first conversion; let it grow old, so that
            // `.now + .seconds(Int64.max)` lies more than Int64.max seconds past it (see FarOut).
            FarOut.ageTheConversion()
            let huge = Duration.seconds(Int64.max)
            let now = ContinuousClock.now
            // Past the end: "never", which no monotonic reading reaches.
            precondition(MonotonicInstant(now + huge).nanoseconds == .max)
            precondition(MonotonicInstant(now + huge + .seconds(1)).nanoseconds == .max)
            precondition(MonotonicInstant(now + huge + huge + huge + huge).nanoseconds == .max)
            precondition(MonotonicInstant(now + .seconds(1 << 40)) >= .distantFuture)
            precondition(MonotonicInstant(now + .seconds(Int64.max / 2)) >= .distantFuture)
            precondition(MonotonicInstant.now() < .distantFuture)
            precondition(MonotonicInstant(now - huge).nanoseconds == 0)
            precondition(MonotonicInstant(now - huge - huge - huge - huge).nanoseconds == 0)
            // Nearby instants still convert exactly as before.
            let before = MonotonicInstant.now()
            let soon = MonotonicInstant(ContinuousClock.now + .seconds(10))
            precondition(soon >= before.advanced(by: .seconds(10)))
            precondition(soon < MonotonicInstant.now().advanced(by: .seconds(10) + .milliseconds(250)))
        }
    }
}

@Suite("PThreadMutex and MonotonicCondition")
struct MutexConditionTests {
    /// A plain, unsynchronised integer; only the mutex under test makes sharing it safe.
    final class UnsafeBox: @unchecked Sendable {
        var value = 0
    }

    @Test("The mutex excludes: 4 threads × 50,000 unsynchronised increments lose none")
    func mutualExclusion() async {
        let mutex = PThreadMutex()
        let box = UnsafeBox()
        let inside = Counter()
        let overlaps = Counter()
        await onThreads(4) { _ in
            for _ in 0..<50_000 {
                mutex.withLock {
                    if inside.increment() != 1 { overlaps.increment() }
                    box.value += 1
                    inside.increment(by: -1)
                }
            }
        }
        #expect(box.value == 200_000)
        #expect(overlaps.value == 0)
    }

    @Test("withLock returns the body's value, rethrows its error and unlocks either way")
    func withLockUnlocks() {
        struct Failure: Error {}
        let mutex = PThreadMutex()
        #expect(mutex.withLock { 42 } == 42)
        #expect(throws: Failure.self) { try mutex.withLock { () throws(Failure) in throw Failure() } }
        // Locked again from the same thread: this would deadlock if the throw had left it locked.
        #expect(mutex.withLock { "unlocked" } == "unlocked")
    }

    @Test("A timed wait with nobody signalling returns false, never before its deadline")
    func timedWaitTimesOut() async throws {
        let (spurious, deadline, end) = try await onNewThread(limit: .seconds(10)) { () -> (Int, MonotonicInstant, MonotonicInstant) in
            let mutex = PThreadMutex()
            let condition = MonotonicCondition()
            mutex.lock()
            defer { mutex.unlock() }
            let deadline = MonotonicInstant.now().advanced(by: .milliseconds(100))
            var wakeups = 0
            // Spurious wakeups return true; the wait that reaches the deadline returns false.
            while condition.wait(mutex, until: deadline) {
                wakeups += 1
                if wakeups >= 100 { break }
            }
            return (wakeups, deadline, MonotonicInstant.now())
        }
        #expect(spurious < 100, "a wait without a signal keeps returning true")
        #expect(end >= deadline)
        // Late by at most a second, which a loaded machine can take to schedule the thread again.
        #expect(deadline.duration(to: end) < .seconds(1))
    }

    @Test("A timed wait whose deadline has passed returns false at once")
    func pastDeadline() {
        let mutex = PThreadMutex()
        let condition = MonotonicCondition()
        mutex.withLock {
            let start = MonotonicInstant.now()
            #expect(!condition.wait(mutex, until: start.advanced(by: .milliseconds(-10))))
            #expect(!condition.wait(mutex, until: MonotonicInstant(nanoseconds: 0)))
            #expect(start.duration(to: .now()) < .seconds(1))
        }
    }

    /// State shared between a waiting thread and the test, guarded by `mutex`.
    final class Shared: @unchecked Sendable {
        let mutex = PThreadMutex()
        let condition = MonotonicCondition()
        var waiting = 0
        var go = false

        /// Once `count` threads have set `waiting` (holding the mutex, which they release only by
        /// waiting), sets `go` and wakes them with `wake`, under the mutex; returns when it did.
        func letGo(afterWaiting count: Int, sourceLocation: SourceLocation = #_sourceLocation,
                   by wake: (MonotonicCondition) -> Void) async -> MonotonicInstant {
            #expect(await eventually { mutex.withLock { waiting == count } }, "not every waiter waits", sourceLocation: sourceLocation)
            let wokenAt = MonotonicInstant.now()
            mutex.withLock {
                go = true
                wake(condition)
            }
            return wokenAt
        }
    }

    @Test("signal() wakes a waiter long before its deadline, and its wait returns true")
    func signalWakesWaiter() async throws {
        let shared = Shared()
        let results = Recorder<(woken: Bool, at: MonotonicInstant)>()
        let waiter = Thread {
            shared.mutex.lock()
            let deadline = MonotonicInstant.now().advanced(by: .seconds(60))
            shared.waiting += 1
            var woken = true
            while !shared.go && woken {
                woken = shared.condition.wait(shared.mutex, until: deadline)
            }
            shared.mutex.unlock()
            results.append((woken, .now()))
        }
        waiter.start()
        let signalledAt = await shared.letGo(afterWaiting: 1) { $0.signal() }
        #expect(await eventually { results.count == 1 })
        let result = try #require(results.values.first)
        #expect(result.woken)
        #expect(signalledAt.duration(to: result.at) < .seconds(2))
    }

    @Test("broadcast() wakes every waiter; untimed waits too")
    func broadcastWakesAll() async {
        let shared = Shared()
        let wokenAt = Recorder<MonotonicInstant>()
        for index in 0..<3 {
            Thread {
                shared.mutex.lock()
                shared.waiting += 1
                while !shared.go {
                    if index == 0 {
                        shared.condition.wait(shared.mutex)
                    } else {
                        shared.condition.wait(shared.mutex, until: MonotonicInstant.now().advanced(by: .seconds(60)))
                    }
                }
                shared.mutex.unlock()
                wokenAt.append(.now())
            }.start()
        }
        let broadcastAt = await shared.letGo(afterWaiting: 3) { $0.broadcast() }
        #expect(await eventually { wokenAt.count == 3 })
        for at in wokenAt.values { #expect(broadcastAt.duration(to: at) < .seconds(2)) }
    }
}

/// The spin budget's rule, over made-up sleeps: no threads, no clock.
@Suite("SpinBudget")
struct SpinBudgetTests {
    @Test("It starts at its ceiling and keeps it while work comes back within the ceiling")
    func shortSleepsKeepTheCeiling() {
        var budget = SpinBudget(ceiling: .microseconds(50))
        #expect(budget.current == .microseconds(50))
        for _ in 0..<10 { budget.slept(for: .microseconds(49)) }
        #expect(budget.current == .microseconds(50))
    }

    @Test("Each long sleep halves it; below 2 µs it is zero: sparse work pays no spin")
    func longSleepsShrinkItToNothing() {
        var budget = SpinBudget(ceiling: .microseconds(50))
        var seen: [Duration] = []
        for _ in 0..<6 {
            budget.slept(for: .milliseconds(1))
            seen.append(budget.current)
        }
        #expect(seen == [.microseconds(25), .nanoseconds(12_500), .nanoseconds(6_250), .nanoseconds(3_125), .zero, .zero])
    }

    @Test("A sleep ended within the ceiling restores it at once, from zero too; exactly the ceiling counts as long")
    func aShortSleepRestoresIt() {
        var budget = SpinBudget(ceiling: .microseconds(50))
        for _ in 0..<8 { budget.slept(for: .seconds(1)) }
        #expect(budget.current == .zero)
        budget.slept(for: .microseconds(10))
        #expect(budget.current == .microseconds(50))
        budget.slept(for: .microseconds(50))
        #expect(budget.current == .microseconds(25))
    }
}

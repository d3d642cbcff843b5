import Foundation
import Testing
@testable import ThreadKit

/// Issue 12: any `Duration` or instant is accepted by every public entry point that takes a time,
/// however far out. It saturates to "never" (or "as long as possible") and never traps.
///
/// Before the fix these trapped with SIGILL ("Not enough bits to represent the passed value"), so
/// each body runs in a child process, which must exit cleanly; its `precondition`s check that the
/// far-out time behaves as "never". Every child first lets the clock conversion's reference grow
/// older than a second: from then on `.now + .seconds(Int64.max)` lies more than `Int64.max` seconds
/// past that reference, as it does in any process that has run for a while.
@Suite("Far-out times never trap", .serialized)
struct FarOutTimeExitTests {
    // MARK: TimerThread

    @Test("TimerThread.schedule(after:) with a far-out delay is pending, never runs, and cancels", .exitTestOnOwnThreads)
    func timerScheduleAfter() async {
        await #expect(processExitsWith: .success) {
            FarOut.expectPendingNeverRunning(timerNamed: "FarAfter") { timer, call in
                try [FarOut.huge, FarOut.largest, FarOut.huge + FarOut.huge + FarOut.huge].map { try timer.schedule(after: $0, call) }
            }
        }
    }

    @Test("TimerThread.schedule(at:) with a far-future instant is pending; a far-past one runs at once", .exitTestOnOwnThreads)
    func timerScheduleAt() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let timer = TimerThread(name: "FarAt")
            let ran = Counter()
            let future = try! timer.schedule(at: .now + FarOut.largest) { ran.increment() }
            let further = try! timer.schedule(at: .now + FarOut.largest + FarOut.largest) { ran.increment() }
            let past = Latch()
            try! timer.schedule(at: .now - FarOut.largest) { past.countDown() }
            try! timer.schedule(at: .now - FarOut.largest - FarOut.largest) { past.countDown() }
            FarOut.settle(timer)
            precondition(past.isOpen)
            precondition(ran.value == 0)
            precondition(timer.pendingCount == 2)
            precondition(future.cancel() && further.cancel())
            precondition(timer.dispose() == 0)
        }
    }

    @Test("TimerThread.schedule(every:) with a far-out interval is pending and never runs, at either spacing", .exitTestOnOwnThreads)
    func timerScheduleEvery() async {
        await #expect(processExitsWith: .success) {
            FarOut.expectPendingNeverRunning(timerNamed: "FarEvery") { timer, call in
                try [TimerThread.Spacing.fixedRate, .fixedDelay].map { try timer.schedule(every: FarOut.huge, spacing: $0, call) }
            }
        }
    }

    @Test("TimerThread.schedule(every:startingAfter:) with a far-out first delay is pending and never runs", .exitTestOnOwnThreads)
    func timerScheduleEveryStartingAfter() async {
        await #expect(processExitsWith: .success) {
            FarOut.expectPendingNeverRunning(timerNamed: "FarFirst") { timer, call in
                [try timer.schedule(every: .milliseconds(1), startingAfter: FarOut.huge, call),
                 try timer.schedule(every: .milliseconds(1), startingAfter: FarOut.huge + FarOut.huge, spacing: .fixedDelay, call)]
            }
        }
    }

    @Test("A far-out interval starting at once runs once, then is pending for ever, at either spacing", .exitTestOnOwnThreads)
    func timerScheduleEveryFarOutAfterAFirstRun() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let timer = TimerThread(name: "FarOnce")
            let ran = Counter()
            let handles = try! [TimerThread.Spacing.fixedRate, .fixedDelay].map { spacing in
                try timer.schedule(every: FarOut.huge, startingAfter: .zero, spacing: spacing) { ran.increment() }
            }
            FarOut.settle(timer)
            FarOut.settle(timer)
            precondition(ran.value == 2)
            precondition(handles.allSatisfy { $0.hasFired && !$0.isCancelled })
            precondition(timer.pendingCount == 2)
            precondition(timer.dispose() == 2)
            precondition(handles.allSatisfy { $0.isCancelled })
        }
    }

    // MARK: ThreadPool

    @Test("ScheduledTask.wait(timeout:) with a far-out timeout waits as long as it takes", .exitTestOnOwnThreads)
    func scheduledTaskWait() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let pool = ThreadPool(name: "FarWait", size: 1)
            let done = try! pool.schedule {}
            precondition(done.wait(timeout: FarOut.huge))
            let slow = try! pool.schedule { Thread.sleep(forTimeInterval: 0.1) }
            precondition(slow.wait(timeout: FarOut.huge))
            precondition(slow.isCompleted)
            pool.dispose()
            precondition(pool.awaitTermination(timeout: .seconds(5)))
        }
    }

    @Test("ThreadPool.init with a far-out keepAlive and collectionInterval keeps its idle thread", .exitTestOnOwnThreads)
    func threadPoolInit() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let pool = ThreadPool(name: "FarInit", size: 2, keepAlive: FarOut.huge, collectionInterval: FarOut.huge)
            precondition(try! pool.schedule {}.wait(timeout: .seconds(5)))
            FarOut.pause()
            precondition(pool.statistics.threads == 1)
            precondition(try! pool.schedule {}.wait(timeout: .seconds(5)))
            pool.dispose()
            precondition(pool.awaitTermination(timeout: .seconds(5)))
        }
    }

    @Test("ThreadPool.awaitTermination(timeout:) with a far-out timeout returns true once the pool ends", .exitTestOnOwnThreads)
    func threadPoolAwaitTermination() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let pool = ThreadPool(name: "FarTerm", size: 2)
            precondition(try! pool.schedule {}.wait(timeout: .seconds(5)))
            pool.dispose()
            FarOut.expectEnded(pool.awaitTermination(timeout:))
        }
    }

    // MARK: ThrottledQueue

    @Test("ThrottledQueue.init(interval:) with a far-out interval runs its first task, then holds the next", .exitTestOnOwnThreads)
    func throttledQueueInit() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let queue = ThrottledQueue(label: "FarInit", interval: FarOut.huge)
            FarOut.expectRunsThenHolds(queue)
        }
    }

    @Test("Setting ThrottledQueue.interval to a far-out value", .exitTestOnOwnThreads)
    func throttledQueueIntervalSetter() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let queue = ThrottledQueue(label: "FarSet", interval: .milliseconds(1))
            queue.interval = FarOut.huge
            precondition(queue.interval == FarOut.huge)
            FarOut.expectRunsThenHolds(queue)
        }
    }

    @Test("ThrottledQueue.async(interval:) and sync(interval:) with a far-out gap", .exitTestOnOwnThreads)
    func throttledQueueExplicitIntervals() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let queue = ThrottledQueue(label: "FarExplicit", interval: .zero)
            precondition(queue.sync(interval: .zero) { 1 } == 1)
            FarOut.expectRunsThenHolds(queue) { try queue.async(interval: FarOut.huge, $0) }

            let other = ThrottledQueue(label: "FarSync", interval: .zero)
            precondition(other.sync(interval: FarOut.huge) { 2 } == 2)
        }
    }

    @Test("ThrottledQueue.pause(for:) with a far-out duration, then resume()", .exitTestOnOwnThreads)
    func throttledQueuePauseFor() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let queue = ThrottledQueue(label: "FarPauseFor", interval: .zero)
            queue.pause(for: FarOut.huge)
            FarOut.expectHeldUntilResumed(queue)
        }
    }

    @Test("ThrottledQueue.pause(until:) with a far-future instant, then resume()", .exitTestOnOwnThreads)
    func throttledQueuePauseUntil() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let queue = ThrottledQueue(label: "FarPauseUntil", interval: .zero)
            queue.pause(until: .now + FarOut.largest)
            queue.pause(until: .now + FarOut.largest + FarOut.largest)
            FarOut.expectHeldUntilResumed(queue)
            // A far-past instant is no pause at all.
            queue.pause(until: .now - FarOut.largest)
            let next = Latch()
            try! queue.async { next.countDown() }
            FarOut.expectOpens(next, "the task after a pause that had already ended")
        }
    }

    @Test("RateLimit.rate(_:per:) with a far-out window lets the first starts through, then holds", .exitTestOnOwnThreads)
    func rateLimit() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let limit = RateLimit.rate(2, per: FarOut.huge)
            precondition(limit.window == FarOut.huge)
            _ = limit.description
            let queue = ThrottledQueue(label: "FarRate", interval: .zero, limit: limit)
            FarOut.expectRunsThenHolds(queue, first: 2)
        }
    }

    // MARK: DedicatedThread and DispatchMethod

    @Test("DedicatedThread.awaitTermination(timeout:) with a far-out timeout returns true once the thread ends", .exitTestOnOwnThreads)
    func dedicatedThreadAwaitTermination() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let thread = DedicatedThread(name: "FarDT")
            precondition(!thread.awaitTermination(timeout: .milliseconds(10)))
            thread.dispose()
            FarOut.expectEnded(thread.awaitTermination(timeout:))
        }
    }

    @Test("DispatchMethod.after with a far-out delay never runs, and its chain can be cancelled", .exitTestOnOwnThreads)
    func dispatchMethodAfter() async {
        await #expect(processExitsWith: .success) {
            FarOut.ageTheConversion()
            let ran = Counter()
            let chain = DispatchMethod.after(FarOut.huge, on: .global()).execute { ran.increment() }
            FarOut.pause()
            precondition(ran.value == 0)
            chain.cancel()
            do {
                _ = try await chain.value
                fatalError("a cancelled chain returned a value")
            } catch {
                precondition(error is CancellationError)
            }
        }
    }
}

/// What the far-out tests share; exit test bodies cannot capture, so it lives at file scope.
enum FarOut {
    /// A duration past `Int64.max` seconds: `Duration.components` cannot represent it.
    static let huge = Duration.seconds(Int64.max) + .seconds(1)
    /// The largest duration `Duration.seconds` makes.
    static let largest = Duration.seconds(Int64.max)

    /// A wait for an end that has come returns true, however far out its timeout.
    static func expectEnded(_ awaitTermination: (Duration) -> Bool) {
        precondition(awaitTermination(huge), "a wait with a far-out timeout missed the end")
        precondition(awaitTermination(largest), "a wait with the largest timeout missed the end")
    }

    /// Converts an instant once, so the conversion takes its reference, and lets that reference age.
    static func ageTheConversion() {
        _ = MonotonicInstant(ContinuousClock.now)
        Thread.sleep(forTimeInterval: 1.1)
    }

    /// Waits for `latch` a few seconds, stopping the child process if it does not open.
    static func expectOpens(_ latch: Latch, _ what: String) {
        precondition(latch.wait(timeout: .seconds(5)), "\(what) did not happen")
    }

    /// Gives a call that must not run the chance to run, by waiting for a later one on `timer`.
    static func settle(_ timer: TimerThread) {
        let sentinel = Latch()
        _ = try! timer.schedule(after: .milliseconds(50)) { sentinel.countDown() }
        expectOpens(sentinel, "the sentinel call")
    }

    /// On a new timer named `name`, makes the calls `schedule` makes (each running the call it is
    /// given) and checks that they are pending, never run, and cancel.
    static func expectPendingNeverRunning(
        timerNamed name: String, _ schedule: (TimerThread, @escaping @Sendable () -> Void) throws -> [TimerHandle]
    ) {
        ageTheConversion()
        let timer = TimerThread(name: name)
        let ran = Counter()
        let handles = try! schedule(timer) { ran.increment() }
        settle(timer)
        precondition(ran.value == 0)
        precondition(!handles.contains { $0.hasFired })
        precondition(timer.pendingCount == handles.count)
        precondition(handles.allSatisfy { $0.cancel() })
        precondition(timer.pendingCount == 0)
        precondition(timer.dispose() == 0)
    }

    /// Submits `count` tasks through `submit` (by default `async`), expects them to run, and then
    /// expects the task after them to be held by the far-out gap or window until it is cancelled.
    static func expectRunsThenHolds(
        _ queue: ThrottledQueue, first count: Int = 1, submit: ((@escaping @Sendable () -> Void) throws -> Void)? = nil
    ) {
        let ran = Latch(count: count)
        for _ in 0..<count { try! (submit ?? { try queue.async($0) }) { ran.countDown() } }
        expectOpens(ran, "the first \(count) task(s)")
        try! queue.async { preconditionFailure("a task ran before a far-out gap or window ended") }
        pause()
        precondition(queue.pendingCount == 1)
        precondition(queue.cancelAll() == 1)
    }

    /// Submits a task to `queue`, which is paused, expects it to wait, then to run once resumed.
    static func expectHeldUntilResumed(_ queue: ThrottledQueue) {
        let ran = Latch()
        try! queue.async { ran.countDown() }
        pause()
        precondition(!ran.isOpen)
        queue.resume()
        expectOpens(ran, "the task after resume()")
    }

    /// Blocks the child's thread a little, for work that must not happen to get its chance.
    static func pause() {
        Thread.sleep(forTimeInterval: 0.1)
    }
}

import Foundation
import Testing
@_spi(ThreadKitTools) @testable import ThreadKit

/// The numeric arguments of ThreadKit's public API that work, at their edges: zero, negative and
/// `.max`-style values, each checked for the meaning its type's "Arguments" paragraph gives it.
///
/// The values that cannot work stop the process, so they are rows of ``ProcessExitTests`` (and
/// ``ThrottledQueueExitTests``); durations and instants far out (`.seconds(Int64.max)` and beyond)
/// are ``FarOutTimeExitTests``', in child processes, because they once trapped. One table per type.
@Suite("Arguments at their edges mean what the docs say", .serialized, .timeLimit(.minutes(2)))
struct ArgumentRulesTests {
    // No wall-clock bound says "at once" here (a loaded machine stretches any): each call that
    // must not wait is made while what a wrong reading would wait for cannot happen (a task held
    // by a latch, a pool or thread not disposed, a gap or pause of an hour), so that its return
    // shows it did not wait, and a guard turns a wait into a failure instead of a hang. Where the
    // wrong reading would wait only briefly, the check is an ordering (a timer call runs before
    // one due later) or the schedule's own decision (the next start allowed is not in the future).

    /// Runs blocking `body` off the cooperative pool; throws ``TestTimedOut`` unless it returns
    /// within 10 s, while the event it must not wait for is held back (it could wait forever).
    static func returnsWithoutWaiting<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        try await onNewThread(limit: .seconds(10), body)
    }

    // MARK: - ThreadPool and ScheduledTask

    enum PoolCase: String, CaseIterable, Sendable, NamedTestCase {
        case sizeIntMax = "ThreadPool: size Int.max makes threads only as tasks need them"
        case queueLimitIntMax = "ThreadPool: queueLimit Int.max refuses none of 100 queued tasks"
        case queueLimitOne = "ThreadPool: queueLimit 1, the smallest, queues one task and refuses the next"
        case zeroKeepAlive = "ThreadPool: keepAlive zero retires an idle thread at the next collection"
        case waitTimeoutZero = "ScheduledTask.wait(timeout: .zero) checks once: false before the task ran, true after"
        case awaitTerminationTimeoutZero = "ThreadPool.awaitTermination(timeout: .zero) checks once: false while alive, true once ended"
    }

    @Test(arguments: PoolCase.allCases)
    func threadPool(_ check: PoolCase) async throws {
        switch check {
        case .sizeIntMax:
            let pool = ThreadPool(name: "AR max", size: .max)
            let running = Latch(count: 4), release = Latch()
            for _ in 0..<4 {
                try pool.execute {
                    running.countDown()
                    _ = release.wait(timeout: .seconds(10))
                }
            }
            #expect(await onNewThread { running.wait(timeout: .seconds(10)) })
            #expect(pool.statistics.threads == 4)
            release.countDown()
            pool.dispose()
            #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(10)) })
        case .queueLimitIntMax:
            let pool = ThreadPool(name: "AR qmax", size: 1, queueLimit: .max, whenFull: .reject)
            let release = Latch(), ran = Counter()
            try pool.execute { _ = release.wait(timeout: .seconds(10)) }
            for _ in 0..<100 { try pool.execute { ran.increment() } }
            release.countDown()
            pool.dispose()
            #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(10)) })
            #expect(ran.value == 100)
        case .queueLimitOne:
            let pool = ThreadPool(name: "AR q1", size: 1, queueLimit: 1, whenFull: .reject)
            let running = Latch(), release = Latch()
            try pool.execute {
                running.countDown()
                _ = release.wait(timeout: .seconds(10))
            }
            #expect(await onNewThread { running.wait(timeout: .seconds(10)) })
            try pool.execute {}
            #expect(throws: ThreadPoolError.queueFull(pool: "AR q1", limit: 1)) { try pool.execute {} }
            release.countDown()
            pool.dispose()
            #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(10)) })
        case .zeroKeepAlive:
            let pool = ThreadPool(name: "AR keep0", size: 1, keepAlive: .zero, collectionInterval: .milliseconds(50))
            #expect(await onNewThread { try! pool.schedule {}.wait(timeout: .seconds(10)) })
            #expect(await eventually(timeout: .seconds(5)) { pool.statistics.threads == 0 })
        case .waitTimeoutZero:
            // (A negative timeout stops: ProcessExitTests. A far-out one: FarOutTimeExitTests.)
            let pool = ThreadPool(name: "AR wait", size: 1)
            let release = Latch()
            try pool.execute { _ = release.wait(timeout: .seconds(10)) }
            let task = try pool.schedule {}
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { task.wait(timeout: .zero) } == false)
            release.countDown()
            #expect(await onNewThread { task.wait(timeout: .seconds(10)) })
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { task.wait(timeout: .zero) })
            pool.dispose()
        case .awaitTerminationTimeoutZero:
            let pool = ThreadPool(name: "AR term", size: 1)
            #expect(await onNewThread { try! pool.schedule {}.wait(timeout: .seconds(10)) })
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { pool.awaitTermination(timeout: .zero) } == false)
            pool.dispose()
            #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(10)) })
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { pool.awaitTermination(timeout: .zero) })
        }
    }

    // MARK: - TimerThread

    enum TimerCase: String, CaseIterable, Sendable, NamedTestCase {
        case zeroDelay = "TimerThread.schedule(after: .zero) runs the call at once"
        case pastInstants = "TimerThread.schedule(at:) an hour or Int64.max seconds ago runs the call at once"
        case zeroFirstDelay = "TimerThread.schedule(every:startingAfter: .zero) runs its first call at once, at either spacing"
        case smallestInterval = "TimerThread.schedule(every: 1 ns) repeats, and stops when cancelled"
    }

    @Test(arguments: TimerCase.allCases)
    func timerThread(_ check: TimerCase) async throws {
        let timer = TimerThread(name: "AR timer")
        defer { _ = timer.dispose() }
        switch check {
        case .zeroDelay:
            // Due now, so before a call scheduled after it with a delay of 1 ns.
            let order = Recorder<String>()
            try timer.schedule(after: .zero) { order.append("zero") }
            #expect(try await Self.runsBefore(order, on: timer) == ["zero"])
        case .pastInstants:
            let order = Recorder<String>()
            try timer.schedule(at: .now - .seconds(3_600)) { order.append("an hour ago") }
            try timer.schedule(at: .now - .seconds(Int64.max)) { order.append("Int64.max s ago") }
            #expect(try await Self.runsBefore(order, on: timer).sorted() == ["Int64.max s ago", "an hour ago"])
        case .zeroFirstDelay:
            // Read wrongly, the first call would come after the interval: an hour.
            let ran = Latch(count: 2)
            let handles = try [TimerThread.Spacing.fixedRate, .fixedDelay].map { spacing in
                try timer.schedule(every: .seconds(3_600), startingAfter: .zero, spacing: spacing) { ran.countDown() }
            }
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { ran.wait(timeout: .seconds(10)) })
            #expect(handles.allSatisfy { $0.cancel() })
        case .smallestInterval:
            let ran = Counter()
            let handle = try timer.schedule(every: .nanoseconds(1), startingAfter: .zero) { ran.increment() }
            #expect(await eventually { ran.value >= 3 })
            #expect(handle.cancel())
            let settled = Latch()
            try timer.schedule(after: .zero) { settled.countDown() }
            #expect(await onNewThread { settled.wait(timeout: .seconds(10)) })
            let afterCancel = ran.value
            let again = Latch()
            try timer.schedule(after: .milliseconds(20)) { again.countDown() }
            #expect(await onNewThread { again.wait(timeout: .seconds(10)) })
            #expect(ran.value == afterCancel)
        }
    }

    /// Schedules a reference call on `timer` 1 ns from now and waits (at most 10 s) until it ran;
    /// returns what `order` recorded before it, which the calls scheduled earlier and due by now
    /// must have recorded (the timer runs calls in the order they are due, however late).
    static func runsBefore(_ order: Recorder<String>, on timer: TimerThread) async throws -> [String] {
        let reference = Latch()
        let before = LockedValue<[String]?>(nil)
        try timer.schedule(after: .nanoseconds(1)) {
            before.value = order.values
            reference.countDown()
        }
        #expect(try await returnsWithoutWaiting { reference.wait(timeout: .seconds(10)) })
        return try #require(before.value)
    }

    // MARK: - ThrottledQueue and RateLimit

    enum QueueCase: String, CaseIterable, Sendable, NamedTestCase {
        case zeroInterval = "ThrottledQueue(interval: .zero) starts its tasks back to back"
        case zeroIntervalSet = "ThrottledQueue.interval = .zero reaches the gap being waited"
        case zeroExplicitIntervals = "async(interval: .zero) and sync(interval: .zero) let the next task follow at once, whatever the queue's interval"
        case pausesThatHavePassed = "pause(for:) zero, negative or negative beyond Int64.max seconds, and pause(until:) far in the past, hold nothing"
        case rateIntMax = "RateLimit.rate(Int.max, per:) caps nothing in practice"
        case smallestWindow = "RateLimit.rate(1, per: 1 ns), the smallest window, lets tasks through"
    }

    /// The instants at which `queue` started `count` tasks submitted at once, waiting until they ran.
    static func starts(of queue: ThrottledQueue, count: Int, submit: ((@escaping @Sendable () -> Void) throws -> Void)? = nil) async throws -> [Duration] {
        let starts = Recorder<Duration>()
        for _ in 0..<count {
            try (submit ?? { try queue.async($0) }) { if let start = queue.startOfCurrentTask { starts.append(start) } }
        }
        await ThrottledQueueTests.waitUntilIdle(queue)
        return starts.values
    }

    /// Whether the next task `queue` is given may start already: the earliest start its schedule
    /// allows (the gap after the last task, a pause, the rate limit) is not after now. Asked of a
    /// copy of the schedule (a value) with one task more submitted to it.
    static func nextTaskMayStartNow(_ queue: ThrottledQueue) -> Bool {
        var probe = queue.mutex.withLock { queue.schedule }
        probe.submit(.work({}))
        guard case .startAt(let allowed) = probe.nextStart() else { return false }
        return allowed <= MonotonicInstant.now()
    }

    @Test(arguments: QueueCase.allCases)
    func throttledQueue(_ check: QueueCase) async throws {
        switch check {
        case .zeroInterval:
            let queue = ThrottledQueue(label: "AR zero", interval: .zero)
            let starts = try await Self.starts(of: queue, count: 5)
            #expect(starts.count == 5 && starts == starts.sorted())
            // No gap after the last: the next may start as soon as it ended.
            #expect(Self.nextTaskMayStartNow(queue))
        case .zeroIntervalSet:
            let queue = ThrottledQueue(label: "AR set zero", interval: .seconds(3_600))
            let ran = Latch(count: 2)
            try queue.async { ran.countDown() }
            try queue.async { ran.countDown() }
            #expect(await eventually { queue.pendingCount == 1 })
            queue.interval = .zero
            // The hour's gap being waited no longer holds the second task.
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { ran.wait(timeout: .seconds(10)) })
        case .zeroExplicitIntervals:
            let queue = ThrottledQueue(label: "AR explicit zero", interval: .seconds(3_600))
            // The queue's hour-long gap would hold the second and third tasks past the guard.
            let starts = try await Self.starts(of: queue, count: 3) { try queue.async(interval: .zero, $0) }
            #expect(starts.count == 3)
            #expect(Self.nextTaskMayStartNow(queue))
            let other = ThrottledQueue(label: "AR sync zero", interval: .seconds(3_600))
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { (0..<3).map { index in other.sync(interval: .zero) { index } } } == [0, 1, 2])
        case .pausesThatHavePassed:
            let queue = ThrottledQueue(label: "AR past pause", interval: .zero)
            for duration in [Duration.zero, .nanoseconds(-1), .seconds(-3_600), .zero - FarOut.huge] { queue.pause(for: duration) }
            queue.pause(until: .now - .seconds(Int64.max))
            queue.pause(until: .now - FarOut.huge - FarOut.huge)
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { queue.sync { 1 } } == 1)
        case .rateIntMax:
            let queue = ThrottledQueue(label: "AR rate max", interval: .zero, limit: .rate(.max, per: .seconds(3_600)))
            // A cap would hold a task an hour, past the guard.
            let starts = try await Self.starts(of: queue, count: 20)
            #expect(starts.count == 20)
            #expect(Self.nextTaskMayStartNow(queue))
        case .smallestWindow:
            let queue = ThrottledQueue(label: "AR 1 ns", limit: .rate(1, per: .nanoseconds(1)))
            let starts = try await Self.starts(of: queue, count: 5)
            try #require(starts.count == 5)
            #expect(zip(starts, starts.dropFirst()).allSatisfy { $1 - $0 >= .nanoseconds(1) })
        }
    }

    // MARK: - DedicatedThread and DispatchMethod

    enum ThreadCase: String, CaseIterable, Sendable, NamedTestCase {
        case awaitTerminationTimeoutZero = "DedicatedThread.awaitTermination(timeout: .zero) checks once: false while alive, true once ended"
        case afterZero = "DispatchMethod.after(.zero) runs its step at once, through execute, run and then"
    }

    @Test(arguments: ThreadCase.allCases)
    func dedicatedThreadAndDispatchMethod(_ check: ThreadCase) async throws {
        switch check {
        case .awaitTerminationTimeoutZero:
            // (A negative timeout stops: ProcessExitTests. A far-out one: FarOutTimeExitTests.)
            let thread = DedicatedThread(name: "AR thread")
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { thread.awaitTermination(timeout: .zero) } == false)
            thread.dispose()
            #expect(await onNewThread { thread.awaitTermination(timeout: .seconds(10)) })
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { thread.awaitTermination(timeout: .zero) })
        case .afterZero:
            let now = DispatchMethod.after(.zero, on: .global())
            let chain = now.execute { 1 }.then(now) { $0 + 1 }
            #expect(try await ArgumentRulesTests.returnsWithoutWaiting { try? chain.wait() } == 2)
            #expect(try await now.run { 3 } == 3)
        }
    }
}

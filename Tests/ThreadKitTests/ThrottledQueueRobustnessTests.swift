import Foundation
import Testing
@_spi(ThreadKitTools) @testable import ThreadKit

/// ThrottledQueue findings of issue 7 (items 11–19), one test (or more) per finding.
///
/// A scenario that hung before its fix runs on a helper thread (or a task on a pool of its own,
/// never on Swift's cooperative threads) and is waited for with a timeout, so that a regression fails
/// its test instead of hanging the run. Serialized: the thread and CPU measurements are its own.
@Suite("ThrottledQueue robustness", .serialized, .timeLimit(.minutes(1)))
struct ThrottledQueueRobustnessTests {
    typealias Instant = ContinuousClock.Instant

    static let lateness = ThrottledQueueTests.lateness

    /// Runs `body` on a new thread and waits up to `timeout` for its result; `nil` if it did not
    /// return in time (the thread stays blocked: the queue under test hung).
    static func returns<Result: Sendable>(
        within timeout: Duration = .seconds(5), _ body: @escaping @Sendable () -> Result
    ) async -> Result? {
        let result = LockedValue<Result?>(nil)
        let done = Latch()
        Thread {
            let value = body()
            result.value = value
            done.countDown()
        }.start()
        guard await onNewThread({ done.wait(timeout: timeout) }) else { return nil }
        return result.value
    }

    /// Runs `operation` in a task whose work runs on threads of `pool` (never on Swift's
    /// cooperative threads, which a hung or blocking call would starve), and waits up to `timeout`
    /// for its result. `nil` if it did not finish in time; the task is then cancelled.
    static func finishes<Result: Sendable>(
        within timeout: Duration = .seconds(5), on pool: ThreadPool,
        _ operation: @escaping @Sendable () async throws -> Result
    ) async -> Swift.Result<Result, any Error>? {
        let outcome = LockedValue<Swift.Result<Result, any Error>?>(nil)
        let done = Latch()
        let task = Task(executorPreference: pool) {
            do {
                let value = try await operation()
                outcome.value = .success(value)
            } catch {
                outcome.value = .failure(error)
            }
            done.countDown()
        }
        guard await onNewThread({ done.wait(timeout: timeout) }) else {
            task.cancel()
            return nil
        }
        return outcome.value
    }

    /// Runs `operation` in a task on a pool of `threads` threads of the test's own, and returns
    /// its value. If it throws or does not finish within `timeout`, records an issue saying that
    /// `what` did not return, cancels what waits on `queue` (so that nothing is left hanging) and
    /// returns `nil`.
    static func returned<Result: Sendable>(
        _ what: String, releasing queue: ThrottledQueue, threads: Int = 2, within timeout: Duration = .seconds(5),
        sourceLocation: SourceLocation = #_sourceLocation,
        _ operation: @escaping @Sendable () async throws -> Result
    ) async -> Result? {
        let executor = ThreadPool(name: KernelThreads.uniqueName("TQx"), size: threads)
        defer { executor.dispose() }
        let outcome = await finishes(within: timeout, on: executor, operation)
        guard case .success(let value)? = outcome else {
            Issue.record("\(what) did not return: \(String(describing: outcome))", sourceLocation: sourceLocation)
            queue.cancelAll()
            return nil
        }
        return value
    }

    /// An object that calls `onDeinit` when the last reference to it goes.
    final class DeinitProbe: Sendable {
        private let onDeinit: @Sendable () -> Void
        init(_ onDeinit: @escaping @Sendable () -> Void) { self.onDeinit = onDeinit }
        deinit { onDeinit() }
    }

    // MARK: - Item 11: sync, run and waitUntilIdle from inside run's async work

    @Test("sync from inside run's async work runs nested (gap waited, ahead of queued tasks) instead of hanging")
    func syncInsideRunIsNested() async throws {
        let queue = ThrottledQueue(label: "TQ run+sync", interval: .milliseconds(50))
        let order = Recorder<String>()
        let spacing = await Self.returned("sync inside run", releasing: queue) { () -> [Duration] in
            // The queue is idle: run's work cannot start before this. Measured from inside the work,
            // its start could read later than the queue's (a thread preempted on a loaded machine),
            // so the never-early checks count from here.
            let called = ContinuousClock.now
            return try await queue.run { () -> [Duration] in
                let outer = ContinuousClock.now
                try? queue.async { order.append("queued") }
                let (first, second) = synchronously { () -> (Instant, Instant) in
                    let first = queue.sync { () -> Instant in
                        let start = ContinuousClock.now
                        order.append("nested 1")
                        return start
                    }
                    let second = queue.sync(interval: .zero) { () -> Instant in
                        let start = ContinuousClock.now
                        order.append("nested 2")
                        return start
                    }
                    return (first, second)
                }
                order.append("outer end")
                return [first - called, second - called, first - outer]
            }
        }
        guard let spacing else { return }
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(order.values == ["nested 1", "nested 2", "outer end", "queued"])
        // Gaps of 50 ms after run's work and after the first nested sync, each from its start.
        #expect(spacing[0] >= .milliseconds(50), "the nested sync started \(spacing[0]) after run was called, the gap is 50 ms")
        #expect(spacing[1] >= .milliseconds(100), "the second nested sync started \(spacing[1]) after run was called, two gaps are 100 ms")
        #expect(spacing[2] < .milliseconds(50) + Self.lateness)
    }

    @Test("Concurrent child tasks of run's work each get the queue to themselves: their nested sync and run calls never overlap")
    func nestedSiblingsKeepExclusion() async throws {
        // No gap: only the exclusion keeps the siblings apart.
        let queue = ThrottledQueue(label: "TQ siblings", interval: .zero)
        let inside = Counter()
        let overlaps = Counter()
        let ran = Counter()
        @Sendable func exclusiveWork() {
            if inside.increment() > 1 { overlaps.increment() }
            usleep(5_000)
            inside.increment(by: -1)
            ran.increment()
        }
        let finished: Void? = await Self.returned("run with nested siblings", releasing: queue, threads: 8, within: .seconds(20)) {
            try await queue.run {
                await withTaskGroup(of: Void.self) { group in
                    for index in 0..<8 {
                        group.addTask {
                            if index.isMultiple(of: 2) {
                                synchronously { queue.sync { exclusiveWork() } }
                            } else {
                                _ = try? await queue.run { exclusiveWork() }
                            }
                        }
                    }
                }
            }
        }
        guard finished != nil else { return }
        #expect(ran.value == 8)
        #expect(overlaps.value == 0)
    }

    @Test("run's work holds its queue in every blocking wait: A.run → thread.sync / DispatchMethod.sync → A.sync runs nested")
    func runWorkHandsItsQueueOn() async throws {
        let queue = ThrottledQueue(label: "TQ handover", interval: .zero)
        let thread = DedicatedThread(name: KernelThreads.uniqueName("TQhoD"))
        defer { thread.dispose() }
        let order = Recorder<String>()
        let finished: Void? = await Self.returned("a sync back onto the queue from run's work", releasing: queue, within: .seconds(10)) {
            try await queue.run {
                try? queue.async { order.append("queued") }
                synchronously {
                    thread.sync { queue.sync { order.append("through the thread") } }
                    DispatchMethod.sync(on: .thread(thread)).execute {
                        queue.sync { order.append("through DispatchMethod") }
                    }
                }
                order.append("run's work ends")
            }
        }
        guard finished != nil else { return }
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(order.values == ["through the thread", "through DispatchMethod", "run's work ends", "queued"])
    }

    @Test("A task that outlived run's work holds nothing of it: its sync and waitUntilIdle on the queue wait their turn and return")
    func outlivingTaskHoldsNothing() async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("TQout"), size: 2)
        defer { executor.dispose() }
        let queue = ThrottledQueue(label: "TQ outliving", interval: .zero)
        let ran = Counter()
        let outcome = await Self.finishes(within: .seconds(10), on: executor) { () -> Int in
            let late = try await queue.run {
                // Inherits the run's hold, and runs after the run's work has returned.
                Task(executorPreference: executor) {
                    try await Task.sleep(for: .milliseconds(20))
                    synchronously {
                        queue.sync { _ = ran.increment() }
                        queue.waitUntilIdle()
                    }
                    await queue.waitUntilIdle()
                }
            }
            try await late.value
            return ran.value
        }
        guard case .success(let count)? = outcome else {
            Issue.record("a sync from a task that outlived run's work did not return: \(String(describing: outcome))")
            queue.cancelAll()
            return
        }
        #expect(count == 1)
    }

    @Test("run from inside run's async work runs nested (gap waited, ahead of queued tasks) instead of hanging")
    func runInsideRunIsNested() async throws {
        let queue = ThrottledQueue(label: "TQ run+run", interval: .milliseconds(50))
        let order = Recorder<String>()
        let returned = await Self.returned("run inside run", releasing: queue) { () -> (Duration, Duration, Int) in
            // The queue is idle: run's work cannot start before this (see `syncInsideRunIsNested`).
            let called = ContinuousClock.now
            return try await queue.run { () -> (Duration, Duration, Int) in
                let outer = ContinuousClock.now
                try? queue.async { order.append("queued") }
                let (start, value) = try await queue.run { () -> (Instant, Int) in
                    let start = ContinuousClock.now
                    order.append("nested")
                    return (start, 7)
                }
                order.append("outer end")
                return (start - called, start - outer, value)
            }
        }
        guard let returned else { return }
        let (spacing, measuredSpacing, value) = returned
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(value == 7)
        #expect(order.values == ["nested", "outer end", "queued"])
        #expect(spacing >= .milliseconds(50), "the nested run started \(spacing) after run was called, the gap is 50 ms")
        // A run's start resumes its task on an executor: bounded as every run start is.
        #expect(measuredSpacing < .milliseconds(50) + ThrottledQueueTests.asyncLateness)
    }

    // MARK: - Item 12: closures are released outside the queue's mutex

    @Test("A finished task's closure is released outside the queue's mutex: a capture whose deinit touches the queue does not wedge it")
    func finishedClosureIsReleasedOutsideTheMutex() async throws {
        let queue = ThrottledQueue(label: "TQ release", interval: .milliseconds(1))
        let touched = Latch(), ranAfter = Latch()
        do {
            let probe = DeinitProbe {
                _ = queue.pendingCount
                try? queue.async { ranAfter.countDown() }
                touched.countDown()
            }
            try queue.async { withExtendedLifetime(probe) {} }
        }
        // Required: a wedged queue would block any thread that touches it again.
        try #require(await onNewThread { touched.wait(timeout: .seconds(5)) }, "the capture's deinit could not reach the queue")
        try #require(await onNewThread { ranAfter.wait(timeout: .seconds(5)) }, "the queue is wedged")

        // Closures that cancelAll() removes go the same way.
        let cancelledTouched = Latch()
        queue.pause(for: .seconds(60))
        do {
            let probe = DeinitProbe {
                _ = queue.pendingCount
                cancelledTouched.countDown()
            }
            try queue.async { withExtendedLifetime(probe) {} }
        }
        #expect(queue.cancelAll() == 1)
        #expect(await onNewThread { cancelledTouched.wait(timeout: .seconds(5)) })
        queue.resume()
        let value: Int? = await Self.returns { queue.sync { 3 } }
        #expect(value == 3)
    }

    // MARK: - Item 13: disposeNow() on a shared pool

    @Test("disposeNow() on a shared pool loses nothing: accepted work and run waiters still run, later async and run throw, sync and waitUntilIdle return")
    func disposeNowHandsTheWorkerBackToTheQueue() async throws {
        let poolName = KernelThreads.uniqueName("TQdn")
        let label = KernelThreads.uniqueName("TQf")
        let pool = ThreadPool(name: poolName, size: 1)
        let queue = ThrottledQueue(label: label, interval: .milliseconds(20), pool: pool)
        let gate = Latch(), occupied = Latch()
        try pool.execute {
            occupied.countDown()
            gate.wait(timeout: .seconds(30))
        }
        #expect(await onNewThread { occupied.wait(timeout: .seconds(5)) })
        let threads = Recorder<String>()
        for _ in 0..<3 { try queue.async { threads.append(KernelThreads.currentName()) } }
        let executor = ThreadPool(name: KernelThreads.uniqueName("TQr"), size: 1)
        defer { executor.dispose() }
        let waiterDone = Latch()
        let waiterValue = LockedValue<Int?>(nil)
        Task(executorPreference: executor) {
            waiterValue.value = try? await queue.run { 7 }
            waiterDone.countDown()
        }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 4 })

        let handedBack = pool.disposeNow()
        #expect(handedBack.isEmpty, "the queue's worker was handed to disposeNow's caller")
        gate.countDown()

        #expect(await eventually(timeout: .seconds(5)) { threads.count == 3 }, "accepted async work was lost")
        #expect(await onNewThread { waiterDone.wait(timeout: .seconds(5)) }, "a run waiter was left hanging")
        #expect(waiterValue.value == 7)
        #expect(threads.values.allSatisfy { $0.hasPrefix(label) }, "ran on \(threads.values), not a thread of the queue's own")

        #expect(throws: ThreadPoolError.disposed(pool: poolName)) { try queue.async {} }
        let refused = await Self.finishes(on: executor) { try await queue.run { 1 } }
        if case .failure(let error as ThreadPoolError)? = refused {
            #expect(error == .disposed(pool: poolName))
        } else {
            Issue.record("run after disposeNow() gave \(String(describing: refused))")
        }
        let value: Int? = await Self.returns { queue.sync { 5 } }
        #expect(value == 5, "sync on the queue hung")
        let idle: Bool? = await Self.returns { queue.waitUntilIdle(); return true }
        #expect(idle == true, "waitUntilIdle hung")
        #expect(queue.pendingCount == 0)
        #expect(await eventually(timeout: .seconds(3)) { KernelThreads.count(ofPool: label) == 0 }, "the queue's own thread did not exit")
    }

    @Test("disposeNow() with no work queued: later async throws .disposed and nothing is half-accepted")
    func disposeNowOnAnIdleQueue() async throws {
        let poolName = KernelThreads.uniqueName("TQdn")
        let pool = ThreadPool(name: poolName, size: 2)
        let queue = ThrottledQueue(label: "TQ idle disposed", interval: .milliseconds(10), pool: pool)
        try queue.async {}
        await ThrottledQueueTests.waitUntilIdle(queue)
        _ = pool.disposeNow()
        #expect(throws: ThreadPoolError.disposed(pool: poolName)) { try queue.async {} }
        #expect(throws: ThreadPoolError.disposed(pool: poolName)) { try queue.async(interval: .zero) {} }
        #expect(queue.pendingCount == 0, "a refused task was half-accepted")
    }

    // MARK: - Item 14: cancelAll() and a cancelled run waiter wake the worker

    /// Expects a task submitted to the one-thread `pool` now to run well before the 5 s gap the
    /// callers' queues wait out: no worker keeps the pool's thread through it. The bound is half the
    /// gap, so a loaded machine's scheduling delays cannot be taken for a kept thread, nor the
    /// reverse.
    static func expectThreadFree(in pool: ThreadPool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let before = ContinuousClock.now
        let ran = Latch()
        try pool.execute { ran.countDown() }
        #expect(await onNewThread { ran.wait(timeout: .milliseconds(2_500)) }, "the worker kept the pool's only thread through the gap", sourceLocation: sourceLocation)
        #expect(ContinuousClock.now - before < .milliseconds(2_500), sourceLocation: sourceLocation)
    }

    @Test("cancelAll() wakes the worker, which gives its shared pool thread back at once instead of after the gap")
    func cancelAllGivesThePoolThreadBack() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("TQc"), size: 1)
        defer { pool.dispose() }
        let queue = ThrottledQueue(label: "TQ cancel frees", interval: .seconds(5), pool: pool)
        try queue.async {}
        try queue.async {}  // waits out the 5 s gap on the pool's one thread
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 1 })
        try await Task.sleep(for: .milliseconds(20))
        #expect(queue.cancelAll() == 1)
        try await Self.expectThreadFree(in: pool)
    }

    @Test("A cancelled run waiter wakes the worker, which gives its shared pool thread back at once")
    func cancelledRunWaiterGivesThePoolThreadBack() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("TQc"), size: 1)
        defer { pool.dispose() }
        let queue = ThrottledQueue(label: "TQ leave frees", interval: .seconds(5), pool: pool)
        try queue.async {}
        let waiter = Task { try await queue.run { 1 } }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 1 })
        try await Task.sleep(for: .milliseconds(20))
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        try await Self.expectThreadFree(in: pool)
    }

    // MARK: - Item 15: sync onto another queue of a one-thread shared pool

    @Test("B.sync from A's task on a shared one-thread pool runs on A's thread when nothing is queued on B, and keeps B's gap")
    func syncOntoAnotherQueueOfTheSamePool() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("TQs"), size: 1)
        defer { pool.dispose() }
        let a = ThrottledQueue(label: "TQ A", interval: .zero, pool: pool)
        let b = ThrottledQueue(label: "TQ B", interval: .milliseconds(50), pool: pool)
        let result = LockedValue<[Instant]>([])
        let done = Latch()
        try a.async {
            let first = b.sync { ContinuousClock.now }
            let second = b.sync { ContinuousClock.now }
            result.value = [first, second]
            done.countDown()
        }
        guard await onNewThread({ done.wait(timeout: .seconds(5)) }) else {
            Issue.record("B.sync from A's task hung")
            return
        }
        let starts = result.value
        try #require(starts.count == 2)
        #expect(starts[1] - starts[0] >= .milliseconds(50))
        #expect(starts[1] - starts[0] < .milliseconds(50) + Self.lateness)
    }

    // MARK: - Item 17: a dropped queue releases its private pool's thread

    #if os(Linux)
    /// Makes a queue with its own pool, runs `tasks` tasks on it, and drops it (at once, or once idle).
    static func useAndDrop(label: String, tasks: Int, interval: Duration, waitFirst: Bool, ran: Counter) async throws {
        let queue = ThrottledQueue(label: label, interval: interval)
        for _ in 0..<tasks { try queue.async { ran.increment() } }
        if waitFirst { await ThrottledQueueTests.waitUntilIdle(queue) }
    }

    @Test("50 dropped idle queues release their private pools' threads promptly, not after 10–25 s")
    func droppedQueuesReleaseTheirThreads() async throws {
        let labels = (0..<50).map { _ in KernelThreads.uniqueName("TQd") }
        let ran = Counter()
        for label in labels {
            try await Self.useAndDrop(label: label, tasks: 1, interval: .zero, waitFirst: true, ran: ran)
        }
        #expect(ran.value == 50)
        let prefixes = labels.map { KernelThreads.prefix(ofPool: $0) }
        func alive() -> [String] {
            let names = KernelThreads.names()
            return prefixes.filter { prefix in names.contains { $0.hasPrefix(prefix) } }
        }
        #expect(await eventually(timeout: .seconds(3)) { alive().isEmpty }, "threads of dropped queues still alive: \(alive())")
    }

    @Test("A queue dropped with work queued runs it all, then releases its thread")
    func droppedBusyQueueFinishesThenReleases() async throws {
        let label = KernelThreads.uniqueName("TQd")
        let ran = Counter()
        try await Self.useAndDrop(label: label, tasks: 3, interval: .milliseconds(30), waitFirst: false, ran: ran)
        #expect(await eventually(timeout: .seconds(3)) { ran.value == 3 }, "a dropped queue lost accepted work")
        #expect(await eventually(timeout: .seconds(3)) { KernelThreads.count(ofPool: label) == 0 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(ran.value == 3)
    }

    @Test("Dropping a queue never disposes a pool it was given")
    func droppedQueueKeepsAGivenPool() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("TQg"), size: 1)
        defer { pool.dispose() }
        let ran = Counter()
        do {
            let queue = ThrottledQueue(label: "TQ given pool", interval: .zero, pool: pool)
            try queue.async { ran.increment() }
            await ThrottledQueueTests.waitUntilIdle(queue)
        }
        try await Task.sleep(for: .milliseconds(50))
        let task = try pool.schedule { ran.increment() }
        #expect(await onNewThread { task.wait(timeout: .seconds(3)) })
        #expect(ran.value == 2)
    }
    #endif

    // MARK: - Item 18: a nested sync keeps the start margin

    /// Who runs the outer task of a nested `sync`.
    enum Outer: String, CaseIterable, Sendable, NamedTestCase {
        /// An `async` task, on the queue's worker.
        case async
        /// `sync` callers on eight threads at once.
        case syncFromEightThreads
    }

    /// Now, on the time line of ``ThrottledQueue/startOfCurrentTask``.
    static func monotonicNow() -> Duration {
        .nanoseconds(Int64(clamping: MonotonicInstant.now().nanoseconds))
    }

    @Test("startOfCurrentTask is the instant recorded before this queue's task began, in async, sync and run work; nil elsewhere")
    func startOfCurrentTaskIsRecordedBeforeTheBody() async throws {
        let queue = ThrottledQueue(label: "TQ recorded start", interval: .zero)
        let other = ThrottledQueue(label: "TQ other", interval: .zero)
        #expect(queue.startOfCurrentTask == nil)
        let seen = Recorder<Bool>()
        let check: @Sendable () -> Void = {
            let now = Self.monotonicNow()
            seen.append(queue.startOfCurrentTask.map { $0 <= now } == true && other.startOfCurrentTask == nil)
        }
        try queue.async(check)
        await ThrottledQueueTests.waitUntilIdle(queue)
        synchronously { queue.sync(check) }
        try await queue.run { check() }
        #expect(seen.values == [true, true, true])
        #expect(queue.startOfCurrentTask == nil)
    }

    @Test("A nested sync never begins before its gap, counted from when the running task's code began", arguments: Outer.allCases)
    func nestedSyncKeepsTheGapFromTheRunningTasksStart(outer: Outer) async throws {
        // Each outer body calls the nested sync 10 µs before its gap ends: a nested start counted
        // from when the outer's turn was granted, with no margin, comes early whenever the body
        // began more than 10 µs after that grant.
        //
        // Both starts are the instants the queue recorded, on the thread that runs each body, right
        // before it began (`startOfCurrentTask`): where the promise is kept, exactly, with no slack.
        // Not the bodies' own first clock readings: a thread kept off its core between the queue's
        // record and the outer body's reading makes that reading late, and the nested start, which
        // the queue rightly counts from its record, then looks early from the body by up to the
        // time the thread was away (seen once in a full-suite run on a loaded machine, a few µs).
        let gap = Duration.milliseconds(2)
        let queue = ThrottledQueue(label: "TQ nested margin", interval: gap)
        let spacings = Recorder<Duration?>()
        let body: @Sendable () -> Void = {
            guard let outer = queue.startOfCurrentTask else { return spacings.append(nil) }
            let call = outer + gap - .microseconds(10)
            while Self.monotonicNow() < call {}
            let nested = queue.sync { queue.startOfCurrentTask }
            spacings.append(nested.map { $0 - outer })
        }
        let rounds = 16
        switch outer {
        case .async:
            for _ in 0..<rounds { try queue.async(body) }
            await ThrottledQueueTests.waitUntilIdle(queue, within: .seconds(20))
        case .syncFromEightThreads:
            let done: Bool? = await Self.returns(within: .seconds(20)) {
                let finished = Latch(count: 8)
                for _ in 0..<8 {
                    Thread {
                        for _ in 0..<(rounds / 8) { queue.sync(body) }
                        finished.countDown()
                    }.start()
                }
                return finished.wait(timeout: .seconds(20))
            }
            #expect(done == true)
        }
        let values = spacings.values.compactMap { $0 }
        #expect(values.count == rounds, "a task's recorded start was missing")
        let early = values.filter { $0 < gap }
        #expect(early.isEmpty, "nested syncs began \(early.map { gap - $0 }) before their gap")
    }

    // MARK: - Item 19: the final approach costs a bounded share of a core

    #if os(Linux)
    /// The worker thread's CPU time over the wall time of `count` back-to-back tasks spaced `interval`.
    static func workerCPUShare(interval: Duration, count: Int) async throws -> Double {
        let queue = ThrottledQueue(label: "TQ spin", interval: interval)
        let first = LockedValue<(ThreadUsage, Instant)?>(nil)
        let last = LockedValue<(ThreadUsage, Instant)?>(nil)
        try queue.async { first.value = (ThreadUsage.current(), .now) }
        for _ in 1..<(count - 1) { try queue.async {} }
        try queue.async { last.value = (ThreadUsage.current(), .now) }
        await ThrottledQueueTests.waitUntilIdle(queue, within: .seconds(20))
        let (startUsage, start) = try #require(first.value)
        let (endUsage, end) = try #require(last.value)
        return (endUsage.cpuTime - startUsage.cpuTime).seconds / (end - start).seconds
    }

    @Test("The spin before each start is bounded by a share of the interval: cheap at 1 ms and at 100 µs")
    func finalApproachIsCheap() async throws {
        let atOneMillisecond = try await Self.workerCPUShare(interval: .milliseconds(1), count: 400)
        let atHundredMicroseconds = try await Self.workerCPUShare(interval: .microseconds(100), count: 3000)
        #expect(atOneMillisecond < 0.2, "the worker used \(Int(atOneMillisecond * 100)) % of a core at a 1 ms interval")
        // A spin of the whole interval would take the whole core. Under the thread sanitizer the
        // instrumented wake-up alone costs about 50 µs of CPU per start, half a core at 100 µs
        // (0.52-0.55 measured once the start margin came down to 1 µs), so there the bound leaves
        // room for it and still fails such a spin.
        let bound = threadSanitized ? 0.75 : 0.5
        #expect(atHundredMicroseconds < bound, "the worker used \(Int(atHundredMicroseconds * 100)) % of a core at a 100 µs interval")
    }
    #endif
}

/// Robustness scenarios that stop the process, or stopped it before their fix: `ProcessExitTests`
/// runs each in a process of its own. One that hung before its fix waits with a timeout.
extension ChildScenario {
    static func syncOnADisposedPool() {
        for disposeNow in [false, true] {
            let pool = ThreadPool(name: "TQ gone", size: 1)
            if disposeNow { _ = pool.disposeNow() } else { pool.dispose() }
            let queue = ThrottledQueue(label: "TQ orphan", interval: .milliseconds(30), pool: pool)
            let done = Latch()
            let starts = LockedValue<[ContinuousClock.Instant]>([])
            Thread {
                let first = queue.sync { ContinuousClock.now }
                let second = queue.sync { ContinuousClock.now }
                starts.value = [first, second]
                done.countDown()
            }.start()
            guard done.wait(timeout: .seconds(5)) else { exit(3) }
            guard starts.value[1] - starts.value[0] >= .milliseconds(30) else { exit(4) }
            do {
                try queue.async {}
                exit(5)
            } catch ThreadPoolError.disposed(pool: "TQ gone") {
            } catch {
                exit(6)
            }
        }
    }
}

extension ChildScenario {
    static func waitUntilIdleInsideRun() {
        let queue = ThrottledQueue(label: "TQ exit run wait", interval: .zero)
        let executor = ThreadPool(name: "TQxr", size: 1)
        let done = Latch()
        Task(executorPreference: executor) {
            _ = try? await queue.run { synchronously { queue.waitUntilIdle() } }
            done.countDown()
        }
        _ = done.wait(timeout: .seconds(5))
    }

    static func syncOntoAStarvedQueueStops() {
        let pool = ThreadPool(name: "TQ one", size: 1)
        let a = ThrottledQueue(label: "TQ A", interval: .zero, pool: pool)
        let b = ThrottledQueue(label: "TQ B", interval: .zero, pool: pool)
        let queued = Latch(), done = Latch()
        try? a.async {
            queued.wait(timeout: .seconds(5))
            b.sync {}
            done.countDown()
        }
        try? b.async {}  // B's worker waits in the pool for the thread A's task holds
        queued.countDown()
        _ = done.wait(timeout: .seconds(5))
    }
}

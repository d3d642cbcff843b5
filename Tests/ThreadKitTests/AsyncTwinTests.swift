import Foundation
import Testing
@testable import ThreadKit
import SeededRandom

// The async twins of the blocking waits: ThreadPool's and DedicatedThread's awaitTermination(),
// ThrottledQueue's waitUntilIdle(). Each suspends its task (no thread blocks), is resumed by the
// event that wakes its blocking twin, and ends at once, with no effect on the component, when its
// task is cancelled.

/// What one awaiting task saw: whether its wait ended on the event, and the component's state read
/// at once after it returned.
private struct Awaited<Reading: Sendable & Equatable>: Sendable, Equatable {
    var returned: Bool
    var reading: Reading
}

extension ThreadPool {
    /// How many tasks are suspended in `awaitTermination()`.
    fileprivate var terminationWaiterCount: Int {
        mutex.withLock { terminationWaiters.count }
    }
}

extension ThrottledQueue {
    /// How many tasks are suspended in the async `waitUntilIdle()`.
    fileprivate var idleWaiterCount: Int {
        mutex.withLock { idleWaiters.count }
    }

    /// Awaits the async `waitUntilIdle()` and says whether the queue's idleness ended the wait:
    /// `false` if the awaiting task's cancellation did (a guard's, after its limit), so that a
    /// missed wake-up fails the test instead of passing once the guard has cancelled the wait.
    fileprivate func idleResumedTheWait() async -> Bool {
        await waitUntilIdle()
        return !Task.isCancelled
    }
}

extension DedicatedThread {
    /// How many tasks are suspended in `awaitTermination()`.
    fileprivate var exitWaiterCount: Int {
        core.exitWaiterCount
    }
}

extension Task where Failure == Never {
    /// The task's value, cancelling the task once `limit` has passed (the awaiting task's own
    /// cancellation does not reach an unstructured task), so that a wait that never ends fails
    /// the test instead of hanging it.
    fileprivate func value(cancellingAfter limit: Duration) async -> Success {
        await cancelling(after: limit) {
            await withTaskCancellationHandler { await self.value } onCancel: { self.cancel() }
        }
    }

    /// Like ``value(cancellingAfter:)``, then `reading()`.
    fileprivate func value<Reading: Sendable>(cancellingAfter limit: Duration, then reading: @escaping @Sendable () -> Reading) async -> Reading {
        _ = await value(cancellingAfter: limit)
        return reading()
    }
}

@Suite("ThreadPool.awaitTermination() async", .timeLimit(.minutes(1)))
struct PoolAwaitTerminationTests {
    @Test("Returns true once the last thread has exited, not before, with every task run")
    func returnsAfterTheLastThreadExits() async throws {
        let pool = ThreadPool(name: "ATa", size: 3)
        let gate = try pool.occupy(3)
        let ran = Counter()
        for _ in 0..<5 { try pool.execute { _ = ran.increment() } }
        let awaiter = Task { () -> Awaited<[Int]> in
            let returned = await pool.awaitTermination()
            return Awaited(returned: returned, reading: [ran.value, pool.statistics.threads])
        }
        #expect(await eventually { pool.terminationWaiterCount == 1 })
        pool.dispose()
        // The threads are held: the wait goes on, however long they take.
        try await Task.sleep(for: .milliseconds(100))
        #expect(pool.terminationWaiterCount == 1, "the wait ended while three threads still ran")
        gate.countDown()
        let outcome = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(outcome == Awaited(returned: true, reading: [5, 0]))
        #expect(await onNewThread { pool.awaitTermination(timeout: .zero) })
        #expect(pool.terminationWaiterCount == 0)
    }

    @Test("Called after the pool has ended, or on a disposed pool that never had a thread, it returns true at once")
    func returnsAtOnceAfterTermination() async throws {
        let fresh = ThreadPool(name: "ATb", size: 2)
        fresh.dispose()
        #expect(await fresh.awaitTermination())
        let used = ThreadPool(name: "ATc", size: 2)
        try await used.run {}
        used.dispose()
        #expect(await used.awaitTermination(within: .seconds(10)))
        // Again, and from a task already cancelled: the pool had ended first.
        #expect(await used.awaitTermination())
        let cancelled = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await used.awaitTermination()
        }
        #expect(await cancelled.value)
        #expect(used.terminationWaiterCount == 0)
    }

    @Test("Cancelling the awaiting task ends the wait at once with false; the pool goes on")
    func cancellationEndsTheWait() async throws {
        let pool = ThreadPool(name: "ATd", size: 1)
        defer { pool.dispose() }
        let awaiter = Task { await pool.awaitTermination() }
        #expect(await eventually { pool.terminationWaiterCount == 1 })
        awaiter.cancel()
        let returned = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(!returned)
        #expect(pool.terminationWaiterCount == 0, "the cancelled waiter stayed on the list")
        // Cancelled before the call: it never waits.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await pool.awaitTermination()
        }
        #expect(await !early.value)
        #expect(try await pool.run { 7 } == 7)
        #expect(pool.terminationWaiterCount == 0)
    }

    @Test("Many tasks awaiting at once are all resumed, each once, by the one termination")
    func manyAwaitersAllResumed() async throws {
        let pool = ThreadPool(name: "ATe", size: 2)
        let gate = try pool.occupy(2)
        let count = 200
        // Each returns false if the guard's cancellation, not the termination, ended its wait.
        let resumed = await cancelling(after: .seconds(10)) {
            await withTaskGroup(of: Bool.self) { group -> [Bool] in
                for _ in 0..<count { group.addTask { await pool.awaitTermination() } }
                #expect(await eventually { pool.terminationWaiterCount == count })
                pool.dispose()
                gate.countDown()
                var resumed: [Bool] = []
                for await returned in group { resumed.append(returned) }
                return resumed
            }
        }
        #expect(resumed == Array(repeating: true, count: count))
        #expect(pool.statistics.threads == 0)
    }

    @Test("disposeNow() and a pool ended by its last thread's exit both resume the waiters")
    func disposeNowResumes() async throws {
        let pool = ThreadPool(name: "ATf", size: 1)
        let gate = try pool.occupy()
        for _ in 0..<3 { try pool.execute {} }
        let awaiter = Task { await pool.awaitTermination() }
        #expect(await eventually { pool.terminationWaiterCount == 1 })
        #expect(pool.disposeNow().count == 3)
        gate.countDown()
        #expect(await awaiter.value(cancellingAfter: .seconds(10)))
    }

    /// When the stress test cancels an awaiter of a pool's termination.
    private enum CancelMoment: CaseIterable {
        /// Never: the termination must end its wait, with true.
        case never
        /// Before `dispose()`, with the awaiter on the waiter list: its wait ends with false.
        case beforeDispose
        /// Right after `dispose()`, racing the threads' exit: true or false, whichever came first.
        case racingTermination
        /// After the pool is known to have ended: too late, its wait ended with true.
        case afterTermination
    }

    @Test("Stress: awaiters cancelled before, racing and after the termination, across 100 pools: each ends once, on whichever came first")
    func stress() async throws {
        var random = SplitMix64(seed: 21)
        var outcomes: [CancelMoment: [Bool: Int]] = [:]
        for round in 0..<100 {
            let pool = ThreadPool(name: "ATs\(round % 10)", size: 2)
            let tasks = Int(random.next() % 20)
            let ran = Counter()
            for _ in 0..<tasks { try pool.execute { _ = ran.increment() } }
            let moments = (0..<8).map { _ in CancelMoment.allCases[Int(random.next() % 4)] }
            let awaiters = moments.map { _ in Task { await pool.awaitTermination() } }
            #expect(await eventually { pool.terminationWaiterCount == 8 }, "round \(round)")
            for (moment, awaiter) in zip(moments, awaiters) where moment == .beforeDispose { awaiter.cancel() }
            pool.dispose()
            // Racing: cancelled from the test's task while the pool's threads run out and exit.
            for (moment, awaiter) in zip(moments, awaiters).shuffled(using: &random) where moment == .racingTermination {
                awaiter.cancel()
            }
            #expect(await pool.awaitTermination(within: .seconds(10)), "round \(round)")
            for (moment, awaiter) in zip(moments, awaiters) where moment == .afterTermination { awaiter.cancel() }
            for (index, (moment, awaiter)) in zip(moments, awaiters).enumerated() {
                let returned = await awaiter.value(cancellingAfter: .seconds(10))
                outcomes[moment, default: [:]][returned, default: 0] += 1
                switch moment {
                case .never, .afterTermination: #expect(returned, "round \(round): awaiter \(index), cancelled \(moment)")
                case .beforeDispose: #expect(!returned, "round \(round): awaiter \(index), cancelled \(moment)")
                case .racingTermination: break
                }
            }
            #expect(ran.value == tasks)
            #expect(pool.terminationWaiterCount == 0)
        }
        // Every awaiter ended exactly once: on the termination (true) or on its cancellation
        // (false), and false only where the cancellation could come first.
        let count = { (moment: CancelMoment, returned: Bool) in outcomes[moment]?[returned] ?? 0 }
        #expect(outcomes.values.flatMap(\.values).reduce(0, +) == 800)
        #expect(count(.never, false) == 0 && count(.afterTermination, false) == 0 && count(.beforeDispose, true) == 0)
        #expect(count(.never, true) > 0 && count(.beforeDispose, false) > 0 && count(.afterTermination, true) > 0)
    }
}

@Suite("DedicatedThread.awaitTermination() async", .timeLimit(.minutes(1)))
struct DedicatedThreadAwaitTerminationTests {
    @Test("Returns true once the thread has exited, not before, with every item run")
    func returnsAfterTheThreadExits() async throws {
        let name = KernelThreads.uniqueName("DTat")
        let thread = DedicatedThread(name: name)
        let gate = Latch()
        let ran = Counter()
        try thread.execute { gate.wait(timeout: .seconds(30)) }
        for _ in 0..<5 { try thread.execute { _ = ran.increment() } }
        let awaiter = Task { () -> Awaited<Int> in
            let returned = await thread.awaitTermination()
            return Awaited(returned: returned, reading: ran.value)
        }
        #expect(await eventually { thread.exitWaiterCount == 1 })
        thread.dispose()
        try await Task.sleep(for: .milliseconds(100))
        #expect(KernelThreads.names().contains(name))
        #expect(thread.exitWaiterCount == 1, "the wait ended while the thread still ran")
        gate.countDown()
        let outcome = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(outcome == Awaited(returned: true, reading: 5))
        #expect(await onNewThread { thread.awaitTermination(timeout: .zero) })
        #expect(await eventually { !KernelThreads.names().contains(name) })
    }

    @Test("Called after the thread has exited it returns true at once, cancelled or not")
    func returnsAtOnceAfterTermination() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTat2"))
        thread.dispose()
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(await thread.awaitTermination())
        let cancelled = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await thread.awaitTermination()
        }
        #expect(await cancelled.value)
    }

    @Test("Cancelling the awaiting task ends the wait at once with false; the thread goes on")
    func cancellationEndsTheWait() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTat3"))
        defer { thread.dispose() }
        let awaiter = Task { await thread.awaitTermination() }
        #expect(await eventually { thread.exitWaiterCount == 1 })
        awaiter.cancel()
        #expect(await !awaiter.value(cancellingAfter: .seconds(10)))
        #expect(thread.exitWaiterCount == 0, "the cancelled waiter stayed on the list")
        // Cancelled before the call: it never waits, nor joins the list.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await thread.awaitTermination()
        }
        #expect(await !early.value)
        #expect(thread.exitWaiterCount == 0)
        #expect(try await thread.run { 7 } == 7)
    }

    @Test("Many tasks awaiting at once are all resumed by the thread's exit")
    func manyAwaitersAllResumed() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTat4"))
        let gate = Latch()
        try thread.execute { gate.wait(timeout: .seconds(30)) }
        let count = 200
        // Each returns false if the guard's cancellation, not the exit, ended its wait.
        let resumed = await cancelling(after: .seconds(10)) {
            await withTaskGroup(of: Bool.self) { group -> [Bool] in
                for _ in 0..<count { group.addTask { await thread.awaitTermination() } }
                #expect(await eventually { thread.exitWaiterCount == count })
                thread.dispose()
                gate.countDown()
                var resumed: [Bool] = []
                for await returned in group { resumed.append(returned) }
                return resumed
            }
        }
        #expect(resumed == Array(repeating: true, count: count))
        #expect(thread.exitWaiterCount == 0)
    }

    @Test("Awaited from an actor whose executor is the thread, it stops instead of resuming onto the dead thread", .exitTestOnOwnThreads)
    func fromTheThreadsActorStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()  // a hang exits with success, which fails the test
            let store = ThreadBoundStore(thread: DedicatedThread(name: "DT exit own actor"))
            await store.shutDown()
        }
        #expect(stopped(result, saying: "DedicatedThread 'DT exit own actor'.awaitTermination()", "from a task on that thread"))
    }

    @Test("Awaited from a task that prefers the thread as its executor, it stops instead of resuming onto the dead thread", .exitTestOnOwnThreads)
    func fromATaskPreferringTheThreadStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()  // a hang exits with success, which fails the test
            let thread = DedicatedThread(name: "DT exit preferring")
            await Task(executorPreference: thread) {
                thread.dispose()
                await thread.awaitTermination()
            }.value
        }
        #expect(stopped(result, saying: "DedicatedThread 'DT exit preferring'.awaitTermination()", "from a task on that thread"))
    }
}

/// An actor that runs on a dedicated thread and, wrongly, awaits that thread's end from itself.
private actor ThreadBoundStore {
    let thread: DedicatedThread
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    init(thread: DedicatedThread) {
        self.thread = thread
    }

    func shutDown() async {
        thread.dispose()
        await thread.awaitTermination()
    }
}

@Suite("ThrottledQueue.waitUntilIdle() async", .serialized, .timeLimit(.minutes(1)))
struct ThrottledQueueAsyncIdleTests {
    @Test("Returns once every accepted task has finished, not before")
    func returnsAfterTheLastTask() async throws {
        let queue = ThrottledQueue(label: "TQ idle twin", interval: .zero)
        let gate = Latch()
        let ran = Counter()
        try queue.async { gate.wait(timeout: .seconds(30)) }
        for _ in 0..<5 { try queue.async { _ = ran.increment() } }
        let awaiter = Task { () -> Awaited<[Int]> in
            let resumed = await queue.idleResumedTheWait()
            return Awaited(returned: resumed, reading: [ran.value, queue.pendingCount])
        }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(queue.idleWaiterCount == 1, "the wait ended while a task still ran")
        gate.countDown()
        let outcome = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(outcome == Awaited(returned: true, reading: [5, 0]))
    }

    @Test("On an idle queue it returns at once; a task already cancelled returns at once too")
    func idleQueueReturnsAtOnce() async throws {
        let queue = ThrottledQueue(label: "TQ idle twin 2", interval: .seconds(60))
        #expect(await cancelling(after: .seconds(10)) { await queue.idleResumedTheWait() })
        try await queue.run {}
        // The queue's 60 s gap follows, but no task is left: idle.
        #expect(await cancelling(after: .seconds(10)) { await queue.idleResumedTheWait() })
        // On a busy queue, a task cancelled before the call returns at once.
        let gate = Latch()
        try queue.async { gate.wait(timeout: .seconds(30)) }
        let cancelled = Task { () -> Duration in
            withUnsafeCurrentTask { $0?.cancel() }
            let start = ContinuousClock.now
            await queue.waitUntilIdle()
            return ContinuousClock.now - start
        }
        #expect(await cancelled.value(cancellingAfter: .seconds(10)) < .seconds(5))
        #expect(queue.idleWaiterCount == 0)
        gate.countDown()
    }

    @Test("Cancelling the awaiting task ends the wait at once; the queue goes on and runs its tasks")
    func cancellationEndsTheWait() async throws {
        let queue = ThrottledQueue(label: "TQ idle twin 3", interval: .zero)
        let gate = Latch()
        let ran = Counter()
        try queue.async { gate.wait(timeout: .seconds(30)) }
        try queue.async { _ = ran.increment() }
        let awaiter = Task { await queue.waitUntilIdle() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        awaiter.cancel()
        _ = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(queue.idleWaiterCount == 0)
        #expect(ran.value == 0)
        #expect(queue.pendingCount == 1, "the wait ended on its cancellation, not on idleness")
        gate.countDown()
        #expect(await cancelling(after: .seconds(10)) { await queue.idleResumedTheWait() })
        #expect(ran.value == 1)
    }

    @Test("Many tasks awaiting at once are all resumed when the queue becomes idle")
    func manyAwaitersAllResumed() async throws {
        let queue = ThrottledQueue(label: "TQ idle twin 4", interval: .zero)
        let gate = Latch()
        let ran = Counter()
        try queue.async { gate.wait(timeout: .seconds(30)) }
        for _ in 0..<10 { try queue.async { _ = ran.increment() } }
        let count = 200
        // Each sees nil if the guard's cancellation, not idleness, ended its wait.
        let seen = await cancelling(after: .seconds(10)) {
            await withTaskGroup(of: Int?.self) { group -> [Int?] in
                for _ in 0..<count {
                    group.addTask { await queue.idleResumedTheWait() ? ran.value : nil }
                }
                #expect(await eventually { queue.idleWaiterCount == count })
                gate.countDown()
                var seen: [Int?] = []
                for await value in group { seen.append(value) }
                return seen
            }
        }
        #expect(seen == Array(repeating: 10, count: count))
        #expect(queue.idleWaiterCount == 0)
    }

    @Test("Each way a queue becomes idle resumes it: a run caller's end, a sync caller's end, cancelAll(), a queued run caller's cancellation")
    func everyWayToIdleResumes() async throws {
        let queue = ThrottledQueue(label: "TQ idle twin 5", interval: .zero)
        // A run caller's work ends.
        let inRun = Latch()
        let leaveRun = Latch()
        let runner = Task {
            try await queue.run {
                inRun.countDown()
                await onNewThread { _ = leaveRun.wait(timeout: .seconds(30)) }
            }
        }
        #expect(await eventually { inRun.isOpen })
        let afterRun = Task { await queue.idleResumedTheWait() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        leaveRun.countDown()
        try await runner.value
        #expect(await afterRun.value(cancellingAfter: .seconds(10)), "a run caller's end did not resume the wait")
        #expect(queue.idleWaiterCount == 0)

        // A sync caller's work ends.
        let inSync = Latch()
        let leaveSync = Latch()
        Thread { queue.sync { inSync.countDown(); _ = leaveSync.wait(timeout: .seconds(30)) } }.start()
        #expect(await eventually { inSync.isOpen })
        let afterSync = Task { await queue.idleResumedTheWait() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        leaveSync.countDown()
        #expect(await afterSync.value(cancellingAfter: .seconds(10)), "a sync caller's end did not resume the wait")
        #expect(queue.idleWaiterCount == 0)

        // cancelAll() removes the queued tasks, behind a pause that holds them all.
        queue.pause(for: .seconds(60))
        let ran = Counter()
        for _ in 0..<3 { try queue.async { _ = ran.increment() } }
        let afterCancel = Task { await queue.idleResumedTheWait() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        #expect(queue.cancelAll() == 3)
        #expect(await afterCancel.value(cancellingAfter: .seconds(10)), "cancelAll() did not resume the wait")
        #expect(queue.idleWaiterCount == 0)
        #expect(ran.value == 0)

        // The one queued run caller is cancelled, behind the same pause: it leaves the queue.
        let queuedRunner = Task { try await queue.run { _ = ran.increment() } }
        #expect(await eventually { queue.pendingCount == 1 })
        let afterLeaving = Task { await queue.idleResumedTheWait() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        queuedRunner.cancel()
        await #expect(throws: CancellationError.self) { try await queuedRunner.value }
        #expect(await afterLeaving.value(cancellingAfter: .seconds(10)), "a queued run caller's cancellation did not resume the wait")
        #expect(queue.idleWaiterCount == 0)
        #expect(ran.value == 0)
    }

    @Test("Stress: tasks from several threads; awaiters cancelled before or racing idleness: each ends once, those resumed by idleness see every task done")
    func stress() async throws {
        var random = SplitMix64(seed: 2121)
        var resumedByIdleness = 0, cancelledFirst = 0, notCancelled = 0, cancelledBefore = 0
        for round in 0..<40 {
            let queue = ThrottledQueue(label: "TQ idle stress \(round)", interval: .zero)
            let gate = Latch()
            let ran = Counter()
            try queue.async { gate.wait(timeout: .seconds(30)) }
            await onThreads(4) { _ in for _ in 0..<25 { try? queue.async { _ = ran.increment() } } }
            // 0: never cancelled; 1: cancelled before the queue can be idle; 2: racing idleness.
            let plan = (0..<16).map { _ in Int(random.next() % 3) }
            let awaiters = plan.map { _ in Task { () -> Int? in await queue.idleResumedTheWait() ? ran.value : nil } }
            #expect(await eventually { queue.idleWaiterCount == 16 }, "round \(round)")
            for (step, awaiter) in zip(plan, awaiters) where step == 1 { awaiter.cancel() }
            gate.countDown()
            for (step, awaiter) in zip(plan, awaiters) where step == 2 { awaiter.cancel() }
            for (index, (step, awaiter)) in zip(plan, awaiters).enumerated() {
                let seen = await awaiter.value(cancellingAfter: .seconds(10))
                if let seen {
                    resumedByIdleness += 1
                    #expect(seen == 100, "round \(round): awaiter \(index) saw \(seen)")
                } else {
                    cancelledFirst += 1
                }
                if step == 0 { notCancelled += 1; #expect(seen != nil, "round \(round): awaiter \(index) was not resumed") }
                if step == 1 { cancelledBefore += 1; #expect(seen == nil, "round \(round): awaiter \(index) outlived its cancellation") }
            }
            #expect(ran.value == 100)
            #expect(queue.idleWaiterCount == 0)
        }
        // Each of the 640 ended once: by idleness (all that were never cancelled, and the racing
        // cancellations that came late) or by its cancellation (all cancelled before, and the
        // racing ones that came first).
        #expect(resumedByIdleness + cancelledFirst == 640)
        #expect(resumedByIdleness >= notCancelled && cancelledFirst >= cancelledBefore)
        #expect(notCancelled > 0 && cancelledBefore > 0)
    }

    @Test("The async waitUntilIdle() from inside run's work on the same queue stops instead of waiting forever", .exitTestOnOwnThreads)
    func fromInsideRunStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit async idle", interval: .zero)
            try await queue.run { await queue.waitUntilIdle() }
        }
        #expect(stopped(result, saying: "TQ exit async idle", "waitUntilIdle() from inside its own task"))
    }
}

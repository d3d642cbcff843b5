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
        let cancelledAt = ContinuousClock.now
        awaiter.cancel()
        let returned = await awaiter.value(cancellingAfter: .seconds(10))
        #expect(!returned)
        #expect(ContinuousClock.now - cancelledAt < .seconds(5), "the cancelled wait did not end at once")
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
        let resumed = await withTaskGroup(of: Bool.self) { group -> [Bool] in
            for _ in 0..<count { group.addTask { await pool.awaitTermination() } }
            #expect(await eventually { pool.terminationWaiterCount == count })
            pool.dispose()
            gate.countDown()
            var resumed: [Bool] = []
            for await returned in group { resumed.append(returned) }
            return resumed
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

    @Test("Stress: awaiters, some cancelled at random moments, across 100 pools: each returns once; those not cancelled return true")
    func stress() async throws {
        var random = SplitMix64(seed: 21)
        var cancelled = 0, returnedTrue = 0, total = 0
        for round in 0..<100 {
            let pool = ThreadPool(name: "ATs\(round % 10)", size: 2)
            let tasks = Int(random.next() % 20)
            let ran = Counter()
            for _ in 0..<tasks { try pool.execute { _ = ran.increment() } }
            let awaiters = (0..<8).map { _ in Task { await pool.awaitTermination() } }
            let cancelSome = random.next() % 2 == 0
            if cancelSome { for (index, awaiter) in awaiters.enumerated() where index.isMultiple(of: 3) { awaiter.cancel() } }
            pool.dispose()
            for (index, awaiter) in awaiters.enumerated() {
                let returned = await awaiter.value(cancellingAfter: .seconds(10))
                total += 1
                if returned { returnedTrue += 1 }
                if cancelSome, index.isMultiple(of: 3) { cancelled += 1 } else { #expect(returned, "round \(round): awaiter \(index)") }
            }
            #expect(ran.value == tasks)
            #expect(pool.terminationWaiterCount == 0)
        }
        #expect(total == 800)
        #expect(returnedTrue >= 800 - cancelled)
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
        thread.dispose()
        try await Task.sleep(for: .milliseconds(100))
        #expect(KernelThreads.names().contains(name))
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
        let started = Latch()
        let awaiter = Task {
            started.countDown()
            return await thread.awaitTermination()
        }
        #expect(await eventually { started.isOpen })
        try await Task.sleep(for: .milliseconds(20))  // let it suspend; either way it must end
        let cancelledAt = ContinuousClock.now
        awaiter.cancel()
        #expect(await !awaiter.value(cancellingAfter: .seconds(10)))
        #expect(ContinuousClock.now - cancelledAt < .seconds(5), "the cancelled wait did not end at once")
        #expect(try await thread.run { 7 } == 7)
    }

    @Test("Many tasks awaiting at once are all resumed by the thread's exit")
    func manyAwaitersAllResumed() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTat4"))
        let gate = Latch()
        try thread.execute { gate.wait(timeout: .seconds(30)) }
        let count = 200
        let resumed = await withTaskGroup(of: Bool.self) { group -> [Bool] in
            for _ in 0..<count { group.addTask { await thread.awaitTermination() } }
            thread.dispose()
            try? await Task.sleep(for: .milliseconds(20))
            gate.countDown()
            var resumed: [Bool] = []
            for await returned in group { resumed.append(returned) }
            return resumed
        }
        #expect(resumed == Array(repeating: true, count: count))
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
            await queue.waitUntilIdle()
            return Awaited(returned: true, reading: [ran.value, queue.pendingCount])
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
        await queue.waitUntilIdle()
        try await queue.run {}
        // The queue's 60 s gap follows, but no task is left: idle.
        #expect(await cancelling(after: .seconds(10)) { await queue.waitUntilIdle(); return true })
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
        let cancelledAt = ContinuousClock.now
        awaiter.cancel()
        #expect(await awaiter.value(cancellingAfter: .seconds(10), then: { true }))
        #expect(ContinuousClock.now - cancelledAt < .seconds(5), "the cancelled wait did not end at once")
        #expect(queue.idleWaiterCount == 0)
        #expect(ran.value == 0)
        gate.countDown()
        #expect(await cancelling(after: .seconds(10)) { await queue.waitUntilIdle(); return true })
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
        let seen = await withTaskGroup(of: Int.self) { group -> [Int] in
            for _ in 0..<count {
                group.addTask {
                    await queue.waitUntilIdle()
                    return ran.value
                }
            }
            #expect(await eventually { queue.idleWaiterCount == count })
            gate.countDown()
            var seen: [Int] = []
            for await value in group { seen.append(value) }
            return seen
        }
        #expect(seen == Array(repeating: 10, count: count))
    }

    @Test("Each way a queue becomes idle resumes it: a run caller's end, a sync caller's end, cancelAll()")
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
        let afterRun = Task { await queue.waitUntilIdle() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        leaveRun.countDown()
        try await runner.value
        #expect(await afterRun.value(cancellingAfter: .seconds(10), then: { queue.idleWaiterCount == 0 }))

        // A sync caller's work ends.
        let inSync = Latch()
        let leaveSync = Latch()
        Thread { queue.sync { inSync.countDown(); _ = leaveSync.wait(timeout: .seconds(30)) } }.start()
        #expect(await eventually { inSync.isOpen })
        let afterSync = Task { await queue.waitUntilIdle() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        leaveSync.countDown()
        #expect(await afterSync.value(cancellingAfter: .seconds(10), then: { queue.idleWaiterCount == 0 }))

        // cancelAll() removes the queued tasks, behind a pause that holds them all.
        queue.pause(for: .seconds(60))
        let ran = Counter()
        for _ in 0..<3 { try queue.async { _ = ran.increment() } }
        let afterCancel = Task { await queue.waitUntilIdle() }
        #expect(await eventually { queue.idleWaiterCount == 1 })
        #expect(queue.cancelAll() == 3)
        #expect(await afterCancel.value(cancellingAfter: .seconds(10), then: { queue.idleWaiterCount == 0 }))
        #expect(ran.value == 0)
    }

    @Test("Stress: tasks from several threads and awaiters, some cancelled: every awaiter not cancelled sees every task done")
    func stress() async throws {
        for round in 0..<40 {
            let queue = ThrottledQueue(label: "TQ idle stress \(round)", interval: .zero)
            let gate = Latch()
            let ran = Counter()
            try queue.async { gate.wait(timeout: .seconds(30)) }
            await onThreads(4) { _ in for _ in 0..<25 { try? queue.async { _ = ran.increment() } } }
            let awaiters = (0..<16).map { _ in Task { () -> Int in
                await queue.waitUntilIdle()
                return ran.value
            } }
            for (index, awaiter) in awaiters.enumerated() where index.isMultiple(of: 4) { awaiter.cancel() }
            gate.countDown()
            for (index, awaiter) in awaiters.enumerated() {
                let seen = await awaiter.value(cancellingAfter: .seconds(10))
                if !index.isMultiple(of: 4) { #expect(seen == 100, "round \(round): awaiter \(index) saw \(seen)") }
            }
            #expect(ran.value == 100)
            #expect(queue.idleWaiterCount == 0)
        }
    }

    @Test("The async waitUntilIdle() from inside run's work on the same queue stops instead of waiting forever")
    func fromInsideRunStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = ThrottledQueue(label: "TQ exit async idle", interval: .zero)
            try await queue.run { await queue.waitUntilIdle() }
        }
        #expect(stopped(result, saying: "TQ exit async idle", "waitUntilIdle() from inside its own task"))
    }
}

import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// One test per finding of the hostile review of ThreadPool and ScheduledTask (issue 7, items 1–8).
///
/// Scenarios that used to hang run their blocking part on a thread of their own and wait for it
/// with a timeout, so that a regression fails the test instead of hanging the suite.
@Suite("ThreadPool hardening", .timeLimit(.minutes(1)))
struct ThreadPoolHardeningTests {
    /// Holds a pool and reads its statistics when deinitialised, as a capture of user work might.
    final class StatisticsReaderOnDeinit: Sendable {
        let pool: ThreadPool
        let reads: Counter

        init(pool: ThreadPool, reads: Counter) {
            self.pool = pool
            self.reads = reads
        }

        deinit {
            _ = pool.statistics
            _ = reads.increment()
        }
    }

    /// Watches an object without keeping it alive.
    final class WeakReference<Object: AnyObject>: @unchecked Sendable {
        // Sendable: written once, before it is shared; a weak load is atomic.
        weak var object: Object?

        init(_ object: Object) {
            self.object = object
        }
    }

    /// A disposed size-1 pool that nobody but its thread holds: its thread waits at `gate`, then
    /// drains `task` (unless cancelled) and exits, which frees the pool.
    private func droppedPool(ran: Counter) -> (task: ScheduledTask, gate: Latch, pool: WeakReference<ThreadPool>)? {
        let pool = ThreadPool(name: "HCancel", size: 1)
        let gate = Latch()
        guard (try? pool.execute({ gate.wait() })) != nil,
              let task = try? pool.schedule({ _ = ran.increment() }) else { return nil }
        pool.dispose()
        return (task, gate, WeakReference(pool))
    }

    @Test("cancel() stays memory-safe when the pool's last thread exits and frees the pool meanwhile")
    func cancelRacingTheLastThreadOfADroppedPool() async {
        let rounds = 300
        let outcome = await onNewThread { () -> (ran: Int, cancelled: Int, cancelReturnedTrue: Int, leaked: Int) in
            let ran = Counter()
            let cancelReturnedTrue = Counter()
            var cancelled = 0
            var leaked = 0
            for round in 0..<rounds {
                guard let (task, gate, pool) = droppedPool(ran: ran) else { return (0, 0, 0, rounds) }
                let start = Latch()
                let finished = Latch()
                Thread {
                    start.wait()
                    if round.isMultiple(of: 2) { sched_yield() }
                    if task.cancel() { _ = cancelReturnedTrue.increment() }
                    finished.countDown()
                }.start()
                start.countDown()
                gate.countDown()
                _ = task.wait(timeout: .seconds(10))
                _ = finished.wait(timeout: .seconds(10))
                if task.isCancelled { cancelled += 1 }
                // Whatever the order, the pool is freed once its thread is gone and the task is done.
                let deadline = ContinuousClock.now + .seconds(10)
                while pool.object != nil, ContinuousClock.now < deadline { usleep(100) }
                if pool.object != nil {
                    leaked += 1
                    break  // one is enough to fail; do not wait out the other rounds
                }
            }
            return (ran.value, cancelled, cancelReturnedTrue.value, leaked)
        }
        #expect(outcome.leaked == 0, "a pool was never freed")
        // Each task either ran or was cancelled, exactly once, and cancel() said so.
        #expect(outcome.ran + outcome.cancelled == rounds)
        #expect(outcome.cancelled == outcome.cancelReturnedTrue)
    }

    @Test("A handle outlives its pool: cancel, wait and the flags stay safe after the pool is gone")
    func handleOutlivesItsPool() async throws {
        func finishedTaskOfAGonePool() throws -> (ScheduledTask, WeakReference<ThreadPool>) {
            let pool = ThreadPool(name: "HOutlive", size: 1)
            let handle = try pool.schedule {}
            handle.wait()
            pool.dispose()
            #expect(pool.awaitTermination(timeout: .seconds(10)))
            return (handle, WeakReference(pool))
        }
        let (handle, pool) = try finishedTaskOfAGonePool()
        #expect(await eventually { pool.object == nil })
        #expect(handle.cancel() == false)
        #expect(handle.isCompleted)
        #expect(await onNewThread { handle.wait(timeout: .zero) })
    }

    @Test("disposeNow() releases handed-back closures after unlocking: a capture's deinit may read statistics")
    func disposeNowReleasesOutsideTheLock() async throws {
        let pool = ThreadPool(name: "HDispNow", size: 1)
        let gate = Latch()
        let reads = Counter()
        try pool.execute { gate.wait() }
        #expect(await eventually { pool.statistics.busyThreads == 1 })
        do {
            let reader = StatisticsReaderOnDeinit(pool: pool, reads: reads)
            try pool.execute { withExtendedLifetime(reader) {} }
        }
        do {
            let reader = StatisticsReaderOnDeinit(pool: pool, reads: reads)
            try pool.schedule { withExtendedLifetime(reader) {} }
        }
        let handedBack = await onNewThread { () -> Int? in
            let done = Latch()
            let count = Counter()
            Thread {
                _ = count.increment(by: pool.disposeNow().count)
                done.countDown()
            }.start()
            return done.wait(timeout: .seconds(10)) ? count.value : nil
        }
        gate.countDown()
        #expect(handedBack == 2, "disposeNow() hung or lost a task")
        #expect(reads.value == 2)
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("cancel() releases the closure after the pool's bookkeeping: a capture's deinit may read statistics")
    func cancelReleasesOutsideTheLock() async throws {
        let pool = ThreadPool(name: "HCancRel", size: 1)
        let gate = Latch()
        let reads = Counter()
        try pool.execute { gate.wait() }
        let task: ScheduledTask
        do {
            let reader = StatisticsReaderOnDeinit(pool: pool, reads: reads)
            task = try pool.schedule { withExtendedLifetime(reader) {} }
        }
        let cancelled = await onNewThread { () -> Bool? in
            let done = Latch()
            let result = Counter()
            Thread {
                if task.cancel() { _ = result.increment() }
                done.countDown()
            }.start()
            return done.wait(timeout: .seconds(10)) ? result.value == 1 : nil
        }
        gate.countDown()
        #expect(cancelled == true)
        #expect(reads.value == 1)
        #expect(pool.statistics.queuedTasks == 0)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("run suspends on a full queue under .block: more callers than cores do not stall Swift's threads")
    func runSuspendsOnAFullQueue() async throws {
        let pool = ThreadPool(name: "HRunBlk", size: 1, queueLimit: 1, whenFull: .block)
        let gate = Latch()
        try pool.execute { gate.wait() }
        try pool.execute {}  // the queue is now full
        let callers = 8
        let entered = Counter()
        let finished = Counter()
        for index in 0..<callers {
            Task.detached {
                entered.increment()
                let value = try? await pool.run { index }
                if value == index { _ = finished.increment() }
            }
        }
        // Every caller has called run, more of them than there are cooperative threads.
        #expect(await eventually { entered.value == callers }, "only \(entered.value) callers got a thread")
        #expect(pool.statistics.queuedTasks == 1 && finished.value == 0)
        // Swift's cooperative threads are free: other async work still runs while the callers wait.
        // Generous: other suites' exit tests hold cooperative threads while their children run.
        let probe = await onNewThread { () -> Bool in
            let done = Latch()
            Task.detached { done.countDown() }
            return done.wait(timeout: .seconds(20))
        }
        #expect(probe, "the cooperative pool was blocked by run callers waiting for room")
        gate.countDown()
        #expect(await eventually { finished.value == callers })
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("run under .runOnCaller suspends for room; the work never runs on the caller's thread")
    func runOnCallerPolicySuspendsRun() async throws {
        let pool = ThreadPool(name: "HRunRoc", size: 1, queueLimit: 1, whenFull: .runOnCaller)
        let gate = Latch()
        try pool.execute { gate.wait() }
        try pool.execute {}
        let ranOnPool = Task.detached { try await pool.run { pool.isCurrentThreadMember } }
        #expect(await eventually { pool.statistics.queuedTasks == 1 })
        try await Task.sleep(for: .milliseconds(50))
        gate.countDown()
        #expect(try await ranOnPool.value == true)
        pool.dispose()
    }

    @Test("A run waiting for room can be cancelled; dispose fails the ones still waiting")
    func runWaitingForRoomCancelAndDispose() async throws {
        let pool = ThreadPool(name: "HRunCan", size: 1, queueLimit: 1, whenFull: .block)
        let gate = Latch()
        let ran = Counter()
        try pool.execute { gate.wait() }
        try pool.execute {}
        let cancelled = Task.detached { try await pool.run { _ = ran.increment() } }
        let disposed = Task.detached { try await pool.run { _ = ran.increment() } }
        try await Task.sleep(for: .milliseconds(100))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(pool.statistics.queuedTasks == 1)
        pool.dispose()
        await #expect(throws: ThreadPoolError.disposed(pool: "HRunCan")) { try await disposed.value }
        gate.countDown()
        #expect(await pool.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 0)
    }

    @Test("A .block submission from the pool's own thread onto its full queue runs on the caller")
    func blockFromOwnThreadRunsOnCaller() async throws {
        let pool = ThreadPool(name: "HOwnBlk", size: 1, queueLimit: 1, whenFull: .block)
        let done = Latch()
        let order = Recorder<String>()
        try pool.execute {
            try? pool.execute { order.append("queued") }  // fills the queue
            try? pool.execute { order.append("inline on \(KernelThreads.currentName())") }
            order.append("outer returns")
            done.countDown()
        }
        let finished = await onNewThread { done.wait(timeout: .seconds(10)) }
        #expect(finished, "a pool thread waited forever for room in its own queue")
        #expect(await eventually { order.values.count == 3 })
        #expect(order.values == ["inline on HOwnBlk Thread1", "outer returns", "queued"])
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("A .block submission from another pool's thread still waits for room")
    func blockFromAnotherPoolWaits() async throws {
        let pool = ThreadPool(name: "HOthBlk", size: 1, queueLimit: 1, whenFull: .block)
        let other = ThreadPool(name: "HOther", size: 1)
        let gate = Latch()
        try pool.execute { gate.wait() }
        try pool.execute {}
        let ranOn = Recorder<Bool>()
        try other.execute {
            try? pool.execute { ranOn.append(pool.isCurrentThreadMember) }
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(ranOn.values.isEmpty)
        gate.countDown()
        #expect(await eventually { ranOn.values == [true] })
        pool.dispose()
        other.dispose()
    }

    @Test("Every thread of a pool with a long name keeps Thread<N> in the kernel, and its whole name for logs")
    func longPoolNameKeepsThreadNumbers() async throws {
        let pool = ThreadPool(name: "Downloads", size: 3)
        let gate = Latch()
        let started = Latch(count: 3)
        let names = Recorder<(kernel: String, whole: String, foundation: String?)>()
        for _ in 0..<3 {
            try pool.execute {
                names.append((KernelThreads.currentName(), NamedThread.currentName(), Thread.current.name))
                started.countDown()
                gate.wait()
            }
        }
        _ = await onNewThread { started.wait(timeout: .seconds(10)) }
        gate.countDown()
        let seen = names.values
        #expect(Set(seen.map(\.kernel)) == ["Downloa Thread1", "Downloa Thread2", "Downloa Thread3"])
        #expect(Set(seen.map(\.whole)) == ["Downloads Thread1", "Downloads Thread2", "Downloads Thread3"])
        #if os(Linux)
        // Foundation reads Thread.name back from the kernel on Linux.
        #expect(Set(seen.compactMap(\.foundation)) == Set(seen.map(\.kernel)))
        #else
        #expect(Set(seen.compactMap(\.foundation)) == Set(seen.map(\.whole)))
        #endif
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("A pool whose name starts with a character longer than 15 bytes still names its threads")
    func hugeFirstCharacter() async throws {
        let family = "👨‍👩‍👧‍👦"
        #expect(family.count == 1 && family.utf8.count > 15)
        let pool = ThreadPool(name: family, size: 1)
        let names = Recorder<(kernel: String, whole: String)>()
        try await pool.run { names.append((KernelThreads.currentName(), NamedThread.currentName())) }
        #expect(names.values.map(\.kernel) == ["Thread1"])  // no room for the character: only the number
        #expect(names.values.map(\.whole) == ["\(family) Thread1"])
        pool.dispose()
    }

    @Test("Retiring many idle threads at once costs a step each, not a search of the idle list")
    func retiringManyIdleThreads() async throws {
        let count = 400
        let pool = ThreadPool(name: "HRetire", size: count, keepAlive: .zero, collectionInterval: .seconds(2))
        let started = Latch(count: count)
        let gate = Latch()
        for _ in 0..<count {
            try pool.execute {
                started.countDown()
                gate.wait()
            }
        }
        #expect(await onNewThread { started.wait(timeout: .seconds(30)) })
        gate.countDown()
        // They retire together at a collector tick, each removing itself from the middle of the list.
        #expect(await eventually(timeout: .seconds(20)) { pool.statistics.threads == 0 })
        #expect(pool.statistics.idleThreads == 0)
        #expect(pool.statistics.peakThreads == count)
        #expect(await eventually { KernelThreads.count(ofPool: "HRetire") == 0 })
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("The idle list keeps most-recent-first reuse while removing from anywhere")
    func idleListOrder() async throws {
        let pool = ThreadPool(name: "HIdleOrd", size: 3, keepAlive: .seconds(60))
        let gate = Latch()
        let started = Latch(count: 3)
        for _ in 0..<3 {
            try pool.execute {
                started.countDown()
                gate.wait()
            }
        }
        #expect(await onNewThread { started.wait(timeout: .seconds(10)) })
        gate.countDown()
        // Reuse order is the sleepers': a thread still spinning takes work before any sleeper is
        // woken (on a loaded machine an older thread can be preempted mid-spin), so each task is
        // sent once all three threads sleep.
        #expect(await eventually { pool.idleWorkers.current.sleepers == 3 })
        // Three sequential tasks, each waited for, all go to the most recently idle thread.
        let names = Recorder<String>()
        for _ in 0..<3 {
            try await pool.run { names.append(KernelThreads.currentName()) }
            #expect(await eventually { pool.idleWorkers.current.sleepers == 3 })
        }
        #expect(Set(names.values).count == 1)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }
}

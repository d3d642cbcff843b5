import Foundation
import Testing
@testable import ThreadKit
import SeededRandom

// Every pool in these tests has a short name of its own (at most 6 bytes), so that its threads
// can be counted by their kernel name while other suites run in parallel.

extension ThreadPool {
    /// Fills `count` of the pool's threads with tasks that block until the returned gate opens
    /// (or 60 s pass, so a failing test cannot hang); returns once all of them are running.
    func occupy(_ count: Int = 1) throws -> Latch {
        let gate = Latch()
        let started = Latch(count: count)
        for _ in 0..<count {
            try execute {
                started.countDown()
                gate.wait(timeout: .seconds(60))
            }
        }
        #expect(started.wait(timeout: .seconds(30)), "the blocking tasks did not all start")
        return gate
    }
}

/// Tracks how many tasks run at once and the most that ever did.
final class ConcurrencyMeter: @unchecked Sendable {
    // Sendable: the counts are only touched under `lock` (a pthread mutex the thread sanitizer sees).
    private let lock = NSLock()
    private var current = 0
    private var highest = 0

    func enter() {
        lock.withLock {
            current += 1
            highest = max(highest, current)
        }
    }

    func leave() {
        lock.withLock { current -= 1 }
    }

    var peak: Int { lock.withLock { highest } }
}

/// Foundation's name for the calling thread (wrapped: `Thread.current` is not for async code).
func foundationThreadName() -> String? {
    Thread.current.name
}

@Suite("ThreadPool")
struct ThreadPoolTests {
    // The original library's own test, made strict.
    @Test("100 tasks of 0–5 ms on 4 threads each run exactly once")
    func hundredRandomTasks() async throws {
        let pool = ThreadPool(name: "Orig", size: 4)
        defer { pool.dispose() }
        var random = SplitMix64(seed: 100)
        let runs = AtomicCounters(count: 100)
        var tasks: [ScheduledTask] = []
        for index in 0..<100 {
            let micros = UInt32.random(in: 0...5_000, using: &random)
            tasks.append(try pool.schedule {
                usleep(micros)
                runs.increment(index)
            })
        }
        let all = tasks
        await onNewThread { for task in all { task.wait() } }
        #expect(runs.indices(notEqualTo: 1) == [])
        #expect(tasks.allSatisfy { $0.isCompleted })
        let statistics = pool.statistics
        #expect(statistics.completedTasks == 100)
        #expect(statistics.queuedTasks == 0)
        #expect(statistics.peakThreads >= 1 && statistics.peakThreads <= 4)
    }

    @Test("size is a hard cap: exactly size tasks run at once, never more", arguments: [1, 2, 3, 5])
    func sizeIsAHardCap(size: Int) async throws {
        let name = "Cap\(size)"
        let pool = ThreadPool(name: name, size: size)
        defer { pool.dispose() }
        let meter = ConcurrencyMeter()
        let threadSamples = Recorder<Int>()
        let done = Latch(count: 8 * size)
        for _ in 0..<(8 * size) {
            try pool.execute {
                meter.enter()
                // Hold the thread until `size` tasks have been seen at once (or 1 s), so that a
                // pool that ran more than `size` would show it.
                let deadline = MonotonicInstant.now().advanced(by: .seconds(1))
                while meter.peak < size && MonotonicInstant.now() < deadline { usleep(200) }
                threadSamples.append(KernelThreads.count(ofPool: name))
                threadSamples.append(pool.statistics.threads)
                usleep(2_000)
                meter.leave()
                done.countDown()
            }
        }
        #expect(await onNewThread { done.wait() })
        #expect(meter.peak == size)
        #expect(pool.statistics.peakThreads == size)
        #expect(threadSamples.values.max() == size)
        // The latch opens inside the last task; the pool counts it once the closure has returned.
        #expect(await eventually { pool.statistics.completedTasks == 8 * size })
    }

    // The original's "is a thread free?" check raced with enqueue.
    @Test("Work-conserving: N tasks that each wait for all N to start all run on N threads", arguments: [2, 4, 8])
    func workConserving(size: Int) async throws {
        let pool = ThreadPool(name: "WC\(size)", size: size)
        defer { pool.dispose() }
        // Round after round, submitted while the previous round's threads are still going idle.
        let results = await onNewThread { () -> [Bool] in
            var results: [Bool] = []
            for _ in 0..<25 {
                let barrier = Latch(count: size)
                let finished = Latch(count: size)
                let round = Recorder<Bool>()
                for _ in 0..<size {
                    do {
                        try pool.execute {
                            barrier.countDown()
                            round.append(barrier.wait(timeout: .seconds(10)))
                            finished.countDown()
                        }
                    } catch {
                        return [false]
                    }
                }
                finished.wait(timeout: .seconds(20))
                results += round.values
            }
            return results
        }
        #expect(results.count == 25 * size)
        #expect(results.allSatisfy { $0 }, "a task waited in the queue while a thread was free")
        #expect(pool.statistics.peakThreads == size)
    }

    @Test("Work-conserving: with 3 of 4 threads blocked, a new task starts at once")
    func freeThreadTakesNewWork() async throws {
        // A keep-alive far longer than any test: on a loaded machine the check below may come long
        // after the task ran, and the idle thread must not have retired by then.
        let pool = ThreadPool(name: "WCq", size: 4, keepAlive: .seconds(3600))
        defer { pool.dispose() }
        let gate = try pool.occupy(3)
        defer { gate.countDown() }
        let task = try pool.schedule {}
        #expect(await onNewThread { task.wait(timeout: .seconds(10)) }, "the task waited although a thread was free")
        #expect(await eventually { pool.statistics.idleThreads == 1 })
        #expect(pool.statistics == ThreadPool.Statistics(
            threads: 4, idleThreads: 1, busyThreads: 3, queuedTasks: 0, completedTasks: 1, peakThreads: 4))
    }

    @Test("FIFO: on one thread, 1000 tasks start in the order they were accepted")
    func fifo() async throws {
        let pool = ThreadPool(name: "Fifo", size: 1)
        defer { pool.dispose() }
        let order = Recorder<Int>()
        var last: ScheduledTask?
        for index in 0..<1_000 {
            if index.isMultiple(of: 2) {
                try pool.execute { order.append(index) }
            } else {
                last = try pool.schedule { order.append(index) }
            }
        }
        let final = last
        #expect(await onNewThread { final?.wait(timeout: .seconds(20)) ?? false })
        #expect(order.values == Array(0..<1_000))
    }

    @Test("Recycling: a task that arrives while a thread is idle reuses it")
    func recyclesIdleThread() async throws {
        let pool = ThreadPool(name: "Recy", size: 4, keepAlive: .seconds(30))
        defer { pool.dispose() }
        let seen = Recorder<String>()
        for _ in 0..<10 {
            try await pool.run {
                seen.append("\(KernelThreads.currentID()) \(foundationThreadName() ?? "?")")
            }
            #expect(await eventually { pool.statistics.idleThreads == 1 })
            #expect(pool.statistics.threads == 1)
        }
        let values = seen.values
        #expect(values.count == 10)
        #expect(Set(values).count == 1, "\(Set(values))")
        #expect(values.first?.hasSuffix(" Recy Thread1") == true)
        #expect(pool.statistics.peakThreads == 1)
        #expect(KernelThreads.count(ofPool: "Recy") == 1)
    }

    /// Makes `count` threads in `pool` by running `count` tasks that wait for each other; returns
    /// when each task ended, once all have. Blocks the calling thread: call it on a plain thread.
    private static func makeThreads(_ count: Int, in pool: ThreadPool) -> [MonotonicInstant] {
        let barrier = Latch(count: count)
        let ends = Recorder<MonotonicInstant>()
        let done = Latch(count: count)
        for _ in 0..<count {
            do {
                try pool.execute {
                    barrier.countDown()
                    barrier.wait(timeout: .seconds(5))
                    ends.append(.now())
                    done.countDown()
                }
            } catch {
                return []
            }
        }
        done.wait()
        return ends.values
    }

    @Test("Collection: idle threads retire after keepAlive, on the collector's tick, down to 0 in the kernel too")
    func collectsIdleThreads() async throws {
        let keepAlive = Duration.milliseconds(100)
        let interval = Duration.milliseconds(100)
        let pool = ThreadPool(name: "Coll", size: 4, keepAlive: keepAlive, collectionInterval: interval)
        defer { pool.dispose() }
        // Made and watched from a plain thread, which wakes on time even when Swift concurrency's
        // few threads are busy with other tests.
        let (ends, firstDrop, allGone) = await onNewThread {
            () -> ([MonotonicInstant], MonotonicInstant?, MonotonicInstant?) in
            let ends = Self.makeThreads(4, in: pool)
            var firstDrop: MonotonicInstant?
            let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
            while MonotonicInstant.now() < deadline {
                let threads = pool.statistics.threads
                let now = MonotonicInstant.now()
                if threads < 4 && firstDrop == nil { firstDrop = now }
                if threads == 0 { return (ends, firstDrop, now) }
                usleep(1_000)
            }
            return (ends, firstDrop, nil)
        }
        try #require(ends.count == 4)
        #expect(pool.statistics.peakThreads == 4)
        let drop = try #require(firstDrop)
        let gone = try #require(allGone, "the idle threads were never collected")
        // Never early: no thread retires before it has been idle for keepAlive.
        #expect(drop >= ends.min()!.advanced(by: keepAlive))
        // Late by less than 250 ms: the last one retires by the first tick after its keepAlive.
        #expect(gone < ends.max()!.advanced(by: keepAlive + interval + .milliseconds(250)))
        // The kernel agrees: the threads have exited, not just left the books.
        #expect(await eventually { KernelThreads.count(ofPool: "Coll") == 0 })
        let statistics = pool.statistics
        #expect(statistics.threads == 0)
        #expect(statistics.idleThreads == 0)
        #expect(statistics.completedTasks == 4)
        // A collected pool makes threads again when work comes. Waited for by blocking, as the
        // statistics are read right after: the thread may retire soon after (keepAlive is short).
        try synchronously { try pool.schedule {}.wait() }
        #expect(pool.statistics.threads == 1)
    }

    @Test("Collection with keepAlive zero retires a thread at the next tick")
    func zeroKeepAlive() async throws {
        let pool = ThreadPool(name: "Zero", size: 2, keepAlive: .zero, collectionInterval: .milliseconds(50))
        defer { pool.dispose() }
        #expect(await onNewThread { Self.makeThreads(2, in: pool) }.count == 2)
        #expect(pool.statistics.peakThreads == 2)
        #expect(await eventually { pool.statistics.threads == 0 })
        #expect(await eventually { KernelThreads.count(ofPool: "Zero") == 0 })
    }

    // The original re-armed its collector on every schedule, so it never ran under steady load.
    @Test("Under a steady stream of tasks, surplus threads still retire")
    func steadyLoadStillCollects() async throws {
        let pool = ThreadPool(
            name: "Stdy", size: 4, keepAlive: .milliseconds(100), collectionInterval: .milliseconds(100))
        defer { pool.dispose() }
        let ran = Counter()
        // Four threads, then one short task every ~10 ms for ~1 s, sampling the pool's threads as it goes.
        let (start, samples) = await onNewThread { () -> (Int, [(threads: Int, kernel: Int)]) in
            guard Self.makeThreads(4, in: pool).count == 4 else { return (0, []) }
            let start = pool.statistics.threads
            var samples: [(threads: Int, kernel: Int)] = []
            for _ in 0..<100 {
                do { try pool.execute { ran.increment() } } catch { return (start, []) }
                samples.append((pool.statistics.threads, KernelThreads.count(ofPool: "Stdy")))
                usleep(10_000)
            }
            return (start, samples)
        }
        #expect(start == 4)
        #expect(samples.count == 100)
        #expect(samples.allSatisfy { $0.threads >= 1 })
        // Well before the stream ends, the three spare threads are gone, in the books and in the kernel.
        let laterHalf = samples.suffix(50)
        #expect(laterHalf.contains { $0.threads == 1 }, "\(samples.map(\.threads))")
        #expect(laterHalf.contains { $0.kernel == 1 }, "\(samples.map(\.kernel))")
        #expect(await eventually { ran.value == 100 })
        #expect(pool.statistics.peakThreads == 4)
        #expect(await eventually { pool.statistics.threads == 0 })
    }

    // The original's idle threads polled every 0.5–1.5 s.
    @Test("Idle threads block instead of polling: CPU time and context switches of an idle pool thread, measured inside it")
    func idleThreadDoesNotPoll() async throws {
        let pool = ThreadPool(name: "Idle", size: 1, keepAlive: .seconds(60))
        defer { pool.dispose() }
        // Warm up, so that going idle allocates nothing more.
        for _ in 0..<3 {
            try await pool.run {}
            #expect(await eventually { pool.statistics.idleThreads == 1 })
        }
        // The readings go into preallocated slots, the last thing before going idle and the first
        // thing after waking; nothing touches the pool in between (no wait, no statistics).
        let before = UsageSlot()
        let after = UsageSlot()
        try pool.execute {
            before.thread = KernelThreads.currentID()
            before.usage = ThreadUsage.current()
        }
        try await Task.sleep(for: .milliseconds(5_000))
        try await pool.run {
            after.usage = ThreadUsage.current()
            after.thread = KernelThreads.currentID()
        }
        let start = try #require(before.usage)
        let end = try #require(after.usage)
        #expect(before.thread == after.thread, "the idle thread was not reused")
        #expect(pool.statistics.threads == 1)
        #expect(pool.statistics.peakThreads == 1)
        let cpu = end.cpuTime - start.cpuTime
        let switches = end.voluntarySwitches - start.voluntarySwitches
        #expect(cpu < .milliseconds(20), "an idle thread used \(cpu) of CPU in 5 s")
        // Going idle is one switch, up to three with lock contention and the sanitizer's own
        // locks; a thread that polls every 1.5 s blocks three times more in 5 s, every 0.5 s nine
        // times more. (`idleThreadsAreSilent` checks the same from outside, exactly.)
        #expect(switches <= 3, "an idle thread made \(switches) voluntary context switches in 5 s")
    }

    /// Where a pool thread leaves its readings for the test; written by one task, read after it ended.
    final class UsageSlot: @unchecked Sendable {
        var thread: Int32?
        var usage: ThreadUsage?
    }

    @Test("Idle threads make no context switch at all while idle, seen by the kernel")
    func idleThreadsAreSilent() async throws {
        let pool = ThreadPool(name: "Quiet", size: 4, keepAlive: .seconds(60))
        defer { pool.dispose() }
        #expect(await onNewThread { Self.makeThreads(4, in: pool) }.count == 4)
        #expect(await eventually { pool.statistics.idleThreads == 4 })
        // An idle worker may spin for up to 50 µs before it sleeps; let that pass.
        try await Task.sleep(for: .milliseconds(20))
        let ids = KernelThreads.ids(withPrefix: KernelThreads.prefix(ofPool: "Quiet"))
        try #require(ids.count == 4)
        let before = ids.map { KernelThreads.contextSwitches(ofThread: $0) }
        try await Task.sleep(for: .milliseconds(1_500))
        let after = ids.map { KernelThreads.contextSwitches(ofThread: $0) }
        for (start, end) in zip(before, after) {
            let start = try #require(start)
            let end = try #require(end)
            #expect(end.voluntary == start.voluntary)
            #expect(end.involuntary == start.involuntary)
        }
        #expect(pool.statistics.threads == 4)
    }

    @Test("Threads are named \"<pool> Thread<N>\" in Foundation and in the kernel")
    func threadNames() async throws {
        let pool = ThreadPool(name: "Nm", size: 2)
        defer { pool.dispose() }
        let barrier = Latch(count: 2)
        let names = Recorder<String>()
        let done = Latch(count: 2)
        for _ in 0..<2 {
            try pool.execute {
                barrier.countDown()
                barrier.wait(timeout: .seconds(5))
                names.append("\(KernelThreads.currentName())|\(foundationThreadName() ?? "")|\(NamedThread.currentName())")
                done.countDown()
            }
        }
        #expect(await onNewThread { done.wait() })
        #expect(Set(names.values) == ["Nm Thread1|Nm Thread1|Nm Thread1", "Nm Thread2|Nm Thread2|Nm Thread2"])
    }

    @Test("statistics: threads, idle, busy, queued, completed and peak are exact")
    func statistics() async throws {
        let pool = ThreadPool(name: "Stat", size: 3, keepAlive: .seconds(30))
        defer { pool.dispose() }
        typealias Statistics = ThreadPool.Statistics
        #expect(pool.statistics == Statistics(
            threads: 0, idleThreads: 0, busyThreads: 0, queuedTasks: 0, completedTasks: 0, peakThreads: 0))
        let gate = try pool.occupy(3)
        let ran = Counter()
        var queued: [ScheduledTask] = []
        for _ in 0..<4 { queued.append(try pool.schedule { ran.increment() }) }
        #expect(pool.statistics == Statistics(
            threads: 3, idleThreads: 0, busyThreads: 3, queuedTasks: 4, completedTasks: 0, peakThreads: 3))
        #expect(queued[1].cancel())
        #expect(pool.statistics == Statistics(
            threads: 3, idleThreads: 0, busyThreads: 3, queuedTasks: 3, completedTasks: 0, peakThreads: 3))
        gate.countDown()
        let tasks = queued
        await onNewThread { for task in tasks { task.wait() } }
        #expect(await eventually { pool.statistics.idleThreads == 3 })
        #expect(pool.statistics == Statistics(
            threads: 3, idleThreads: 3, busyThreads: 0, queuedTasks: 0, completedTasks: 6, peakThreads: 3))
        #expect(ran.value == 3)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(5)))
        #expect(pool.statistics == Statistics(
            threads: 0, idleThreads: 0, busyThreads: 0, queuedTasks: 0, completedTasks: 6, peakThreads: 3))
        #expect(pool.statistics.description == "0 threads (0 busy, 0 idle, peak 3), 0 queued, 6 completed")
    }

    @Test("The pool keeps its configuration")
    func configuration() {
        let pool = ThreadPool(
            name: "Conf", size: 3, keepAlive: .seconds(2), collectionInterval: .seconds(3), queueLimit: 7,
            whenFull: .reject)
        #expect(pool.name == "Conf")
        #expect(pool.size == 3)
        #expect(pool.keepAlive == .seconds(2))
        #expect(pool.collectionInterval == .seconds(3))
        #expect(pool.queueLimit == 7)
        #expect(pool.overflowPolicy == .reject)
        let defaults = ThreadPool(name: "Dflt", size: 1)
        #expect(defaults.keepAlive == .seconds(10))
        #expect(defaults.collectionInterval == .seconds(15))
        #expect(defaults.queueLimit == nil)
        #expect(defaults.overflowPolicy == .block)
    }
}

@Suite("ThreadPool tasks (ScheduledTask)")
struct ThreadPoolTaskTests {
    // The original's waitForCompletion never returned.
    @Test("wait() returns once the task has run")
    func waitReturns() async throws {
        let pool = ThreadPool(name: "Wait", size: 2)
        defer { pool.dispose() }
        let ran = Counter()
        let task = try pool.schedule {
            usleep(50_000)
            ran.increment()
        }
        #expect(!task.isCompleted)
        // Several threads wait at once; all of them return, after the work.
        let seen = Recorder<Int>()
        await onThreads(3) { _ in
            task.wait()
            seen.append(ran.value)
        }
        #expect(seen.values == [1, 1, 1])
        #expect(task.isCompleted)
        #expect(!task.isCancelled)
        // An ended task returns at once.
        #expect(await onNewThread {
            task.wait()
            return task.wait(timeout: .zero)
        })
    }

    @Test("wait(timeout:) is false while the task is queued (never early), then true once it ran")
    func waitTimeout() async throws {
        let pool = ThreadPool(name: "WaitT", size: 1)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let task = try pool.schedule {}
        let (finished, waited) = await onNewThread { () -> (Bool, Duration) in
            let start = MonotonicInstant.now()
            return (task.wait(timeout: .milliseconds(100)), start.duration(to: .now()))
        }
        #expect(!finished)
        #expect(waited >= .milliseconds(100))
        #expect(waited < .milliseconds(100) + .milliseconds(250))
        #expect(await onNewThread { !task.wait(timeout: .zero) })
        #expect(!task.isCompleted)
        gate.countDown()
        #expect(await onNewThread { task.wait(timeout: .seconds(5)) })
        #expect(task.isCompleted)
    }

    @Test("cancel() of a queued task returns true once, and the task never runs")
    func cancelQueued() throws {
        let pool = ThreadPool(name: "Canc", size: 1)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let ran = Counter()
        let task = try pool.schedule { ran.increment() }
        #expect(!task.isCancelled)
        #expect(!task.isCompleted)
        #expect(pool.statistics.queuedTasks == 1)
        #expect(task.cancel())
        #expect(!task.cancel())
        #expect(task.isCancelled)
        #expect(!task.isCompleted)
        #expect(pool.statistics.queuedTasks == 0)
        #expect(task.wait(timeout: .zero), "a cancelled task has ended")
        gate.countDown()
        // The pool's only thread runs what is queued in order: the marker comes after the cancelled task.
        try pool.schedule {}.wait()
        #expect(ran.value == 0)
        #expect(pool.statistics.completedTasks == 2)
        #expect(task.isCancelled)
    }

    @Test("cancel() wakes threads waiting for the task")
    func cancelWakesWaiters() async throws {
        let pool = ThreadPool(name: "CWake", size: 1)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        defer { gate.countDown() }
        let task = try pool.schedule {}
        // The waiter is a thread of its own, not a child task: it must not depend on Swift's
        // cooperative threads, which other suites' exit tests may hold on a loaded machine.
        let waiter = LockedValue<Int32?>(nil)
        let woken = LockedValue<(finished: Bool, at: MonotonicInstant)?>(nil)
        let done = Latch()
        Thread {
            waiter.value = KernelThreads.currentID()
            woken.value = (task.wait(timeout: .seconds(60)), MonotonicInstant.now())
            done.countDown()
        }.start()
        #expect(await eventually { waiter.value.map(KernelThreads.isSleeping) == true }, "the waiter never blocked")
        let cancelledAt = MonotonicInstant.now()
        #expect(task.cancel())
        #expect(await onNewThread { done.wait(timeout: .seconds(30)) }, "the waiter was not woken")
        let (finished, wokeAt) = try #require(woken.value)
        #expect(finished)
        // Woken by the cancel, not by its own 60 s timeout (the bound allows for a loaded machine).
        #expect(cancelledAt.duration(to: wokeAt) < .seconds(10))
    }

    @Test("cancel() of a running or finished task returns false and changes nothing")
    func cancelRunningOrFinished() throws {
        let pool = ThreadPool(name: "CRun", size: 1)
        defer { pool.dispose() }
        let started = Latch()
        let gate = Latch()
        let task = try pool.schedule {
            started.countDown()
            gate.wait(timeout: .seconds(60))
        }
        #expect(started.wait())
        #expect(!task.cancel())
        #expect(!task.isCancelled)
        #expect(!task.isCompleted)
        gate.countDown()
        task.wait()
        #expect(!task.cancel())
        #expect(!task.isCancelled)
        #expect(task.isCompleted)
        #expect(pool.statistics.completedTasks == 1)
    }

    @Test("A task's closure is released once it has run, while the handle lives on")
    func scheduledClosureReleased() throws {
        let pool = ThreadPool(name: "Rel1", size: 1, keepAlive: .seconds(30))
        defer { pool.dispose() }
        let tracker = LifetimeTracker()
        let ran = Counter()
        let task = try pool.schedule(trackedWork(tracker, ran))
        #expect(task.wait(timeout: .seconds(5)))
        #expect(ran.value == 1)
        #expect(tracker.liveCount == 0)
        withExtendedLifetime(task) {}
    }

    @Test("A closure given to execute() is released once it has run, while its thread stays idle")
    func executedClosureReleased() async throws {
        let pool = ThreadPool(name: "Rel2", size: 1, keepAlive: .seconds(30))
        defer { pool.dispose() }
        let tracker = LifetimeTracker()
        let ran = Counter()
        try pool.execute(trackedWork(tracker, ran))  // the first work of a new thread
        #expect(await eventually { ran.value == 1 })
        #expect(await eventually { pool.statistics.idleThreads == 1 })
        #expect(await eventually(timeout: .seconds(2)) { tracker.liveCount == 0 }, "the idle thread keeps its first closure alive")
        try pool.execute(trackedWork(tracker, ran))  // work for an idle thread
        #expect(await eventually { ran.value == 2 })
        #expect(await eventually { pool.statistics.idleThreads == 1 })
        #expect(await eventually(timeout: .seconds(2)) { tracker.liveCount == 0 }, "the idle thread keeps its last closure alive")
        #expect(pool.statistics.threads == 1)
    }

    @Test("A cancelled task's closure is released at once")
    func cancelledClosureReleased() throws {
        let pool = ThreadPool(name: "Rel3", size: 1)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        defer { gate.countDown() }
        let tracker = LifetimeTracker()
        let ran = Counter()
        let task = try pool.schedule(trackedWork(tracker, ran))
        #expect(tracker.liveCount == 1)
        #expect(task.cancel())
        #expect(tracker.liveCount == 0)
        #expect(ran.value == 0)
    }
}

@Suite("ThreadPool async: run and TaskExecutor", .timeLimit(.minutes(1)))
struct ThreadPoolAsyncTests {
    struct Boom: Error, Equatable {
        let code: Int
    }

    @Test("run returns the work's value, computed on a pool thread")
    func runReturnsValue() async throws {
        let pool = ThreadPool(name: "Run", size: 2)
        defer { pool.dispose() }
        let (value, thread) = try await pool.run { (6 * 7, KernelThreads.currentName()) }
        #expect(value == 42)
        #expect(thread.hasPrefix("Run Thread"))
    }

    @Test("run rethrows the work's error, and the pool carries on")
    func runRethrows() async throws {
        let pool = ThreadPool(name: "RunE", size: 1)
        defer { pool.dispose() }
        await #expect(throws: Boom(code: 7)) {
            try await pool.run { () throws -> Int in throw Boom(code: 7) }
        }
        #expect(try await pool.run { "still works" } == "still works")
        // `run` resumes its caller from inside the work; the pool counts it once the closure returns.
        #expect(await eventually { pool.statistics.completedTasks == 2 })
    }

    @Test("Cancelling the caller while its work is queued throws CancellationError; the work never runs")
    func runCancelledWhileQueued() async throws {
        let pool = ThreadPool(name: "RunC", size: 1)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let ran = Counter()
        let caller = Task { try await pool.run { ran.increment() } }
        #expect(await eventually { pool.statistics.queuedTasks == 1 })
        caller.cancel()
        let result = await caller.result
        #expect(throws: CancellationError.self) { try result.get() }
        #expect(pool.statistics.queuedTasks == 0)
        gate.countDown()
        // The pool's only thread would have run the cancelled work before this one.
        try await pool.run {}
        #expect(ran.value == 0)
    }

    @Test("A caller cancelled before it calls run gets CancellationError; the work never runs")
    func runAlreadyCancelled() async throws {
        let pool = ThreadPool(name: "RunX", size: 1)
        defer { pool.dispose() }
        let ran = Counter()
        let started = Latch()
        let caller = Task {
            started.wait()  // by now the test has cancelled this task
            return try await pool.run { ran.increment() }
        }
        caller.cancel()
        started.countDown()
        let result = await caller.result
        #expect(throws: CancellationError.self) { try result.get() }
        try await pool.run {}
        #expect(ran.value == 0)
        #expect(await eventually { pool.statistics.completedTasks == 1 })
    }

    @Test("disposeNow() while a run's work is queued: the caller gets ThreadPoolError.disposed, the work never runs")
    func runQueuedAtDisposeNow() async throws {
        let pool = ThreadPool(name: "RunN", size: 1)
        let gate = try pool.occupy()
        let ran = Counter()
        let outcome = Recorder<String>()
        let caller = Task {
            do {
                _ = try await pool.run { ran.increment() }
                outcome.append("returned")
            } catch {
                outcome.append("\(error)")
            }
        }
        #expect(await eventually { pool.statistics.queuedTasks == 1 })
        let returned = pool.disposeNow()
        #expect(returned.isEmpty, "the run's internal task is not the caller's to take back")
        #expect(await eventually { outcome.count == 1 }, "the run caller was never resumed")
        #expect(outcome.values == ["\(ThreadPoolError.disposed(pool: "RunN"))"])
        gate.countDown()
        #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(10)) })
        #expect(ran.value == 0)
        if outcome.count == 1 { await caller.value }
    }

    @Test("run on a disposed pool throws ThreadPoolError.disposed")
    func runOnDisposedPool() async throws {
        let pool = ThreadPool(name: "RunD", size: 1)
        pool.dispose()
        await #expect(throws: ThreadPoolError.disposed(pool: "RunD")) { try await pool.run { 1 } }
    }

    @Test("200 concurrent run calls each get their own result, exactly once")
    func manyConcurrentRuns() async throws {
        let pool = ThreadPool(name: "RunM", size: 3)
        defer { pool.dispose() }
        let runs = AtomicCounters(count: 200)
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<200 {
                group.addTask {
                    try await pool.run {
                        runs.increment(index)
                        return index
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(results.sorted() == Array(0..<200))
        #expect(runs.indices(notEqualTo: 1) == [])
    }

    @Test("withTaskExecutorPreference(pool) runs child tasks on pool threads")
    func taskExecutorPreference() async throws {
        let pool = ThreadPool(name: "Exec", size: 2)
        defer { pool.dispose() }
        let names = await withTaskExecutorPreference(pool) { () async -> [String] in
            async let child = KernelThreads.currentName()
            async let childFoundation = foundationThreadName() ?? ""
            let grouped = await withTaskGroup(of: String.self) { group in
                for _ in 0..<4 { group.addTask { KernelThreads.currentName() } }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            return [await child, await childFoundation] + grouped
        }
        #expect(names.count == 6)
        for name in names { #expect(name.hasPrefix("Exec Thread"), "ran on \(name)") }
        let unstructured = await Task(executorPreference: pool) {
            [KernelThreads.currentName(), foundationThreadName() ?? ""]
        }.value
        for name in unstructured { #expect(name.hasPrefix("Exec Thread"), "ran on \(name)") }
    }

    @Test("A Swift task preferring a disposed pool still runs, on the global executor")
    func executorAfterDispose() async throws {
        let pool = ThreadPool(name: "ExecD", size: 1)
        pool.dispose()
        let name = await Task(executorPreference: pool) { KernelThreads.currentName() }.value
        #expect(!name.hasPrefix("ExecD"))
    }
}

@Suite("ThreadPool queueLimit", .timeLimit(.minutes(1)))
struct ThreadPoolQueueLimitTests {
    @Test(".reject throws queueFull, naming the pool and the limit; the refused work never runs")
    func reject() throws {
        let pool = ThreadPool(name: "QRej", size: 1, queueLimit: 2, whenFull: .reject)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let ran = AtomicCounters(count: 3)
        let refused = Counter()
        let first = try pool.schedule { ran.increment(0) }
        try pool.execute { ran.increment(1) }
        #expect(throws: ThreadPoolError.queueFull(pool: "QRej", limit: 2)) { try pool.execute { refused.increment() } }
        #expect(throws: ThreadPoolError.queueFull(pool: "QRej", limit: 2)) { try pool.schedule { refused.increment() } }
        do {
            try pool.execute { refused.increment() }
            Issue.record("a full queue accepted work")
        } catch {
            #expect(String(describing: error).contains("'QRej'"))
            #expect(String(describing: error).contains("limit 2"))
        }
        #expect(pool.statistics.queuedTasks == 2)
        // A cancelled task makes room.
        #expect(first.cancel())
        let last = try pool.schedule { ran.increment(2) }
        gate.countDown()
        last.wait()
        #expect(ran.values == [0, 1, 1])
        #expect(refused.value == 0)
    }

    @Test(".block makes the submitter wait for room, then accepts; nothing is lost")
    func block() async throws {
        let pool = ThreadPool(name: "QBlk", size: 1, queueLimit: 2, whenFull: .block)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let order = Recorder<Int>()
        let queuedSeen = Recorder<Int>()
        let accepted = Counter()
        async let produced = onNewThread { () -> Bool in
            for index in 0..<50 {
                do {
                    try pool.execute {
                        queuedSeen.append(pool.statistics.queuedTasks)
                        order.append(index)
                    }
                } catch {
                    return false
                }
                accepted.increment()
            }
            return true
        }
        // Two fit in the queue; the third submission blocks while the only thread is busy.
        #expect(await eventually { accepted.value == 2 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(accepted.value == 2)
        #expect(pool.statistics.queuedTasks == 2)
        gate.countDown()
        #expect(await produced)
        #expect(accepted.value == 50)
        #expect(await eventually { order.count == 50 })
        #expect(order.values == Array(0..<50))
        #expect(queuedSeen.values.allSatisfy { $0 <= 2 })
    }

    @Test(
        "A submitter blocked on a full queue gets ThreadPoolError.disposed when the pool is disposed",
        arguments: [false, true])
    func blockedSubmitterGetsDisposed(disposeNow: Bool) async throws {
        let name = disposeNow ? "QBlN" : "QBlD"
        let pool = ThreadPool(name: name, size: 1, queueLimit: 1, whenFull: .block)
        let gate = try pool.occupy()
        let ran = Counter()
        let refusedRan = Counter()
        let queued = try pool.schedule { ran.increment() }
        let submitting = Latch()
        async let outcome = onNewThread { () -> ThreadPoolError? in
            submitting.countDown()
            do {
                try pool.execute { refusedRan.increment() }
                return nil
            } catch {
                return error as? ThreadPoolError
            }
        }
        #expect(await eventually { submitting.isOpen })
        try await Task.sleep(for: .milliseconds(100))
        if disposeNow {
            #expect(pool.disposeNow().map(ObjectIdentifier.init) == [ObjectIdentifier(queued)])
        } else {
            pool.dispose()
        }
        #expect(await outcome == .disposed(pool: name))
        gate.countDown()
        #expect(await pool.awaitTermination(within: .seconds(5)))
        #expect(ran.value == (disposeNow ? 0 : 1))
        #expect(refusedRan.value == 0)
    }

    @Test(".runOnCaller runs the work on the submitting thread, before execute returns")
    func runOnCaller() async throws {
        let pool = ThreadPool(name: "QRoC", size: 1, queueLimit: 1, whenFull: .runOnCaller)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        let ran = AtomicCounters(count: 3)
        let threads = Recorder<Int32>()
        try pool.execute { ran.increment(0) }  // fills the queue
        let caller = KernelThreads.currentID()
        try pool.execute {
            threads.append(KernelThreads.currentID())
            ran.increment(1)
        }
        #expect(ran[1] == 1)
        let task = try pool.schedule {
            threads.append(KernelThreads.currentID())
            ran.increment(2)
        }
        #expect(task.isCompleted)
        #expect(ran.values == [0, 1, 1])
        #expect(threads.values == [caller, caller])
        #expect(pool.statistics.queuedTasks == 1)
        gate.countDown()
        #expect(await eventually { ran.values == [1, 1, 1] })
    }

    @Test("Swift task jobs skip queueLimit rather than block or fail")
    func executorJobsSkipLimit() async throws {
        let pool = ThreadPool(name: "QJob", size: 1, queueLimit: 1, whenFull: .reject)
        defer { pool.dispose() }
        let gate = try pool.occupy()
        try pool.execute {}
        #expect(throws: ThreadPoolError.queueFull(pool: "QJob", limit: 1)) { try pool.execute {} }
        let job = Task(executorPreference: pool) { KernelThreads.currentName() }
        #expect(await eventually { pool.statistics.queuedTasks == 2 })
        gate.countDown()
        #expect(await job.value.hasPrefix("QJob Thread"))
    }
}

@Suite("ThreadPool dispose", .timeLimit(.minutes(1)))
struct ThreadPoolDisposeTests {
    @Test("dispose() runs all queued work, then refuses more with an error naming the pool; threads end")
    func gracefulDispose() async throws {
        let pool = ThreadPool(name: "DGr", size: 2)
        let gate = try pool.occupy(2)
        let ran = AtomicCounters(count: 10)
        for index in 0..<10 { try pool.schedule { ran.increment(index) } }
        pool.dispose()
        #expect(throws: ThreadPoolError.disposed(pool: "DGr")) { try pool.execute {} }
        #expect(throws: ThreadPoolError.disposed(pool: "DGr")) { try pool.schedule {} }
        await #expect(throws: ThreadPoolError.disposed(pool: "DGr")) { try await pool.run {} }
        #expect(String(describing: ThreadPoolError.disposed(pool: "DGr")).contains("'DGr'"))
        #expect(pool.statistics.queuedTasks == 10)
        #expect(await !pool.awaitTermination(within: .milliseconds(50)), "threads still run")
        gate.countDown()
        #expect(await pool.awaitTermination(within: .seconds(5)))
        #expect(ran.indices(notEqualTo: 1) == [])
        let statistics = pool.statistics
        #expect(statistics.threads == 0)
        #expect(statistics.queuedTasks == 0)
        #expect(statistics.completedTasks == 12)
        #expect(await eventually { KernelThreads.count(ofPool: "DGr") == 0 })
        pool.dispose()  // again: nothing happens
        #expect(await pool.awaitTermination(within: .zero))
        #expect(pool.disposeNow().isEmpty)
    }

    @Test("dispose() ends idle threads at once, long before their keepAlive")
    func disposeIdlePool() async throws {
        let pool = ThreadPool(name: "DIdle", size: 3, keepAlive: .seconds(60))
        let barrier = Latch(count: 3)
        for _ in 0..<3 {
            try pool.execute {
                barrier.countDown()
                barrier.wait(timeout: .seconds(5))
            }
        }
        #expect(await eventually { pool.statistics.idleThreads == 3 })
        #expect(KernelThreads.count(ofPool: "DIdle") == 3)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(5)))
        #expect(await eventually { KernelThreads.count(ofPool: "DIdle") == 0 })
    }

    @Test("A disposed pool that never had a thread has terminated")
    func disposeFreshPool() {
        let pool = ThreadPool(name: "DNew", size: 2)
        pool.dispose()
        #expect(pool.awaitTermination(timeout: .zero))
        #expect(pool.statistics.threads == 0)
    }

    @Test("awaitTermination is false on a pool never disposed, after the full timeout")
    func awaitTerminationWithoutDispose() async throws {
        let pool = ThreadPool(name: "ATNo", size: 1)
        defer { pool.dispose() }
        #expect(await onNewThread { !pool.awaitTermination(timeout: .zero) })
        let timedWait = { @Sendable () -> (Bool, Duration) in
            let start = MonotonicInstant.now()
            return (pool.awaitTermination(timeout: .milliseconds(100)), start.duration(to: .now()))
        }
        // Never before the timeout; late by at most a second, which a loaded machine can take to
        // schedule the waiter again.
        var (terminated, waited) = await onNewThread(timedWait)
        #expect(!terminated, "no threads, but not disposed")
        #expect(waited >= .milliseconds(100) && waited < .milliseconds(100) + .seconds(1))
        try await pool.run {}  // now with an idle thread
        (terminated, waited) = await onNewThread(timedWait)
        #expect(!terminated)
        #expect(waited >= .milliseconds(100) && waited < .milliseconds(100) + .seconds(1))
    }

    @Test(
        "disposeNow() hands back exactly the queued tasks, in order, cancelled, waiters woken; the running one finishes; nothing runs after")
    func disposeNow() async throws {
        let pool = ThreadPool(name: "DNow", size: 1)
        let started = Latch()
        let gate = Latch()
        let running = try pool.schedule {
            started.countDown()
            gate.wait(timeout: .seconds(60))
        }
        #expect(started.wait())
        let ran = AtomicCounters(count: 9)
        var handles: [Int: ScheduledTask] = [:]
        for index in 0..<8 {
            if index.isMultiple(of: 2) {
                handles[index] = try pool.schedule { ran.increment(index) }
            } else {
                try pool.execute { ran.increment(index) }
            }
        }
        let withdrawn = try pool.schedule { ran.increment(8) }
        #expect(withdrawn.cancel())  // cancelled by its owner: not handed back again
        let waiting = Latch()
        let firstQueued = try #require(handles[0])
        async let waiterWoke = onNewThread { () -> Bool in
            waiting.countDown()
            return firstQueued.wait(timeout: .seconds(60))
        }
        // Not waiting.wait(): blocking this thread could starve the child task that starts the waiter.
        #expect(await eventually { waiting.isOpen })

        let returned = pool.disposeNow()
        #expect(returned.count == 8)
        for (index, task) in returned.enumerated() {
            if let handle = handles[index] {
                #expect(task === handle, "task \(index) out of order")
            } else {
                #expect(!handles.values.contains { $0 === task })
            }
            #expect(task.isCancelled)
            #expect(!task.isCompleted)
            #expect(!task.cancel())
        }
        #expect(await onNewThread { returned.allSatisfy { $0.wait(timeout: .zero) } })
        #expect(await waiterWoke)
        #expect(pool.statistics.queuedTasks == 0)
        #expect(throws: ThreadPoolError.disposed(pool: "DNow")) { try pool.execute {} }
        #expect(!running.isCompleted)

        gate.countDown()
        #expect(await pool.awaitTermination(within: .seconds(5)))
        #expect(running.isCompleted)
        #expect(ran.values == Array(repeating: 0, count: 9))
        #expect(pool.statistics.completedTasks == 1)
        #expect(pool.statistics.threads == 0)
        #expect(pool.disposeNow().isEmpty)
        pool.dispose()
        #expect(await eventually { KernelThreads.count(ofPool: "DNow") == 0 })
    }

    @Test("disposeNow() releases the closures of the tasks it hands back")
    func disposeNowReleasesClosures() throws {
        let pool = ThreadPool(name: "DNowR", size: 1)
        let gate = try pool.occupy()
        let tracker = LifetimeTracker()
        let ran = Counter()
        for index in 0..<6 {
            if index.isMultiple(of: 2) {
                try pool.execute(trackedWork(tracker, ran))
            } else {
                try pool.schedule(trackedWork(tracker, ran))
            }
        }
        #expect(tracker.liveCount == 6)
        let returned = pool.disposeNow()
        #expect(returned.count == 6)
        #expect(tracker.liveCount == 0)
        gate.countDown()
        #expect(pool.awaitTermination(timeout: .seconds(5)))
        #expect(ran.value == 0)
        withExtendedLifetime(returned) {}
    }

    @Test("disposeNow() does not strand a queued Swift task job: it moves to the global executor")
    func disposeNowKeepsSwiftTasks() async throws {
        let pool = ThreadPool(name: "DNowJ", size: 1)
        let gate = try pool.occupy()
        let finished = Counter()
        let job = Task(executorPreference: pool) { () -> Int in
            finished.increment()
            return 7
        }
        #expect(await eventually { pool.statistics.queuedTasks == 1 })
        let returned = pool.disposeNow()
        #expect(returned.isEmpty, "a Swift task job is not a ScheduledTask of the caller's")
        gate.countDown()
        #expect(await eventually { finished.value == 1 }, "the Swift task never resumed")
        if finished.value == 1 { #expect(await job.value == 7) }
        #expect(await pool.awaitTermination(within: .seconds(5)))
    }
}

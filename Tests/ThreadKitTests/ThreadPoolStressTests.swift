import Foundation
import Testing
@testable import ThreadKit
import SeededRandom

/// Races, counted exactly. Each body runs with 1, 2, 4 and 8 threads on the other side.
@Suite("ThreadPool stress", .timeLimit(.minutes(1)))
struct ThreadPoolStressTests {
    /// What a run of submissions did.
    struct Outcome {
        let runs: AtomicCounters
        let refused: Int
    }

    /// Submits tasks `0..<total` to `pool` from `producers` threads (task i from thread i % producers,
    /// every third with `schedule`, the rest with `execute`), then disposes the pool and waits for it.
    private static func submitFromThreads(_ pool: ThreadPool, producers: Int, total: Int) async -> Outcome {
        let runs = AtomicCounters(count: total)
        let refused = Counter()
        await onThreads(producers) { producer in
            for index in stride(from: producer, to: total, by: producers) {
                do {
                    if index % 3 == 0 {
                        try pool.schedule { runs.increment(index) }
                    } else {
                        try pool.execute { runs.increment(index) }
                    }
                } catch {
                    refused.increment()
                }
            }
        }
        pool.dispose()
        #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(50)) }, "the pool did not finish its work")
        return Outcome(runs: runs, refused: refused.value)
    }

    // Under the thread sanitizer every access is instrumented and a million tasks take over a
    // minute on two cores, so that run checks a quarter of them (as the URL stress tests scale).
    @Test("1,000,000 tasks (250,000 under the thread sanitizer) from 4 producer threads each run exactly once")
    func millionTasks() async {
        let total = threadSanitized ? 250_000 : 1_000_000
        let pool = ThreadPool(name: "Mil", size: 4)
        let outcome = await Self.submitFromThreads(pool, producers: 4, total: total)
        #expect(outcome.refused == 0)
        #expect(pool.statistics.completedTasks == total)
        #expect(outcome.runs.indices(notEqualTo: 1) == [])
        #expect(await eventually { KernelThreads.count(ofPool: "Mil") == 0 })
    }

    @Test("Tasks from 1, 2, 4 and 8 producer threads each run exactly once", arguments: [1, 2, 4, 8])
    func producers(count: Int) async {
        let total = 40_000
        let pool = ThreadPool(name: "Pr\(count)", size: 4)
        let outcome = await Self.submitFromThreads(pool, producers: count, total: total)
        #expect(outcome.refused == 0)
        #expect(pool.statistics.completedTasks == total)
        #expect(outcome.runs.indices(notEqualTo: 1) == [])
    }

    /// The wake protocol under its worst case: producers submit short bursts and pause between
    /// them, so workers keep going to sleep (the spin budget soon drops to zero) just as work comes.
    /// A lost wakeup leaves a burst queued while every thread sleeps, until the keep-alive (far
    /// longer than the 5 s each burst is given) retires a thread: that burst times out and counts.
    @Test(
        "Bursts from 1, 2, 4 and 8 producers into sleeping workers: every burst runs promptly, no wakeup is lost",
        arguments: [1, 2, 4, 8])
    func noLostWakeup(producers: Int) async {
        let bursts = 4_000 / producers
        let pool = ThreadPool(name: "Wk\(producers)", size: 2, keepAlive: .seconds(120))
        let ran = Counter()
        let stalled = Counter()
        let submitted = Counter()
        await onThreads(producers) { producer in
            var random = SplitMix64(seed: UInt64(producers * 100 + producer))
            for _ in 0..<bursts {
                let size = Int.random(in: 1...4, using: &random)
                let done = Latch(count: size)
                for _ in 0..<size {
                    do {
                        try pool.execute {
                            ran.increment()
                            done.countDown()
                        }
                        submitted.increment()
                    } catch {
                        Issue.record("refused: \(error)")
                    }
                }
                if !done.wait(timeout: .seconds(5)) { stalled.increment() }
                usleep(UInt32.random(in: 0...80, using: &random))
            }
        }
        #expect(stalled.value == 0, "bursts left queued while the pool's threads slept")
        pool.dispose()
        #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(30)) })
        #expect(ran.value == submitted.value)
        #expect(pool.statistics.completedTasks == submitted.value)
    }

    @Test(
        "With a small blocking queue, tasks from 1, 2, 4 and 8 producers each run exactly once",
        arguments: [1, 2, 4, 8])
    func producersWithBackpressure(count: Int) async {
        let total = 20_000
        let pool = ThreadPool(name: "Bp\(count)", size: 3, queueLimit: 16, whenFull: .block)
        let outcome = await Self.submitFromThreads(pool, producers: count, total: total)
        #expect(outcome.refused == 0)
        #expect(pool.statistics.completedTasks == total)
        #expect(outcome.runs.indices(notEqualTo: 1) == [])
    }

    @Test(
        "cancel() racing the workers and 1, 2, 4, 8 other cancellers: each task runs XOR one cancel returns true",
        arguments: [1, 2, 4, 8])
    func cancelRace(cancellers: Int) async throws {
        let total = 20_000
        let pool = ThreadPool(name: "CR\(cancellers)", size: 2)
        let gate = try pool.occupy(2)
        let ran = AtomicCounters(count: total)
        let progress = Counter()
        var tasks: [ScheduledTask] = []
        tasks.reserveCapacity(total)
        for index in 0..<total {
            tasks.append(try pool.schedule {
                ran.increment(index)
                progress.increment()
            })
        }
        let queued = tasks
        let cancelled = AtomicCounters(count: total)
        // The workers take tasks from the front. Canceller 0 cancels from the back, so it meets
        // them somewhere in the middle; the others wait until the workers are under way and then
        // chase them from the front, racing the workers and each other for the same tasks.
        let fromBackDone = Latch()
        await onThreads(cancellers) { canceller in
            if canceller == 0 {
                gate.countDown()
                for index in (0..<total).reversed() where queued[index].cancel() {
                    cancelled.increment(index)
                }
                fromBackDone.countDown()
            } else {
                while progress.value < total / 20 && !fromBackDone.isOpen { usleep(20) }
                for index in 0..<total where queued[index].cancel() {
                    cancelled.increment(index)
                }
            }
        }
        pool.dispose()
        #expect(await onNewThread { pool.awaitTermination(timeout: .seconds(50)) })
        var neitherOrBoth: [Int] = []
        var wrongState: [Int] = []
        var ranCount = 0
        for index in 0..<total {
            ranCount += ran[index]
            if ran[index] + cancelled[index] != 1 { neitherOrBoth.append(index) }
            if queued[index].isCancelled != (cancelled[index] == 1) || queued[index].isCompleted != (ran[index] == 1) {
                wrongState.append(index)
            }
        }
        #expect(neitherOrBoth == [])
        #expect(wrongState == [])
        #expect(pool.statistics.completedTasks == 2 + ranCount)
        #expect(pool.statistics.queuedTasks == 0)
    }

    /// Submissions racing a dispose: every submitter keeps going until it has been refused, so the
    /// race always happens.
    private struct DisposeRace {
        let submitters: Int
        let capacity: Int
        let accepted: AtomicCounters
        let refused: AtomicCounters
        let ran: AtomicCounters
        let acceptedAfterRefusal: Counter
        let handles: Recorder<[(id: Int, task: ScheduledTask)]>
        let handedBack: Recorder<[ScheduledTask]>

        init(submitters: Int, capacity: Int = 50_000) {
            self.submitters = submitters
            self.capacity = capacity
            accepted = AtomicCounters(count: submitters * capacity)
            refused = AtomicCounters(count: submitters * capacity)
            ran = AtomicCounters(count: submitters * capacity)
            acceptedAfterRefusal = Counter()
            handles = Recorder()
            handedBack = Recorder()
        }

        /// Races `submitters` submitters against `dispose()` (or `disposeNow()`) of a new 4-thread pool
        /// named `name`, then waits (off the cooperative pool) up to 50 s for the pool to terminate.
        static func run(submitters: Int, poolNamed name: String, disposeNow: Bool) async
            -> (race: DisposeRace, pool: ThreadPool, terminated: Bool)
        {
            let pool = ThreadPool(name: name, size: 4)
            let race = DisposeRace(submitters: submitters)
            await race.run(pool, disposeNow: disposeNow)
            return (race, pool, await onNewThread { pool.awaitTermination(timeout: .seconds(50)) })
        }

        /// The submissions accepted and refused, over every submitter.
        var totals: (accepted: Int, refused: Int) {
            (accepted.values.reduce(0, +), refused.values.reduce(0, +))
        }

        private func run(_ pool: ThreadPool, disposeNow: Bool) async {
            let submitted = Counter()
            let trigger = 1_000 * submitters
            let submitters = submitters
            let capacity = capacity
            let (accepted, refused, ran) = (accepted, refused, ran)
            let (acceptedAfterRefusal, handles, handedBack) = (acceptedAfterRefusal, handles, handedBack)
            await onThreads(submitters + 1) { thread in
                if thread == submitters {
                    while submitted.value < trigger { usleep(50) }
                    if disposeNow {
                        handedBack.append(pool.disposeNow())
                    } else {
                        pool.dispose()
                    }
                    return
                }
                var mine: [(id: Int, task: ScheduledTask)] = []
                var refusals = 0
                for step in 0..<capacity {
                    let id = thread * capacity + step
                    do {
                        if disposeNow || step.isMultiple(of: 2) {
                            mine.append((id, try pool.schedule { ran.increment(id) }))
                        } else {
                            try pool.execute { ran.increment(id) }
                        }
                        accepted.increment(id)
                        if refusals > 0 { acceptedAfterRefusal.increment() }
                    } catch ThreadPoolError.disposed {
                        refused.increment(id)
                        refusals += 1
                        if refusals == 3 { break }
                    } catch {
                        Issue.record("unexpected error \(error)")
                    }
                    submitted.increment()
                }
                handles.append(mine)
            }
        }
    }

    // The original's dispose stranded queued work forever, and a racing schedule could create a
    // thread after dispose.
    @Test(
        "dispose() racing 1, 2, 4, 8 submitters: each submission throws or runs once; no thread outlives the pool",
        arguments: [1, 2, 4, 8])
    func disposeRace(submitters: Int) async throws {
        let name = "DR\(submitters)"
        let (race, pool, terminated) = await DisposeRace.run(submitters: submitters, poolNamed: name, disposeNow: false)
        #expect(terminated)
        var unaccounted: [Int] = []
        for id in 0..<(submitters * race.capacity)
        where race.accepted[id] + race.refused[id] > 1 || race.ran[id] != race.accepted[id] {
            unaccounted.append(id)
        }
        #expect(unaccounted == [])
        #expect(pool.statistics.completedTasks == race.totals.accepted)
        try await Self.expectEnded(race, pool, named: name)
    }

    /// How either race ends: every submitter refused exactly three times and nothing accepted after
    /// a refusal; the pool's threads gone, and none started after the end.
    private static func expectEnded(_ race: DisposeRace, _ pool: ThreadPool, named name: String,
                            sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(race.totals.refused == 3 * race.submitters, "every submitter was refused three times, then stopped",
                sourceLocation: sourceLocation)
        #expect(race.acceptedAfterRefusal.value == 0, sourceLocation: sourceLocation)
        #expect(pool.statistics.threads == 0, sourceLocation: sourceLocation)
        #expect(await eventually { KernelThreads.count(ofPool: name) == 0 }, sourceLocation: sourceLocation)
        try await Task.sleep(for: .milliseconds(100))
        #expect(KernelThreads.count(ofPool: name) == 0, "a thread started after the end", sourceLocation: sourceLocation)
        #expect(pool.statistics.threads == 0, sourceLocation: sourceLocation)
    }

    @Test(
        "disposeNow() racing 1, 2, 4, 8 submitters: each accepted task runs XOR is handed back, in order",
        arguments: [1, 2, 4, 8])
    func disposeNowRace(submitters: Int) async throws {
        let name = "DN\(submitters)"
        let (race, pool, terminated) = await DisposeRace.run(submitters: submitters, poolNamed: name, disposeNow: true)
        #expect(terminated)
        let returned = try #require(race.handedBack.values.first)
        let accepted = race.handles.values.flatMap { $0 }
        var idOf: [ObjectIdentifier: Int] = [:]
        for (id, task) in accepted { idOf[ObjectIdentifier(task)] = id }

        var wrong: [Int] = []
        var cancelledIDs: Set<Int> = []
        for (id, task) in accepted {
            let ran = race.ran[id]
            if !(ran == 1 && task.isCompleted && !task.isCancelled) && !(ran == 0 && task.isCancelled) { wrong.append(id) }
            if task.isCancelled { cancelledIDs.insert(id) }
        }
        #expect(wrong == [])
        let returnedIDs = returned.compactMap { idOf[ObjectIdentifier($0)] }
        #expect(returnedIDs.count == returned.count, "disposeNow returned a task nobody submitted")
        #expect(Set(returnedIDs) == cancelledIDs)
        #expect(returnedIDs.count == cancelledIDs.count)
        // In the order accepted: each submitter's tasks come back in the order it submitted them.
        for submitter in 0..<submitters {
            let own = returnedIDs.filter { $0 / race.capacity == submitter }
            #expect(own == own.sorted())
        }
        #expect(race.totals.accepted == accepted.count)
        #expect(pool.statistics.completedTasks == race.totals.accepted - returned.count)
        try await Self.expectEnded(race, pool, named: name)
    }
}

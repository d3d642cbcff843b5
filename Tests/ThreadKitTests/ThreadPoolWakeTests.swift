import Foundation
import SeededRandom
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// The word a pool worker sleeps on (``Futex``), and the pool's sleep and wake-up under races:
/// no post is lost, a timed wait is never early, and every task submitted to a sleeping pool runs
/// exactly once, without waiting for a collector tick to rescue it.
@Suite("ThreadPool wake-up", .timeLimit(.minutes(1)))
struct ThreadPoolWakeTests {
    // MARK: - The futex word

    @Test("a post before the wait keeps the waiter awake; a reset makes the next wait sleep")
    func postBeforeWait() {
        let futex = Futex()
        #expect(!futex.isPosted)
        futex.post()
        #expect(futex.isPosted)
        #expect(futex.wait(until: .distantFuture))
        futex.reset()
        #expect(!futex.isPosted)
        #expect(!futex.wait(until: .now()))
    }

    @Test("a timed wait with no post returns false, never before its deadline")
    func timedWaitIsNeverEarly() {
        let futex = Futex()
        let start = MonotonicInstant.now()
        let deadline = start.advanced(by: .milliseconds(50))
        #expect(!futex.wait(until: deadline))
        #expect(MonotonicInstant.now() >= deadline)
        #expect(!futex.wait(until: MonotonicInstant(nanoseconds: 0)), "a deadline long past returns at once")
    }

    @Test("a post from another thread wakes a waiter with no deadline")
    func postWakesWaiter() async {
        let futex = Futex()
        let woke = await guarded {
            Thread { Thread.sleep(forTimeInterval: 0.05); futex.post() }.start()
            return futex.wait(until: .distantFuture)
        }
        #expect(woke == true)
    }

    @Test("two threads hand a turn back and forth 20,000 times over two words: no post is lost")
    func pingPong() async {
        let rounds = 20_000
        let ping = Futex()
        let pong = Futex()
        let finished = await guarded(timeout: .seconds(30)) {
            Thread {
                for _ in 0..<rounds {
                    _ = ping.wait(until: .distantFuture)
                    ping.reset()
                    pong.post()
                }
            }.start()
            for _ in 0..<rounds {
                ping.post()
                _ = pong.wait(until: .distantFuture)
                pong.reset()
            }
            return true
        }
        #expect(finished == true, "a post was lost: the turn never came back")
    }

    // MARK: - The pool

    /// Submits `total` tasks from `producers` threads, each pausing a random 0–300 µs between
    /// submissions so that the workers keep running out of work, spinning, sleeping and being
    /// woken; each task's count must be exactly 1, and each must run without a collector tick's help.
    private static func submitWithPauses(_ pool: ThreadPool, producers: Int, total: Int, seed: UInt64) async -> AtomicCounters {
        let runs = AtomicCounters(count: total)
        let done = Latch(count: total)
        await onThreads(producers) { producer in
            var random = SplitMix64(seed: seed &+ UInt64(producer))
            for index in stride(from: producer, to: total, by: producers) {
                let pause = Int.random(in: 0...300, using: &random)
                if pause > 20 { Thread.sleep(forTimeInterval: Double(pause) / 1e6) }
                do {
                    try pool.execute {
                        runs.increment(index)
                        done.countDown()
                    }
                } catch {
                    Issue.record("the running pool refused a task: \(error)")
                    done.countDown()
                }
            }
        }
        #expect(await onNewThread { done.wait(timeout: .seconds(20)) }, "a task was not run: a wake-up was lost")
        return runs
    }

    @Test("tasks trickling into a sleeping pool from 1, 2 and 4 threads each run once, woken at once", arguments: [1, 2, 4])
    func trickleWakesSleepers(producers: Int) async {
        // keepAlive and collection far out: a lost wake-up would wait for a tick that never comes.
        let pool = ThreadPool(name: "Wake\(producers)", size: 2, keepAlive: .seconds(3_600), collectionInterval: .seconds(3_600))
        let runs = await Self.submitWithPauses(pool, producers: producers, total: 3_000, seed: 23)
        #expect(runs.indices(notEqualTo: 1) == [])
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
        #expect(pool.statistics.completedTasks == 3_000)
    }

    @Test("tasks handed to threads as the collector retires them, every millisecond, each run once")
    func wakesRacingRetirement() async {
        // Sleepers time out on every 1 ms tick while submitters hand them work: a worker whose
        // wait timed out may have been handed work meanwhile, and must run it, not leave.
        let pool = ThreadPool(name: "WakeRet", size: 3, keepAlive: .zero, collectionInterval: .milliseconds(1))
        let runs = await Self.submitWithPauses(pool, producers: 2, total: 3_000, seed: 7)
        #expect(runs.indices(notEqualTo: 1) == [])
        #expect(pool.statistics.completedTasks == 3_000)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    /// How a sleeping worker gets the task of ``wokenWorkerRunsWithoutMutex(_:)``.
    enum WakeKind: String, CaseIterable, Sendable {
        /// Fewer threads than `size`: the submitter hands the task to the sleeper (`handOver`).
        case handedWork
        /// All threads started: the task goes onto the intake and a sleeper is woken to look.
        case wokenToLook
    }

    @Test("a worker woken for a task runs it while another thread holds the pool's mutex", arguments: WakeKind.allCases)
    func wokenWorkerRunsWithoutMutex(_ kind: WakeKind) async {
        let pool = ThreadPool(name: "WakeNoMutex", size: 2, keepAlive: .seconds(3_600), collectionInterval: .seconds(3_600))
        let threads = kind == .handedWork ? 1 : 2
        let started = Latch(count: threads)
        let release = Latch()
        for _ in 0..<threads {
            try? pool.execute {
                started.countDown()
                release.wait(timeout: .seconds(10))
            }
        }
        started.wait(timeout: .seconds(10))
        release.countDown()
        let ranEvery = await onNewThread { () -> Bool in
            for _ in 0..<20 {
                // Every thread asleep, none spinning: the task needs a wake-up.
                let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
                while pool.idleWorkers.current.sleepers != threads || pool.idleWorkers.current.spinners != 0 {
                    guard MonotonicInstant.now() < deadline else { return false }
                    Thread.sleep(forTimeInterval: 0.001)
                }
                let ran = Latch()
                do { try pool.execute { ran.countDown() } } catch { return false }
                // Held from just after the submitter let go of it, while the woken worker starts.
                pool.mutex.lock()
                let done = ran.wait(timeout: .seconds(5))
                pool.mutex.unlock()
                guard done else { return false }
            }
            return true
        }
        #expect(ranEvery, "the woken worker waited for the pool's mutex")
        #expect(await eventually { pool.statistics.completedTasks == threads + 20 })
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("pools disposed (or stopped) at once while tasks trickle in: each accepted task runs once or comes back, and the pool ends", arguments: [false, true])
    func disposeWhileWaking(now: Bool) async {
        // The shutdown's post sends a sleeper to the intake without the mutex; it reports the
        // sleep at its next hold and leaves. 200 pools, each disposed after a random few tasks.
        let outcome = await onNewThread { () -> (miscounted: Int, unended: Int) in
            var random = SplitMix64(seed: now ? 5 : 3)
            var miscounted = 0
            var unended = 0
            for round in 0..<200 {
                let pool = ThreadPool(name: "WakeDispose\(round)", size: 2, keepAlive: .seconds(3_600), collectionInterval: .seconds(3_600))
                let ran = Counter()
                var accepted = 0
                for _ in 0..<Int.random(in: 0...6, using: &random) {
                    if Bool.random(using: &random) { Thread.sleep(forTimeInterval: 0.000_2) }
                    if (try? pool.schedule { _ = ran.increment() }) != nil { accepted += 1 }
                }
                let handedBack = now ? pool.disposeNow().count : 0
                if !now { pool.dispose() }
                if !pool.awaitTermination(timeout: .seconds(10)) { unended += 1 }
                if ran.value + handedBack != accepted { miscounted += 1 }
            }
            return (miscounted, unended)
        }
        #expect(outcome.miscounted == 0, "a task ran twice, or neither ran nor came back")
        #expect(outcome.unended == 0, "a disposed pool did not end")
    }

    @Test("kept threads, sleeping with no deadline, are woken for every task", arguments: [1, 2])
    func keptThreadsAreWoken(minimumThreads: Int) async {
        let pool = ThreadPool(
            name: "WakeMin\(minimumThreads)", size: 2, minimumThreads: minimumThreads,
            keepAlive: .seconds(3_600), collectionInterval: .seconds(3_600))
        let runs = await Self.submitWithPauses(pool, producers: 2, total: 2_000, seed: 11)
        #expect(runs.indices(notEqualTo: 1) == [])
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }
}

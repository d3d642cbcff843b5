import Foundation
import Synchronization
import Testing
@testable import ThreadKit
#if canImport(Glibc)
import Glibc
#endif

/// How a pool's threads start and end, in scenarios that change the whole process (thread starts
/// refused, the shared timer thread kept busy, the global log delegate): `ProcessExitTests` runs
/// each in a process of its own.
extension ChildScenario {
    #if os(Linux)
    static func peakThreadsSkipsAFailedStart() {
        let pool = ThreadPool(name: "PeakNoStart", size: 2)
        let refused = ThreadStarts.refused { () -> Bool in
            do {
                try pool.execute {}
                return false
            } catch {
                return true
            }
        }
        precondition(refused, "the start was not refused")
        let statistics = pool.statistics
        precondition(statistics.peakThreads == 0 && statistics.threads == 0, "\(statistics)")
        // A thread that does start counts.
        let gate = Latch()
        try! pool.execute { gate.wait() }
        let started = pool.statistics
        precondition(started.peakThreads == 1 && started.threads == 1, "\(started)")
        gate.countDown()
        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(10)))
        precondition(pool.statistics.peakThreads == 1, "\(pool.statistics)")
    }

    static func disposeStartsAThreadForQueuedWork() {
        let pool = ThreadPool(name: "NoThreadLeft", size: 1)
        // The shared timer thread is kept busy: the retry it would make for queued work whose
        // thread failed to start cannot come, so only dispose() can start one.
        let timerBusy = Latch()
        let timerRelease = Latch()
        _ = try! TimerThread.shared.schedule(after: .zero) {
            timerBusy.countDown()
            timerRelease.wait(timeout: .seconds(60))
        }
        precondition(timerBusy.wait(timeout: .seconds(10)), "the timer call did not start")
        defer { timerRelease.countDown() }

        // While starts are refused, two submitters race: one counts a thread that then fails to
        // start, the other sees that thread counted and queues its task. Threads made before
        // the refusal, which would refuse them too.
        let ran = Counter()
        let accepted = Counter()
        let attempts = Counter()
        let go = Latch()
        let stop = Atomic<Bool>(false)
        let submittersDone = Latch(count: 2)
        for _ in 0..<2 {
            Thread {
                go.wait()
                while !stop.load(ordering: .relaxed), attempts.increment() < 200_000 {
                    if (try? pool.execute { ran.increment() }) != nil { accepted.increment() }
                }
                submittersDone.countDown()
            }.start()
        }
        ThreadStarts.refused {
            go.countDown()
            while accepted.value == 0, attempts.value < 200_000 { sched_yield() }
            stop.store(true, ordering: .relaxed)
            precondition(submittersDone.wait(timeout: .seconds(30)), "the submitters did not stop")
        }
        precondition(accepted.value > 0, "no task was queued while a thread failed to start")
        let before = pool.statistics
        precondition(before.threads == 0 && before.queuedTasks == accepted.value, "\(before)")

        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(10)), "the queued work never ran: \(pool.statistics)")
        precondition(ran.value == accepted.value, "\(ran.value) of \(accepted.value) queued tasks ran")
    }

    #endif

    static func collectedThreadRunsNothingAfter() {
        /// Holds up the first "collected" record until released.
        final class HoldingDelegate: LogDelegate, @unchecked Sendable {
            // Sendable: the latches are thread-safe.
            let collecting = Latch()
            let release = Latch()
            func log(_ record: Log.Record) {
                guard record.message.contains("collected") else { return }
                collecting.countDown()
                release.wait(timeout: .seconds(30))
            }
        }
        let delegate = HoldingDelegate()
        Log.delegate = delegate
        Log.enable(.threadPool)
        let pool = ThreadPool(name: "Retire", size: 1, keepAlive: .zero, collectionInterval: .milliseconds(1))
        try! pool.execute {}
        // Thread1 goes idle, is retired at the next tick, and logs it: the delegate holds it there.
        precondition(delegate.collecting.wait(timeout: .seconds(10)), "the thread was not collected")
        let ranOn = LockedValue<String?>(nil)
        let task = try! pool.schedule { ranOn.withLock { $0 = NamedThread.currentName() } }
        delegate.release.countDown()
        precondition(task.wait(timeout: .seconds(10)), "the task never ran")
        let thread = ranOn.withLock { $0 }
        precondition(thread == "Retire Thread2", "the task ran on \(thread ?? "nothing"), not on a new thread")
        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(10)))
    }
}

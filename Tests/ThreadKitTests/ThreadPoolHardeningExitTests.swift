import Foundation
import Synchronization
import Testing
@testable import ThreadKit
#if canImport(Glibc)
import Glibc
#endif

/// Hardening scenarios that change the whole process (thread starts refused, the global log
/// delegate): `ProcessExitTests` runs each in a process of its own.
extension ChildScenario {
    #if os(Linux)
    static func poolThreadStartFailure() {
        let pool = ThreadPool(name: "NoRoom", size: 1)
        let refused: ThreadPoolError? = ThreadStarts.refused {
            do {
                try pool.execute {}
                return nil
            } catch {
                return error as? ThreadPoolError
            }
        }

        guard case .threadStartFailed(pool: "NoRoom", let errno) = refused, errno != 0 else {
            fatalError("expected threadStartFailed, got \(String(describing: refused))")
        }
        precondition("\(refused!)".contains("NoRoom") && "\(refused!)".contains("errno"))
        // The failed start left no phantom thread behind: the next task gets a real one.
        let statistics = pool.statistics
        precondition(statistics.threads == 0 && statistics.queuedTasks == 0, "\(statistics)")
        let task = try! pool.schedule {}
        precondition(task.wait(timeout: .seconds(10)), "the pool still believes it has a thread")
        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(10)))
    }

    static func threadStartFailureWithThreadsRunning() {
        let pool = ThreadPool(name: "NoRoom2", size: 2)
        let gate = Latch()
        let ran = Atomic<Int>(0)
        try! pool.execute { gate.wait() }
        while pool.statistics.busyThreads < 1 { usleep(1000) }
        ThreadStarts.refused {
            try! pool.execute { ran.add(1, ordering: .relaxed) }  // accepted: thread 1 will run it
        }
        let statistics = pool.statistics
        precondition(statistics.threads == 1 && statistics.queuedTasks == 1, "\(statistics)")
        gate.countDown()
        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(10)))
        precondition(ran.load(ordering: .relaxed) == 1)
    }

    #endif

    static func awaitTerminationWaitsForExitLogs() {
        final class SlowDelegate: LogDelegate, @unchecked Sendable {
            // Sendable: the counters are atomics.
            let inside = Atomic<Int>(0)
            let calls = Atomic<Int>(0)
            func log(_ record: Log.Record) {
                inside.add(1, ordering: .sequentiallyConsistent)
                usleep(20_000)
                calls.add(1, ordering: .sequentiallyConsistent)
                inside.subtract(1, ordering: .sequentiallyConsistent)
            }
        }
        let delegate = SlowDelegate()
        Log.delegate = delegate
        Log.enable(.threadPool)
        let pool = ThreadPool(name: "ExitLog", size: 4)
        for _ in 0..<4 { try! pool.execute { usleep(10_000) } }
        pool.dispose()
        precondition(pool.awaitTermination(timeout: .seconds(20)))
        let inside = delegate.inside.load(ordering: .sequentiallyConsistent)
        let calls = delegate.calls.load(ordering: .sequentiallyConsistent)
        precondition(inside == 0, "a pool thread was still inside the delegate")
        usleep(100_000)
        precondition(delegate.calls.load(ordering: .sequentiallyConsistent) == calls,
                     "a pool thread called the delegate after awaitTermination returned")
    }
}

/// The timer's thread, when the system will not start it.
extension ChildScenario {
    #if os(Linux)
    static func timerThreadStartFailure() {
        let timer = TimerThread(name: "NoTimer")
        let refused: TimerThreadError? = ThreadStarts.refused {
            do {
                _ = try timer.schedule(after: .zero) { fatalError("a refused call ran") }
                return nil
            } catch {
                return error as? TimerThreadError
            }
        }
        guard case .threadStartFailed(name: "NoTimer", let errno) = refused, errno != 0 else {
            fatalError("expected threadStartFailed, got \(String(describing: refused))")
        }
        precondition(timer.pendingCount == 0, "the refused call is still pending")
        let ran = Latch()
        _ = try! timer.schedule(after: .milliseconds(1)) { ran.countDown() }
        precondition(ran.wait(timeout: .seconds(10)), "the timer did not start its thread on the next call")
        _ = timer.dispose()
    }
    #endif
}

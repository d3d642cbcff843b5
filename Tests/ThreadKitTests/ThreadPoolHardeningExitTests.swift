import Foundation
import Synchronization
import Testing
@testable import ThreadKit
#if canImport(Glibc)
import Glibc
#endif

/// Hardening scenarios that change the whole process (a resource limit, the global log delegate),
/// each in a process of its own.
///
/// Serialized: while an exit test's child process runs, Swift Testing blocks Swift concurrency
/// threads reading its pipes, and this machine has only two of them.
@Suite("ThreadPool hardening, in processes of their own", .serialized)
struct ThreadPoolHardeningExitTests {
    #if os(Linux)
    @Test("3. A thread that cannot start is an error, not a lost task; the pool recovers once threads can start")
    func threadStartFailure() async {
        await #expect(processExitsWith: .success) {
            let pool = ThreadPool(name: "NoRoom", size: 1)
            // Leave too little address space for a thread's stack (8 MB by default).
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_AS.rawValue), &limit)
            let saved = limit
            limit.rlim_cur = rlim_t(AddressSpace.current() + 2 << 20)
            precondition(setrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0)
            let refused: ThreadPoolError?
            do {
                try pool.execute {}
                refused = nil
            } catch {
                refused = error as? ThreadPoolError
            }
            var restored = saved
            precondition(setrlimit(Int32(RLIMIT_AS.rawValue), &restored) == 0)

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
    }

    @Test("3. A thread that cannot start while others run leaves its task queued for them")
    func threadStartFailureWithThreadsRunning() async {
        await #expect(processExitsWith: .success) {
            let pool = ThreadPool(name: "NoRoom2", size: 2)
            let gate = Latch()
            let ran = Atomic<Int>(0)
            try! pool.execute { gate.wait() }
            while pool.statistics.busyThreads < 1 { usleep(1000) }
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_AS.rawValue), &limit)
            let saved = limit
            limit.rlim_cur = rlim_t(AddressSpace.current() + 2 << 20)
            precondition(setrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0)
            try! pool.execute { ran.add(1, ordering: .relaxed) }  // accepted: thread 1 will run it
            var restored = saved
            precondition(setrlimit(Int32(RLIMIT_AS.rawValue), &restored) == 0)
            let statistics = pool.statistics
            precondition(statistics.threads == 1 && statistics.queuedTasks == 1, "\(statistics)")
            gate.countDown()
            pool.dispose()
            precondition(pool.awaitTermination(timeout: .seconds(10)))
            precondition(ran.load(ordering: .relaxed) == 1)
        }
    }
    #endif

    @Test("7. awaitTermination returns true only after the exiting threads are done with the log delegate")
    func awaitTerminationWaitsForExitLogs() async {
        await #expect(processExitsWith: .success) {
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
}

/// The process's virtual memory size, from `/proc/self/status`.
enum AddressSpace {
    static func current() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmSize:") } ?? ""
        let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        return kilobytes * 1024
    }
}

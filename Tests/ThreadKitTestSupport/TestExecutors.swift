import Foundation
import Testing

// Where tests' tasks run when Swift concurrency's cooperative pool is the wrong place: on a 2-core
// machine that pool has two threads, shared by every test of the process, and a test that holds
// one for seconds stops the others' awaits, polls and resumptions for as long (a loaded machine
// makes that longer still): a 10 s bound elsewhere then fails for no fault of its test.

/// For a test that blocks a thread for long: runs the test's tasks on threads of their own, a new
/// thread for each job, instead of on the cooperative pool.
///
/// Exit tests above all: Swift Testing's exit-test handler waits for the child with blocking reads
/// (of its back channel, and of its standard error or output when observed), each in a child task
/// of the test, until the child exits. The handler's child tasks inherit this trait's executor
/// preference, so they block threads of their own. Tests that make blocking network calls from
/// their own body too.
public struct OnOwnThreads: TestTrait, SuiteTrait, TestScoping {
    /// On a suite, it applies to every test in it.
    public var isRecursive: Bool { true }

    /// Runs the test with a preference for ``ThreadPerJobExecutor``, which its child tasks inherit.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(ThreadPerJobExecutor.shared) { try await function() }
    }
}

extension Trait where Self == OnOwnThreads {
    /// Runs the test's tasks off Swift concurrency's cooperative pool, a thread per job (see ``OnOwnThreads``).
    public static var onOwnThreads: Self { Self() }
}

extension Task where Failure == any Error {
    /// An unstructured task whose jobs run on threads of their own (see ``OnOwnThreads``), for a
    /// test that times what the task does from its start: an unstructured task does not inherit
    /// its creator's executor preference, and on Swift's few shared threads it may start seconds late.
    @discardableResult
    public static func onOwnThreads(_ operation: sending @escaping () async throws -> Success) -> Task<Success, any Error> {
        Task(executorPreference: ThreadPerJobExecutor.shared, operation: operation)
    }
}

/// Runs each job on a new thread: a job that blocks holds only its own thread.
final class ThreadPerJobExecutor: TaskExecutor {
    static let shared = ThreadPerJobExecutor()

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        let thread = Thread { job.runSynchronously(on: executor) }
        thread.name = "own-thread test job"
        thread.start()
    }
}

/// For a CPU-bound test (a model comparison, a fuzz, a long loop without a suspension): runs the
/// test's tasks on a pool of its own, one thread per core, shared by every such test.
///
/// Off the cooperative pool, so that it does not hold up other tests' resumptions for seconds; and
/// on a bounded pool, unlike ``OnOwnThreads``, so that twenty such tests at once do not become
/// twenty runnable threads that the timing tests' threads must share the cores with.
public struct CPUBound: TestTrait, SuiteTrait, TestScoping {
    /// On a suite, it applies to every test in it.
    public var isRecursive: Bool { true }

    /// Runs the test with a preference for ``CPUBoundExecutor``, which its child tasks inherit.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(CPUBoundExecutor.shared) { try await function() }
    }
}

extension Trait where Self == CPUBound {
    /// Runs the test's tasks on a pool of its own for CPU-bound tests (see ``CPUBound``).
    public static var cpuBound: Self { Self() }
}

/// One thread per core, taking jobs in the order they came.
final class CPUBoundExecutor: TaskExecutor, @unchecked Sendable {
    // Sendable: `jobs` is guarded by `condition`.
    static let shared = CPUBoundExecutor(threads: ProcessInfo.processInfo.activeProcessorCount)

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    private init(threads: Int) {
        for index in 1...threads {
            let thread = Thread { [self] in runJobs() }
            thread.name = "cpu-bound test \(index)"
            thread.start()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func runJobs() -> Never {
        let executor = asUnownedTaskExecutor()
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: executor)
        }
    }
}

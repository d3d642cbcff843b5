import Foundation
import Testing

/// For a test with an exit test: runs the test's tasks on threads of their own, a new thread for
/// each job, instead of on Swift concurrency's cooperative pool.
///
/// Swift Testing's exit-test handler waits for the child with blocking reads (of its back channel,
/// and of its standard error or output when observed), each in a child task of the test, until the
/// child exits. On a 2-core machine the pool has two threads: two such reads hold both, and every
/// other test of the process stops for as long as the child runs, seconds on a loaded machine. The
/// handler's child tasks inherit this trait's executor preference, so they block threads of their own.
public struct ExitTestOnOwnThreads: TestTrait, SuiteTrait, TestScoping {
    /// On a suite, it applies to every test in it.
    public var isRecursive: Bool { true }

    /// Runs the test with a preference for ``ThreadPerJobExecutor``, which its child tasks inherit.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(ThreadPerJobExecutor.shared) { try await function() }
    }
}

extension Trait where Self == ExitTestOnOwnThreads {
    /// Runs the test's tasks off Swift concurrency's cooperative pool (see ``ExitTestOnOwnThreads``).
    public static var exitTestOnOwnThreads: Self { Self() }
}

/// Runs each job on a new thread: a job that blocks holds only its own thread.
final class ThreadPerJobExecutor: TaskExecutor {
    static let shared = ThreadPerJobExecutor()

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        let thread = Thread { job.runSynchronously(on: executor) }
        thread.name = "exit test job"
        thread.start()
    }
}

/// What an exit test's child process wrote to standard error, as text (`nil` if the exit test
/// did not run, or its expectation failed).
public func standardError(of result: ExitTest.Result?) -> String? {
    result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }
}

/// Whether an exit test's child stopped with a message on standard error that contains every one
/// of `fragments` (a precondition's message names the argument and the value).
public func stopped(_ result: ExitTest.Result?, saying fragments: String...) -> Bool {
    stopped(result, saying: fragments)
}

/// Whether an exit test's child stopped with a message on standard error that contains every one
/// of `fragments` (none: whether it stopped at all, as the exit test expected).
public func stopped(_ result: ExitTest.Result?, saying fragments: [String]) -> Bool {
    guard let message = standardError(of: result) else { return false }
    return fragments.allSatisfy { message.contains($0) }
}

/// Expects, in debug builds where precondition messages are kept, that an exit test's child wrote
/// each of `expected` to standard error.
public func expectMessage(_ result: ExitTest.Result?, contains expected: [String], sourceLocation: SourceLocation = #_sourceLocation) {
    #if DEBUG
    guard let output = standardError(of: result) else { return }
    for part in expected {
        #expect(output.contains(part), "standard error was: \(output)", sourceLocation: sourceLocation)
    }
    #endif
}

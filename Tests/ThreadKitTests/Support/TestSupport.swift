// The helpers of ThreadKit's tests that need ThreadKit's internals; what the test targets share
// (counting, waiting, kernel threads, exit-test checks) is in ThreadKitTestSupport, re-exported
// here so that every test file has it.

@_exported import ThreadKitTestSupport
import Foundation
@testable import ThreadKit

extension KernelThreads {
    /// The kernel name prefix of every thread of the `ThreadPool` named `pool`: `"<pool> Thread"`.
    ///
    /// The kernel keeps 15 bytes, so the pool name must be short enough (at most 6 bytes) to leave
    /// room for the thread number; then the prefix matches that pool's threads and no other's.
    static func prefix(ofPool pool: String) -> String {
        let prefix = "\(pool) Thread"
        precondition(prefix.utf8.count <= 13, "pool name '\(pool)' is too long to count its threads exactly")
        return prefix
    }

    /// How many threads of the `ThreadPool` named `pool` the kernel has alive: those whose kernel
    /// name is the one the pool gives its thread N, `"<pool, cut to fit> Thread<N>"`.
    static func count(ofPool pool: String) -> Int {
        names().filter { name in
            guard let range = name.range(of: "Thread", options: .backwards),
                  let number = Int(name[range.upperBound...]) else { return false }
            return name == NamedThread.kernelName(for: pool, keepingSuffix: " Thread\(number)")
        }.count
    }
}

/// Runs `body` on a new thread named `name` (as ``startThread(named:_:)`` names it) and suspends
/// until it returns its result, so that blocking test code never holds one of Swift concurrency's
/// few threads.
func onNewThread<Result: Sendable>(named name: String, _ body: @escaping @Sendable () -> Result) async -> Result {
    await onNewThread {
        NamedThread.nameCurrentThread(name)
        return body()
    }
}

/// Starts a thread that names itself `name` (in Foundation and the kernel) and runs `body`.
///
/// The name is set from inside the thread, through ThreadKit, which also sets the kernel's name: on
/// Linux, Foundation drops a name set before `start()` (the thread inherits its creator's) and reads
/// names back from the kernel, 15 bytes at most.
func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
    Thread {
        NamedThread.nameCurrentThread(name)
        body()
    }.start()
}

/// Runs `body` with a new pool of `size` threads and a new dedicated thread, each named by its
/// prefix and a fresh number, and disposes both after it.
func withPoolAndThread<Result>(
    pool poolPrefix: String, size: Int = 1, thread threadPrefix: String,
    _ body: (ThreadPool, DedicatedThread) async throws -> Result
) async throws -> Result {
    let pool = ThreadPool(name: KernelThreads.uniqueName(poolPrefix), size: size)
    let thread = DedicatedThread(name: KernelThreads.uniqueName(threadPrefix))
    defer {
        pool.dispose()
        thread.dispose()
    }
    return try await body(pool, thread)
}

extension ThreadPool {
    /// The async ``awaitTermination()``, cancelled after `limit`: `false` if the pool had not ended
    /// by then, so that a pool that never ends fails the test instead of hanging it.
    func awaitTermination(within limit: Duration) async -> Bool {
        await cancelling(after: limit) { await self.awaitTermination() }
    }
}

extension DedicatedThread {
    /// The async ``awaitTermination()``, cancelled after `limit`: `false` if the thread had not
    /// exited by then, so that a thread that never ends fails the test instead of hanging it.
    func awaitTermination(within limit: Duration) async -> Bool {
        await cancelling(after: limit) { await self.awaitTermination() }
    }
}

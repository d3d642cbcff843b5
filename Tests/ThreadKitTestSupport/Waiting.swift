// Waiting for something that happens on another thread, always with a bound, and running
// blocking test code off Swift concurrency's few threads.

import Foundation

/// A test ran past its bound.
public struct TestTimedOut: Error, CustomStringConvertible {
    /// The bound it ran past.
    public let limit: Duration
    public init(limit: Duration) { self.limit = limit }
    public var description: String { "the test did not finish within \(limit)" }
}

/// Polls `condition` every `interval` until it holds or `timeout` passes, suspending (not blocking a
/// Swift concurrency thread) in between. Returns whether it held.
///
/// The condition is checked once more after any stall, before the timeout counts: exit tests
/// block Swift concurrency's threads while their child process runs, which can delay a poll.
public func eventually(
    timeout: Duration = .seconds(10), pollingEvery interval: Duration = .milliseconds(5),
    _ condition: () -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: interval)
    }
    return true
}

/// Runs `body(index)` for each index in `0..<count`, each on a new thread of its own, all released
/// at once, and suspends until every one has returned.
public func onThreads(_ count: Int, _ body: @escaping @Sendable (_ index: Int) -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let start = Latch(count: 1)
        let running = Counter()
        for index in 0..<count {
            let thread = Thread {
                start.wait()
                body(index)
                if running.increment() == count { continuation.resume() }
            }
            thread.start()
        }
        start.countDown()
    }
}

/// Runs `body` on a new thread and suspends until it returns its result, so that blocking test
/// code never holds one of Swift concurrency's few threads.
public func onNewThread<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// Runs `body` on a thread of its own and gives up after `timeout`, so that a hang (a deadlock, a
/// lost wakeup) fails the test instead of hanging the suite; `nil` when it gave up.
public func guarded<Result: Sendable>(timeout: Duration = .seconds(10), _ body: @escaping @Sendable () -> Result) async -> Result? {
    await onNewThread { () -> Result? in
        let done = Latch()
        let value = LockedValue<Result?>(nil)
        Thread {
            value.value = body()
            done.countDown()
        }.start()
        return done.wait(timeout: timeout) ? value.value : nil
    }
}

/// Runs blocking `body` on a new thread and suspends until it returns; throws ``TestTimedOut``
/// once `limit` has passed, leaving the thread to finish on its own.
public func onNewThread<Result: Sendable>(limit: Duration, _ body: @escaping @Sendable () -> Result) async throws -> Result {
    guard let value = await guarded(timeout: limit, body) else { throw TestTimedOut(limit: limit) }
    return value
}

/// Awaits `body`, cancelling it once `limit` has passed, and returns what it returned: for async
/// waits that end when their task is cancelled (a pool's or a thread's `awaitTermination()`, a
/// queue's `waitUntilIdle()`), so that a wait that never ends fails the test instead of hanging it.
public func cancelling<Result: Sendable>(
    after limit: Duration, _ body: @escaping @Sendable () async -> Result
) async -> Result {
    await withTaskGroup(of: Result?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        // The first to finish cancels the other; `body` always finishes, with its result.
        var result: Result?
        while let next = await group.next() {
            group.cancelAll()
            if let next { result = next }
        }
        return result!
    }
}

/// Calls `body`, synchronous code, at once on the calling thread, and returns its result.
///
/// For tests of what a blocking call does when a Swift task makes it (a nested `sync` inside a
/// throttled queue's `run`, a deadlock the detector stops, a precondition in an exit test): async
/// code cannot call a blocking API directly, which is marked `noasync`, but synchronous code that
/// a task runs can, and that is what these tests exercise. Everywhere else, tests await the
/// blocking call's async twin.
@inline(__always)
public func synchronously<Result>(_ body: () throws -> Result) rethrows -> Result {
    try body()
}

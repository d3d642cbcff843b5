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

/// Polls `condition` every `interval` until it holds or `timeout` passes, and returns whether it
/// held; the caller suspends meanwhile. The default timeout is generous: it is only reached when
/// the test fails, or when what it waits for (a `Task` that must start, say) waits for one of Swift
/// concurrency's threads on a loaded machine.
///
/// The polls run on a thread of their own, not on Swift concurrency's few threads: on a loaded
/// machine other tests' CPU-bound work can hold those for seconds, and a poll that comes that late
/// may miss a state that held for a while (an idle thread before it was retired), or find the
/// timeout past before it ever looked.
public func eventually(
    timeout: Duration = .seconds(30), pollingEvery interval: Duration = .milliseconds(5),
    _ condition: @escaping @Sendable () -> Bool
) async -> Bool {
    await onNewThread {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: interval.seconds)
        }
        return true
    }
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
///
/// The limit counts from the moment `body` starts, not from the call: on a loaded machine Swift's
/// few threads may start `body`'s task seconds after the timer's, and a wait cut short before it
/// began would fail a test for the machine's load.
public func cancelling<Result: Sendable>(
    after limit: Duration, _ body: @escaping @Sendable () async -> Result
) async -> Result {
    let (started, start) = AsyncStream<Never>.makeStream()
    return await withTaskGroup(of: Result?.self) { group in
        group.addTask {
            start.finish()
            return await body()
        }
        group.addTask {
            for await _ in started {}
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

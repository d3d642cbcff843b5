import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// DESIGN's one cancellation rule, for every async entry point of the core module: cancelling the
/// awaiting task before the work starts removes the work (it never starts) and the await throws
/// `CancellationError`; once started, the work runs to its end and the await returns its result.
///
/// Each entry point gets both cases. The awaiting task runs on a pool of the test's own, never on
/// Swift's cooperative threads (work that runs in the calling task blocks until the test lets it
/// end), and every await is bounded: a regression fails its test instead of hanging the run.
@Suite("One cancellation rule for every async entry point", .serialized, .timeLimit(.minutes(1)))
struct AsyncCancellationTests {
    /// The outcome of `task`, or `nil` if it did not end within `timeout`.
    static func outcome<T: Sendable>(of task: Task<T, any Error>, within timeout: Duration = .seconds(5)) async -> Result<T, any Error>? {
        let result = LockedValue<Result<T, any Error>?>(nil)
        let done = Latch()
        Task {
            result.value = await task.result
            done.countDown()
        }
        guard await onNewThread({ done.wait(timeout: timeout) }) else { return nil }
        return result.value
    }

    /// Whether `result` is a failure with `CancellationError`.
    static func isCancellation<T>(_ result: Result<T, any Error>?) -> Bool {
        if case .failure(let error)? = result { error is CancellationError } else { false }
    }

    /// Work that tells when it has started, then runs until the test lets it end.
    final class BlockingWork: Sendable {
        let started = Latch()
        let finish = Latch()
        let ran = Counter()

        func run() -> Int {
            started.countDown()
            finish.wait(timeout: .seconds(10))
            ran.increment()
            return 42
        }

        /// Waits (off the cooperative pool) until the work has started.
        func waitUntilStarted() async -> Bool {
            await onNewThread { self.started.wait(timeout: .seconds(5)) }
        }
    }

    /// Runs `body` in a task on a pool of the test's own, cancels the task once `work` has started,
    /// then lets the work end; returns the task's outcome (`nil` if it did not end in time).
    static func cancelOnceStarted(
        _ work: BlockingWork, sourceLocation: SourceLocation = #_sourceLocation,
        _ body: @escaping @Sendable () async throws -> Int
    ) async -> Result<Int, any Error>? {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let task = Task(executorPreference: executor, operation: body)
        #expect(await work.waitUntilStarted(), "the work did not start", sourceLocation: sourceLocation)
        task.cancel()
        work.finish.countDown()
        return await outcome(of: task)
    }

    /// Each kind of target `DispatchMethod` can address and that the test can stop from starting work.
    enum Kind: String, CaseIterable, Sendable, NamedTestCase {
        case pool, thread, serialQueue, concurrentQueue, throttled
    }

    /// How `DispatchMethod.run` reaches the target.
    enum Way: String, CaseIterable, Sendable, NamedTestCase {
        case async, sync

        func method(on target: DispatchTarget) -> DispatchMethod {
            switch self {
            case .async: .async(on: target)
            case .sync: .sync(on: target)
            }
        }
    }

    /// A target of one kind, which the test can stop from starting work and then release.
    final class TestTarget: Sendable {
        let kind: Kind
        let target: DispatchTarget
        private let pool: ThreadPool?
        private let thread: DedicatedThread?
        private let queue: DispatchQueue?
        private let throttled: ThrottledQueue?
        private let gate = Latch()
        private let isHeld = LockedValue(false)

        init(_ kind: Kind) {
            self.kind = kind
            var pool: ThreadPool?, thread: DedicatedThread?, queue: DispatchQueue?, throttled: ThrottledQueue?
            switch kind {
            case .pool:
                pool = ThreadPool(name: KernelThreads.uniqueName("ACp"), size: 1)
                target = .pool(pool!)
            case .thread:
                thread = DedicatedThread(name: KernelThreads.uniqueName("ACt"))
                target = .thread(thread!)
            case .serialQueue:
                queue = DispatchQueue(label: "AC serial")
                target = .serialQueue(queue!)
            case .concurrentQueue:
                queue = DispatchQueue(label: "AC concurrent", attributes: .concurrent)
                target = .concurrentQueue(queue!)
            case .throttled:
                throttled = ThrottledQueue(label: "AC throttled", interval: .zero)
                target = .throttled(throttled!)
            }
            self.pool = pool
            self.thread = thread
            self.queue = queue
            self.throttled = throttled
        }

        /// Stops the target from starting work until ``releaseAndDrain()`` (a minute at most: longer
        /// than any wait of the test, so that the hold never ends on its own while the test looks).
        func hold() async throws {
            isHeld.value = true
            let running = Latch()
            switch kind {
            case .pool:
                try pool!.execute { [gate] in
                    running.countDown()
                    gate.wait(timeout: .seconds(60))
                }
                _ = await onNewThread { running.wait(timeout: .seconds(5)) }
            case .thread:
                try thread!.execute { [gate] in
                    running.countDown()
                    gate.wait(timeout: .seconds(60))
                }
                _ = await onNewThread { running.wait(timeout: .seconds(5)) }
            case .serialQueue, .concurrentQueue:
                queue!.suspend()
            case .throttled:
                throttled!.pause(for: .seconds(60))
            }
        }

        /// Whether work waits on the target; `nil` where the target does not tell.
        var hasQueuedWork: Bool? {
            switch kind {
            case .pool: pool!.statistics.queuedTasks > 0
            case .thread: thread!.pendingCount > 0
            case .throttled: throttled!.pendingCount > 0
            case .serialQueue, .concurrentQueue: nil
            }
        }

        /// Lets the target start work again, and waits until it has run all it was given.
        func releaseAndDrain() async {
            switch kind {
            case .pool:
                gate.countDown()
                pool!.dispose()
                _ = await onNewThread { [pool] in pool!.awaitTermination(timeout: .seconds(5)) }
            case .thread:
                gate.countDown()
                thread!.dispose()
                _ = await onNewThread { [thread] in thread!.awaitTermination(timeout: .seconds(5)) }
            case .serialQueue, .concurrentQueue:
                if isHeld.value { queue!.resume() }
                await onNewThread { [queue] in queue!.sync(flags: .barrier) {} }
            case .throttled:
                if isHeld.value { throttled!.resume() }
                await ThrottledQueueTests.waitUntilIdle(throttled!)
            }
        }

        /// Waits until the work the test submitted waits on the target: by the target's own count
        /// where it has one; elsewhere (a suspended `DispatchQueue`) a moment after the call, and the
        /// outcome must be the same whichever came first, the cancellation or the submission.
        func waitUntilWorkIsQueued() async {
            if hasQueuedWork != nil {
                // Generous: on a loaded machine the awaiting task's pool thread may be slow to start.
                #expect(await eventually(timeout: .seconds(20)) { hasQueuedWork == true })
            } else {
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    // MARK: - DispatchMethod.run

    @Test("DispatchMethod.run cancelled before its work starts: the work never runs, the await throws CancellationError",
          arguments: Kind.allCases, Way.allCases)
    func dispatchRunCancelledBeforeStart(kind: Kind, way: Way) async throws {
        let held = TestTarget(kind)
        try await held.hold()
        let method = way.method(on: held.target)
        await Self.expectCancelledWhileQueued(on: held) { work in try await method.run(work) }
    }

    /// Calls `call` with a work from a task while `held` keeps its target busy, cancels the task
    /// once the work is queued, and expects the await to throw `CancellationError` and the work
    /// never to run.
    static func expectCancelledWhileQueued(
        on held: TestTarget, sourceLocation: SourceLocation = #_sourceLocation,
        _ call: @escaping @Sendable (_ work: @escaping @Sendable () -> Int) async throws -> Int
    ) async {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let ran = Counter()
        let task = Task(executorPreference: executor) {
            try await call { () -> Int in
                ran.increment()
                return 1
            }
        }
        await held.waitUntilWorkIsQueued()
        task.cancel()
        let result = await outcome(of: task, within: .seconds(20))
        await held.releaseAndDrain()
        #expect(result != nil, "the await did not end when its task was cancelled", sourceLocation: sourceLocation)
        #expect(isCancellation(result), "the await ended with \(String(describing: result))", sourceLocation: sourceLocation)
        #expect(ran.value == 0, "the removed work ran", sourceLocation: sourceLocation)
    }

    @Test("DispatchMethod.run cancelled once its work has started: the work runs to its end, the await returns its result",
          arguments: Kind.allCases, Way.allCases)
    func dispatchRunCancelledAfterStart(kind: Kind, way: Way) async throws {
        let free = TestTarget(kind)
        let work = BlockingWork()
        let method = way.method(on: free.target)
        let result = await Self.cancelOnceStarted(work) { try await method.run { work.run() } }
        await free.releaseAndDrain()
        #expect(try result?.get() == 42)
        #expect(work.ran.value == 1)
    }

    @Test("DispatchMethod.run with .after cancelled before the delay has passed: the work never runs, the await throws CancellationError")
    func dispatchRunAfterCancelledBeforeStart() async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let ran = Counter()
        let task = Task(executorPreference: executor) {
            try await DispatchMethod.after(.milliseconds(300), on: .global()).run { () -> Int in
                ran.increment()
                return 1
            }
        }
        task.cancel()
        let result = await Self.outcome(of: task)
        #expect(Self.isCancellation(result), "the await ended with \(String(describing: result))")
        // The delay passing is the event: by then the work would have been handed to its target.
        try await Task.sleep(for: .milliseconds(600))
        #expect(ran.value == 0, "the removed work ran")
    }

    @Test("DispatchMethod.run with .inline: a task cancelled before the call never starts the work; once started, the work returns its result")
    func dispatchRunInline() async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let ran = Counter()
        let cancelledFirst = Task(executorPreference: executor) { () async throws -> Int in
            withUnsafeCurrentTask { $0?.cancel() }
            return try await DispatchMethod.inline.run {
                ran.increment()
                return 1
            }
        }
        #expect(Self.isCancellation(await Self.outcome(of: cancelledFirst)))
        #expect(ran.value == 0)

        let work = BlockingWork()
        let result = await Self.cancelOnceStarted(work) { try await DispatchMethod.inline.run { work.run() } }
        #expect(try result?.get() == 42)
    }

    // MARK: - ExecutionChain.value

    @Test("A chain's value cancelled before the step starts: the step never runs, the await throws CancellationError, and so does the link")
    func chainValueCancelledBeforeStart() async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let held = TestTarget(.thread)
        try await held.hold()
        let ran = Counter()
        let chain = DispatchMethod.async(on: held.target).execute { () -> Int in
            ran.increment()
            return 1
        }
        let next = chain.then(.inline) { value -> Int in
            ran.increment()
            return value
        }
        let task = Task(executorPreference: executor) { try await chain.value }
        await held.waitUntilWorkIsQueued()
        task.cancel()
        let result = await Self.outcome(of: task)
        await held.releaseAndDrain()
        #expect(Self.isCancellation(result), "the await ended with \(String(describing: result))")
        #expect(ran.value == 0, "the removed step, or the one after it, ran")
        #expect(throws: CancellationError.self) { try next.wait() }
    }

    @Test("A chain's value cancelled once the step has started: the step runs to its end, the await returns its result")
    func chainValueCancelledAfterStart() async throws {
        let free = TestTarget(.thread)
        let work = BlockingWork()
        let chain = DispatchMethod.async(on: free.target).execute { work.run() }
        let result = await Self.cancelOnceStarted(work) { try await chain.value }
        await free.releaseAndDrain()
        #expect(try result?.get() == 42)
        #expect(try await chain.value == 42)
    }

    // MARK: - ThrottledQueue.run

    @Test("ThrottledQueue.run cancelled before its turn: the work never runs, the await throws CancellationError")
    func throttledRunCancelledBeforeStart() async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("ACx"), size: 2)
        defer { executor.dispose() }
        let queue = ThrottledQueue(label: "AC run before", interval: .zero)
        queue.pause(for: .seconds(60))
        let ran = Counter()
        let task = Task(executorPreference: executor) {
            try await queue.run { () -> Int in
                ran.increment()
                return 1
            }
        }
        #expect(await eventually(timeout: .seconds(5)) { queue.pendingCount == 1 })
        task.cancel()
        let result = await Self.outcome(of: task)
        queue.resume()
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(Self.isCancellation(result), "the await ended with \(String(describing: result))")
        #expect(ran.value == 0)
        #expect(queue.pendingCount == 0)
    }

    @Test("ThrottledQueue.run cancelled once its work has started: the work runs to its end, the await returns its result")
    func throttledRunCancelledAfterStart() async throws {
        let queue = ThrottledQueue(label: "AC run after", interval: .zero)
        let work = BlockingWork()
        let result = await Self.cancelOnceStarted(work) {
            try await queue.run { () async -> Int in
                await onNewThread { work.run() }
            }
        }
        #expect(try result?.get() == 42)
        #expect(work.ran.value == 1)
    }

    // MARK: - ThreadPool.run

    @Test("ThreadPool.run cancelled before a thread takes its work: the work never runs, the await throws CancellationError")
    func poolRunCancelledBeforeStart() async throws {
        let held = TestTarget(.pool)
        try await held.hold()
        guard case .pool(let pool) = held.target else {
            Issue.record("a pool target holds no pool")
            return
        }
        await Self.expectCancelledWhileQueued(on: held) { work in try await pool.run(work) }
    }

    @Test("ThreadPool.run cancelled once its work has started: the work runs to its end, the await returns its result")
    func poolRunCancelledAfterStart() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("ACr"), size: 1)
        defer { pool.dispose() }
        let work = BlockingWork()
        let result = await Self.cancelOnceStarted(work) { try await pool.run { work.run() } }
        #expect(try result?.get() == 42)
        #expect(work.ran.value == 1)
    }
}

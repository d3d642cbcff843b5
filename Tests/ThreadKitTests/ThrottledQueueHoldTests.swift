import Foundation
import Testing
@testable import ThreadKit

/// What `ThrottledQueue.run`'s work holds, and who may count as its holder.
///
/// Inside `run`'s work the queue's turn is taken: work it waits for on the same queue can only run
/// nested, in the work's own task, whichever way it is waited for. A scenario that hung before its
/// fix runs in a task on a pool of its own (never on Swift's cooperative threads) and is waited for
/// with a timeout, so that a regression fails its test instead of hanging the run.
@Suite("ThrottledQueue run's hold", .serialized, .timeLimit(.minutes(1)))
struct ThrottledQueueHoldTests {
    typealias Instant = ContinuousClock.Instant

    /// How a step of a chain on the held queue is waited for from inside `run`'s work.
    enum Wait: String, CaseIterable, Sendable, NamedTestCase {
        /// `ExecutionChain.wait()`, which blocks.
        case chainWait
        /// `ExecutionChain.value`, which suspends.
        case chainValue
        /// `chainWait`, after an await inside the work (the task may have moved to another thread).
        case chainWaitAfterAwait
        /// `chainValue`, after an await inside the work.
        case chainValueAfterAwait
        /// `DispatchMethod.sync(on:).run`.
        case dispatchSyncRun
        /// `DispatchMethod.async(on:).run`.
        case dispatchAsyncRun
        /// `DispatchMethod.after(_:on:).run`.
        case dispatchAfterRun

        /// Waits for `work`, queued on `queue` this way, and returns its value.
        func perform(_ work: @escaping @Sendable () -> Int, on queue: ThrottledQueue) async throws -> Int {
            switch self {
            case .chainWait:
                return try synchronously { try DispatchMethod.async(on: .throttled(queue)).execute(work).wait() }
            case .chainValue:
                return try await DispatchMethod.async(on: .throttled(queue)).execute(work).value
            case .chainWaitAfterAwait:
                try await Task.sleep(for: .milliseconds(1))
                return try synchronously { try DispatchMethod.async(on: .throttled(queue)).execute(work).wait() }
            case .chainValueAfterAwait:
                try await Task.sleep(for: .milliseconds(1))
                return try await DispatchMethod.async(on: .throttled(queue)).execute(work).value
            case .dispatchSyncRun:
                return try await DispatchMethod.sync(on: .throttled(queue)).run(work)
            case .dispatchAsyncRun:
                return try await DispatchMethod.async(on: .throttled(queue)).run(work)
            case .dispatchAfterRun:
                return try await DispatchMethod.after(.milliseconds(20), on: .throttled(queue)).run(work)
            }
        }
    }

    @Test("Work queued on the queue that run's work holds, and waited for from inside that work, runs nested instead of hanging",
          arguments: Wait.allCases)
    func waitedForWorkOnTheHeldQueueRunsNested(wait: Wait) async throws {
        let queue = ThrottledQueue(label: "TQ held wait", interval: .milliseconds(20))
        let order = Recorder<String>()
        let value = await ThrottledQueueRobustnessTests.returned("waiting for work on the held queue", releasing: queue) { () -> Int in
            try await queue.run { () -> Int in
                try? queue.async { order.append("queued") }
                let value = try await wait.perform({
                    order.append("waited-for step")
                    return 7
                }, on: queue)
                order.append("run's work ends")
                return value
            }
        }
        guard let value else { return }
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(value == 7)
        #expect(order.values == ["waited-for step", "run's work ends", "queued"])
    }

    /// What an unstructured task started inside `run`'s work calls on the queue.
    enum Call: String, CaseIterable, Sendable, NamedTestCase {
        case sync
        case run
    }

    @Test("An unstructured Task started inside run's work is not its holder: its call on the queue waits for the work to end instead of overlapping it",
          arguments: Call.allCases)
    func unstructuredTaskWaitsItsTurn(call: Call) async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("TQut"), size: 4)
        defer { executor.dispose() }
        let queue = ThrottledQueue(label: "TQ unstructured", interval: .zero)
        let workEnd = LockedValue<Instant?>(nil)
        let outcome = await ThrottledQueueRobustnessTests.finishes(within: .seconds(10), on: executor) { () -> (Instant, Instant) in
            let inner = try await queue.run { () -> Task<Instant, any Error> in
                let inner = Task(executorPreference: executor) { () async throws -> Instant in
                    switch call {
                    case .sync: return synchronously { queue.sync { ContinuousClock.now } }
                    case .run: return try await queue.run { ContinuousClock.now }
                    }
                }
                // Long enough for the task's call to be made while the work still holds the queue.
                try await Task.sleep(for: .milliseconds(100))
                workEnd.value = ContinuousClock.now
                return inner
            }
            return (try await inner.value, try #require(workEnd.value))
        }
        guard case .success(let (innerStart, end))? = outcome else {
            Issue.record("the unstructured task's call did not return: \(String(describing: outcome))")
            queue.cancelAll()
            return
        }
        #expect(innerStart >= end, "the unstructured task's \(call) began \(end - innerStart) before run's work ended")
    }

    @Test("Structured child tasks (async let) of run's work keep its hold: their sync on the queue runs nested")
    func asyncLetChildKeepsTheHold() async throws {
        let queue = ThrottledQueue(label: "TQ async let", interval: .zero)
        let order = Recorder<String>()
        let finished: Void? = await ThrottledQueueRobustnessTests.returned("a child task's sync inside run's work", releasing: queue, threads: 4) {
            try await queue.run {
                try? queue.async { order.append("queued") }
                async let child: Void = synchronously { queue.sync { order.append("child") } }
                await child
                order.append("run's work ends")
            }
        }
        guard finished != nil else { return }
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(order.values == ["child", "run's work ends", "queued"])
    }

    @Test(
        "Child tasks of run's work get the queue one at a time, also one that reaches it through another thread's sync",
        arguments: ["dedicated thread", "pool"])
    func childTasksNestedThroughAnotherThreadDoNotOverlap(through: String) async throws {
        let executor = ThreadPool(name: KernelThreads.uniqueName("TQov"), size: 4)
        let thread = DedicatedThread(name: KernelThreads.uniqueName("TQov"))
        let pool = ThreadPool(name: KernelThreads.uniqueName("TQop"), size: 2)
        let queue = ThrottledQueue(label: "TQ overlap", interval: .zero)
        let inside = Counter(), overlaps = Counter(), ran = Counter()
        /// A task of the queue: it must never find another of the queue's tasks running.
        @Sendable func exclusive() {
            if inside.increment() != 1 { overlaps.increment() }
            usleep(50)  // widens the window in which an overlapping task would be seen
            inside.increment(by: -1)
            ran.increment()
        }
        let viaPool = through == "pool"
        @Sendable func elsewhere(_ work: @escaping @Sendable () -> Void) {
            if viaPool {
                try! DispatchMethod.sync(on: .pool(pool)).execute(work).wait()
            } else {
                thread.sync(work)
            }
        }
        // Generous: 600 nested syncs under the thread sanitizer on a loaded machine.
        let outcome = await ThrottledQueueRobustnessTests.finishes(within: .seconds(60), on: executor) {
            try await queue.run {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { synchronously { for _ in 0..<300 { queue.sync { exclusive() } } } }
                    group.addTask { for _ in 0..<300 { elsewhere { queue.sync { exclusive() } } } }
                }
            }
        }
        guard case .success? = outcome else {
            // Nothing is disposed: the work may still run, and a sync on a disposed pool would stop
            // the whole test process.
            Issue.record("run's work did not return: \(String(describing: outcome))")
            return
        }
        executor.dispose()
        thread.dispose()
        pool.dispose()
        #expect(ran.value == 600)
        #expect(overlaps.value == 0)
    }
}

/// Run's hold in scenarios that stopped the process before their fix: `ProcessExitTests` runs
/// each in a process of its own.
extension ChildScenario {
    static func unstructuredTaskIsNoHolderForTheDetector() {
        let api = ThrottledQueue(label: "api", interval: .zero)
        let db = DedicatedThread(name: "db")
        let runner = ThreadPool(name: "runner", size: 4)
        let done = Latch()
        Task(executorPreference: runner) {
            try await api.run {
                // "db" waits for its turn on "api", which comes when this work ends.
                try db.execute { api.sync {} }
                while api.pendingCount == 0 { try await Task.sleep(for: .milliseconds(1)) }
                let calling = Latch()
                Task(executorPreference: runner) {
                    calling.countDown()
                    synchronously { db.sync {} }  // waits for "db", which waits for "api": the work ends, all go on
                    done.countDown()
                }
                await onNewThread { _ = calling.wait(timeout: .seconds(5)) }
                // Let the unstructured task block on "db" while the work still holds "api".
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        guard done.wait(timeout: .seconds(10)) else { exit(3) }
    }

    static func nestedSyncReachedAgainThroughAThreadNestsInIt() {
        let api = ThrottledQueue(label: "api", interval: .zero)
        let db = DedicatedThread(name: "db")
        let runner = ThreadPool(name: "runner", size: 2)
        let order = Recorder<String>()
        let done = Latch()
        Task(executorPreference: runner) {
            try await api.run {
                synchronously {
                    api.sync {
                        order.append("nested")
                        db.sync { api.sync { order.append("nested again, on db") } }
                    }
                }
            }
            done.countDown()
        }
        guard done.wait(timeout: .seconds(10)) else { exit(3) }
        precondition(order.values == ["nested", "nested again, on db"], "ran \(order.values)")
    }
}

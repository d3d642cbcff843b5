import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// Scenarios that close a wait cycle, wait for what can never come, or came close to either before
/// a fix: each runs in a process of its own, because a cycle stops the process the moment it
/// closes. The tables say what each scenario must do; the scenarios themselves are beside the
/// tests of what they exercise (`extension CompletingScenario`, `extension StoppingScenario`).
///
/// In every child a watchdog ends the process after 20 s with the exit its test does not expect,
/// so a scenario that hangs fails instead of hanging the run. Serialized: while a child runs,
/// Swift Testing blocks Swift concurrency threads reading its pipes.
@Suite("Wait cycles and waits that never end, in processes of their own", .serialized)
struct DeadlockExitTests {
    @Test("A wait cycle, or a wait that can never end, stops the process with a message naming it",
          arguments: StoppingScenario.allCases)
    func stops(_ scenario: StoppingScenario) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [scenario] in
            DeadlockScenario.watchdog()
            scenario.run()
            DeadlockScenario.sleepForever()
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        let named = scenario.message.contains { fragments in fragments.allSatisfy { output.contains($0) } }
        #expect(named, "standard error was: \(output)")
        #endif
    }

    @Test("A wait that closes no cycle completes, in a process of its own", arguments: CompletingScenario.allCases)
    func completes(_ scenario: CompletingScenario) async {
        await #expect(processExitsWith: .success) { [scenario] in
            DeadlockScenario.watchdog(exitCode: EXIT_FAILURE)
            scenario.run()
        }
    }
}

/// A scenario that must stop its process, said as the behaviour it checks.
enum StoppingScenario: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
    case twoThreads = "Two dedicated threads that sync onto each other: the second wait is reported"
    case threeThreads = "Three contexts of three kinds, A → B → C → A, across three threads"
    case scheduledTaskWaitCycle = "A dedicated thread waiting on a one-thread pool's task while the pool's thread syncs onto it is reported"
    case siblingsWaitCycle = "Child tasks of run's work: one nested in the queue waits for a queue the other holds, which waits for its turn: reported"
    case runWorkWaitCycle = "ThrottledQueue.run's work holds its queue while it blocks: a step it waits for that syncs back onto the queue is reported"
    case waitUntilIdleHeldThroughAnotherThread = "waitUntilIdle() from work a queue's task waits for stops, as from inside the task itself"
    case mainQueueDedicatedThreadCycle = "Main queue ↔ dedicated thread: the second wait of the cycle is reported, naming the main queue"
    case mainQueueSerialQueueCycle = "Main queue ↔ serial queue, both sent through DispatchMethod: the cycle is reported"
    case waitUntilIdleInsideRun = "waitUntilIdle() from inside run's async work stops with its precondition instead of hanging"
    case syncOntoAStarvedQueueStops = "B.sync from A's task on a shared one-thread pool, with B's work queued behind A, stops naming both queues instead of hanging"

    var testDescription: String { rawValue }

    /// What the message must say: every fragment of one of these (a cycle that can close from
    /// either side is named from the side that closed it).
    var message: [[String]] {
        switch self {
        case .twoThreads:
            [[#"deadlock: thread "cache" holds DedicatedThread "cache" and waits for DedicatedThread "db", held by thread "db", which waits for "cache""#]]
        case .threeThreads:
            [["deadlock: thread", #"holds DispatchQueue "serial" and waits for DedicatedThread "db""#,
              #"held by thread "db", which waits for ThreadPool "single""#, #"held by thread "single Thread1", which waits for "serial""#]]
        case .scheduledTaskWaitCycle:
            [[#"deadlock: thread "single Thread1" holds ThreadPool "single" and waits for DedicatedThread "db", held by thread "db", which waits for "single""#]]
        case .siblingsWaitCycle:
            [["deadlock: thread", #"waits for ThrottledQueue "cache""#, #"which waits for "api""#],
             ["deadlock: thread", #"waits for ThrottledQueue "api""#, #"which waits for "cache""#]]
        case .runWorkWaitCycle:
            [[#"deadlock: thread "db" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by thread "runner Thread1", which waits for "db""#]]
        case .waitUntilIdleHeldThroughAnotherThread:
            [["ThrottledQueue 'api': waitUntilIdle() from inside its own task would wait forever"]]
        case .mainQueueDedicatedThreadCycle:
            [[#"deadlock: thread "db" holds DedicatedThread "db" and waits for the main queue, held by thread"#, #"which waits for "db""#]]
        case .mainQueueSerialQueueCycle:
            [[#"holds the main queue and waits for DispatchQueue "serial""#, #"which waits for the main queue"#]]
        case .waitUntilIdleInsideRun:
            [["TQ exit run wait", "waitUntilIdle() from inside its own task"]]
        case .syncOntoAStarvedQueueStops:
            [["ThrottledQueue 'TQ B'", "ThrottledQueue 'TQ A'", "one-thread ThreadPool 'TQ one'", "would wait forever"]]
        }
    }

    /// Sets the scenario up; the test then waits for it to stop the process.
    func run() {
        switch self {
        case .twoThreads: Self.twoThreads()
        case .threeThreads: Self.threeThreads()
        case .scheduledTaskWaitCycle: Self.scheduledTaskWaitCycle()
        case .siblingsWaitCycle: Self.siblingsWaitCycle()
        case .runWorkWaitCycle: Self.runWorkWaitCycle()
        case .waitUntilIdleHeldThroughAnotherThread: Self.waitUntilIdleHeldThroughAnotherThread()
        case .mainQueueDedicatedThreadCycle: Self.mainQueueDedicatedThreadCycle()
        case .mainQueueSerialQueueCycle: Self.mainQueueSerialQueueCycle()
        case .waitUntilIdleInsideRun: Self.waitUntilIdleInsideRun()
        case .syncOntoAStarvedQueueStops: Self.syncOntoAStarvedQueueStops()
        }
    }
}

/// A scenario that must complete without stopping its process, said as the behaviour it checks.
enum CompletingScenario: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
    case reentryIsNoDeadlock = "A wait that re-enters a held context is no deadlock: A → B → A completes"
    case syncOnMainFromMainQueueUnderDispatchMain = "DispatchMethod.sync(on: .main) from work already on the main queue runs inline instead of trapping"
    case mainThroughADedicatedThreadBackToMain = "Main queue → dedicated thread → main queue: the nested work runs on the main queue, served by the blocked main-queue work"
    case actorAssumeIsolatedInNestedLevel = "An actor whose executor is A can assumeIsolated in A → B → A, at depths 3 and 5"
    case actorAssumeIsolatedInChainStepWaitedForThroughB = "An actor whose executor is A can assumeIsolated in a chain step on A that B's work waits for, in A → B"
    case unstructuredTaskIsNoHolderForTheDetector = "An unstructured Task started inside run's work holds nothing of it: its wait on a thread that waits for the queue is no deadlock"
    case nestedSyncReachedAgainThroughAThreadNestsInIt = "Inside run's work, a sync nested in the queue that reaches it again through a dedicated thread nests in that sync, instead of a false deadlock"
    case syncOnADisposedPool = "sync on a queue whose pool was disposed runs on the caller, keeping the gap, instead of crashing"

    var testDescription: String { rawValue }

    /// Runs the scenario to its end (or exits the process with its verdict).
    func run() {
        switch self {
        case .reentryIsNoDeadlock: Self.reentryIsNoDeadlock()
        case .syncOnMainFromMainQueueUnderDispatchMain: Self.syncOnMainFromMainQueueUnderDispatchMain()
        case .mainThroughADedicatedThreadBackToMain: Self.mainThroughADedicatedThreadBackToMain()
        case .actorAssumeIsolatedInNestedLevel: Self.actorAssumeIsolatedInNestedLevel()
        case .actorAssumeIsolatedInChainStepWaitedForThroughB: Self.actorAssumeIsolatedInChainStepWaitedForThroughB()
        case .unstructuredTaskIsNoHolderForTheDetector: Self.unstructuredTaskIsNoHolderForTheDetector()
        case .nestedSyncReachedAgainThroughAThreadNestsInIt: Self.nestedSyncReachedAgainThroughAThreadNestsInIt()
        case .syncOnADisposedPool: Self.syncOnADisposedPool()
        }
    }
}

// The scenarios of deadlock detection itself.

extension CompletingScenario {
    static func reentryIsNoDeadlock() {
        let first = DedicatedThread(name: "A")
        let second = DedicatedThread(name: "B")
        let value = first.sync { second.sync { first.sync { second.sync { 42 } } } }
        precondition(value == 42)
    }
}

extension StoppingScenario {
    static func twoThreads() {
        let first = DedicatedThread(name: "db")
        let second = DedicatedThread(name: "cache")
        let bothInside = Latch(count: 2)
        try! first.execute {
            bothInside.countDown()
            bothInside.wait()
            second.sync {}
        }
        try! second.execute {
            bothInside.countDown()
            bothInside.wait()
            usleep(100_000)  // let "db" block first
            first.sync {}
        }
    }

    static func threeThreads() {
        let db = DedicatedThread(name: "db")
        let pool = ThreadPool(name: "single", size: 1)
        let queue = DispatchQueue(label: "serial")
        let allInside = Latch(count: 3)
        try! db.execute {
            allInside.countDown()
            allInside.wait()
            _ = try? DispatchMethod.sync(on: .pool(pool)).execute {}.wait()
        }
        try! pool.execute {
            allInside.countDown()
            allInside.wait()
            usleep(50_000)
            _ = try? DispatchMethod.sync(on: .serialQueue(queue)).execute {}.wait()
        }
        DispatchMethod.async(on: .serialQueue(queue)).execute {
            allInside.countDown()
            allInside.wait()
            usleep(150_000)
            _ = try? DispatchMethod.sync(on: .thread(db)).execute {}.wait()
        }
    }
}

enum DeadlockScenario {
    /// Ends the process with `exitCode` after `seconds`: a hung scenario then exits with the code
    /// its test does not expect.
    static func watchdog(seconds: UInt32 = 20, exitCode: Int32 = EXIT_SUCCESS) {
        Thread {
            sleep(seconds)
            FileHandle.standardError.write(Data("watchdog: the scenario hung\n".utf8))
            exit(exitCode)
        }.start()
    }

    static func sleepForever() -> Never {
        while true { sleep(60) }
    }
}

extension StoppingScenario {
    static func scheduledTaskWaitCycle() {
        let db = DedicatedThread(name: "db")
        let pool = ThreadPool(name: "single", size: 1)
        let bothInside = Latch(count: 2)
        try! pool.execute {
            bothInside.countDown()
            bothInside.wait()
            usleep(100_000)  // let "db" block first
            db.sync {}
        }
        try! db.execute {
            bothInside.countDown()
            bothInside.wait()
            let task = try! pool.schedule {}
            task.wait()
        }
    }

    static func siblingsWaitCycle() {
        let api = ThrottledQueue(label: "api", interval: .zero)
        let cache = ThrottledQueue(label: "cache", interval: .zero)
        let runner = ThreadPool(name: "runner", size: 4)
        let nestedStarted = Latch()
        let siblingHoldsCache = Latch()
        Task(executorPreference: runner) {
            try await api.run {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        api.sync {
                            nestedStarted.countDown()
                            siblingHoldsCache.wait()
                            cache.sync {}
                        }
                    }
                    group.addTask {
                        nestedStarted.wait()
                        _ = try? await cache.run {
                            siblingHoldsCache.countDown()
                            api.sync {}
                        }
                    }
                }
            }
        }
    }

    static func runWorkWaitCycle() {
        let db = DedicatedThread(name: "db")
        let api = ThrottledQueue(label: "api", interval: .zero)
        let runner = ThreadPool(name: "runner", size: 1)
        Task(executorPreference: runner) {
            try await api.run {
                let step = DispatchMethod.async(on: .thread(db)).execute {
                    usleep(100_000)  // let the run's work block first
                    api.sync {}
                }
                _ = try? step.wait()
            }
        }
    }
}

extension StoppingScenario {
    static func waitUntilIdleHeldThroughAnotherThread() {
        let queue = ThrottledQueue(label: "api", interval: .zero)
        let thread = DedicatedThread(name: "db")
        try! queue.async { thread.sync { queue.waitUntilIdle() } }
    }
}

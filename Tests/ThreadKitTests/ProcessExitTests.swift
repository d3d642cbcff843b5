import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// What runs in a process of its own, because it stops the process or could: every precondition
/// of the core module, every wait cycle and wait that can never end, and the waits that come close
/// to one without closing it. One table says how each must end; the scenarios of wait cycles are
/// beside the tests of what they exercise (`extension ChildScenario`).
///
/// In every child a watchdog ends the process after 20 s with the exit its test does not expect,
/// so a scenario that hangs fails instead of hanging the run. Serialized: while a child runs,
/// Swift Testing blocks Swift concurrency threads reading its pipes, and this machine has two.
@Suite("In a process of its own: what stops it, and what must not", .serialized)
struct ProcessExitTests {
    @Test("Each scenario ends its process as its table says: stopped with a message naming what was wrong, or completed", .exitTestOnOwnThreads,
          arguments: ChildScenario.allCases)
    func endsAsSpecified(_ scenario: ChildScenario) async {
        let specification = scenario.specification
        let result = await #expect(
            processExitsWith: specification.stops ? .failure : .success, observing: [\.standardErrorContent]
        ) { [scenario] in
            await scenario.runWatched()
        }
        #if DEBUG
        if case .stops(let alternatives) = specification.ending {
            let output = standardError(of: result) ?? ""
            let named = alternatives.contains { fragments in fragments.allSatisfy { output.contains($0) } }
            #expect(named, "standard error was: \(output)")
        }
        #endif
    }
}

/// How a scenario must end its process, and the sentence that says so.
struct Specification: Sendable {
    enum Ending: Sendable {
        /// Stopped, with a message that contains every fragment of one of these lists (a cycle that
        /// can close from either side is named from the side that closed it).
        case stops([[String]])
        /// Exited normally, the scenario done.
        case completes
    }

    let sentence: String
    let ending: Ending

    var stops: Bool {
        if case .stops = ending { true } else { false }
    }

    static func stops(_ sentence: String, naming fragments: String...) -> Specification {
        Specification(sentence: sentence, ending: .stops([fragments]))
    }

    static func stops(_ sentence: String, namingOneOf alternatives: [[String]]) -> Specification {
        Specification(sentence: sentence, ending: .stops(alternatives))
    }

    static func completes(_ sentence: String) -> Specification {
        Specification(sentence: sentence, ending: .completes)
    }
}

/// A scenario run in a process of its own.
enum ChildScenario: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
    // Preconditions: a call that breaks one stops the process, naming the object, the argument and its value.
    // (Zero, negative and far-out values that work are ArgumentRulesTests'; a wait's zero timeout
    // checks once, its far-out one is FarOutTimeExitTests', and its negative one stops, here.)
    case poolSizeZero, poolSizeNegative, poolSizeMin, poolNegativeKeepAlive, poolZeroCollectionInterval
    case poolNegativeCollectionInterval, poolZeroQueueLimit, poolNegativeQueueLimit
    case poolNegativeWaitTimeout, poolFarNegativeWaitTimeout, poolNegativeWaitTimeoutAfterTheTaskRan
    case poolNegativeAwaitTermination, poolNegativeMinimumThreads, poolMinimumThreadsAboveSize
    case timerNegativeDelay, timerFarNegativeDelay, timerNaNDelay, timerZeroInterval
    case timerNegativeInterval, timerNegativeIntervalFixedDelay, timerNegativeFirstDelay
    case timerNegativeFirstDelayFixedDelay, timerDisposeShared
    case rateLimitNegativeCount, rateLimitMinCount, rateLimitNegativeWindow
    case sharedThrottleZeroHorizon, sharedThrottleNegativeHorizon
    case dispatchAfterNegativeExecute, dispatchAfterNegativeRun, dispatchAfterNegativeThen
    case threadCheckIsolatedOffThread, threadPreconditionOffThread, threadActorAfterDispose
    case threadSyncAfterDispose, threadNegativeTimeout, sendingWorkCalledTwice
    // The same calls with fine arguments: they do not stop it (each misuse stops it for its argument alone).
    case poolFineArguments, timerFineArguments
    // Wait cycles, and waits that can never end: they stop it, naming the cycle or the wait.
    case twoThreads, threeThreads, scheduledTaskWaitCycle, siblingsWaitCycle, runWorkWaitCycle
    case waitUntilIdleHeldThroughAnotherThread, mainQueueDedicatedThreadCycle, mainQueueSerialQueueCycle
    case waitUntilIdleInsideRun, syncOntoAStarvedQueueStops
    #if os(Linux)
    // Threads the system will not start: an error, never a lost task, and a recovery.
    case poolThreadStartFailure, threadStartFailureWithThreadsRunning, timerThreadStartFailure
    case peakThreadsSkipsAFailedStart, disposeStartsAThreadForQueuedWork, dedicatedThreadStartFailure
    #endif
    // Pool threads ending while the global log delegate holds them up.
    case awaitTerminationWaitsForExitLogs, collectedThreadRunsNothingAfter
    // Waits that close no cycle: they complete.
    case reentryIsNoDeadlock, syncOnMainFromMainQueueUnderDispatchMain
    case mainThroughADedicatedThreadBackToMain, actorAssumeIsolatedInNestedLevel
    case actorAssumeIsolatedInChainStepWaitedForThroughB, unstructuredTaskIsNoHolderForTheDetector
    case nestedSyncReachedAgainThroughAThreadNestsInIt, syncOnADisposedPool

    var testDescription: String { specification.sentence }

    var specification: Specification {
        switch self {
        case .poolSizeZero: .stops("ThreadPool: size 0 stops", naming: "ThreadPool 'Bad'.init: size must be at least 1, got 0")
        case .poolSizeNegative: .stops("ThreadPool: size -1 stops", naming: "ThreadPool 'Bad'.init: size must be at least 1, got -1")
        case .poolSizeMin: .stops("ThreadPool: size Int.min stops", naming: "ThreadPool 'Bad'.init: size must be at least 1, got \(Int.min)")
        case .poolNegativeKeepAlive:
            .stops("ThreadPool: a negative keepAlive stops", naming: "ThreadPool 'Bad'.init: keepAlive must not be negative, got -0.001 seconds")
        case .poolZeroCollectionInterval:
            .stops("ThreadPool: a zero collectionInterval stops",
                   naming: "ThreadPool 'Bad'.init: collectionInterval must be more than zero, got 0.0 seconds")
        case .poolNegativeCollectionInterval:
            .stops("ThreadPool: a negative collectionInterval stops",
                   naming: "ThreadPool 'Bad'.init: collectionInterval must be more than zero, got -15.0 seconds")
        case .poolNegativeMinimumThreads:
            .stops("ThreadPool: minimumThreads -1 stops",
                   naming: "ThreadPool 'Bad'.init: minimumThreads must be in 0...size (0...2), got -1")
        case .poolMinimumThreadsAboveSize:
            .stops("ThreadPool: minimumThreads above size stops",
                   naming: "ThreadPool 'Bad'.init: minimumThreads must be in 0...size (0...2), got 3")
        case .poolZeroQueueLimit:
            .stops("ThreadPool: queueLimit 0 stops", naming: "ThreadPool 'Bad'.init: queueLimit must be at least 1, got 0")
        case .poolNegativeQueueLimit:
            .stops("ThreadPool: queueLimit -1 stops", naming: "ThreadPool 'Bad'.init: queueLimit must be at least 1, got -1")
        case .poolNegativeWaitTimeout:
            .stops("ScheduledTask: a negative wait(timeout:) stops, naming the timeout and its value",
                   naming: "ScheduledTask.wait(timeout:): timeout must not be negative, got -1.0 seconds")
        case .poolFarNegativeWaitTimeout:
            .stops("ScheduledTask: a wait(timeout:) negative beyond Int64.max seconds stops, naming it",
                   naming: "ScheduledTask.wait(timeout:): timeout must not be negative, got -")
        case .poolNegativeWaitTimeoutAfterTheTaskRan:
            .stops("ScheduledTask: a negative wait(timeout:) stops even once the task has run",
                   naming: "ScheduledTask.wait(timeout:): timeout must not be negative, got -0.001 seconds")
        case .poolNegativeAwaitTermination:
            .stops("ThreadPool: a negative awaitTermination(timeout:) stops, naming the pool, the timeout and its value",
                   naming: "ThreadPool 'Bad'.awaitTermination(timeout:): timeout must not be negative, got -1e-09 seconds")
        case .timerNegativeDelay:
            .stops("TimerThread: a negative delay stops the process",
                   naming: "TimerThread 'TmExitNeg'.schedule(after:tag:_:): delay must not be negative, got -0.001 seconds")
        case .timerFarNegativeDelay:
            .stops("TimerThread: a delay negative beyond Int64.max seconds stops, naming it, instead of trapping elsewhere",
                   naming: "TimerThread 'TmExitFarNeg'.schedule(after:tag:_:): delay must not be negative, got -")
        case .timerNaNDelay: .stops("TimerThread: a NaN delay stops the process")
        case .rateLimitNegativeCount:
            .stops("RateLimit: a count of -1 stops", naming: "RateLimit.rate(_:per:): count must be at least 1, got -1")
        case .rateLimitMinCount:
            .stops("RateLimit: a count of Int.min stops", naming: "RateLimit.rate(_:per:): count must be at least 1, got \(Int.min)")
        case .rateLimitNegativeWindow:
            .stops("RateLimit: a negative window stops",
                   naming: "RateLimit.rate(_:per:): window must be more than zero, got -1.0 seconds")
        case .sharedThrottleZeroHorizon:
            .stops("SharedThrottle: a horizon of zero stops (it would decline with no wait, a busy loop)",
                   naming: "SharedThrottle.request: horizon must be more than zero, got 0 µs")
        case .sharedThrottleNegativeHorizon:
            .stops("SharedThrottle: a negative horizon stops", naming: "SharedThrottle.request: horizon must be more than zero, got -9007199254740991 µs")
        case .dispatchAfterNegativeExecute:
            .stops("DispatchMethod.after with a negative delay stops at execute, naming it",
                   naming: "DispatchMethod.after(_:on:): delay must not be negative, got -1.0 seconds")
        case .dispatchAfterNegativeRun:
            .stops("DispatchMethod.after with a negative delay stops at run, naming it",
                   naming: "DispatchMethod.after(_:on:): delay must not be negative, got -0.001 seconds")
        case .dispatchAfterNegativeThen:
            .stops("DispatchMethod.after with a negative delay stops at then, where it is handed over",
                   naming: "DispatchMethod.after(_:on:): delay must not be negative, got -2.0 seconds")
        case .timerZeroInterval:
            .stops("TimerThread: a zero interval stops the process",
                   naming: "TimerThread 'TmExitZero'.schedule(every:startingAfter:spacing:tag:_:): interval must be more than zero, got 0.0 seconds")
        case .timerNegativeInterval:
            .stops("TimerThread: a negative interval stops the process",
                   naming: "TimerThread 'TmExitNegI'.schedule(every:startingAfter:spacing:tag:_:): interval must be more than zero, got -1.0 seconds")
        case .timerNegativeIntervalFixedDelay:
            .stops("TimerThread: a negative interval stops the process, with a fixed delay too",
                   naming: "TimerThread 'TmExitNegD'.schedule(every:startingAfter:spacing:tag:_:): interval must be more than zero, got -0.005 seconds")
        case .timerNegativeFirstDelay:
            .stops("TimerThread: a negative first delay stops the process",
                   naming: "TimerThread 'TmExitFirst'.schedule(every:startingAfter:spacing:tag:_:): firstDelay must not be negative, got -0.001 seconds")
        case .timerNegativeFirstDelayFixedDelay:
            .stops("TimerThread: a negative first delay stops the process, with a fixed delay too",
                   naming: "TimerThread 'TmExitFirstD'.schedule(every:startingAfter:spacing:tag:_:): firstDelay must not be negative, got -2.0 seconds")
        case .timerDisposeShared: .stops("TimerThread: disposing the shared timer stops the process")
        case .threadCheckIsolatedOffThread:
            .stops("DedicatedThread: checkIsolated traps off the thread, naming it", naming: "DedicatedThread 'db'")
        case .threadPreconditionOffThread:
            .stops("DedicatedThread: preconditionIsCurrent traps off the thread, naming it",
                   naming: "expected to run on DedicatedThread 'db'")
        case .threadActorAfterDispose:
            .stops("DedicatedThread: an actor used after its thread was disposed stops, naming the thread",
                   naming: "actor used after its DedicatedThread 'db' was disposed")
        case .threadSyncAfterDispose:
            .stops("DedicatedThread: sync on a disposed thread stops, naming it",
                   naming: "sync on DedicatedThread 'db'", "disposed")
        case .threadNegativeTimeout:
            .stops("DedicatedThread: a negative awaitTermination(timeout:) stops, naming the thread, the timeout and its value",
                   naming: "DedicatedThread 'db'.awaitTermination(timeout:): timeout must not be negative, got -0.001 seconds")
        case .sendingWorkCalledTwice:
            .stops("Work handed over as sending runs once: a second call stops the process",
                   naming: "work handed over as 'sending' was called a second time")
        case .twoThreads:
            .stops("Two dedicated threads that sync onto each other: the second wait is reported",
                   naming: #"deadlock: thread "cache" holds DedicatedThread "cache" and waits for DedicatedThread "db", held by thread "db", which waits for "cache""#)
        case .threeThreads:
            // Whichever of the three blocks last closes the cycle and names it from its side.
            .stops("Three contexts of three kinds, A → B → C → A, across three threads", namingOneOf: [
                ["deadlock: thread", #"holds DispatchQueue "serial" and waits for DedicatedThread "db""#,
                 #"held by thread "db", which waits for ThreadPool "single""#, #"held by thread "single Thread1", which waits for "serial""#],
                [#"deadlock: thread "db" holds DedicatedThread "db" and waits for ThreadPool "single""#,
                 #"held by thread "single Thread1", which waits for DispatchQueue "serial""#, #"which waits for "db""#],
                [#"deadlock: thread "single Thread1" holds ThreadPool "single" and waits for DispatchQueue "serial""#,
                 #"which waits for DedicatedThread "db""#, #"held by thread "db", which waits for "single""#],
            ])
        case .scheduledTaskWaitCycle:
            .stops("A dedicated thread waiting on a one-thread pool's task while the pool's thread syncs onto it is reported",
                   naming: #"deadlock: thread "single Thread1" holds ThreadPool "single" and waits for DedicatedThread "db", held by thread "db", which waits for "single""#)
        case .siblingsWaitCycle:
            // Each child waits for the queue the other holds; whichever blocks second names the cycle.
            .stops("Child tasks of run's work: one nested in the queue waits for a queue the other holds, which waits for its turn: reported",
                   namingOneOf: [["deadlock: thread", #"waits for ThrottledQueue "cache""#, #"which waits for "api""#],
                                 ["deadlock: thread", #"waits for ThrottledQueue "api""#, #"which waits for "cache""#]])
        case .runWorkWaitCycle:
            .stops("ThrottledQueue.run's work holds its queue while it blocks: a step it waits for that syncs back onto the queue is reported",
                   naming: #"deadlock: thread "db" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by thread "runner Thread1", which waits for "db""#)
        case .waitUntilIdleHeldThroughAnotherThread:
            .stops("waitUntilIdle() from work a queue's task waits for stops, as from inside the task itself",
                   naming: "ThrottledQueue 'api': waitUntilIdle() from inside its own task would wait forever")
        case .mainQueueDedicatedThreadCycle:
            .stops("Main queue ↔ dedicated thread: the second wait of the cycle is reported, naming the main queue",
                   naming: #"deadlock: thread "db" holds DedicatedThread "db" and waits for the main queue, held by thread"#, #"which waits for "db""#)
        case .mainQueueSerialQueueCycle:
            .stops("Main queue ↔ serial queue, both sent through DispatchMethod: the cycle is reported",
                   naming: #"holds the main queue and waits for DispatchQueue "serial""#, #"which waits for the main queue"#)
        case .waitUntilIdleInsideRun:
            .stops("waitUntilIdle() from inside run's async work stops with its precondition instead of hanging",
                   naming: "TQ exit run wait", "waitUntilIdle() from inside its own task")
        case .syncOntoAStarvedQueueStops:
            .stops("B.sync from A's task on a shared one-thread pool, with B's work queued behind A, stops naming both queues instead of hanging",
                   naming: "ThrottledQueue 'TQ B'", "ThrottledQueue 'TQ A'", "one-thread ThreadPool 'TQ one'", "would wait forever")
        case .reentryIsNoDeadlock:
            .completes("A wait that re-enters a held context is no deadlock: A → B → A completes")
        case .syncOnMainFromMainQueueUnderDispatchMain:
            .completes("DispatchMethod.sync(on: .main) from work already on the main queue runs inline instead of trapping")
        case .mainThroughADedicatedThreadBackToMain:
            .completes("Main queue → dedicated thread → main queue: the nested work runs on the main queue, served by the blocked main-queue work")
        case .actorAssumeIsolatedInNestedLevel:
            .completes("An actor whose executor is A can assumeIsolated in A → B → A, at depths 3 and 5")
        case .actorAssumeIsolatedInChainStepWaitedForThroughB:
            .completes("An actor whose executor is A can assumeIsolated in a chain step on A that B's work waits for, in A → B")
        case .unstructuredTaskIsNoHolderForTheDetector:
            .completes("An unstructured Task started inside run's work holds nothing of it: its wait on a thread that waits for the queue is no deadlock")
        case .nestedSyncReachedAgainThroughAThreadNestsInIt:
            .completes("Inside run's work, a sync nested in the queue that reaches it again through a dedicated thread nests in that sync, instead of a false deadlock")
        case .syncOnADisposedPool:
            .completes("sync on a queue whose pool was disposed runs on the caller, keeping the gap, instead of crashing")
        #if os(Linux)
        case .poolThreadStartFailure:
            .completes("A thread that cannot start is an error, not a lost task; the pool recovers once threads can start")
        case .threadStartFailureWithThreadsRunning:
            .completes("A thread that cannot start while others run leaves its task queued for them")
        case .timerThreadStartFailure:
            .completes("A timer whose thread cannot start refuses the call with an error, and starts it on the next call")
        case .peakThreadsSkipsAFailedStart:
            .completes("statistics.peakThreads does not count a thread that failed to start")
        case .disposeStartsAThreadForQueuedWork:
            .completes("dispose() starts a thread for queued work when the pool has none left")
        case .dedicatedThreadStartFailure:
            .completes("A thread the system will not start makes execute and run throw, and awaitTermination true")
        #endif
        case .awaitTerminationWaitsForExitLogs:
            .completes("awaitTermination returns true only after the exiting threads are done with the log delegate")
        case .collectedThreadRunsNothingAfter:
            .completes(#"a thread that logs "collected" runs no task afterwards: work that arrives while it logs gets another thread"#)
        case .poolFineArguments: .completes("ThreadPool: the smallest valid configuration and timeouts do not stop")
        case .timerFineArguments:
            .completes("TimerThread: zero delays, a one-nanosecond interval and a past instant do not stop")
        }
    }

    /// Runs the scenario under a watchdog; one that must stop the process then waits for it to.
    func runWatched() async {
        let stops = specification.stops
        DeadlockScenario.watchdog(exitCode: stops ? EXIT_SUCCESS : EXIT_FAILURE)
        await run()
        if stops { DeadlockScenario.sleepForever() }
    }

    /// Makes the call or sets the scenario up.
    private func run() async {
        switch self {
        case .poolSizeZero: _ = ThreadPool(name: "Bad", size: 0)
        case .poolSizeNegative: _ = ThreadPool(name: "Bad", size: -1)
        case .poolSizeMin: _ = ThreadPool(name: "Bad", size: .min)
        case .poolNegativeKeepAlive: _ = ThreadPool(name: "Bad", size: 1, keepAlive: .milliseconds(-1))
        case .poolZeroCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .zero)
        case .poolNegativeCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .seconds(-15))
        case .poolNegativeMinimumThreads: _ = ThreadPool(name: "Bad", size: 2, minimumThreads: -1)
        case .poolMinimumThreadsAboveSize: _ = ThreadPool(name: "Bad", size: 2, minimumThreads: 3)
        case .poolZeroQueueLimit: _ = ThreadPool(name: "Bad", size: 1, queueLimit: 0)
        case .poolNegativeQueueLimit: _ = ThreadPool(name: "Bad", size: 1, queueLimit: -1)
        case .poolNegativeWaitTimeout:
            let release = Latch()
            let pool = ThreadPool(name: "Bad", size: 1)
            try? pool.execute { _ = release.wait(timeout: .seconds(30)) }
            _ = synchronously { try? pool.schedule {}.wait(timeout: .seconds(-1)) }
        case .poolFarNegativeWaitTimeout:
            _ = synchronously { try? ThreadPool(name: "Bad", size: 1).schedule {}.wait(timeout: .zero - FarOut.huge) }
        case .poolNegativeWaitTimeoutAfterTheTaskRan:
            let task = try? ThreadPool(name: "Bad", size: 1).schedule {}
            precondition(synchronously { task?.wait(timeout: .seconds(10)) } == true, "the task did not run")
            _ = synchronously { task?.wait(timeout: .milliseconds(-1)) }
        case .poolNegativeAwaitTermination:
            let pool = ThreadPool(name: "Bad", size: 1)
            pool.dispose()
            _ = synchronously { pool.awaitTermination(timeout: .nanoseconds(-1)) }

        case .timerNegativeDelay:
            _ = try? TimerThread(name: "TmExitNeg").schedule(after: .milliseconds(-1)) {}
        case .timerFarNegativeDelay:
            _ = try? TimerThread(name: "TmExitFarNeg").schedule(after: .zero - FarOut.huge) {}
        case .timerNaNDelay:
            _ = try? TimerThread(name: "TmExitNaN").schedule(after: .seconds(Double.nan)) {}
        case .rateLimitNegativeCount: _ = RateLimit.rate(-1, per: .seconds(1))
        case .rateLimitMinCount: _ = RateLimit.rate(.min, per: .seconds(1))
        case .rateLimitNegativeWindow: _ = RateLimit.rate(1, per: .seconds(-1))
        case .sharedThrottleZeroHorizon, .sharedThrottleNegativeHorizon:
            var model = SharedThrottle()
            _ = model.request(SharedThrottle.Request(
                now: 0, gap: 0, monitor: .concurrent, limit: nil,
                horizon: self == .sharedThrottleZeroHorizon ? 0 : .min, leaseTTL: 1_000, token: 1, asker: 1))
        case .dispatchAfterNegativeExecute:
            DispatchMethod.after(.seconds(-1), on: .global()).execute {}
        case .dispatchAfterNegativeRun:
            _ = try? await DispatchMethod.after(.milliseconds(-1), on: .global()).run {}
        case .dispatchAfterNegativeThen:
            // The step it follows has not finished: the delay is checked where it is handed over.
            let gate = Latch()
            DispatchMethod.async(on: .global()).execute { _ = gate.wait(timeout: .seconds(30)) }
                .then(.after(.seconds(-2), on: .global())) { _ in }
        case .timerZeroInterval:
            _ = try? TimerThread(name: "TmExitZero").schedule(every: .zero) {}
        case .timerNegativeInterval:
            _ = try? TimerThread(name: "TmExitNegI").schedule(every: .seconds(-1)) {}
        case .timerNegativeIntervalFixedDelay:
            _ = try? TimerThread(name: "TmExitNegD").schedule(every: .milliseconds(-5), startingAfter: .zero, spacing: .fixedDelay) {}
        case .timerNegativeFirstDelay:
            _ = try? TimerThread(name: "TmExitFirst").schedule(every: .seconds(1), startingAfter: .milliseconds(-1)) {}
        case .timerNegativeFirstDelayFixedDelay:
            _ = try? TimerThread(name: "TmExitFirstD").schedule(every: .seconds(1), startingAfter: .seconds(-2), spacing: .fixedDelay) {}
        case .timerDisposeShared:
            _ = TimerThread.shared.dispose()
        case .sendingWorkCalledTwice:
            let work = SendingWork { 1 }
            precondition((try? work()) == 1, "the first call did not run the work")
            _ = try? work()

        case .threadCheckIsolatedOffThread:
            DedicatedThread(name: "db").checkIsolated()
        case .threadPreconditionOffThread:
            DedicatedThread(name: "db").preconditionIsCurrent()
        case .threadActorAfterDispose:
            let thread = DedicatedThread(name: "db")
            let counter = PinnedCounter(thread: thread)
            thread.dispose()
            await thread.awaitTermination()
            _ = await counter.increment()
        case .threadSyncAfterDispose:
            let thread = DedicatedThread(name: "db")
            thread.dispose()
            synchronously { thread.sync {} }
        case .threadNegativeTimeout:
            _ = synchronously { DedicatedThread(name: "db").awaitTermination(timeout: .milliseconds(-1)) }
        case .poolFineArguments:
            let pool = ThreadPool(
                name: "Good", size: 1, keepAlive: .zero, collectionInterval: .nanoseconds(1), queueLimit: 1)
            _ = synchronously { try? pool.schedule {}.wait(timeout: .zero) }
            pool.dispose()
            _ = synchronously { pool.awaitTermination(timeout: .zero) }
        case .timerFineArguments:
            let timer = TimerThread(name: "TmExitOK")
            _ = try? timer.schedule(after: .zero) {}
            _ = try? timer.schedule(every: .nanoseconds(1)) {}
            _ = try? timer.schedule(at: .now - .seconds(1)) {}
            _ = try? timer.schedule(every: .nanoseconds(1), startingAfter: .zero, spacing: .fixedDelay) {}
            precondition(timer.dispose() <= 4)
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
        #if os(Linux)
        case .poolThreadStartFailure: Self.poolThreadStartFailure()
        case .threadStartFailureWithThreadsRunning: Self.threadStartFailureWithThreadsRunning()
        case .timerThreadStartFailure: Self.timerThreadStartFailure()
        case .peakThreadsSkipsAFailedStart: Self.peakThreadsSkipsAFailedStart()
        case .disposeStartsAThreadForQueuedWork: Self.disposeStartsAThreadForQueuedWork()
        case .dedicatedThreadStartFailure: await Self.dedicatedThreadStartFailure()
        #endif
        case .awaitTerminationWaitsForExitLogs: Self.awaitTerminationWaitsForExitLogs()
        case .collectedThreadRunsNothingAfter: Self.collectedThreadRunsNothingAfter()
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

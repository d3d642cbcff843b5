import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a precondition failure whose message names the object,
/// the argument and its value: every precondition of the core module in one table, each case in a
/// process of its own; and the same calls with fine arguments, which must not stop it (so that each
/// misuse stops the process for its argument alone).
///
/// Serialized: while an exit test's child process runs, Swift Testing blocks Swift concurrency
/// threads reading its pipes, and this machine has only two of them.
@Suite("Preconditions", .serialized)
struct PreconditionExitTests {
    /// A call that breaks a precondition, said as the behaviour it checks.
    enum Misuse: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
        case poolSizeZero = "ThreadPool: size 0 stops"
        case poolSizeNegative = "ThreadPool: size -1 stops"
        case poolNegativeKeepAlive = "ThreadPool: a negative keepAlive stops"
        case poolZeroCollectionInterval = "ThreadPool: a zero collectionInterval stops"
        case poolNegativeCollectionInterval = "ThreadPool: a negative collectionInterval stops"
        case poolZeroQueueLimit = "ThreadPool: queueLimit 0 stops"
        case poolNegativeWaitTimeout = "ThreadPool: a negative wait(timeout:) stops"
        case poolNegativeAwaitTermination = "ThreadPool: a negative awaitTermination timeout stops"

        case timerNegativeDelay = "TimerThread: a negative delay stops the process"
        case timerNaNDelay = "TimerThread: a NaN delay stops the process"
        case timerZeroInterval = "TimerThread: a zero interval stops the process"
        case timerNegativeInterval = "TimerThread: a negative interval stops the process"
        case timerNegativeIntervalFixedDelay = "TimerThread: a negative interval stops the process, with a fixed delay too"
        case timerNegativeFirstDelay = "TimerThread: a negative first delay stops the process"
        case timerNegativeFirstDelayFixedDelay = "TimerThread: a negative first delay stops the process, with a fixed delay too"
        case timerDisposeShared = "TimerThread: disposing the shared timer stops the process"
        case timerHeapInsertTwice = "TimerHeap: an element cannot be in a timer heap twice"

        case threadCheckIsolatedOffThread = "DedicatedThread: checkIsolated traps off the thread, naming it"
        case threadPreconditionOffThread = "DedicatedThread: preconditionIsCurrent traps off the thread, naming it"
        case threadActorAfterDispose = "DedicatedThread: an actor used after its thread was disposed stops, naming the thread"
        case threadSyncAfterDispose = "DedicatedThread: sync on a disposed thread stops, naming it"
        case threadNegativeTimeout = "DedicatedThread: a negative awaitTermination timeout stops, naming the value"

        var testDescription: String { rawValue }

        /// What the message names (nothing is checked where it is empty).
        var message: [String] {
            switch self {
            case .poolSizeZero: ["'Bad'", "size must be at least 1, got 0"]
            case .poolSizeNegative: ["size must be at least 1, got -1"]
            case .poolNegativeKeepAlive: ["keepAlive must not be negative", "-0.001 seconds"]
            case .poolZeroCollectionInterval: ["collectionInterval must be more than zero", "0.0 seconds"]
            case .poolNegativeCollectionInterval: ["collectionInterval must be more than zero", "-15.0 seconds"]
            case .poolZeroQueueLimit: ["queueLimit must be at least 1, got 0"]
            case .poolNegativeWaitTimeout: ["wait(timeout:)", "-1.0 seconds"]
            case .poolNegativeAwaitTermination: ["awaitTermination timeout must not be negative"]
            case .timerNegativeDelay: ["TimerThread 'TmExitNeg'", "delay must not be negative, got -0.001 seconds"]
            case .timerZeroInterval: ["TimerThread 'TmExitZero'", "interval must be more than zero, got 0.0 seconds"]
            case .timerNegativeInterval: ["TimerThread 'TmExitNegI'", "interval must be more than zero, got -1.0 seconds"]
            case .timerNegativeIntervalFixedDelay: ["TimerThread 'TmExitNegD'", "interval must be more than zero, got -0.005 seconds"]
            case .timerNegativeFirstDelay: ["TimerThread 'TmExitFirst'", "firstDelay must not be negative, got -0.001 seconds"]
            case .timerNegativeFirstDelayFixedDelay: ["TimerThread 'TmExitFirstD'", "firstDelay must not be negative, got -2.0 seconds"]
            case .timerNaNDelay, .timerDisposeShared, .timerHeapInsertTwice: []
            case .threadCheckIsolatedOffThread: ["DedicatedThread 'db'"]
            case .threadPreconditionOffThread: ["expected to run on DedicatedThread 'db'"]
            case .threadActorAfterDispose: ["actor used after its DedicatedThread 'db' was disposed"]
            case .threadSyncAfterDispose: ["sync on DedicatedThread 'db'", "disposed"]
            case .threadNegativeTimeout: ["'db'", "must not be negative"]
            }
        }

        /// Makes the call; it does not return.
        func perform() async {
            switch self {
            case .poolSizeZero: _ = ThreadPool(name: "Bad", size: 0)
            case .poolSizeNegative: _ = ThreadPool(name: "Bad", size: -1)
            case .poolNegativeKeepAlive: _ = ThreadPool(name: "Bad", size: 1, keepAlive: .milliseconds(-1))
            case .poolZeroCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .zero)
            case .poolNegativeCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .seconds(-15))
            case .poolZeroQueueLimit: _ = ThreadPool(name: "Bad", size: 1, queueLimit: 0)
            case .poolNegativeWaitTimeout:
                let task = try? ThreadPool(name: "Bad", size: 1).schedule {}
                _ = task?.wait(timeout: .seconds(-1))
            case .poolNegativeAwaitTermination:
                let pool = ThreadPool(name: "Bad", size: 1)
                pool.dispose()
                _ = pool.awaitTermination(timeout: .nanoseconds(-1))

            case .timerNegativeDelay:
                _ = try? TimerThread(name: "TmExitNeg").schedule(after: .milliseconds(-1)) {}
            case .timerNaNDelay:
                _ = try? TimerThread(name: "TmExitNaN").schedule(after: .seconds(Double.nan)) {}
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
            case .timerHeapInsertTwice:
                final class Item: TimerHeapElement { var heapIndex: Int? }
                var heap = TimerHeap<Item>()
                let item = Item()
                heap.insert(item, deadline: MonotonicInstant(nanoseconds: 1))
                heap.insert(item, deadline: MonotonicInstant(nanoseconds: 2))

            case .threadCheckIsolatedOffThread:
                DedicatedThread(name: "db").checkIsolated()
            case .threadPreconditionOffThread:
                DedicatedThread(name: "db").preconditionIsCurrent()
            case .threadActorAfterDispose:
                let thread = DedicatedThread(name: "db")
                let counter = PinnedCounter(thread: thread)
                thread.dispose()
                _ = thread.awaitTermination(timeout: .seconds(10))
                _ = await counter.increment()
            case .threadSyncAfterDispose:
                let thread = DedicatedThread(name: "db")
                thread.dispose()
                thread.sync {}
            case .threadNegativeTimeout:
                _ = DedicatedThread(name: "db").awaitTermination(timeout: .milliseconds(-1))
            }
        }
    }

    @Test("A call that breaks a precondition stops the process with a message naming what was wrong", arguments: Misuse.allCases)
    func stops(_ misuse: Misuse) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [misuse] in
            await misuse.perform()
        }
        expectMessage(result, contains: misuse.message)
    }

    /// Calls like the misuses' with arguments that are fine.
    enum FineUse: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
        case poolConfiguration = "ThreadPool: the smallest valid configuration and timeouts do not stop"
        case timerCalls = "TimerThread: zero delays, a one-nanosecond interval and a past instant do not stop"

        var testDescription: String { rawValue }

        func perform() {
            switch self {
            case .poolConfiguration:
                let pool = ThreadPool(
                    name: "Good", size: 1, keepAlive: .zero, collectionInterval: .nanoseconds(1), queueLimit: 1)
                _ = try? pool.schedule {}.wait(timeout: .zero)
                pool.dispose()
                _ = pool.awaitTermination(timeout: .zero)
            case .timerCalls:
                let timer = TimerThread(name: "TmExitOK")
                _ = try? timer.schedule(after: .zero) {}
                _ = try? timer.schedule(every: .nanoseconds(1)) {}
                _ = try? timer.schedule(at: .now - .seconds(1)) {}
                _ = try? timer.schedule(every: .nanoseconds(1), startingAfter: .zero, spacing: .fixedDelay) {}
                precondition(timer.dispose() <= 4)
            }
        }
    }

    @Test("The same calls with fine arguments do not stop the process", arguments: FineUse.allCases)
    func fineArgumentsDoNotStop(_ use: FineUse) async {
        await #expect(processExitsWith: .success) { [use] in
            use.perform()
        }
    }
}

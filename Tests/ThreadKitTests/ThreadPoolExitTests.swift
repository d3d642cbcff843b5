import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a message that names the argument and its value.
///
/// Serialized: while an exit test's child process runs, Swift Testing blocks Swift concurrency
/// threads reading its pipes, and this machine has only two of them.
@Suite("ThreadPool preconditions", .serialized)
struct ThreadPoolExitTests {
    /// A call that breaks one of the pool's preconditions, and what the message it stops with says.
    enum BadCall: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
        case sizeZero = "size 0 stops"
        case sizeNegative = "size -1 stops"
        case negativeKeepAlive = "A negative keepAlive stops"
        case zeroCollectionInterval = "A zero collectionInterval stops"
        case negativeCollectionInterval = "A negative collectionInterval stops"
        case zeroQueueLimit = "queueLimit 0 stops"
        case negativeWaitTimeout = "A negative wait(timeout:) stops"
        case negativeAwaitTermination = "A negative awaitTermination timeout stops"

        var testDescription: String { rawValue }

        /// What the message names: the pool, the argument and its value.
        var message: [String] {
            switch self {
            case .sizeZero: ["'Bad'", "size must be at least 1, got 0"]
            case .sizeNegative: ["size must be at least 1, got -1"]
            case .negativeKeepAlive: ["keepAlive must not be negative", "-0.001 seconds"]
            case .zeroCollectionInterval: ["collectionInterval must be more than zero", "0.0 seconds"]
            case .negativeCollectionInterval: ["collectionInterval must be more than zero", "-15.0 seconds"]
            case .zeroQueueLimit: ["queueLimit must be at least 1, got 0"]
            case .negativeWaitTimeout: ["wait(timeout:)", "-1.0 seconds"]
            case .negativeAwaitTermination: ["awaitTermination timeout must not be negative"]
            }
        }

        /// Makes the call; it does not return.
        func perform() {
            switch self {
            case .sizeZero: _ = ThreadPool(name: "Bad", size: 0)
            case .sizeNegative: _ = ThreadPool(name: "Bad", size: -1)
            case .negativeKeepAlive: _ = ThreadPool(name: "Bad", size: 1, keepAlive: .milliseconds(-1))
            case .zeroCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .zero)
            case .negativeCollectionInterval: _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .seconds(-15))
            case .zeroQueueLimit: _ = ThreadPool(name: "Bad", size: 1, queueLimit: 0)
            case .negativeWaitTimeout:
                let pool = ThreadPool(name: "Bad", size: 1)
                let task = try? pool.schedule {}
                _ = task?.wait(timeout: .seconds(-1))
            case .negativeAwaitTermination:
                let pool = ThreadPool(name: "Bad", size: 1)
                pool.dispose()
                _ = pool.awaitTermination(timeout: .nanoseconds(-1))
            }
        }
    }

    @Test("A bad argument stops the process with a message naming it and its value", arguments: BadCall.allCases)
    func stops(_ call: BadCall) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [call] in
            call.perform()
        }
        expectMessage(result, contains: call.message)
    }

    @Test("A valid configuration does not stop (the exit tests above fail for their argument alone)")
    func validConfiguration() async {
        await #expect(processExitsWith: .success) {
            let pool = ThreadPool(
                name: "Good", size: 1, keepAlive: .zero, collectionInterval: .nanoseconds(1), queueLimit: 1)
            _ = try? pool.schedule {}.wait(timeout: .zero)
            pool.dispose()
            _ = pool.awaitTermination(timeout: .zero)
        }
    }
}

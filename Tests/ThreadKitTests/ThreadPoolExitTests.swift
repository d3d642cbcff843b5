import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a message that names the argument and its value.
///
/// Serialized: while an exit test's child process runs, Swift Testing blocks Swift concurrency
/// threads reading its pipes, and this machine has only two of them.
@Suite("ThreadPool preconditions", .serialized)
struct ThreadPoolExitTests {
    @Test("size 0 stops")
    func sizeZero() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: 0)
        }
        expectMessage(result, contains: ["'Bad'", "size must be at least 1, got 0"])
    }

    @Test("size -1 stops")
    func sizeNegative() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: -1)
        }
        expectMessage(result, contains: ["size must be at least 1, got -1"])
    }

    @Test("A negative keepAlive stops")
    func negativeKeepAlive() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: 1, keepAlive: .milliseconds(-1))
        }
        expectMessage(result, contains: ["keepAlive must not be negative", "-0.001 seconds"])
    }

    @Test("A zero collectionInterval stops")
    func zeroCollectionInterval() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .zero)
        }
        expectMessage(result, contains: ["collectionInterval must be more than zero", "0.0 seconds"])
    }

    @Test("A negative collectionInterval stops")
    func negativeCollectionInterval() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: 1, collectionInterval: .seconds(-15))
        }
        expectMessage(result, contains: ["collectionInterval must be more than zero", "-15.0 seconds"])
    }

    @Test("queueLimit 0 stops")
    func zeroQueueLimit() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = ThreadPool(name: "Bad", size: 1, queueLimit: 0)
        }
        expectMessage(result, contains: ["queueLimit must be at least 1, got 0"])
    }

    @Test("A negative wait(timeout:) stops")
    func negativeWaitTimeout() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let pool = ThreadPool(name: "Bad", size: 1)
            let task = try? pool.schedule {}
            _ = task?.wait(timeout: .seconds(-1))
        }
        expectMessage(result, contains: ["wait(timeout:)", "-1.0 seconds"])
    }

    @Test("A negative awaitTermination timeout stops")
    func negativeAwaitTermination() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let pool = ThreadPool(name: "Bad", size: 1)
            pool.dispose()
            _ = pool.awaitTermination(timeout: .nanoseconds(-1))
        }
        expectMessage(result, contains: ["awaitTermination timeout must not be negative"])
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

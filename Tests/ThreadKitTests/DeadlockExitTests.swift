import Dispatch
import Foundation
import Testing
@testable import ThreadKit

// The scenarios of deadlock detection itself.

extension ChildScenario {
    /// A work started on its context by `startFirst` and one started on another by `startSecond`
    /// wait until both are inside their contexts; then the first makes `firstWait` at once and the
    /// second `secondWait` 100 ms later, so that on an idle machine the second wait closes the cycle.
    static func crossWaits(
        _ startFirst: (@escaping @Sendable () -> Void) -> Void, then firstWait: @escaping @Sendable () -> Void,
        _ startSecond: (@escaping @Sendable () -> Void) -> Void, then secondWait: @escaping @Sendable () -> Void
    ) {
        let bothInside = Latch(count: 2)
        startFirst {
            bothInside.countDown()
            bothInside.wait()
            firstWait()
        }
        startSecond {
            bothInside.countDown()
            bothInside.wait()
            usleep(100_000)  // let the first block first
            secondWait()
        }
    }

    static func reentryIsNoDeadlock() {
        let first = DedicatedThread(name: "A")
        let second = DedicatedThread(name: "B")
        let value = first.sync { second.sync { first.sync { second.sync { 42 } } } }
        precondition(value == 42)
    }
}

extension ChildScenario {
    static func twoThreads() {
        let first = DedicatedThread(name: "db")
        let second = DedicatedThread(name: "cache")
        crossWaits({ try! first.execute($0) }, then: { second.sync {} },
                   { try! second.execute($0) }, then: { first.sync {} })
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

extension ChildScenario {
    static func scheduledTaskWaitCycle() {
        let db = DedicatedThread(name: "db")
        let pool = ThreadPool(name: "single", size: 1)
        crossWaits({ try! db.execute($0) }, then: { try! pool.schedule {}.wait() },
                   { try! pool.execute($0) }, then: { db.sync {} })
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
                        synchronously {
                            api.sync {
                                nestedStarted.countDown()
                                siblingHoldsCache.wait()
                                cache.sync {}
                            }
                        }
                    }
                    group.addTask {
                        nestedStarted.wait()
                        _ = try? await cache.run {
                            siblingHoldsCache.countDown()
                            synchronously { api.sync {} }
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
                _ = synchronously { try? step.wait() }
            }
        }
    }
}

extension ChildScenario {
    static func waitUntilIdleHeldThroughAnotherThread() {
        let queue = ThrottledQueue(label: "api", interval: .zero)
        let thread = DedicatedThread(name: "db")
        try! queue.async { thread.sync { queue.waitUntilIdle() } }
    }
}

import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// Cross-thread wait cycles stop the process the moment they close, with a message naming the cycle.
///
/// Each runs in a process of its own; in each, a watchdog ends the child with success after 20 s,
/// so a hang fails the test (it expects a failure) instead of hanging the run.
@Suite("Deadlock detection", .serialized)
struct DeadlockExitTests {
    @Test("Two dedicated threads that sync onto each other: the second wait is reported")
    func twoThreads() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
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
            DeadlockScenario.sleepForever()
        }
        expectMessage(result, contains: [
            #"deadlock: thread "cache" holds DedicatedThread "cache" and waits for DedicatedThread "db", held by thread "db", which waits for "cache""#,
        ])
    }

    @Test("Three contexts of three kinds, A → B → C → A, across three threads")
    func threeThreads() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
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
            DeadlockScenario.sleepForever()
        }
        expectMessage(result, contains: [
            "deadlock: thread",
            #"holds DispatchQueue "serial" and waits for DedicatedThread "db""#,
            #"held by thread "db", which waits for ThreadPool "single""#,
            #"held by thread "single Thread1", which waits for "serial""#,
        ])
    }

    @Test("A wait that re-enters a held context is no deadlock: A → B → A completes")
    func reentryIsNoDeadlock() async {
        await #expect(processExitsWith: .success) {
            DeadlockScenario.watchdog(exitCode: EXIT_FAILURE)
            let first = DedicatedThread(name: "A")
            let second = DedicatedThread(name: "B")
            let value = first.sync { second.sync { first.sync { second.sync { 42 } } } }
            precondition(value == 42)
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

@Suite("Deadlock detection in ThreadKit's own waits", .serialized)
struct OwnWaitsDeadlockExitTests {
    @Test("A dedicated thread waiting on a one-thread pool's task while the pool's thread syncs onto it is reported")
    func scheduledTaskWaitCycle() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
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
            DeadlockScenario.sleepForever()
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        #expect(output.contains(#"deadlock: thread "single Thread1" holds ThreadPool "single" and waits for DedicatedThread "db", held by thread "db", which waits for "single""#), "standard error was: \(output)")
        #endif
    }

    @Test("Child tasks of run's work: one nested in the queue waits for a queue the other holds, which waits for its turn: reported")
    func siblingsWaitCycle() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
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
            DeadlockScenario.sleepForever()
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        // Each child waits for the queue the other holds; whichever blocks second closes the cycle
        // and names it from its side.
        let cycle = output.split(separator: "\n").first { $0.contains("deadlock: thread") } ?? ""
        let named = [("cache", "api"), ("api", "cache")].contains { waitsFor, heldBy in
            cycle.contains(#"waits for ThrottledQueue "\#(waitsFor)""#) && cycle.contains(#"which waits for "\#(heldBy)""#)
        }
        #expect(named, "standard error was: \(output)")
        #endif
    }

    @Test("ThrottledQueue.run's work holds its queue while it blocks: a step it waits for that syncs back onto the queue is reported")
    func runWorkWaitCycle() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
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
            DeadlockScenario.sleepForever()
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        #expect(output.contains(#"deadlock: thread "db" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by thread "runner Thread1", which waits for "db""#), "standard error was: \(output)")
        #endif
    }
}

@Suite("Waits that can never end, through held contexts", .serialized)
struct TransitiveHoldExitTests {
    @Test("waitUntilIdle() from work a queue's task waits for stops, as from inside the task itself")
    func waitUntilIdleHeldThroughAnotherThread() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            DeadlockScenario.watchdog()
            let queue = ThrottledQueue(label: "api", interval: .zero)
            let thread = DedicatedThread(name: "db")
            try! queue.async { thread.sync { queue.waitUntilIdle() } }
            DeadlockScenario.sleepForever()
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        #expect(output.contains("ThrottledQueue 'api': waitUntilIdle() from inside its own task would wait forever"), "standard error was: \(output)")
        #endif
    }
}

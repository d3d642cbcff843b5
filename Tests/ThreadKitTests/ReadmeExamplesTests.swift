import Dispatch
import Foundation
import Testing
import ThreadKit

/// The README's quick start, compiled and run as written, so the README cannot drift from the API.
@Suite struct ReadmeExamplesTests {
    @Test func threadPoolQuickStart() async throws {
        let pool = ThreadPool(name: "Images", size: 4)       // threads start lazily, at most 4
        try pool.execute { print("on \(Thread.current.name!)") }   // "Images Thread1"
        let task = try pool.schedule { print("cancellable until a thread takes it") }
        task.wait()                                          // returns once it has run
        let answer = try await pool.run { 6 * 7 }            // suspends; no thread blocked
        pool.dispose()                                       // run what is queued, then let threads exit
        _ = pool.awaitTermination(timeout: .seconds(5))

        #expect(task.isCompleted)
        #expect(answer == 42)
        #expect(pool.statistics.completedTasks == 3)
    }

    @Test func timerThreadQuickStart() throws {
        let timeout = try TimerThread.shared.schedule(after: .seconds(30), tag: "login") { print("timed out") }
        let heartbeat = try TimerThread.shared.schedule(every: .seconds(1)) { print("beat") }   // on the beat: 1 s, 2 s, 3 s…
        let poll = try TimerThread.shared.schedule(every: .seconds(5), startingAfter: .zero,
                                                   spacing: .fixedDelay) { print("poll") }    // now, then 5 s after each poll returned
        if timeout.cancel() { print("answered in time") }    // true exactly when it stopped the call
        heartbeat.cancel()
        poll.cancel()
        TimerThread.shared.cancelAll(tag: "login")

        #expect(timeout.isCancelled)
        #expect(heartbeat.isCancelled)
        #expect(poll.isCancelled)
    }

    @Test func logQuickStart() {
        let billing = Log.Source("Billing")                  // or ThreadKit's own: .threadPool, .timer, .throttle
        Log.log(billing, "never built: Billing is off")
        Log.enable(billing)
        Log.log(billing, "charged \(42) €")                  // stderr: "<thread> Billing: charged 42 €"
        Log.disable(billing)

        #expect(!Log.isEnabled(billing))
    }

    @Test func throttledQueueQuickStart() async throws {
        let api = ThrottledQueue(label: "API", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
        try api.async { print("first request: at once") }
        try api.async { print("second: 200 ms after the first started") }
        let status = try await api.run { 200 }               // async work, throttled the same way
        api.pause(for: .seconds(30))                         // after an HTTP 429 with Retry-After: 30
        api.waitUntilIdle()

        #expect(status == 200)
        #expect(api.pendingCount == 0)
    }

    @Test func dedicatedThreadQuickStart() async throws {
        let db = DedicatedThread(name: "SQLite")             // one named thread, started at once
        try db.execute { print("always on \(Thread.current.name!)") }   // FIFO on "SQLite"
        let rows = db.sync { 3 }                             // blocks until it ran there; from "SQLite": inline
        let user = try await db.run { "alice" }              // suspends; no thread blocked
        actor Store {                                        // every method of Store runs on "Store"
            let thread = DedicatedThread(name: "Store")
            nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
        }
        db.dispose()                                         // run what is queued, then exit

        #expect(rows == 3)
        #expect(user == "alice")
        #expect(db.awaitTermination(timeout: .seconds(5)))
        _ = Store.self
    }

    @Test func dispatchMethodQuickStart() throws {
        let db = DedicatedThread(name: "SQLite")
        let pool = ThreadPool(name: "Images", size: 4)
        defer {
            db.dispose()
            pool.dispose()
        }
        var save: DispatchMethod = .async(on: .thread(db))   // a value a type can store and a user can change
        save = .sync(on: .pool(pool))                        // .inline, .async, .sync, .after(delay, on:)
        let total = try DispatchMethod.async(on: .pool(pool)).execute { 20 }
            .then(.async(on: .thread(db))) { $0 + 1 }         // each step once, in order, with the value
            .then(.inline) { $0 * 2 }
            .wait()                                          // 42; errors and cancellation come out here
        let queue = DispatchQueue(label: "Ledger")           // a sync back onto a context the thread holds runs inline:
        let nested = try DispatchMethod.sync(on: .serialQueue(queue)).execute {
            try DispatchMethod.sync(on: .serialQueue(queue)).execute { "no deadlock" }.wait()
        }.wait()

        #expect(total == 42)
        #expect(nested == "no deadlock")
        #expect(try save.execute { 1 }.wait() == 1)
    }
}

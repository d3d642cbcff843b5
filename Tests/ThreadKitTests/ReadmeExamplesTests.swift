import Dispatch
import Foundation
import Testing
import ThreadKit
import ThreadKitTestSupport

/// The README's quick start, compiled and run as written, so the README cannot drift from the API
/// (each block between its `// snippet:` markers; DocSnippetCoverageTests checks the copies).
@Suite(.timeLimit(.minutes(1))) struct ReadmeExamplesTests {
    @Test func threadPoolQuickStart() async throws {
        // snippet: README.md#1
        let pool = ThreadPool(name: "Images", size: 4)       // threads start lazily, at most 4
        try pool.execute { print("on \(Thread.current.name!)") }   // "Images Thread1"
        let task = try pool.schedule { print("cancellable until a thread takes it") }
        let answer = try await pool.run { 6 * 7 }            // suspends; no thread blocked
        pool.dispose()                                       // run what is queued, then let threads exit
        await pool.awaitTermination()                        // suspends until every thread has exited
        // end snippet

        #expect(task.isCompleted)
        #expect(answer == 42)
        #expect(pool.statistics.completedTasks == 3)
    }

    @Test func timerThreadQuickStart() throws {
        // snippet: README.md#2
        let timeout = try TimerThread.shared.schedule(after: .seconds(30), tag: "login") { print("timed out") }
        let heartbeat = try TimerThread.shared.schedule(every: .seconds(1)) { print("beat") }   // on the beat: 1 s, 2 s, 3 s…
        let poll = try TimerThread.shared.schedule(every: .seconds(5), startingAfter: .zero,
                                                   spacing: .fixedDelay) { print("poll") }    // now, then 5 s after each poll returned
        if timeout.cancel() { print("answered in time") }    // true exactly when it stopped the call
        heartbeat.cancel()
        poll.cancel()
        TimerThread.shared.cancelAll(tag: "login")
        // end snippet

        #expect(timeout.isCancelled)
        #expect(heartbeat.isCancelled)
        #expect(poll.isCancelled)
    }

    @Test func logQuickStart() {
        // snippet: README.md#3
        let billing = Log.Source("Billing")                  // or ThreadKit's own: .threadPool, .timer, .throttle
        Log.log(billing, "never built: Billing is off")
        Log.enable(billing)
        Log.log(billing, "charged \(42) €")                  // stderr: "<thread> Billing: charged 42 €"
        Log.disable(billing)
        // end snippet

        #expect(!Log.isEnabled(billing))
    }

    @Test func throttledQueueQuickStart() async throws {
        // snippet: README.md#4
        let api = ThrottledQueue(label: "API", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
        try api.async { print("first request: at once") }
        try api.async { print("second: 200 ms after the first started") }
        let status = try await api.run { 200 }               // async work, throttled the same way
        api.pause(for: .seconds(30))                         // after an HTTP 429 with Retry-After: 30
        func drain(_ queue: ThrottledQueue) async {          // an async function, not top-level code (see above)
            await queue.waitUntilIdle()                      // suspends until every accepted task has finished
        }
        await drain(api)
        // end snippet

        #expect(status == 200)
        #expect(api.pendingCount == 0)
    }

    @Test func dedicatedThreadQuickStart() async throws {
        // snippet: README.md#5
        let db = DedicatedThread(name: "SQLite")             // one named thread, started at once
        try db.execute { print("always on \(Thread.current.name!)") }   // FIFO on "SQLite"
        let user = try await db.run { "alice" }              // suspends; no thread blocked
        actor Store {                                        // every method of Store runs on "Store"
            let thread = DedicatedThread(name: "Store")
            nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
        }
        db.dispose()                                         // run what is queued, then exit
        await db.awaitTermination()                          // suspends until the thread has exited
        // end snippet

        #expect(user == "alice")
        #expect(db.pendingCount == 0)
        _ = Store.self
    }

    @Test func dispatchMethodQuickStart() async throws {
        // snippet: README.md#6
        let workers = ThreadPool(name: "Workers", size: 2)
        let ledger = DedicatedThread(name: "Ledger")
        var save: DispatchMethod = .async(on: .thread(ledger))   // a value a type can store and a user can change
        save = .sync(on: .pool(workers))                     // .inline, .async, .sync, .after(delay, on:)
        let total = try await DispatchMethod.async(on: .pool(workers)).execute { 20 }
            .then(.async(on: .thread(ledger))) { $0 + 1 }     // each step once, in order, with the value
            .then(.inline) { $0 * 2 }
            .value                                           // 42; errors and cancellation come out here
        func nested() throws -> String {                     // synchronous code may block: .sync and wait()
            let queue = DispatchQueue(label: "Journal")      // a sync back onto the queue it runs in runs inline:
            return try DispatchMethod.sync(on: .serialQueue(queue)).execute {
                try DispatchMethod.sync(on: .serialQueue(queue)).execute { "no deadlock" }.wait()
            }.wait()
        }
        // end snippet

        #expect(total == 42)
        #expect(try nested() == "no deadlock")
        #expect(try await save.run { 1 } == 1)
        ledger.dispose()
        workers.dispose()
    }

    // In a child process: it installs a signal handler and prints the dump.
    @Test(.exitTestOnOwnThreads) func diagnosticsQuickStart() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            // snippet: README.md#8
            let pool = ThreadPool(name: "Render", size: 2)
            try pool.execute(label: "page 7") { }                // a label shows in the dump while the work runs
            print(Diagnostics.snapshot())                        // every component and thread; waits, cycles first
            Diagnostics.dumpOnSignal(SIGUSR1)                    // `kill -USR1 <pid>`: the dump on standard error
            let scrape = Diagnostics.prometheusText()            // threadkit_pool_tasks_completed_total{pool="Render"} …
            // end snippet

            precondition(scrape.contains("threadkit_pool_tasks_completed_total{pool=\"Render\"}"))
        }
        let output = result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } ?? ""
        #expect(output.contains("ThreadPool \"Render\": size=2"))
    }
}

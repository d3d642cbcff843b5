// threadkit-demo: a short tour of ThreadKit's parts, in about ten seconds. Each step says what
// it shows, prints what it observes as it happens (measured, never hard-coded), and says how long
// it took. The URL step talks only to a server it starts itself on 127.0.0.1; the Redis step, only
// to a redis-server it starts itself in a temporary folder (and is skipped, saying how to get one,
// when there is no redis-server on PATH).
import Foundation
import Synchronization
import ThreadKit

/// The names of this process's threads that start with `prefix`, as the kernel reports them.
func kernelThreadNames(prefix: String) -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
        .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        .filter { $0.hasPrefix(prefix) }
        .sorted()
}

/// Log records, printed indented so they stand out from the demo's own lines.
final class DemoLogDelegate: LogDelegate {
    func log(_ record: Log.Record) {
        say("   [log] \(record.threadName) \(record.source.name): \(record.message)")
    }
}

// A member process of the Redis step (this program again): it runs its part and exits.
if CommandLine.arguments.count > 1, CommandLine.arguments[1] == SharedLimitTour.memberFlag {
    exit(SharedLimitTour.runMember(Array(CommandLine.arguments.dropFirst(2))))
}

let tourStart = ContinuousClock.now
say("ThreadKit tour: every figure below is measured as it happens.")
// `kill -USR1 <pid>` while the tour runs writes the dump, as it is then, to standard error.
Diagnostics.dumpOnSignal(SIGUSR1)

// MARK: - ThreadPool

step("ThreadPool: 24 tasks on a pool of 3 threads",
     shows: "a fixed pool reuses its few named threads; tasks queue, threads never exceed the size")
let pool = ThreadPool(name: "Demo", size: 3, keepAlive: .milliseconds(400), collectionInterval: .milliseconds(100))
let tasksPerThread = Mutex<[String: Int]>([:])
let batch = try (1...24).map { _ in
    try pool.schedule {
        Thread.sleep(forTimeInterval: 0.01)
        let name = Thread.current.name ?? "?"
        tasksPerThread.withLock { $0[name, default: 0] += 1 }
    }
}
for task in batch { task.wait() }
for (name, count) in tasksPerThread.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
    say("  \(name) ran \(count) tasks")
}
say("  statistics: \(pool.statistics)")
say("  never more than 3 threads: peak \(pool.statistics.peakThreads)")
say("  the kernel knows them by name too: \(kernelThreadNames(prefix: "Demo"))")

// MARK: - Log

step("Log: per-source logging, switched on and off",
     shows: "a disabled source costs nothing; an enabled one reaches the delegate with its thread's name")
Log.delegate = DemoLogDelegate()
let billing = Log.Source("Billing")
say("  Billing is off: this message is never even built:")
Log.log(billing, "charged the card")
Log.enable(billing)
say("  Billing is on:")
Log.log(billing, "charged the card")
Log.disable(billing)
say("  ThreadPool logging on while a second pool starts and is disposed:")
Log.enable(.threadPool)
let logged = ThreadPool(name: "Logged", size: 2)
try logged.schedule { Thread.sleep(forTimeInterval: 0.05) }.wait()
logged.dispose()
_ = logged.awaitTermination(timeout: .seconds(2))
Log.disable(.threadPool)
say("  ThreadPool logging off again.")

// MARK: - TimerThread

step("TimerThread: 8 delayed calls, each with its lateness",
     shows: "calls run in deadline order whatever order they were scheduled in, never early; cancel stops one")
let timer = TimerThread(name: "DemoTimer")
let scheduledAt = ContinuousClock.now
let allFired = DispatchGroup()
for delay in [350, 50, 200, 400, 100, 300, 150, 250] {
    let due = scheduledAt.advanced(by: .milliseconds(delay))
    allFired.enter()
    try timer.schedule(at: due) {
        say("  due at \(delay) ms: fired \(milliseconds(ContinuousClock.now - due)) late")
        allFired.leave()
    }
}
let cancelled = try timer.schedule(after: .milliseconds(120)) { say("  this never prints") }
say("  scheduled in the order 350 50 200 400 100 300 150 250 ms; a ninth, due at 120 ms, cancelled: \(cancelled.cancel())")
if allFired.wait(timeout: .now() + 5) == .timedOut { say("  not every call fired within 5 s") }
say("  calls still pending: \(timer.pendingCount)")
let ticks = Mutex(0)
let repeating = try timer.schedule(every: .milliseconds(100)) { ticks.withLock { $0 += 1 } }
Thread.sleep(forTimeInterval: 0.55)
repeating.cancel()
say("  a call every 100 ms ran \(ticks.withLock { $0 }) times in 550 ms, then was cancelled")
say("  disposing the timer; pending calls dropped: \(timer.dispose())")

step("TimerThread: a 60 ms call every 100 ms, fixed rate vs fixed delay",
     shows: "fixed rate keeps to the grid; fixed delay waits 100 ms after each run returns")
// Each on a timer of its own, so that neither call waits behind the other.
let rateTimer = TimerThread(name: "RateTimer")
let delayTimer = TimerThread(name: "DelayTimer")
let beatsFrom = ContinuousClock.now
let rateStarts = Mutex<[ContinuousClock.Instant]>([])
let delayStarts = Mutex<[ContinuousClock.Instant]>([])
try rateTimer.schedule(every: .milliseconds(100), spacing: .fixedRate) {
    rateStarts.withLock { $0.append(.now) }
    Thread.sleep(forTimeInterval: 0.06)
}
try delayTimer.schedule(every: .milliseconds(100), spacing: .fixedDelay) {
    delayStarts.withLock { $0.append(.now) }
    Thread.sleep(forTimeInterval: 0.06)
}
say("  both running for 750 ms…")
Thread.sleep(forTimeInterval: 0.75)
_ = rateTimer.dispose()
_ = delayTimer.dispose()
func offsets(_ starts: [ContinuousClock.Instant]) -> String {
    starts.map { offset($0, from: beatsFrom) }.joined()
}
say("  runs started at (ms after scheduling):")
say("  .fixedRate  \(offsets(rateStarts.withLock { $0 }))")
say("              on the grid (GCD's repeating timer, Java's scheduleAtFixedRate)")
say("  .fixedDelay \(offsets(delayStarts.withLock { $0 }))")
say("              100 ms after each run returned (NIO's scheduleRepeatedTask, Java's scheduleWithFixedDelay)")

// MARK: - Collection

step("ThreadPool: idle threads are collected",
     shows: "the Demo pool retires a thread idle for 400 ms (keepAlive); its collector runs every 100 ms")
for task in try (1...6).map({ _ in try pool.schedule { Thread.sleep(forTimeInterval: 0.02) } }) { task.wait() }
let idleFrom = ContinuousClock.now
var seen = (threads: pool.statistics.threads, kernel: kernelThreadNames(prefix: "Demo").count)
say("  after a batch:      \(pool.statistics); kernel: \(seen.kernel) threads")
// Looks every 20 ms and prints each change as it is seen (for at most 3 s).
while seen.threads > 0 || seen.kernel > 0, ContinuousClock.now - idleFrom < .seconds(3) {
    Thread.sleep(forTimeInterval: 0.02)
    let now = (threads: pool.statistics.threads, kernel: kernelThreadNames(prefix: "Demo").count)
    if now != seen {
        seen = now
        say("  \(milliseconds(ContinuousClock.now - idleFrom)) idle: \(pool.statistics); kernel: \(now.kernel) threads")
    }
}
pool.dispose()

// MARK: - ThrottledQueue

step("ThrottledQueue: 7 calls to an API that allows 1 per 200 ms, 3 per second",
     shows: "a queue that keeps both rules: 200 ms between starts, and a fourth start waits for the window")

/// A stand-in for a third-party API: it records when each call arrives, prints it, and counts the
/// calls that break its rules (closer than 200 ms to the previous one, or a fourth in any one second).
final class SimulatedAPI: Sendable {
    let minimumGap = Duration.milliseconds(200)
    let perSecond = 3
    private let calls = Mutex<[ContinuousClock.Instant]>([])

    func call() {
        let (number, first, now) = calls.withLock { calls in
            calls.append(.now)
            return (calls.count, calls[0], calls[calls.count - 1])
        }
        say("  call \(number) arrives at \(offset(now, from: first)) ms")
        Thread.sleep(forTimeInterval: 0.02)  // the request's own time
    }

    var times: [ContinuousClock.Instant] { calls.withLock { $0 } }

    var violations: Int {
        let times = self.times
        var count = 0
        for index in times.indices.dropFirst() where times[index] - times[index - 1] < minimumGap {
            count += 1
        }
        for index in times.indices.dropFirst(perSecond) where times[index] - times[index - perSecond] < .seconds(1) {
            count += 1
        }
        return count
    }
}

let api = SimulatedAPI()
let throttle = ThrottledQueue(label: "API", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
for _ in 1...7 { try throttle.async { api.call() } }
say("  7 calls queued at once; the queue starts them:")
throttle.waitUntilIdle()
let gaps = zip(api.times.dropFirst(), api.times).map { $0 - $1 }
say(String(format: "  smallest gap: %.3f ms; rule violations: %d", gaps.min()!.seconds * 1e3, api.violations))

// MARK: - DedicatedThread and DispatchMethod

step("DedicatedThread and DispatchMethod: one thread for a resource, a stored \"where\"",
     shows: "an actor whose every method runs on one named thread; a stored choice of where work runs; chains")

/// A stand-in for a database connection that must only ever be used from one thread.
actor Database {
    let thread = DedicatedThread(name: "SQLite")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
    private var rows: [String] = []

    func insert(_ row: String) -> String {
        rows.append(row)
        return "insert \(row.debugDescription) ran on \(Thread.current.name ?? "?")"
    }

    func count() -> String { "count = \(rows.count), on \(Thread.current.name ?? "?")" }
}

/// A type that lets its user choose where its work runs.
final class Thumbnailer: @unchecked Sendable {
    // Sendable for the demo: `dispatch` is only changed between calls, from one thread.
    var dispatch: DispatchMethod = .inline

    func render(_ name: String) -> String {
        (try? dispatch.execute { "\(name) rendered on \(Thread.current.name ?? "?")" }.wait()) ?? "refused"
    }
}

/// The steps of a chain, with the thread each ran on.
final class StepLog: Sendable {
    private let steps = Mutex<[String]>([])

    func note(_ step: String) {
        steps.withLock { $0.append("\(step) on \(Thread.current.name ?? "?")") }
    }

    var all: [String] { steps.withLock { $0 } }
}

func dedicatedThreadTour() {
    let done = DispatchSemaphore(value: 0)
    let database = Database()
    Task.detached {
        for row in ["alice", "bob", "carol"] { say("  \(await database.insert(row))") }
        await withTaskGroup(of: Void.self) { group in
            for caller in 1...8 { group.addTask { _ = await database.insert("caller \(caller)") } }
        }
        say("  8 concurrent callers later: \(await database.count())")
        done.signal()
    }
    done.wait()

    let workers = ThreadPool(name: "Workers", size: 2)
    let renderer = DedicatedThread(name: "Renderer")
    let thumbnails = Thumbnailer()
    say("  a stored DispatchMethod, changed at runtime:")
    say("    .inline:                 \(thumbnails.render("a.png"))")
    thumbnails.dispatch = .sync(on: .pool(workers))
    say("    .sync(on: .pool):        \(thumbnails.render("b.png"))")
    thumbnails.dispatch = .sync(on: .thread(renderer))
    say("    .sync(on: .thread):      \(thumbnails.render("c.png"))")

    let uploads = ThrottledQueue(label: "Uploads", interval: .milliseconds(50))
    let steps = StepLog()
    let chain = DispatchMethod.async(on: .pool(workers)).execute { steps.note("1. resize"); return 3 }
        .then(.async(on: .thread(renderer))) { pages in steps.note("2. render \(pages) pages"); return pages * 10 }
        .then(.async(on: .throttled(uploads))) { size in steps.note("3. upload \(size) kB") }
    _ = try? chain.wait()
    say("  a chain hopping pool → thread → throttled queue:")
    for entry in steps.all { say("    \(entry)") }

    let ledger = DispatchQueue(label: "Ledger")
    let nested = try? DispatchMethod.sync(on: .serialQueue(ledger)).execute {
        try DispatchMethod.sync(on: .thread(renderer)).execute {
            try DispatchMethod.sync(on: .serialQueue(ledger)).execute { "inner sync on Ledger ran inline" }.wait()
        }.wait()
    }.wait()
    say("  nested sync Ledger → Renderer → Ledger: \(nested ?? "failed")")
    say("    (DispatchQueue.sync onto Ledger from inside Ledger would have trapped)")

    workers.dispose()
    renderer.dispose()
    database.thread.dispose()
}
dedicatedThreadTour()

// MARK: - URLDispatcher

step("URLDispatcher: a client that stays inside an API's rules",
     shows: "per-endpoint limits, a stream that does not starve short requests, a real timeout, Retry-After")
do {
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        do {
            try await urlDispatcherTour()
        } catch {
            say("  the URL tour failed: \(error)")
        }
        finished.signal()
    }
    finished.wait()
}

// MARK: - ThreadKitRedis

step("Sharing one limit across processes (Redis)",
     shows: "three processes, one limit on Redis: at most 5 starts a second between them; one 429 pauses all three")
SharedLimitTour.run()
finishStep()

step("Diagnostics: what is running now",
     shows: "every component, each thread and what it runs, who waits for whom: `kill -USR1 \(getpid())` prints it too")
DiagnosticsTour.run()
finishStep()

say()
say("== Done " + String(repeating: "=", count: 62))
say("  the tour took \(milliseconds(ContinuousClock.now - tourStart))")

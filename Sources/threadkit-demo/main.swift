// threadkit-demo: a short tour of ThreadKit's parts, in about thirteen seconds.
import Foundation
import Synchronization
import ThreadKit

let tour = ContinuousClock.now

func heading(_ title: String) {
    print("\n== \(title) " + String(repeating: "=", count: max(0, 66 - title.count)))
}

func milliseconds(_ duration: Duration) -> String {
    String(format: "%.1f ms", Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15)
}

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
        print("   [log] \(record.threadName) \(record.source.name): \(record.message)")
    }
}

// MARK: - ThreadPool

heading("ThreadPool: 24 tasks on a pool of 3 threads")
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
    print("  \(name) ran \(count) tasks")
}
print("  statistics: \(pool.statistics)")
print("  never more than 3 threads: peak \(pool.statistics.peakThreads)")
print("  the kernel knows them by name too: \(kernelThreadNames(prefix: "Demo"))")

// MARK: - Log

heading("Log: per-source logging, switched on and off")
Log.delegate = DemoLogDelegate()
let billing = Log.Source("Billing")
print("  Billing is off: this message is never even built:")
Log.log(billing, "charged the card")
Log.enable(billing)
print("  Billing is on:")
Log.log(billing, "charged the card")
Log.disable(billing)
print("  ThreadPool logging on while a second pool starts and is disposed:")
Log.enable(.threadPool)
let logged = ThreadPool(name: "Logged", size: 2)
try logged.schedule { Thread.sleep(forTimeInterval: 0.05) }.wait()
logged.dispose()
_ = logged.awaitTermination(timeout: .seconds(2))
Log.disable(.threadPool)
print("  ThreadPool logging off again.")

// MARK: - TimerThread

heading("TimerThread: 8 delayed calls, each with its lateness")
let timer = TimerThread(name: "DemoTimer")
let scheduledAt = ContinuousClock.now
let firings = Mutex<[(delay: Int, lateness: Duration)]>([])
for delay in [350, 50, 200, 400, 100, 300, 150, 250] {
    let due = scheduledAt.advanced(by: .milliseconds(delay))
    try timer.schedule(at: due) {
        firings.withLock { $0.append((delay, ContinuousClock.now - due)) }
    }
}
let cancelled = try timer.schedule(after: .milliseconds(120)) { print("  this never prints") }
print("  a ninth call, due at 120 ms, cancelled: \(cancelled.cancel())")
Thread.sleep(forTimeInterval: 0.6)
for firing in firings.withLock({ $0 }) {
    print("  due at \(firing.delay) ms: fired \(milliseconds(firing.lateness)) late")
}
print("  calls still pending: \(timer.pendingCount)")
let ticks = Mutex(0)
let repeating = try timer.schedule(every: .milliseconds(100)) { ticks.withLock { $0 += 1 } }
Thread.sleep(forTimeInterval: 0.55)
repeating.cancel()
print("  a call every 100 ms ran \(ticks.withLock { $0 }) times in 550 ms, then was cancelled")
print("  disposing the timer; pending calls dropped: \(timer.dispose())")

heading("TimerThread: a 60 ms call every 100 ms, fixed rate vs fixed delay")
// Each on a timer of its own, so that neither call waits behind the other.
let rateTimer = TimerThread(name: "RateTimer")
let delayTimer = TimerThread(name: "DelayTimer")
let beatsFrom = ContinuousClock.now
let rateStarts = Mutex<[Duration]>([])
let delayStarts = Mutex<[Duration]>([])
try rateTimer.schedule(every: .milliseconds(100), spacing: .fixedRate) {
    rateStarts.withLock { $0.append(ContinuousClock.now - beatsFrom) }
    Thread.sleep(forTimeInterval: 0.06)
}
try delayTimer.schedule(every: .milliseconds(100), spacing: .fixedDelay) {
    delayStarts.withLock { $0.append(ContinuousClock.now - beatsFrom) }
    Thread.sleep(forTimeInterval: 0.06)
}
Thread.sleep(forTimeInterval: 0.75)
_ = rateTimer.dispose()
_ = delayTimer.dispose()
func offsets(_ starts: [Duration]) -> String {
    starts.map { String(format: "%4.0f", $0.seconds * 1e3) }.joined()
}
print("  runs started at (ms after scheduling):")
print("  .fixedRate  \(offsets(rateStarts.withLock { $0 }))")
print("              on the grid (GCD's repeating timer, Java's scheduleAtFixedRate)")
print("  .fixedDelay \(offsets(delayStarts.withLock { $0 }))")
print("              100 ms after each run returned (NIO's scheduleRepeatedTask, Java's scheduleWithFixedDelay)")

// MARK: - Collection

heading("ThreadPool: idle threads are collected")
print("  the Demo pool keeps an idle thread 400 ms; its collector runs every 100 ms")
for task in try (1...6).map({ _ in try pool.schedule { Thread.sleep(forTimeInterval: 0.02) } }) { task.wait() }
print("  after a batch:   \(pool.statistics); kernel: \(kernelThreadNames(prefix: "Demo").count) threads")
Thread.sleep(forTimeInterval: 0.2)
print("  0.2 s idle:      \(pool.statistics); kernel: \(kernelThreadNames(prefix: "Demo").count) threads")
Thread.sleep(forTimeInterval: 0.5)
print("  0.7 s idle:      \(pool.statistics); kernel: \(kernelThreadNames(prefix: "Demo").count) threads")
pool.dispose()

// MARK: - ThrottledQueue

heading("ThrottledQueue: 20 calls to an API that allows 1 per 200 ms, 3 per second")

/// A stand-in for a third-party API: it records when each call arrives and counts the calls that
/// break its rules (closer than 200 ms to the previous one, or a fourth in any one second).
final class SimulatedAPI: Sendable {
    let minimumGap = Duration.milliseconds(200)
    let perSecond = 3
    private let calls = Mutex<[ContinuousClock.Instant]>([])

    func call() {
        calls.withLock { $0.append(.now) }
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
for _ in 1...20 { try throttle.async { api.call() } }
print("  20 requests queued; waiting for the queue…")
throttle.waitUntilIdle()
let times = api.times
var line = "  call offsets (ms):"
for (index, time) in times.enumerated() {
    if index % 10 == 0 && index > 0 { print(line); line = "                    " }
    line += String(format: " %5.0f", (time - times[0]).seconds * 1e3)
}
print(line)
let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
print(String(format: "  smallest gap: %.3f ms; rule violations: %d", gaps.min()!.seconds * 1e3, api.violations))

// MARK: - DedicatedThread and DispatchMethod

heading("DedicatedThread and DispatchMethod: one thread for a resource, a stored \"where\"")

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
        for row in ["alice", "bob", "carol"] { print("  \(await database.insert(row))") }
        await withTaskGroup(of: Void.self) { group in
            for caller in 1...8 { group.addTask { _ = await database.insert("caller \(caller)") } }
        }
        print("  8 concurrent callers later: \(await database.count())")
        done.signal()
    }
    done.wait()

    let workers = ThreadPool(name: "Workers", size: 2)
    let renderer = DedicatedThread(name: "Renderer")
    let thumbnails = Thumbnailer()
    print("  a stored DispatchMethod, changed at runtime:")
    print("    .inline:                 \(thumbnails.render("a.png"))")
    thumbnails.dispatch = .sync(on: .pool(workers))
    print("    .sync(on: .pool):        \(thumbnails.render("b.png"))")
    thumbnails.dispatch = .sync(on: .thread(renderer))
    print("    .sync(on: .thread):      \(thumbnails.render("c.png"))")

    let uploads = ThrottledQueue(label: "Uploads", interval: .milliseconds(50))
    let steps = StepLog()
    let chain = DispatchMethod.async(on: .pool(workers)).execute { steps.note("1. resize"); return 3 }
        .then(.async(on: .thread(renderer))) { pages in steps.note("2. render \(pages) pages"); return pages * 10 }
        .then(.async(on: .throttled(uploads))) { size in steps.note("3. upload \(size) kB") }
    _ = try? chain.wait()
    print("  a chain hopping pool → thread → throttled queue:")
    for step in steps.all { print("    \(step)") }

    let ledger = DispatchQueue(label: "Ledger")
    let nested = try? DispatchMethod.sync(on: .serialQueue(ledger)).execute {
        try DispatchMethod.sync(on: .thread(renderer)).execute {
            try DispatchMethod.sync(on: .serialQueue(ledger)).execute { "inner sync on Ledger ran inline" }.wait()
        }.wait()
    }.wait()
    print("  nested sync Ledger → Renderer → Ledger: \(nested ?? "failed")")
    print("    (DispatchQueue.sync onto Ledger from inside Ledger would have trapped)")

    workers.dispose()
    renderer.dispose()
    database.thread.dispose()
}
dedicatedThreadTour()

// MARK: - URLDispatcher

heading("URLDispatcher: a client that stays inside an API's rules")
do {
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        do {
            try await urlDispatcherTour()
        } catch {
            print("  the URL tour failed: \(error)")
        }
        finished.signal()
    }
    finished.wait()
}

heading("Done")
print("  the tour took \(milliseconds(ContinuousClock.now - tour))")

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

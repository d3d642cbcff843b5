// The soak itself: starts the drivers, prints a report line every period, then stops the drivers,
// quiesces everything and checks the counts.
import Foundation
import Synchronization
import ThreadKit
import SeededRandom
import ToolHarness

/// What every driver shares: the parts' ledgers, the stop signal, the log book, and the one pool
/// that several throttled queues and the timers' hand-offs use.
final class Soak: Sendable {
    /// The most resident memory may grow past its size at the first report.
    static let residentGrowthLimit = 0.10

    let options: Options
    let pools = Ledger("pools")
    let timers = Ledger("timers")
    let queues = Ledger("throttled queues")
    let dedicated = Ledger("dedicated threads")
    let logs = Ledger("log")
    /// Runs the workers of several throttled queues, and the tasks timer calls hand on.
    let sharedPool = ThreadPool(
        name: "Soak shared", size: 4, keepAlive: .milliseconds(20), collectionInterval: .milliseconds(10))
    /// The tasks handed on to ``sharedPool`` (the queues' workers are the queues' business).
    let sharedPoolLedger: Ledger
    let logBook: LogBook
    private let stopping = Atomic<Bool>(false)

    init(options: Options) {
        self.options = options
        sharedPoolLedger = Ledger("pool Soak shared", parent: pools)
        logBook = LogBook(ledger: logs)
    }

    var parts: [Ledger] { [pools, timers, queues, dedicated, logs] }

    /// Whether the drivers should stop and quiesce.
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Makes a new counting delegate the log's delegate.
    func installLogDelegate() {
        Log.delegate = CountingLogDelegate(book: logBook)
        tally.add("log: delegates installed")
    }

    /// Submits a task to the shared pool, accounted in ``sharedPoolLedger``.
    func handOff() {
        let unit = Unit(sharedPoolLedger)
        do {
            try sharedPool.execute { unit.end(.ran) }
        } catch {
            unit.end(.refused)
            tally.add("shared pool refusals: \(reason(error))")
        }
    }

    // MARK: - Running

    /// Runs the soak; returns the process's exit status.
    func run() -> Int32 {
        // Before anything can log: no record ever reaches the console.
        installLogDelegate()
        let drivers = Self.drivers
        let heartbeats = drivers.map { Heartbeat(name: $0.name) }
        let watchdog = Watchdog(heartbeats: heartbeats) { [self] in outstandingReport() }
        printLine(
            "threadkit-soak: \(clockText(options.duration)) of \(drivers.count) drivers (\(drivers.map(\.name).joined(separator: ", "))), "
                + "a report every \(clockText(options.reportEvery)), seed \(options.seed), "
                + "\(ProcessInfo.processInfo.activeProcessorCount) cores, load \(ProcessReadings.loadAverage())")
        #if DEBUG
        printLine("warning: a debug build; soak the release build (swift build -c release)")
        #endif

        let started = ContinuousClock.now
        watchdog.start()
        // Each driver's seed is drawn from the soak's, in the drivers' order; its logger is its place.
        var seeds = SplitMix64(seed: options.seed)
        for (index, (driver, heartbeat)) in zip(drivers, heartbeats).enumerated() {
            let seed = seeds.next()
            let thread = Thread { [self] in driver.drive(self, heartbeat, seed: seed, logger: index + 1) }
            thread.name = "soak \(driver.name)"
            thread.start()
        }

        var firstResident: Int?
        var reported = Duration.zero
        while reported < options.duration {
            reported = min(reported + options.reportEvery, options.duration)
            sleep(for: started + reported - ContinuousClock.now)
            let resident = ProcessReadings.residentBytes()
            let baseline = firstResident ?? resident
            firstResident = baseline
            printLine(reportLine(at: reported, resident: resident, baseline: baseline))
            checkGrowth(of: resident, over: baseline, when: "at \(clockText(reported))")
        }

        let quiesceStarted = ContinuousClock.now
        watchdog.beginQuiesce("stopping the drivers")
        stopping.store(true, ordering: .releasing)
        while let running = heartbeats.first(where: { !$0.isFinished }) {
            watchdog.quiesceStage("waiting for driver \(running.name): \(running.currentActivity)")
            sleep(for: .milliseconds(5))
        }
        watchdog.quiesceStage("disposing the shared pool")
        sharedPool.dispose()
        if !sharedPool.awaitTermination(timeout: .seconds(30)) {
            violations.report("pool Soak shared did not terminate within 30 s of dispose(): \(sharedPool.statistics)")
        } else if !sharedPoolLedger.isSettled {
            violations.report("pool Soak shared, after dispose() and awaitTermination: \(sharedPoolLedger.counts.line)")
        }
        watchdog.quiesceStage("delivering the last log records")
        Log.disableAll()
        if !poll(timeout: .seconds(10), until: { logs.isSettled }) {
            violations.report("log: records built but not delivered 10 s after the last was logged: \(logs.counts.line)")
        }
        let quiesceTime = ContinuousClock.now - quiesceStarted
        watchdog.stop()

        let resident = ProcessReadings.residentBytes()
        let baseline = firstResident ?? resident
        checkGrowth(of: resident, over: baseline, when: "after the quiesce")
        for part in parts { checkBalance(part) }
        printSummary(
            elapsed: ContinuousClock.now - started, quiesceTime: quiesceTime, resident: resident,
            baseline: baseline, peaks: watchdog.peaks)
        return violations.count == 0 ? 0 : 1
    }

    /// Two pool drivers, a timer driver, two throttled-queue drivers, a log driver and a dedicated
    /// thread driver; each driver thread also logs numbered records as its own logger.
    private static let drivers: [any Driver] = [
        ChurnDriver<PoolUnderTest>(name: "pools-1", count: 1),
        ChurnDriver<PoolUnderTest>(name: "pools-2", count: 1),
        TimerDriver(name: "timers"),
        ChurnDriver<QueueUnderTest>(name: "queues-1", count: 3),
        ChurnDriver<QueueUnderTest>(name: "queues-2", count: 3),
        LogDriver(name: "log"),
        ChurnDriver<ThreadUnderTest>(name: "dedicated", count: 1),
    ]

    // MARK: - Checking

    /// After the quiesce every accepted unit must have ended exactly once.
    private func checkBalance(_ part: Ledger) {
        let counts = part.counts
        if counts.outstanding > 0 {
            violations.report("\(part.name): \(counts.outstanding) accepted tasks neither ran, were handed back nor were cancelled (\(counts.line))")
        } else if counts.outstanding < 0 {
            violations.report("\(part.name): \(-counts.outstanding) more ends than accepted tasks (\(counts.line))")
        }
    }

    private func checkGrowth(of resident: Int, over baseline: Int, when: String) {
        let limit = Double(baseline) * (1 + Self.residentGrowthLimit)
        if Double(resident) > limit {
            violations.report("resident memory \(when) is \(megabytes(resident)), \(growth(resident, over: baseline)) over the first report's \(megabytes(baseline)) (limit +\(Int(Self.residentGrowthLimit * 100)) %)")
        }
    }

    // MARK: - Reporting

    /// One line: elapsed, resident memory, live threads, and each part's counts.
    private func reportLine(at elapsed: Duration, resident: Int, baseline: Int) -> String {
        let parts = [("pools", pools), ("timers", timers), ("queues", queues), ("log", logs)]
            .map { name, ledger in "\(name) \(ledger.counts.line)" }
        return "[\(clockText(elapsed))] rss \(megabytes(resident)) (\(growth(resident, over: baseline))) threads \(ProcessReadings.threadCount()) | "
            + parts.joined(separator: " | ")
    }

    /// Each part's counts, for a hang report.
    private func outstandingReport() -> String {
        parts.map { "  \($0.name): \($0.counts.line)" }.joined(separator: "\n")
    }

    private func printSummary(
        elapsed: Duration, quiesceTime: Duration, resident: Int, baseline: Int, peaks: (residentBytes: Int, threads: Int)
    ) {
        printLine("== after \(clockText(elapsed)), quiesced in \(String(format: "%.2f s", quiesceTime.seconds))")
        let header = ["part", "accepted", "ran", "handed back", "cancelled", "outstanding", "refused", "repeat runs"]
        var rows = [header]
        for part in parts {
            let counts = part.counts
            rows.append([
                part.name, "\(counts.accepted)", "\(counts[.ran])", "\(counts[.handedBack])", "\(counts[.cancelled])",
                "\(counts.outstanding)", "\(counts[.refused])", "\(counts[.repeatRuns])",
            ])
        }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max()! }
        for row in rows {
            let cells = row.enumerated().map { column, cell in
                column == 0 ? cell.padding(toLength: widths[0], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[column] - cell.count) + cell
            }
            printLine("  " + cells.joined(separator: "  "))
        }
        printLine("  resident memory: \(megabytes(baseline)) at the first report, peak \(megabytes(peaks.residentBytes)), \(megabytes(resident)) after the quiesce (\(growth(resident, over: baseline)); limit +\(Int(Self.residentGrowthLimit * 100)) %)")
        printLine("  threads: peak \(peaks.threads), \(ProcessReadings.threadCount()) after the quiesce")
        printLine("  log records of ThreadKit's own sources delivered: \(logBook.componentRecordCount)")
        for (key, count) in tally.all {
            printLine("  \(key): \(count)")
        }
        if violations.count == 0 {
            printLine("PASS: every accepted task ran, was handed back or was cancelled exactly once; memory stayed flat")
        } else {
            printLine("FAIL: \(violations.count) violations; the first:")
            for message in violations.first.prefix(20) { printLine("  \(message)") }
        }
    }

    private func growth(_ resident: Int, over baseline: Int) -> String {
        guard baseline > 0 else { return "+0.0 %" }
        return String(format: "%+.1f %%", (Double(resident) / Double(baseline) - 1) * 100)
    }
}

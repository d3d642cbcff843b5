// Pools: made with every size, queue limit and overflow policy; driven with `execute`, `schedule`
// and `cancel()`, and with `run` from Swift tasks (some cancelled); then disposed gracefully or at
// once, checked, dropped, and replaced by a new pool. Two drivers churn them, one at a time, each
// living 20–500 ms.
import ThreadKit
import SeededRandom
import ToolHarness

/// One pool, from its creation to its checked end. Owned by one driver thread.
struct PoolUnderTest: Subject {
    let pool: ThreadPool
    let ledger: Ledger
    let retireAt: ContinuousClock.Instant
    private let soak: Soak
    /// Swift tasks calling `run` that have not returned.
    private let inFlight = InFlight()
    private var scheduled = RecentRing<(task: ScheduledTask, unit: Unit)>(capacity: 64)
    private var runs = RecentRing<Task<Void, Never>>(capacity: 32)
    private var isDisposed = false

    init(name: String, soak: Soak, random: inout SplitMix64) {
        let policy = [ThreadPool.OverflowPolicy.block, .reject, .runOnCaller].randomElement(using: &random)!
        pool = ThreadPool(
            name: name, size: Int.random(in: 1...4, using: &random),
            keepAlive: random.milliseconds(0...30), collectionInterval: random.milliseconds(1...20),
            queueLimit: random.chance(0.25) ? nil : Int.random(in: 1...8, using: &random), whenFull: policy)
        ledger = Ledger("pool \(pool.name)", parent: soak.pools)
        retireAt = .now + random.milliseconds(20...500)
        self.soak = soak
        tally.add("pools made with whenFull: .\(policy)")
    }

    var description: String {
        "pool '\(pool.name)' (size \(pool.size), queueLimit \(pool.queueLimit.map(String.init) ?? "none"), whenFull .\(pool.overflowPolicy))"
    }

    private enum Operation {
        case execute, schedule, cancel, run, cancelRun, wait, nested, rest
    }

    mutating func step(_ run: inout DriverRun) {
        let operation = run.random.weighted([
            Operation.execute: 30, .schedule: 25, .cancel: 15, .run: 10, .cancelRun: 4, .wait: 2, .nested: 2, .rest: 12,
        ])
        switch operation {
        case .execute:
            for _ in 0..<Int.random(in: 1...8, using: &run.random) { execute(.random(&run.random)) }
        case .schedule:
            for _ in 0..<Int.random(in: 1...8, using: &run.random) { schedule(.random(&run.random)) }
        case .cancel:
            for _ in 0..<Int.random(in: 1...4, using: &run.random) { cancelScheduled(&run.random) }
        case .run:
            self.run(.random(&run.random), cancelAtOnce: run.random.chance(0.1))
        case .cancelRun:
            runs.removeRandom(using: &run.random)?.cancel()
        case .wait:
            if let (task, _) = scheduled.randomElement(using: &run.random), !task.wait(timeout: .seconds(30)) {
                violations.report("\(self): a task neither ran nor was cancelled within 30 s of wait(timeout:)")
            }
        case .nested:
            executeNested()
        case .rest:
            // Long enough, now and then, for idle threads to be collected and new ones made.
            sleep(for: run.random.microseconds(200...3_000))
        }
    }

    // MARK: - Submitting

    private func execute(_ chore: Chore) {
        ledger.submit(chore, in: soak, through: { try pool.execute($0) }, refused: refused)
    }

    private mutating func schedule(_ chore: Chore) {
        if let accepted = ledger.submit(chore, in: soak, through: { try pool.schedule($0) }, refused: refused) {
            scheduled.append((accepted.handle, accepted.unit))
        }
    }

    private mutating func cancelScheduled(_ random: inout SplitMix64) {
        guard let (task, unit) = scheduled.removeRandom(using: &random), task.cancel() else { return }
        unit.end(.cancelled)
        if !task.isCancelled || task.cancel() {
            violations.report("\(self): after cancel() returned true, isCancelled is \(task.isCancelled) and a second cancel() returned true")
        }
    }

    /// `run` from a Swift task; a thrown `disposed` means the pool gave the work back unrun.
    private mutating func run(_ chore: Chore, cancelAtOnce: Bool) {
        let launched = inFlight.launch(limit: 32, unitIn: ledger) { [pool, soak, description] unit in
            do {
                try await pool.run {
                    unit.end(.ran)
                    chore.perform(in: soak)
                }
            } catch is CancellationError {
                unit.end(.cancelled)
            } catch ThreadPoolError.disposed {
                unit.end(.handedBack)
            } catch {
                unit.end(.refused)
                Self.classifyRefusal(error, by: pool, description: description, disposed: nil)
            }
        }
        guard let task = launched else { return }
        if cancelAtOnce {
            task.cancel()
        } else {
            runs.append(task)
        }
    }

    /// A task that submits another from a pool thread: with `.block` and a full queue it must run
    /// on that thread, not wait for a queue that only its own pool can empty.
    private func executeNested() {
        let unit = Unit(ledger)
        do {
            try pool.execute { [pool, ledger, description] in
                unit.end(.ran)
                let inner = Unit(ledger)
                do {
                    try pool.execute { inner.end(.ran) }
                } catch {
                    inner.end(.refused)
                    Self.classifyRefusal(error, by: pool, description: description, disposed: nil)
                }
            }
        } catch {
            unit.end(.refused)
            refused(error)
        }
    }

    private func refused(_ error: any Error) {
        Self.classifyRefusal(error, by: pool, description: description, disposed: isDisposed)
    }

    /// Tallies a refusal by its reason and reports the ones the pool's settings rule out.
    ///
    /// - Parameter disposed: Whether the driver had disposed the pool when it submitted, or `nil`
    ///   when that is unknown (a submission from a Swift task or a pool thread).
    private static func classifyRefusal(_ error: any Error, by pool: ThreadPool, description: String, disposed: Bool?) {
        switch error {
        case ThreadPoolError.disposed:
            tally.add("pool refusals: disposed")
            if disposed == false {
                violations.report("\(description) refused a task as disposed before it was disposed")
            }
        case ThreadPoolError.queueFull:
            tally.add("pool refusals: queue full")
            if pool.overflowPolicy != .reject {
                violations.report("\(description) refused a task as its queue was full, which only .reject may do")
            }
        default:
            // threadStartFailed, or a reason added later.
            tally.add("pool refusals: \(reason(error))")
        }
    }

    // MARK: - Retiring

    /// Queues up slow tasks, so that a dispose finds work waiting: to run it all, or to hand it back.
    private mutating func fill() {
        for _ in 0..<(pool.queueLimit ?? 16) + pool.size {
            schedule(.nap(.microseconds(200)))
        }
    }

    /// Fills the pool half the time, disposes it (gracefully or at once), waits for its threads and
    /// tasks, and checks that every task it accepted ran, was handed back or was cancelled.
    mutating func retire(_ run: inout DriverRun) {
        if run.random.chance(0.5) { fill() }
        isDisposed = true
        let disposesNow = run.random.chance(0.5)
        if disposesNow {
            let handedBack = pool.disposeNow()
            ledger.record(.handedBack, count: handedBack.count)
            tally.add("pools disposed with disposeNow()")
            if handedBack.contains(where: { !$0.isCancelled }) {
                violations.report("\(self): disposeNow() handed back a task whose isCancelled is false")
            }
        } else {
            pool.dispose()
            tally.add("pools disposed with dispose()")
        }
        let probe = Unit(ledger)
        do {
            try pool.execute { probe.end(.ran) }
            violations.report("\(self): accepted a task after it was disposed")
        } catch {
            probe.end(.refused)
        }
        let how = disposesNow ? "disposeNow()" : "dispose()"
        guard pool.awaitTermination(timeout: .seconds(20)) else {
            violations.report("\(self): its threads did not exit within 20 s of \(how): \(pool.statistics)")
            return
        }
        guard inFlight.awaitNone(of: self) else { return }
        let counts = ledger.counts
        if counts.outstanding != 0 {
            violations.report("\(self), after \(how) and awaitTermination: \(counts.line)")
        }
        let statistics = pool.statistics
        if statistics.threads != 0 || statistics.queuedTasks != 0 {
            violations.report("\(self): terminated with \(statistics.threads) threads and \(statistics.queuedTasks) queued tasks")
        }
        _ = scheduled.removeAll()
        _ = runs.removeAll()
    }
}

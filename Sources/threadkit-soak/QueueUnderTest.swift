// Throttled queues: gaps of 0–2 ms, some with a rate limit, on a pool of their own, on a private
// pool the soak disposes, or on the soak's shared pool; driven with `async`, `sync` (nested ones
// too), `run` from Swift tasks, `cancelAll()`, `pause(for:)`/`resume()`, interval changes and
// `waitUntilIdle()`, and replaced every second or so. Two drivers churn them, three at a time.
import ThreadKit
import SeededRandom
import ToolHarness

/// One throttled queue, from its creation to its checked end. Owned by one driver thread.
///
/// A queue either uses `cancelAll()` or cancels its `run` callers' Swift tasks, never both:
/// `cancelAll()` counts the `run` callers it removes, who then throw `CancellationError` too, and
/// a caller cancelled both ways could not tell which one removed it.
struct QueueUnderTest: Subject {
    private enum Workers {
        /// The queue's own pool of one thread (no `pool:` argument).
        case own
        /// A pool made for this queue, disposed when the queue retires.
        case privatePool(ThreadPool)
        /// The soak's shared pool.
        case shared

        var kind: String {
            switch self {
            case .own: "its own pool"
            case .privatePool: "a private pool"
            case .shared: "the shared pool"
            }
        }
    }

    let queue: ThrottledQueue
    let retireAt: ContinuousClock.Instant
    private let workers: Workers
    private let ledger: Ledger
    private let soak: Soak
    private let usesCancelAll: Bool
    /// Swift tasks calling `run` that have not returned.
    private let inFlight = InFlight()
    private var runs = RecentRing<Task<Void, Never>>(capacity: 16)

    init(name: String, soak: Soak, random: inout SplitMix64) {
        let label = name
        switch Int.random(in: 0..<3, using: &random) {
        case 0: workers = .own
        case 1:
            workers = .privatePool(ThreadPool(
                name: label, size: Int.random(in: 1...2, using: &random),
                keepAlive: random.milliseconds(0...20), collectionInterval: random.milliseconds(1...10)))
        default: workers = .shared
        }
        let pool: ThreadPool? =
            switch workers {
            case .own: nil
            case .privatePool(let pool): pool
            case .shared: soak.sharedPool
            }
        queue = ThrottledQueue(
            label: label, interval: random.microseconds(0...2_000),
            monitor: random.chance(0.5) ? .concurrent : .serial,
            mutability: [ThrottledQueue.Mutability.all, .defaultOnly, .none].randomElement(using: &random)!,
            limit: random.chance(0.3)
                ? .rate(Int.random(in: 1...4, using: &random), per: random.milliseconds(1...10)) : nil,
            pool: pool)
        retireAt = .now + random.milliseconds(200...3_000)
        ledger = Ledger("queue '\(label)'", parent: soak.queues)
        self.soak = soak
        usesCancelAll = random.chance(0.5)
        tally.add("throttled queues made on \(workers.kind)")
    }

    var description: String {
        "queue '\(queue.label)' (\(workers.kind), .\(queue.monitor), limit \(queue.limit.map(String.init(describing:)) ?? "none"))"
    }

    private enum Operation {
        case async, asyncWithInterval, sync, nestedSync, run, cancelRun, cancelAll, pause, resume, changeInterval,
            waitUntilIdle, rest
    }

    mutating func step(_ run: inout DriverRun) {
        let operation = run.random.weighted([
            Operation.async: 30, .asyncWithInterval: 8, .sync: 8, .nestedSync: 2, .run: 10, .cancelRun: 3,
            .cancelAll: 3, .pause: 2, .resume: 2, .changeInterval: 2, .waitUntilIdle: 2, .rest: 28,
        ])
        switch operation {
        case .async:
            guard queue.pendingCount < 48 else { return }
            for _ in 0..<Int.random(in: 1...4, using: &run.random) {
                async(.random(&run.random, longestNap: .microseconds(200)), interval: nil)
            }
        case .asyncWithInterval:
            async(.random(&run.random, longestNap: .microseconds(200)), interval: run.random.microseconds(0...2_000))
        case .sync:
            sync(interval: run.random.chance(0.5) ? run.random.microseconds(0...2_000) : nil)
        case .nestedSync:
            asyncWithNestedSync()
        case .run:
            self.run(cancelAtOnce: !usesCancelAll && run.random.chance(0.1))
        case .cancelRun:
            if !usesCancelAll { runs.removeRandom(using: &run.random)?.cancel() }
        case .cancelAll:
            if usesCancelAll { ledger.record(.cancelled, count: queue.cancelAll()) }
        case .pause:
            queue.pause(for: run.random.milliseconds(0...20))
        case .resume:
            queue.resume()
        case .changeInterval:
            queue.interval = run.random.microseconds(0...2_000)
        case .waitUntilIdle:
            queue.waitUntilIdle()
        case .rest:
            sleep(for: run.random.microseconds(100...2_000))
        }
    }

    // MARK: - Submitting

    private func async(_ chore: Chore, interval: Duration?) {
        ledger.submit(chore, in: soak, through: { [queue] work in
            if let interval {
                try queue.async(interval: interval, work)
            } else {
                try queue.async(work)
            }
        }, refused: refused)
    }

    private func sync(interval: Duration?) {
        let unit = Unit(ledger)
        if let interval {
            queue.sync(interval: interval) { unit.end(.ran) }
        } else {
            queue.sync { unit.end(.ran) }
        }
    }

    /// A task that calls `sync` on its own queue: it must run at once on the task's thread.
    private func asyncWithNestedSync() {
        let unit = Unit(ledger)
        do {
            try queue.async { [queue, ledger] in
                unit.end(.ran)
                let inner = Unit(ledger)
                queue.sync { inner.end(.ran) }
            }
        } catch {
            unit.end(.refused)
            refused(error)
        }
    }

    private mutating func run(cancelAtOnce: Bool) {
        let launched = inFlight.launch(limit: 16, unitIn: ledger) { [queue, usesCancelAll, description] unit in
            do {
                try await queue.run {
                    unit.end(.ran)
                    await Task.yield()
                }
            } catch is CancellationError {
                // Where the queue uses cancelAll(), its return value has counted this caller.
                unit.end(.cancelled, alreadyCounted: usesCancelAll)
            } catch {
                unit.end(.refused)
                Self.refused(error, by: description)
            }
        }
        guard let task = launched else { return }
        if cancelAtOnce {
            task.cancel()
        } else if !usesCancelAll {
            runs.append(task)
        }
    }

    private func refused(_ error: any Error) {
        Self.refused(error, by: description)
    }

    /// Tallies a refusal; a queue refuses as disposed only when its pool is, which the soak does
    /// only once the queue has retired.
    private static func refused(_ error: any Error, by description: String) {
        tally.add("throttled queue refusals: \(reason(error))")
        if case ThreadPoolError.disposed = error {
            violations.report("\(description) refused a task as disposed, though its pool is live")
        }
    }

    // MARK: - Retiring

    /// Waits for the `run` callers and for the queue to be idle, checks that every task it accepted
    /// ran or was cancelled, and disposes its private pool.
    mutating func retire(_ run: inout DriverRun) {
        _ = runs.removeAll()
        guard inFlight.awaitNone(of: self) else { return }
        queue.waitUntilIdle()
        let counts = ledger.counts
        if counts.outstanding != 0 {
            violations.report("\(self), after waitUntilIdle(): \(counts.line)")
        }
        if queue.pendingCount != 0 {
            violations.report("\(self): pendingCount is \(queue.pendingCount) after waitUntilIdle()")
        }
        if case .privatePool(let pool) = workers {
            pool.dispose()
            if !pool.awaitTermination(timeout: .seconds(20)) {
                violations.report("\(self): its private pool did not terminate within 20 s of dispose(): \(pool.statistics)")
            }
        }
    }
}

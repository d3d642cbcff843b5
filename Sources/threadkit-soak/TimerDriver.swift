// Timers: `TimerThread.shared` and a private `TimerThread(name:)` that is disposed and replaced
// every second or so; one-shot calls (after a delay, at an instant, far in the future) and
// repeating ones, cancelled one by one, by tag with `cancelAll(tag:)`, and by `dispose()`.
import ThreadKit
import SeededRandom
import ToolHarness

/// Drives the shared timer and a succession of private ones, and ends an epoch of tagged calls
/// every 50 ms–1 s.
struct TimerDriver: Driver {
    let name: String

    struct Timers {
        var shared: TimerUnderTest
        var privates: Generations<TimerUnderTest>
        var nextEpochAt: ContinuousClock.Instant
    }

    func setUp(_ run: inout DriverRun) -> Timers {
        Timers(
            shared: TimerUnderTest(shared: run.soak), privates: Generations(1, of: name, &run),
            nextEpochAt: .now + run.random.milliseconds(50...1_000))
    }

    /// Steps the shared timer or the private one (retiring it when its time is up), half and half.
    func step(_ timers: inout Timers, _ run: inout DriverRun) {
        if run.random.chance(0.5) {
            timers.shared.step(&run)
        } else {
            timers.privates.step(&run)
        }
        let now = ContinuousClock.now
        if now >= timers.nextEpochAt {
            timers.shared.endEpoch()
            timers.privates.forEach { $0.endEpoch() }
            timers.nextEpochAt = now + run.random.milliseconds(50...1_000)
        }
    }

    func quiesce(_ timers: inout Timers, _ run: inout DriverRun) {
        timers.privates.retireAll(&run)
        run.doing("settling TimerThread.shared")
        timers.shared.settle()
    }
}

/// A tag for `cancelAll(tag:)`: each timer's calls of one epoch share one.
private struct EpochTag: Hashable, Sendable {
    let timer: String
    let epoch: Int
}

/// One timer and the handles of its recent calls. Owned by one driver thread.
struct TimerUnderTest: Subject {
    let timer: TimerThread
    let name: String
    let ledger: Ledger
    /// When a private timer is disposed and replaced; never for the shared one.
    let retireAt: ContinuousClock.Instant
    private let soak: Soak
    private let isShared: Bool
    private var oneShots = RecentRing<(handle: TimerHandle, unit: Unit)>(capacity: 64)
    /// Repeating calls never end by themselves: one evicted from here is cancelled.
    private var repeating = RecentRing<(handle: TimerHandle, unit: Unit)>(capacity: 8)
    /// Runs of repeating calls under way, to tell whether one overlapped a `dispose()`.
    private let repeatRunsUnderWay = InFlight()
    private var epoch = 0

    init(shared soak: Soak) {
        timer = .shared
        name = "TimerThread.shared"
        ledger = Ledger(name, parent: soak.timers)
        retireAt = .now + .seconds(365 * 24 * 3_600)
        self.soak = soak
        isShared = true
    }

    /// A private timer, disposed and replaced after 0.1–2 s.
    init(name: String, soak: Soak, random: inout SplitMix64) {
        timer = TimerThread(name: name)
        self.name = "timer '\(name)'"
        ledger = Ledger(self.name, parent: soak.timers)
        retireAt = .now + random.milliseconds(100...2_000)
        self.soak = soak
        isShared = false
        tally.add("private timers made")
    }

    var description: String { name }

    private var tag: EpochTag { EpochTag(timer: name, epoch: epoch) }

    private enum Operation {
        case soon, at, far, every, cancel, cancelRepeating, rest
    }

    mutating func step(_ run: inout DriverRun) {
        let operation = run.random.weighted([
            Operation.soon: 45, .at: 5, .far: 4, .every: 3, .cancel: 20, .cancelRepeating: 2, .rest: 21,
        ])
        switch operation {
        case .soon:
            let tag: EpochTag? = run.random.chance(0.3) ? self.tag : nil
            let delay = run.random.microseconds(0...20_000)
            scheduleOnce(chore(&run.random)) { timer, work in try timer.schedule(after: delay, tag: tag, work) }
        case .at:
            let deadline = ContinuousClock.now + run.random.microseconds(0...20_000)
            scheduleOnce(chore(&run.random)) { timer, work in try timer.schedule(at: deadline, work) }
        case .far:
            // Never due: ended by cancel(), by cancelAll(tag:) at the end of the epoch, or by dispose().
            let tag = self.tag
            scheduleOnce(.nothing) { timer, work in try timer.schedule(after: .seconds(3_600), tag: tag, work) }
        case .every:
            let nap: Duration = run.random.chance(0.3) ? run.random.microseconds(0...200) : .zero
            scheduleRepeating(every: run.random.microseconds(500...20_000), nap: nap, tag: run.random.chance(0.5) ? tag : nil)
        case .cancel:
            for _ in 0..<Int.random(in: 1...4, using: &run.random) {
                if let call = oneShots.removeRandom(using: &run.random) { cancel(call) }
            }
        case .cancelRepeating:
            if let call = repeating.removeRandom(using: &run.random) { cancel(call) }
        case .rest:
            sleep(for: run.random.microseconds(100...2_000))
        }
    }

    /// What a one-shot call does: mostly nothing, sometimes log, sometimes hand a task to the shared pool.
    private func chore(_ random: inout SplitMix64) -> Chore {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<5: .log
        case 5..<10: .handOff
        default: .nothing
        }
    }

    private mutating func scheduleOnce(
        _ chore: Chore, _ submit: (TimerThread, @escaping @Sendable () -> Void) throws -> TimerHandle
    ) {
        if let accepted = ledger.submit(chore, in: soak, through: { [timer] in try submit(timer, $0) }, refused: refused) {
            oneShots.append(accepted)
        }
    }

    /// Schedules a repeating call whose runs last `nap`: long enough, now and then, for a cancel,
    /// a `cancelAll(tag:)` or a `dispose()` to find it running.
    private mutating func scheduleRepeating(every interval: Duration, nap: Duration, tag: EpochTag?) {
        let unit = Unit(ledger)
        do {
            let handle = try timer.schedule(every: interval, tag: tag) { [repeatRunsUnderWay] in
                repeatRunsUnderWay.enter()
                unit.recordRepeatRun()
                sleep(for: nap)
                repeatRunsUnderWay.leave()
            }
            if let evicted = repeating.append((handle, unit)) { cancel(evicted) }
        } catch {
            unit.end(.refused)
            refused(error)
        }
    }

    /// Cancels one call; `true` from `cancel()` ends its unit, and a second `cancel()` must say `false`.
    private func cancel(_ call: (handle: TimerHandle, unit: Unit)) {
        guard call.handle.cancel() else { return }
        call.unit.end(.cancelled)
        if !call.handle.isCancelled || call.handle.cancel() {
            violations.report("\(name): after cancel() returned true, isCancelled is \(call.handle.isCancelled) and a second cancel() returned true")
        }
    }

    private func refused(_ error: any Error) {
        switch error {
        case TimerThreadError.disposed:
            tally.add("timer refusals: disposed")
            violations.report("\(name) refused a call as disposed before it was disposed")
        default:
            // The timer's thread could not start, or a reason added later.
            tally.add("timer refusals: \(reason(error))")
        }
    }

    /// Cancels the epoch's tagged calls, one-shot and repeating, and starts the next epoch.
    mutating func endEpoch() {
        ledger.record(.cancelled, count: timer.cancelAll(tag: tag))
        epoch += 1
    }

    /// Disposes a private timer, counting the calls it drops, and checks that every call it
    /// accepted ran or was cancelled (a call running during `dispose()` may still finish).
    mutating func retire(_ run: inout DriverRun) {
        precondition(!isShared, "TimerThread.shared is never disposed")
        let dropped = timer.dispose()
        // No run starts after dispose() returns: one under way now overlapped it.
        let runOverlappedDispose = repeatRunsUnderWay.count > 0
        ledger.record(.cancelled, count: dropped)
        let probe = Unit(ledger)
        do {
            try timer.schedule(after: .zero) { probe.end(.ran) }
            violations.report("\(name): accepted a call after dispose()")
        } catch {
            probe.end(.refused)
        }
        if timer.dispose() != 0 {
            violations.report("\(name): a second dispose() dropped calls")
        }
        if !poll(timeout: .seconds(5), until: { ledger.isSettled }) {
            let overlap = runOverlappedDispose ? "; a repeating call was running during dispose()" : ""
            violations.report("\(name): dispose() returned \(dropped); 5 s later \(ledger.counts.line)\(overlap)")
        }
        _ = oneShots.removeAll()
        _ = repeating.removeAll()
        tally.add("private timers disposed")
    }

    /// Ends the shared timer's part in the soak: cancels the repeating calls and the epoch's
    /// tagged calls, then waits for the one-shot calls still due (at most 20 ms away).
    mutating func settle() {
        for call in repeating.removeAll() { cancel(call) }
        endEpoch()
        if !poll(timeout: .seconds(10), until: { ledger.isSettled }) {
            violations.report("\(name): 10 s after its last call was due: \(ledger.counts.line)")
        }
        _ = oneShots.removeAll()
    }
}

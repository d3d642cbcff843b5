// Timers: `TimerThread.shared` and a private `TimerThread(name:)` that is disposed and replaced
// every second or so; one-shot calls (after a delay, at an instant, far in the future) and
// repeating ones, cancelled one by one, by tag with `cancelAll(tag:)`, and by `dispose()`.
import ThreadKit
import SeededRandom

/// Drives the shared timer and a succession of private ones.
struct TimerDriver: Driver {
    let name: String
    let seed: UInt64
    let logger: Int

    func drive(_ soak: Soak, _ heartbeat: Heartbeat) {
        var random = SplitMix64(seed: seed)
        var sequence = LogSequence(logger: logger)
        var shared = TimerUnderTest(shared: soak)
        var generation = 1
        var privateTimer = TimerUnderTest(private: "Soak timer \(name)#\(generation)", soak: soak)
        var retirePrivateAt = ContinuousClock.now + random.milliseconds(100...2_000)
        var nextEpochAt = ContinuousClock.now + random.milliseconds(50...1_000)
        heartbeat.doing("scheduling and cancelling timer calls")
        while !soak.isStopping {
            if random.chance(0.5) {
                shared.step(&random)
            } else {
                privateTimer.step(&random)
            }
            let now = ContinuousClock.now
            if now >= nextEpochAt {
                shared.endEpoch()
                privateTimer.endEpoch()
                nextEpochAt = now + random.milliseconds(50...1_000)
            }
            if now >= retirePrivateAt {
                heartbeat.doing("disposing \(privateTimer.name)")
                privateTimer.retire()
                Log.log(.soak, sequence.next(soak.logs))
                generation += 1
                privateTimer = TimerUnderTest(private: "Soak timer \(name)#\(generation)", soak: soak)
                retirePrivateAt = now + random.milliseconds(100...2_000)
                heartbeat.doing("scheduling and cancelling timer calls")
            }
            heartbeat.beat()
        }
        heartbeat.doing("disposing \(privateTimer.name)")
        privateTimer.retire()
        heartbeat.doing("settling TimerThread.shared")
        shared.settle()
        heartbeat.finish()
    }
}

/// A tag for `cancelAll(tag:)`: each timer's calls of one epoch share one.
private struct EpochTag: Hashable, Sendable {
    let timer: String
    let epoch: Int
}

/// One timer and the handles of its recent calls. Owned by one driver thread.
private struct TimerUnderTest {
    let timer: TimerThread
    let name: String
    let ledger: Ledger
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
        self.soak = soak
        isShared = true
    }

    init(private name: String, soak: Soak) {
        timer = TimerThread(name: name)
        self.name = "timer '\(name)'"
        ledger = Ledger(self.name, parent: soak.timers)
        self.soak = soak
        isShared = false
        tally.add("private timers made")
    }

    private var tag: EpochTag { EpochTag(timer: name, epoch: epoch) }

    private enum Operation {
        case soon, at, far, every, cancel, cancelRepeating, rest
    }

    mutating func step(_ random: inout SplitMix64) {
        let operation = random.weighted([
            Operation.soon: 45, .at: 5, .far: 4, .every: 3, .cancel: 20, .cancelRepeating: 2, .rest: 21,
        ])
        switch operation {
        case .soon:
            let tag: EpochTag? = random.chance(0.3) ? self.tag : nil
            let delay = random.microseconds(0...20_000)
            scheduleOnce(chore(&random)) { timer, work in try timer.schedule(after: delay, tag: tag, work) }
        case .at:
            let deadline = ContinuousClock.now + random.microseconds(0...20_000)
            scheduleOnce(chore(&random)) { timer, work in try timer.schedule(at: deadline, work) }
        case .far:
            // Never due: ended by cancel(), by cancelAll(tag:) at the end of the epoch, or by dispose().
            let tag = self.tag
            scheduleOnce(.nothing) { timer, work in try timer.schedule(after: .seconds(3_600), tag: tag, work) }
        case .every:
            let nap: Duration = random.chance(0.3) ? random.microseconds(0...200) : .zero
            scheduleRepeating(every: random.microseconds(500...20_000), nap: nap, tag: random.chance(0.5) ? tag : nil)
        case .cancel:
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                if let call = oneShots.removeRandom(using: &random) { cancel(call) }
            }
        case .cancelRepeating:
            if let call = repeating.removeRandom(using: &random) { cancel(call) }
        case .rest:
            sleep(random.microseconds(100...2_000))
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
        let unit = Unit(ledger)
        do {
            let handle = try submit(timer) { [soak] in
                unit.end(.ran)
                chore.perform(in: soak)
            }
            oneShots.append((handle, unit))
        } catch {
            refused(unit, error)
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
                sleep(nap)
                repeatRunsUnderWay.leave()
            }
            if let evicted = repeating.append((handle, unit)) { cancel(evicted) }
        } catch {
            refused(unit, error)
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

    private func refused(_ unit: Unit, _ error: any Error) {
        unit.end(.refused)
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
    mutating func retire() {
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

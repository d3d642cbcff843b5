// Dedicated threads and dispatch methods: a DedicatedThread driven with `execute` (each closure
// checks that it runs on its thread, in the order submitted), `sync` (nested ones too, through
// `DispatchMethod.sync`), `run` from Swift tasks, `pause()`/`resume()`, and replaced every second
// or so by `dispose()` or `disposeNow()`; and ExecutionChains whose steps hop between the thread,
// the soak's shared pool and a serial DispatchQueue, some of them cancelled midway. One driver
// churns them, one at a time.
import Dispatch
import Synchronization
import ThreadKit
import SeededRandom
import ToolHarness

/// What runs on one dedicated thread and nowhere else: the submission order it has seen.
private final class ThreadOrder: @unchecked Sendable {
    // Sendable: `lastSeen` is read and written only by closures running on the one thread, one at a time.
    var lastSeen = -1
}

/// One dedicated thread, from its creation to its checked end. Owned by one driver thread.
struct ThreadUnderTest: Subject {
    let thread: DedicatedThread
    /// The serial queue of the chains' third steps.
    private let queue: DispatchQueue
    let retireAt: ContinuousClock.Instant
    private let ledger: Ledger
    private let soak: Soak
    private let order = ThreadOrder()
    private var nextNumber = 0
    /// Swift tasks calling `run` that have not returned.
    private let inFlight = InFlight()

    init(name: String, soak: Soak, random: inout SplitMix64) {
        thread = DedicatedThread(name: name)
        queue = DispatchQueue(label: "\(name) serial")
        retireAt = .now + random.milliseconds(200...2_000)
        ledger = Ledger("DedicatedThread '\(name)'", parent: soak.dedicated)
        self.soak = soak
        tally.add("dedicated threads made")
    }

    var description: String { "DedicatedThread '\(thread.name)'" }

    private enum Operation { case execute, sync, nestedSync, run, pause, rest }

    /// One step in ten is a chain; the others call the thread.
    mutating func step(_ run: inout DriverRun) {
        if run.random.chance(0.1) {
            run.doing("a chain over \(self), the shared pool and a serial queue")
            chain(&run.random)
            run.doing("driving \(self)")
            return
        }
        switch run.random.weighted([Operation.execute: 50, .sync: 12, .nestedSync: 4, .run: 10, .pause: 2, .rest: 22]) {
        case .execute:
            guard thread.pendingCount < 64 else { return }
            for _ in 0..<Int.random(in: 1...8, using: &run.random) {
                execute(.random(&run.random, longestNap: .microseconds(100)))
            }
        case .sync:
            let unit = Unit(ledger)
            thread.sync { [thread, description] in
                if !thread.isCurrent { violations.report("\(description): a sync closure ran off the thread") }
                unit.end(.ran)
            }
        case .nestedSync:
            execute(.nothing) { [thread, ledger, description] in
                // From the thread itself: both run inline, at once.
                let inner = Unit(ledger), chained = Unit(ledger)
                thread.sync { inner.end(.ran) }
                DispatchMethod.sync(on: .thread(thread)).execute { chained.end(.ran) }
                if !thread.isCurrent { violations.report("\(description): a nested sync moved off the thread") }
            }
        case .run:
            self.run()
        case .pause:
            thread.pause()
            sleep(for: run.random.microseconds(0...2_000))
            thread.resume()
        case .rest:
            sleep(for: run.random.microseconds(50...1_000))
        }
    }

    /// Submits a closure that checks its thread and its place in the submission order.
    private mutating func execute(_ chore: Chore, then more: (@Sendable () -> Void)? = nil) {
        let unit = Unit(ledger)
        let number = nextNumber
        nextNumber += 1
        do {
            try thread.execute { [thread, order, soak, description] in
                if !thread.isCurrent { violations.report("\(description): an execute closure ran off the thread") }
                if number <= order.lastSeen {
                    violations.report("\(description): closure \(number) ran after closure \(order.lastSeen)")
                }
                order.lastSeen = number
                unit.end(.ran)
                chore.perform(in: soak)
                more?()
            }
        } catch {
            unit.end(.refused)
            violations.report("\(description) refused a closure before it was disposed: \(error)")
        }
    }

    private func run() {
        inFlight.launch(limit: 16, unitIn: ledger) { [thread, description] unit in
            do {
                try await thread.run {
                    if !thread.isCurrent { violations.report("\(description): run's work ran off the thread") }
                    unit.end(.ran)
                }
            } catch {
                // The thread retires only once every run call has returned: nothing refuses or drops one.
                unit.end(.refused)
                violations.report("\(description): run threw \(error)")
            }
        }
    }

    /// A chain of three steps over the thread, the shared pool and `queue`, passing a value along,
    /// each step counted; or, sometimes, one cancelled once its first step has started, whose steps
    /// are not counted but must not begin after `cancel()` returned. Waits for the chain's end.
    ///
    /// A step begins when the chain lets it (under its lock) and its code runs a moment later, so a
    /// thread preempted in between enters the step's code after `cancel()` returned although the
    /// step began before. Steps run one after another, so at most one step can be in that moment:
    /// a chain that lets a step begin after `cancel()` returned shows as two steps entered since.
    private func chain(_ random: inout SplitMix64) {
        let willCancel = random.chance(0.3)
        let steps = willCancel ? nil : (Unit(ledger), Unit(ledger), Unit(ledger))
        let entered = Atomic<Int>(0)
        let description = description
        @Sendable func starting(_ unit: Unit?) {
            entered.add(1, ordering: .sequentiallyConsistent)
            unit?.end(.ran)
        }
        let last = DispatchMethod.async(on: .thread(thread)).execute { () -> Int in
            starting(steps?.0)
            return 1
        }
        .then(.async(on: .pool(soak.sharedPool))) { value -> Int in
            starting(steps?.1)
            return value + 1
        }
        .then(.sync(on: .serialQueue(queue))) { value -> Int in
            starting(steps?.2)
            return value * 10
        }
        var enteredBeforeCancel: Int?
        if willCancel {
            _ = poll(timeout: .seconds(20)) { entered.load(ordering: .sequentiallyConsistent) > 0 }
            last.cancel()
            enteredBeforeCancel = entered.load(ordering: .sequentiallyConsistent)
        }
        do {
            let value = try last.wait()
            if value != 20 { violations.report("\(description): a chain ended with \(value), not 20") }
        } catch is CancellationError where willCancel {
            tally.add("chains cancelled midway")
            // The chain has failed; a step still running ends soon, and none may begin.
            if let before = enteredBeforeCancel {
                _ = poll(timeout: .milliseconds(10)) { entered.load(ordering: .sequentiallyConsistent) > before + 1 }
                let after = entered.load(ordering: .sequentiallyConsistent)
                if after > before + 1 {
                    violations.report("\(description): a chain step began after cancel() returned (\(before) steps entered before, \(after) after)")
                }
            }
        } catch {
            violations.report("\(description): a chain failed with \(error)")
        }
    }

    /// Waits for the `run` callers (a Swift task may start its call late, and a call refused
    /// after the dispose could not be told from one the dispose dropped), disposes the thread
    /// (draining its queue, or dropping it and counting the drops) and checks that every closure
    /// it accepted ran or was dropped.
    mutating func retire(_ run: inout DriverRun) {
        guard inFlight.awaitNone(of: self) else { return }
        if run.random.chance(0.5) {
            thread.dispose()
        } else {
            // Dropped closures never run: the count returned stands for their units.
            ledger.record(.handedBack, count: thread.disposeNow())
        }
        guard thread.awaitTermination(timeout: .seconds(20)) else {
            violations.report("\(self): the thread did not end within 20 s of its dispose")
            return
        }
        if thread.pendingCount != 0 { violations.report("\(self): pendingCount is \(thread.pendingCount) after its end") }
    }
}

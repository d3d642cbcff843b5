import Foundation
import Testing
@testable import ThreadKit

/// Repeating calls as the peers offer them (issue 12, part 2): `.fixedRate` and `.fixedDelay`
/// spacing, a first delay, and exactly-once cancel from anywhere, for both spacings.
@Suite struct TimerThreadRepeatingTests {
    static let late = Duration.milliseconds(250)
    static let spacings: [TimerThread.Spacing] = [.fixedRate, .fixedDelay]

    /// One run of a repeating call: when its body began and when it was about to return.
    struct Run: Sendable {
        var start: MonotonicInstant
        var end: MonotonicInstant
    }

    /// A body that takes `duration` (it sleeps, as a call doing real work would block) and records its run.
    static func body(taking duration: Duration, into runs: Recorder<Run>) -> @Sendable () -> Void {
        {
            let start = MonotonicInstant.now()
            TimerThreadTests.sleep(until: start.advanced(by: duration))
            runs.append(Run(start: start, end: .now()))
        }
    }

    /// Waits for a later call on `timer`, so that a call that must not run has had its chance.
    static func settle(_ timer: TimerThread, after delay: Duration) async throws {
        let sentinel = Counter()
        try timer.schedule(after: delay) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(5)) { sentinel.value == 1 })
    }

    /// The first `count` runs of a repeating call that `schedule` makes on a new timer named after
    /// `prefix`, with a body that takes `duration`, and instants measured just before and just after
    /// the call; the call is cancelled once it has run `count` times. `nil` (an issue recorded) if it
    /// did not run that often within 5 s.
    static func firstRuns(
        _ count: Int, taking duration: Duration, timerNamed prefix: String,
        _ schedule: (TimerThread, @escaping @Sendable () -> Void) throws -> TimerHandle,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (runs: [Run], before: MonotonicInstant, after: MonotonicInstant)? {
        let timer = TimerThread(name: KernelThreads.uniqueName(prefix))
        defer { timer.dispose() }
        let runs = Recorder<Run>()
        let before = MonotonicInstant.now()
        let handle = try schedule(timer, body(taking: duration, into: runs))
        let after = MonotonicInstant.now()
        let ran = await eventually(timeout: .seconds(5)) { runs.count >= count }
        #expect(ran, "the call ran \(runs.count) times, not \(count)", sourceLocation: sourceLocation)
        #expect(handle.cancel(), sourceLocation: sourceLocation)
        return ran ? (Array(runs.values.prefix(count)), before, after) : nil
    }

    // MARK: Spacing

    @Test("fixedRate: a 60 ms body every 100 ms starts on the grid, start + k × 100 ms, never early, < 250 ms late")
    func fixedRateStartsOnTheGrid() async throws {
        let interval = Duration.milliseconds(100)
        guard let (runs, before, after) = try await Self.firstRuns(8, taking: .milliseconds(60), timerNamed: "TmRate", {
            try $0.schedule(every: interval, spacing: .fixedRate, $1)
        }) else { return }
        for (offset, run) in runs.enumerated() {
            let beat = interval * (offset + 1)
            #expect(run.start >= before.advanced(by: beat), "run \(offset + 1) came early")
            // With a fixed delay the eighth run would start at 100 + 7 × 160 = 1,220 ms, not 800 ms.
            #expect(run.start < after.advanced(by: beat + Self.late), "run \(offset + 1) is off the grid")
        }
    }

    @Test("fixedDelay: a 60 ms body every 100 ms starts 100 ms after the previous run returned, at least 160 ms apart")
    func fixedDelayWaitsAfterEachRun() async throws {
        let interval = Duration.milliseconds(100)
        guard let (all, before, after) = try await Self.firstRuns(6, taking: .milliseconds(60), timerNamed: "TmDelay", {
            try $0.schedule(every: interval, spacing: .fixedDelay, $1)
        }) else { return }
        #expect(all[0].start >= before.advanced(by: interval))
        #expect(all[0].start < after.advanced(by: interval + Self.late))
        for (previous, next) in zip(all, all.dropFirst()) {
            #expect(next.start >= previous.end.advanced(by: interval), "a run came less than 100 ms after the previous one returned")
            #expect(previous.start.duration(to: next.start) >= .milliseconds(160))
            #expect(next.start < previous.end.advanced(by: interval + Self.late))
        }
    }

    @Test("a first delay of .zero runs at once, never early, then keeps to the spacing", arguments: spacings)
    func zeroFirstDelayRunsAtOnce(spacing: TimerThread.Spacing) async throws {
        let interval = Duration.milliseconds(200)
        guard let (all, before, after) = try await Self.firstRuns(2, taking: .zero, timerNamed: "TmZero", {
            try $0.schedule(every: interval, startingAfter: .zero, spacing: spacing, $1)
        }) else { return }
        #expect(all[0].start >= before)
        #expect(all[0].start < after.advanced(by: Self.late))
        switch spacing {
        case .fixedRate: #expect(all[1].start >= before.advanced(by: interval))
        case .fixedDelay: #expect(all[1].start >= all[0].end.advanced(by: interval))
        }
        #expect(all[1].start < all[0].end.advanced(by: interval + Self.late))
    }

    @Test("a first delay counts from the call; the runs after it keep to the spacing", arguments: spacings)
    func firstDelayCountsFromTheCall(spacing: TimerThread.Spacing) async throws {
        let interval = Duration.milliseconds(150)
        let firstDelay = Duration.milliseconds(40)
        guard let (all, before, after) = try await Self.firstRuns(3, taking: .milliseconds(30), timerNamed: "TmFirst", {
            let handle = try $0.schedule(every: interval, startingAfter: firstDelay, spacing: spacing, $1)
            #expect(!handle.hasFired)
            return handle
        }) else { return }
        #expect(all[0].start >= before.advanced(by: firstDelay))
        #expect(all[0].start < after.advanced(by: firstDelay + Self.late))
        for (index, (previous, next)) in zip(all, all.dropFirst()).prefix(2).enumerated() {
            switch spacing {
            case .fixedRate:
                // On the grid first + k × interval, where first lies in [before, after] + firstDelay.
                #expect(next.start >= before.advanced(by: firstDelay + interval * (index + 1)))
                #expect(next.start < after.advanced(by: firstDelay + interval * (index + 1) + Self.late))
            case .fixedDelay:
                #expect(next.start >= previous.end.advanced(by: interval))
                #expect(next.start < previous.end.advanced(by: interval + Self.late))
            }
        }
    }

    // MARK: Cancel

    @Test("cancel from another thread between runs: true once, and the call never runs again", arguments: spacings)
    func cancelFromAnotherThreadBetweenRuns(spacing: TimerThread.Spacing) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCanX"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(300)
        let runs = Counter()
        let firstRan = Latch()
        let results = Recorder<Bool>()
        let cancelled = Latch()
        let handleBox = LockedValue<TimerHandle?>(nil)
        // A thread of its own cancels as soon as the first run has ended, 300 ms before the next.
        startThread(named: "TmCanXer") {
            guard firstRan.wait(timeout: .seconds(10)) else { return }
            var handle = handleBox.value
            while handle == nil {  // the run may begin before schedule(every:) has returned the handle
                usleep(100)
                handle = handleBox.value
            }
            guard let handle else { return }
            results.append(handle.cancel())
            results.append(handle.cancel())
            cancelled.countDown()
        }
        let handle = try timer.schedule(every: interval, startingAfter: .zero, spacing: spacing) {
            runs.increment()
            firstRan.countDown()
        }
        handleBox.value = handle
        #expect(await onNewThread { cancelled.wait(timeout: .seconds(5)) })
        #expect(results.values == [true, false])
        try await Self.settle(timer, after: interval * 2)
        #expect(runs.value == 1)
        #expect(handle.isCancelled)
        #expect(handle.hasFired)
        #expect(!handle.cancel())
        #expect(timer.pendingCount == 0)
    }

    @Test("cancel from another thread during a run: true, the run finishes, and the call never runs again", arguments: spacings)
    func cancelFromAnotherThreadDuringARun(spacing: TimerThread.Spacing) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCanD"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(20)
        let runs = Counter()
        let finished = Counter()
        let secondStarted = Latch()
        let gate = Latch()
        let handle = try timer.schedule(every: interval, spacing: spacing) {
            if runs.increment() == 2 {
                secondStarted.countDown()
                gate.wait(timeout: .seconds(60))
            }
            finished.increment()
        }
        #expect(await onNewThread { secondStarted.wait(timeout: .seconds(5)) })
        #expect(timer.pendingCount == 1)  // a repeating call counts once, during its run too
        #expect(await onNewThread { handle.cancel() })
        #expect(timer.pendingCount == 0)
        #expect(handle.isCancelled)
        #expect(!handle.cancel())
        gate.countDown()
        #expect(await eventually(timeout: .seconds(5)) { finished.value == 2 })
        try await Self.settle(timer, after: interval * 5)
        #expect(runs.value == 2)
        #expect(finished.value == 2)
        #expect(timer.pendingCount == 0)
    }

    @Test("cancel from inside the run: true, and the call never runs again", arguments: spacings)
    func cancelFromInsideTheRun(spacing: TimerThread.Spacing) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCanI"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(15)
        let handleBox = LockedValue<TimerHandle?>(nil)
        let runs = Counter()
        let results = Recorder<Bool>()
        let handle = try timer.schedule(every: interval, startingAfter: .milliseconds(50), spacing: spacing) {
            if runs.increment() == 3, let handle = handleBox.value {
                results.append(handle.cancel())
                results.append(handle.cancel())
            }
        }
        handleBox.value = handle
        #expect(await eventually(timeout: .seconds(5)) { results.count == 2 })
        try await Self.settle(timer, after: interval * 5)
        #expect(results.values == [true, false])
        #expect(runs.value == 3)
        #expect(handle.isCancelled)
        #expect(handle.hasFired)
        #expect(timer.pendingCount == 0)
    }

    @Test("cancel immediately after scheduling: true, and the call never runs (or, due at once, runs at most the run it began)",
          arguments: spacings)
    func cancelImmediatelyAfterScheduling(spacing: TimerThread.Spacing) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCanN"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(20)
        let laterRuns = Counter()
        let later = try timer.schedule(every: interval, spacing: spacing) { laterRuns.increment() }
        #expect(later.cancel())
        let atOnceRuns = Counter()
        let atOnce = try timer.schedule(every: interval, startingAfter: .zero, spacing: spacing) { atOnceRuns.increment() }
        #expect(atOnce.cancel())
        #expect(!later.cancel())
        #expect(!atOnce.cancel())
        try await Self.settle(timer, after: interval * 5)
        #expect(laterRuns.value == 0)
        #expect(!later.hasFired)
        // The timer thread may have begun the first run before the cancel; then exactly that one ran.
        #expect(atOnceRuns.value == (atOnce.hasFired ? 1 : 0))
        #expect(later.isCancelled)
        #expect(atOnce.isCancelled)
        #expect(timer.pendingCount == 0)
    }

    // MARK: Handles, counts, tags

    @Test("during a run: hasFired is true, isCancelled false, pendingCount counts the call once; cancelAll counts it",
          arguments: spacings)
    func handleAndCountsDuringARun(spacing: TimerThread.Spacing) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmMid"))
        defer { timer.dispose() }
        let started = Latch()
        let gate = Latch()
        let runs = Counter()
        let handle = try timer.schedule(every: .milliseconds(10), startingAfter: .milliseconds(30), spacing: spacing, tag: "mid") {
            runs.increment()
            started.countDown()
            gate.wait(timeout: .seconds(60))
        }
        #expect(!handle.hasFired)
        #expect(!handle.isCancelled)
        #expect(timer.pendingCount == 1)
        #expect(await onNewThread { started.wait(timeout: .seconds(5)) })
        #expect(handle.hasFired)
        #expect(!handle.isCancelled)
        #expect(timer.pendingCount == 1)
        #expect(timer.cancelAll(tag: "mid") == 1)
        #expect(timer.cancelAll(tag: "mid") == 0)
        #expect(handle.isCancelled)
        #expect(timer.pendingCount == 0)
        #expect(!handle.cancel())
        gate.countDown()
        try await Self.settle(timer, after: .milliseconds(60))
        #expect(runs.value == 1)
        #expect(timer.dispose() == 0)
    }

    @Test("a handle reads back its interval and spacing; the spacing shares the interval's bits")
    func handleKeepsIntervalAndSpacing() throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmBits"))
        defer { timer.dispose() }
        let rate = try timer.schedule(every: .milliseconds(1_500)) {}
        let delay = try timer.schedule(every: .milliseconds(1_500), spacing: .fixedDelay) {}
        let tiny = try timer.schedule(every: .nanoseconds(0.25), startingAfter: .seconds(3600), spacing: .fixedDelay) {}
        let huge = try timer.schedule(every: .seconds(Int64.max) + .seconds(1), spacing: .fixedDelay) {}
        let once = try timer.schedule(after: .seconds(3600)) {}
        #expect(rate.repetition == .init(interval: .milliseconds(1_500), spacing: .fixedRate))
        #expect(delay.repetition == .init(interval: .milliseconds(1_500), spacing: .fixedDelay))
        #expect(tiny.repetition == .init(interval: .nanoseconds(1), spacing: .fixedDelay))
        #expect(huge.repetition == .init(interval: .nanoseconds(Int64.max), spacing: .fixedDelay))
        #expect(once.repetition == nil)
        #expect(timer.pendingCount == 5)
        #expect("\(TimerThread.Spacing.fixedRate), \(TimerThread.Spacing.fixedDelay)" == "fixed rate, fixed delay")
    }
}

import Testing
@testable import ThreadKit
import SeededRandom

/// The throttle's decisions, driven with made-up instants: no threads, no clock, no sleeps.
///
/// Instants are written in milliseconds after an arbitrary origin (`at(250)`); every expectation is
/// exact, to the nanosecond.
@Suite("ThrottleSchedule")
struct ThrottleScheduleTests {
    typealias Schedule = ThrottleSchedule<Int>
    typealias Monitor = ThrottledQueue.Monitor
    typealias Mutability = ThrottledQueue.Mutability

    /// One combination of the queue's settings and the kind of interval its tasks carry.
    struct Setting: Sendable, CustomTestStringConvertible {
        var monitor: Monitor
        var mutability: Mutability
        /// Whether tasks are submitted with their own `interval:` (70 ms) or take the queue's (100 ms).
        var explicit: Bool

        var testDescription: String { "\(monitor), \(mutability), \(explicit ? "explicit interval" : "default interval")" }

        static let all: [Setting] = [Monitor.concurrent, .serial].flatMap { monitor in
            [Mutability.all, .defaultOnly, .none].flatMap { mutability in
                [false, true].map { Setting(monitor: monitor, mutability: mutability, explicit: $0) }
            }
        }

        /// The queue's interval before any change.
        static let queueInterval = Duration.milliseconds(100)
        static let explicitInterval = Duration.milliseconds(70)

        var submittedGap: Duration { explicit ? Self.explicitInterval : Self.queueInterval }
        var explicitGap: Duration? { explicit ? Self.explicitInterval : nil }

        func makeSchedule(limit: RateLimit? = nil) -> Schedule {
            Schedule(interval: Self.queueInterval, monitor: monitor, mutability: mutability, limit: limit)
        }

        /// The gap a task submitted with ``submittedGap`` carries once the queue's interval became `new`.
        func gapAfterChange(to new: Duration) -> Duration {
            switch mutability {
            case .all: new
            case .defaultOnly: explicit ? Self.explicitInterval : new
            case .none: submittedGap
            }
        }

        /// The earliest next start after a task that ran from `start` to `end` with `gap`.
        func next(afterStart start: MonotonicInstant, end: MonotonicInstant, gap: Duration) -> MonotonicInstant {
            switch monitor {
            case .concurrent: max(end, start.advanced(by: gap))
            case .serial: end.advanced(by: gap)
            }
        }
    }

    /// The instant `milliseconds` after the origin (far from zero, so nothing saturates).
    func at(_ milliseconds: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: 1_000_000_000_000).advanced(by: .milliseconds(milliseconds))
    }

    // The schedule stops the process when started before its time or ended with nothing running.
    // These wrappers check first and record an issue instead, so a broken schedule fails its tests
    // rather than crashing the whole test run.

    /// Starts the first queued task at `now`, if the schedule allows it then.
    func startChecked(_ schedule: inout Schedule, at now: MonotonicInstant, sourceLocation: SourceLocation = #_sourceLocation) -> Int? {
        guard case .startAt(let allowed) = schedule.nextStart(), allowed <= now else {
            Issue.record("cannot start at \(now): \(schedule.nextStart())", sourceLocation: sourceLocation)
            return nil
        }
        return schedule.start(at: now)
    }

    /// Starts a nested task at `now`, if the schedule allows it then.
    func startNestedChecked(_ schedule: inout Schedule, at now: MonotonicInstant, gap: Duration?, sourceLocation: SourceLocation = #_sourceLocation) {
        guard schedule.nestedStart() <= now else {
            Issue.record("cannot start nested at \(now): \(schedule.nestedStart())", sourceLocation: sourceLocation)
            return
        }
        schedule.startNested(at: now, gap: gap)
    }

    /// Ends the running task at `now`, if one runs.
    func endChecked(_ schedule: inout Schedule, at now: MonotonicInstant, sourceLocation: SourceLocation = #_sourceLocation) {
        guard schedule.running > 0 else {
            Issue.record("no task running to end", sourceLocation: sourceLocation)
            return
        }
        schedule.end(at: now)
    }

    // MARK: - States and the idle queue

    @Test("nextStart() is .idle, then .startAt(0) for the first task, .awaitingEnd while it runs, .idle after")
    func statesOfAFreshQueue() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        #expect(schedule.nextStart() == .idle)
        #expect(schedule.isIdle)

        schedule.submit(1)
        // The first task on an idle queue may start immediately: at the origin of the time line.
        #expect(schedule.nextStart() == .startAt(MonotonicInstant(nanoseconds: 0)))
        #expect(!schedule.isIdle)
        #expect(startChecked(&schedule, at: at(0)) == 1)
        #expect(schedule.running == 1)
        #expect(schedule.nextStart() == .awaitingEnd)
        #expect(!schedule.isIdle)

        schedule.submit(2)
        #expect(schedule.nextStart() == .awaitingEnd, "a queued task waits for the running one's end")
        endChecked(&schedule, at: at(10))
        #expect(schedule.nextStart() == .startAt(at(100)))
        #expect(startChecked(&schedule, at: at(100)) == 2)
        endChecked(&schedule, at: at(101))
        #expect(schedule.nextStart() == .idle)
        #expect(schedule.isIdle)
        #expect(schedule.running == 0)
    }

    @Test("A task submitted to an idle queue whose last gap has passed may start at once", arguments: [Monitor.concurrent, .serial])
    func idleQueueAfterItsGapStartsAtOnce(monitor: Monitor) {
        var schedule = Schedule(interval: .milliseconds(100), monitor: monitor, mutability: .all, limit: nil)
        schedule.submit(1)
        _ = startChecked(&schedule, at: at(0))
        endChecked(&schedule, at: at(20))
        #expect(schedule.nextStart() == .idle)

        // Submitted at 500 ms, long after the gap (ending at 100 or 120 ms): the allowed instant is
        // already past, so the task starts at its submission.
        schedule.submit(2)
        let expected = monitor == .concurrent ? at(100) : at(120)
        #expect(schedule.nextStart() == .startAt(expected))
        #expect(startChecked(&schedule, at: at(500)) == 2)
        endChecked(&schedule, at: at(500))

        // Submitted inside the gap: it waits for the gap's end, not a whole interval from submission.
        schedule.submit(3)
        #expect(schedule.nextStart() == .startAt(at(600)))
    }

    @Test("A start later than allowed is recorded as it happened: the next gap counts from the real start")
    func lateStartMovesTheNextGap() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        schedule.submit(3)
        _ = startChecked(&schedule, at: at(0))
        endChecked(&schedule, at: at(1))
        #expect(schedule.nextStart() == .startAt(at(100)))
        _ = startChecked(&schedule, at: at(137))
        endChecked(&schedule, at: at(138))
        #expect(schedule.nextStart() == .startAt(at(237)))
    }

    // MARK: - Every monitor × mutability × kind of interval

    @Test("The gap follows the monitor: .concurrent from the start (or the end of a longer task), .serial from the end", arguments: Setting.all)
    func gapFollowsTheMonitor(setting: Setting) {
        var schedule = setting.makeSchedule()
        let gap = setting.submittedGap
        for item in 1...3 { schedule.submit(item, gap: setting.explicitGap) }

        // A short task (10 ms): .concurrent waits out the gap from its start, .serial from its end.
        #expect(startChecked(&schedule, at: at(0)) == 1)
        endChecked(&schedule, at: at(10))
        let second = setting.next(afterStart: at(0), end: at(10), gap: gap)
        #expect(second == (setting.monitor == .concurrent ? at(0).advanced(by: gap) : at(10).advanced(by: gap)))
        #expect(schedule.nextStart() == .startAt(second))

        // A task longer than the gap (250 ms): .concurrent follows it at once, .serial waits the gap.
        #expect(startChecked(&schedule, at: second) == 2)
        let end = second.advanced(by: .milliseconds(250))
        endChecked(&schedule, at: end)
        let third = setting.next(afterStart: second, end: end, gap: gap)
        #expect(third == (setting.monitor == .concurrent ? end : end.advanced(by: gap)))
        #expect(schedule.nextStart() == .startAt(third))
        #expect(startChecked(&schedule, at: third) == 3)
        endChecked(&schedule, at: third)
        #expect(schedule.nextStart() == .idle)
    }

    @Test("An explicit interval is the gap after that one task only; the tasks around it take the queue's interval", arguments: [Monitor.concurrent, .serial])
    func explicitIntervalAppliesToOneTask(monitor: Monitor) {
        var schedule = Schedule(interval: .milliseconds(40), monitor: monitor, mutability: .all, limit: nil)
        schedule.submit(1, gap: .milliseconds(400))
        schedule.submit(2)
        schedule.submit(3, gap: .zero)
        schedule.submit(4)
        var start = at(0)
        for (item, gap) in [(1, Duration.milliseconds(400)), (2, .milliseconds(40)), (3, .zero), (4, .milliseconds(40))] {
            #expect(startChecked(&schedule, at: start) == item)
            let end = start.advanced(by: .milliseconds(5))
            endChecked(&schedule, at: end)
            let next = monitor == .concurrent ? max(end, start.advanced(by: gap)) : end.advanced(by: gap)
            if item < 4 { #expect(schedule.nextStart() == .startAt(next), "the gap after task \(item)") }
            start = next
        }
        #expect(schedule.nextStart() == .idle)
    }

    @Test("Changing the interval while tasks are queued reaches them by mutability; new submissions always", arguments: Setting.all)
    func intervalChangeWhileQueued(setting: Setting) {
        var schedule = setting.makeSchedule()
        for item in 1...3 { schedule.submit(item, gap: setting.explicitGap) }

        #expect(startChecked(&schedule, at: at(0)) == 1)
        // Task 1 runs (its gap is the one now being waited), tasks 2 and 3 are queued.
        schedule.setInterval(.milliseconds(300))
        #expect(schedule.interval == .milliseconds(300))
        schedule.submit(4)  // after the change: always the new interval
        schedule.submit(5, gap: .milliseconds(40))  // its own interval, whatever the mutability
        schedule.submit(6)

        let changed = setting.gapAfterChange(to: .milliseconds(300))
        var start = at(0)
        for item in 2...6 {
            let end = start.advanced(by: .milliseconds(5))
            endChecked(&schedule, at: end)
            // The gap after the task that just ended.
            let gap: Duration = switch item - 1 {
            case 1...3: changed
            case 4: .milliseconds(300)
            case 5: .milliseconds(40)
            default: .milliseconds(300)
            }
            let next = setting.next(afterStart: start, end: end, gap: gap)
            #expect(schedule.nextStart() == .startAt(next), "before task \(item)")
            #expect(startChecked(&schedule, at: next) == item)
            start = next
        }
    }

    @Test("Changing the interval during a gap (after a start, before the next) moves that gap by mutability", arguments: Setting.all)
    func intervalChangeDuringGap(setting: Setting) {
        var schedule = setting.makeSchedule()
        schedule.submit(1, gap: setting.explicitGap)
        schedule.submit(2, gap: setting.explicitGap)
        _ = startChecked(&schedule, at: at(0))
        endChecked(&schedule, at: at(10))
        let original = setting.next(afterStart: at(0), end: at(10), gap: setting.submittedGap)
        #expect(schedule.nextStart() == .startAt(original))

        // Longer: the gap being waited grows (or not).
        schedule.setInterval(.milliseconds(400))
        let longer = setting.next(afterStart: at(0), end: at(10), gap: setting.gapAfterChange(to: .milliseconds(400)))
        #expect(schedule.nextStart() == .startAt(longer))

        // Shorter, even to zero: the gap shrinks (or not); a .concurrent gap never ends before the task.
        schedule.setInterval(.zero)
        let shorter = setting.next(afterStart: at(0), end: at(10), gap: setting.gapAfterChange(to: .zero))
        #expect(schedule.nextStart() == .startAt(shorter))
        switch (setting.mutability, setting.explicit) {
        case (.none, _), (.defaultOnly, true):
            #expect(shorter == original, "this task's gap is not reached by the change")
        default:
            #expect(shorter == at(10), "a zero gap: the next task may follow the end at once")
        }

        // The queued task follows the same rule for the gap after itself.
        #expect(startChecked(&schedule, at: shorter) == 2)
        endChecked(&schedule, at: shorter)
        schedule.submit(3)
        let gapAfterSecond = setting.gapAfterChange(to: .zero)
        #expect(schedule.nextStart() == .startAt(setting.next(afterStart: shorter, end: shorter, gap: gapAfterSecond)))
    }

    // In AHDispatch, .none behaved like .defaultOnly.
    @Test(".none keeps each gap as it was at submission, unlike .defaultOnly")
    func noneDiffersFromDefaultOnly() {
        var none = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .none, limit: nil)
        var defaultOnly = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .defaultOnly, limit: nil)
        for item in 1...2 {
            none.submit(item)
            defaultOnly.submit(item)
        }
        _ = startChecked(&none, at: at(0))
        _ = startChecked(&defaultOnly, at: at(0))
        endChecked(&none, at: at(1))
        endChecked(&defaultOnly, at: at(1))
        none.setInterval(.milliseconds(500))
        defaultOnly.setInterval(.milliseconds(500))
        #expect(none.nextStart() == .startAt(at(100)))
        #expect(defaultOnly.nextStart() == .startAt(at(500)))
    }

    // MARK: - Rate limits

    @Test("RateLimit.rate(n, per: w) lets n start back to back; the (n+1)th waits until the first start + w")
    func rateLimitWindow() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: .rate(3, per: .seconds(1)))
        for item in 1...7 { schedule.submit(item) }
        // Three back to back at 0, 10 and 20 ms.
        for (item, start) in [(1, 0), (2, 10), (3, 20)] {
            guard case .startAt(let allowed) = schedule.nextStart() else {
                Issue.record("expected a start for task \(item)")
                return
            }
            #expect(allowed <= at(start))
            #expect(startChecked(&schedule, at: at(start)) == item)
            endChecked(&schedule, at: at(start))
        }
        // The fourth at the first start + 1 s, the fifth and sixth one second after theirs.
        for (item, start) in [(4, 1000), (5, 1010), (6, 1020), (7, 2000)] {
            #expect(schedule.nextStart() == .startAt(at(start)), "task \(item)")
            #expect(startChecked(&schedule, at: at(start)) == item)
            endChecked(&schedule, at: at(start))
        }
        #expect(schedule.nextStart() == .idle)
    }

    @Test("A rate limit and a gap combine: each start waits for the later of the two")
    func rateLimitAndGap() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: .rate(2, per: .milliseconds(1000)))
        for item in 1...5 { schedule.submit(item) }
        for (item, start) in [(1, 0), (2, 100), (3, 1000), (4, 1100), (5, 2000)] {
            if item > 1 { #expect(schedule.nextStart() == .startAt(at(start)), "task \(item)") }
            #expect(startChecked(&schedule, at: at(start)) == item)
            endChecked(&schedule, at: at(start + 1))
        }
    }

    @Test("The rate limit with a window shorter than the gap never delays anything")
    func rateLimitLooserThanGap() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .serial, mutability: .all, limit: .rate(1, per: .milliseconds(50)))
        for item in 1...3 { schedule.submit(item) }
        var start = at(0)
        for item in 1...3 {
            #expect(startChecked(&schedule, at: start) == item)
            endChecked(&schedule, at: start.advanced(by: .milliseconds(7)))
            start = start.advanced(by: .milliseconds(107))
            if item < 3 { #expect(schedule.nextStart() == .startAt(start)) }
        }
    }

    @Test("Over long random runs the schedule starts each task exactly when a trivially correct model allows, and no window holds more than n starts",
          arguments: [(Monitor.concurrent, 1 as UInt64), (.serial, 2), (.concurrent, 3), (.serial, 4)])
    func randomRunsMatchTheModel(monitor: Monitor, seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let count = Int.random(in: 1...4, using: &random)
        let window = Duration.milliseconds(Int.random(in: 50...400, using: &random))
        let mutability = [Mutability.all, .defaultOnly, .none].randomElement(using: &random)!
        var schedule = Schedule(interval: .milliseconds(30), monitor: monitor, mutability: mutability, limit: .rate(count, per: window))

        // The model: for each started task its start, end and the gap that followed it, kept as the
        // queue's rules say; the pending tasks with their explicit gap and current gap.
        var modelInterval = Duration.milliseconds(30)
        var modelPending: [(item: Int, explicit: Duration?, gap: Duration)] = []
        var starts: [MonotonicInstant] = []
        var ends: [MonotonicInstant] = []
        var gaps: [Duration] = []
        var lastExplicit = false
        var pausedUntil = MonotonicInstant(nanoseconds: 0)

        func modelAllowed() -> MonotonicInstant {
            var allowed = MonotonicInstant(nanoseconds: 0)
            if let start = starts.last, let end = ends.last, let gap = gaps.last {
                allowed = monitor == .concurrent ? max(end, start.advanced(by: gap)) : end.advanced(by: gap)
            }
            allowed = max(allowed, pausedUntil)
            if starts.count >= count { allowed = max(allowed, starts[starts.count - count].advanced(by: window)) }
            return allowed
        }

        var now = at(0)
        var nextItem = 0
        let total = 2000
        while starts.count < total {
            // Submit a few tasks, some with their own interval.
            if modelPending.isEmpty || Int.random(in: 0..<3, using: &random) == 0 {
                for _ in 0..<Int.random(in: 1...3, using: &random) where nextItem < total {
                    let explicit: Duration? = Bool.random(using: &random) ? .milliseconds(Int.random(in: 0...80, using: &random)) : nil
                    schedule.submit(nextItem, gap: explicit)
                    modelPending.append((nextItem, explicit, explicit ?? modelInterval))
                    nextItem += 1
                }
            }
            // Now and then change the interval or pause.
            switch Int.random(in: 0..<20, using: &random) {
            case 0:
                let new = Duration.milliseconds(Int.random(in: 0...120, using: &random))
                schedule.setInterval(new)
                modelInterval = new
                for index in modelPending.indices {
                    switch mutability {
                    case .all: modelPending[index].gap = new
                    case .defaultOnly: if modelPending[index].explicit == nil { modelPending[index].gap = new }
                    case .none: break
                    }
                }
                if !gaps.isEmpty {
                    switch mutability {
                    case .all: gaps[gaps.count - 1] = new
                    case .defaultOnly: if !lastExplicit { gaps[gaps.count - 1] = new }
                    case .none: break
                    }
                }
            case 1:
                let until = now.advanced(by: .milliseconds(Int.random(in: 0...300, using: &random)))
                schedule.pause(until: until)
                pausedUntil = max(pausedUntil, until)
            default:
                break
            }

            let allowed = modelAllowed()
            #expect(schedule.nextStart() == .startAt(allowed))
            guard schedule.nextStart() == .startAt(allowed) else { return }
            // Start exactly when allowed, or a little late, as a loaded machine would.
            let lateness = Bool.random(using: &random) ? Duration.zero : .microseconds(Int.random(in: 1...20_000, using: &random))
            now = max(now, allowed).advanced(by: lateness)
            let task = modelPending.removeFirst()
            guard startChecked(&schedule, at: now) == task.item else {
                Issue.record("task \(task.item) did not start at \(now)")
                return
            }
            #expect(schedule.nextStart() == .awaitingEnd)
            starts.append(now)
            gaps.append(task.gap)
            lastExplicit = task.explicit != nil
            now = now.advanced(by: .microseconds(Int.random(in: 0...60_000, using: &random)))
            endChecked(&schedule, at: now)
            ends.append(now)
        }

        // No sliding window of `window` holds more than `count` starts.
        for index in starts.indices.dropFirst(count) {
            #expect(starts[index - count].duration(to: starts[index]) >= window)
        }
        // And the gap rule held between every pair of neighbours.
        for index in starts.indices.dropFirst() {
            let previous = index - 1
            let earliest = monitor == .concurrent
                ? max(ends[previous], starts[previous].advanced(by: gaps[previous]))
                : ends[previous].advanced(by: gaps[previous])
            #expect(starts[index] >= earliest)
        }
    }

    // MARK: - Pauses

    @Test("A pause that starts before the gap holds the first task of an idle queue")
    func pauseBeforeTheGap() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.pause(until: at(500))
        #expect(schedule.nextStart() == .idle)
        schedule.submit(1)
        #expect(schedule.nextStart() == .startAt(at(500)))
        schedule.resume()
        #expect(schedule.nextStart() == .startAt(MonotonicInstant(nanoseconds: 0)))
        schedule.pause(until: at(200))
        #expect(startChecked(&schedule, at: at(200)) == 1)
        endChecked(&schedule, at: at(210))
        schedule.submit(2)
        // A pause that has passed no longer matters: the gap rules again.
        #expect(schedule.nextStart() == .startAt(at(300)))
    }

    @Test("A pause during a gap: a shorter one changes nothing, a longer one holds, pause(until:) only extends, resume() clears", arguments: [Monitor.concurrent, .serial])
    func pauseDuringTheGap(monitor: Monitor) {
        var schedule = Schedule(interval: .milliseconds(100), monitor: monitor, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = startChecked(&schedule, at: at(0))
        // Paused while the task runs: the end is still awaited first.
        schedule.pause(until: at(50))
        #expect(schedule.nextStart() == .awaitingEnd)
        endChecked(&schedule, at: at(10))
        let gapEnd = monitor == .concurrent ? at(100) : at(110)
        #expect(schedule.nextStart() == .startAt(gapEnd), "a pause ending inside the gap changes nothing")

        schedule.pause(until: at(300))
        #expect(schedule.nextStart() == .startAt(at(300)))
        schedule.pause(until: at(200))
        #expect(schedule.nextStart() == .startAt(at(300)), "an earlier pause does not shorten the one in force")
        #expect(schedule.pausedUntil == at(300))
        schedule.pause(until: at(450))
        #expect(schedule.nextStart() == .startAt(at(450)), "a later pause extends it")

        schedule.resume()
        #expect(schedule.pausedUntil == nil)
        #expect(schedule.nextStart() == .startAt(gapEnd), "resume ends the pause but not the gap")
    }

    @Test("A pause holds a rate-limited queue past its window too")
    func pauseAndRateLimit() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: .rate(1, per: .milliseconds(100)))
        schedule.submit(1)
        schedule.submit(2)
        _ = startChecked(&schedule, at: at(0))
        endChecked(&schedule, at: at(0))
        #expect(schedule.nextStart() == .startAt(at(100)))
        schedule.pause(until: at(150))
        #expect(schedule.nextStart() == .startAt(at(150)))
        schedule.pause(until: at(50))
        #expect(schedule.nextStart() == .startAt(at(150)))
    }

    // MARK: - Nested starts

    @Test("A nested start waits only for the gap from the running task's start, and counts as a start", arguments: [Monitor.concurrent, .serial])
    func nestedStarts(monitor: Monitor) {
        var schedule = Schedule(interval: .milliseconds(100), monitor: monitor, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = startChecked(&schedule, at: at(0))
        // The running task's end cannot apply: the nested task runs inside it.
        #expect(schedule.nestedStart() == at(100))
        startNestedChecked(&schedule, at: at(100), gap: nil)
        #expect(schedule.running == 2)
        #expect(schedule.nextStart() == .awaitingEnd)
        #expect(schedule.pending.count == 1, "the nested task ran ahead of the queued one")

        // A second nested task, with its own interval, waits for the first's gap.
        #expect(schedule.nestedStart() == at(200))
        startNestedChecked(&schedule, at: at(230), gap: .milliseconds(50))
        endChecked(&schedule, at: at(240))
        endChecked(&schedule, at: at(250))
        #expect(schedule.running == 1)
        #expect(schedule.nextStart() == .awaitingEnd, "the outer task still runs")
        endChecked(&schedule, at: at(260))
        #expect(schedule.running == 0)
        // The gap after the last (nested) start, from its start (.concurrent, at least the outer
        // end) or from the outer task's end (.serial).
        #expect(schedule.nextStart() == .startAt(monitor == .concurrent ? at(280) : at(310)))
    }

    @Test("After a nested task has ended, the next nested start follows the monitor: .serial counts from that end", arguments: [Monitor.concurrent, .serial])
    func nestedStartAfterAnEndedNestedTask(monitor: Monitor) {
        var schedule = Schedule(interval: .milliseconds(100), monitor: monitor, mutability: .all, limit: nil)
        schedule.submit(1)
        _ = startChecked(&schedule, at: at(0))
        startNestedChecked(&schedule, at: at(100), gap: nil)
        endChecked(&schedule, at: at(350))  // the nested task ran 250 ms, longer than the gap
        // .concurrent: max(end, start + gap) = 350; .serial: end + gap = 450. Never 200.
        #expect(schedule.nestedStart() == (monitor == .concurrent ? at(350) : at(450)))
        startNestedChecked(&schedule, at: schedule.nestedStart(), gap: nil)
        endChecked(&schedule, at: schedule.nestedStart())
        endChecked(&schedule, at: at(500))
        #expect(schedule.running == 0)
    }

    @Test("A nested start respects a pause and the rate limit")
    func nestedStartConstraints() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: .rate(2, per: .milliseconds(1000)))
        schedule.submit(1)
        _ = startChecked(&schedule, at: at(0))
        #expect(schedule.nestedStart() == at(0))
        startNestedChecked(&schedule, at: at(0), gap: nil)
        endChecked(&schedule, at: at(1))
        #expect(schedule.nestedStart() == at(1000), "two starts already in this window")
        schedule.pause(until: at(1500))
        #expect(schedule.nestedStart() == at(1500))
        schedule.resume()
        #expect(schedule.nestedStart() == at(1000))
    }

    // MARK: - Removing

    @Test("removeAll(where:) removes matching queued tasks in order, leaves the running one and the others' gaps")
    func removeAllWhere() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        for item in 1...6 { schedule.submit(item, gap: item == 3 ? .milliseconds(20) : nil) }
        #expect(startChecked(&schedule, at: at(0)) == 1)
        #expect(schedule.removeAll { $0 == 1 } == [], "a running task is not queued")
        #expect(schedule.removeAll { $0.isMultiple(of: 2) } == [2, 4, 6])
        #expect(schedule.pending.count == 2)
        #expect(schedule.nextStart() == .awaitingEnd)
        endChecked(&schedule, at: at(5))
        #expect(schedule.nextStart() == .startAt(at(100)))
        #expect(startChecked(&schedule, at: at(100)) == 3)
        endChecked(&schedule, at: at(105))
        #expect(schedule.nextStart() == .startAt(at(120)), "task 3 kept its own interval")
        #expect(startChecked(&schedule, at: at(120)) == 5)
        endChecked(&schedule, at: at(121))
        #expect(schedule.removeAll { _ in true } == [])
        #expect(schedule.nextStart() == .idle)

        schedule.submit(7)
        schedule.submit(8)
        #expect(schedule.removeAll { _ in true } == [7, 8])
        #expect(schedule.nextStart() == .idle)
        #expect(schedule.isIdle)
    }
}

/// Made-up instants in microseconds, for the suites that follow a task's start to the microsecond.
protocol MicrosecondInstants {}

extension MicrosecondInstants {
    typealias Schedule = ThrottleSchedule<Int>

    /// The instant `microseconds` after the origin (far from zero, so nothing saturates).
    func at(_ microseconds: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: 1_000_000_000_000).advanced(by: .microseconds(microseconds))
    }
}

/// `ThrottleSchedule.end(at:startedAt:)`: gaps count from when a task's own code began.
@Suite struct ThrottleScheduleStartedAtTests: MicrosecondInstants {
    @Test("a later actual start moves the next gap, for both monitors' start-based rule")
    func laterStartMovesTheGap() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        #expect(schedule.start(at: at(0)) == 1)
        schedule.end(at: at(1_000), startedAt: at(7))
        #expect(schedule.nextStart() == .startAt(at(10_007)))
    }

    @Test("an actual start never moves a start earlier than it was granted")
    func neverEarlier() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(50))
        schedule.end(at: at(1_000), startedAt: at(20))
        #expect(schedule.nextStart() == .startAt(at(10_050)))
    }

    @Test("the rate limit's window counts from the actual start too")
    func rateLimitUsesTheActualStart() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: .rate(2, per: .milliseconds(100)))
        for item in 1...3 { schedule.submit(item) }
        _ = schedule.start(at: at(0))
        schedule.end(at: at(10), startedAt: at(3))
        _ = schedule.start(at: at(10))
        schedule.end(at: at(20), startedAt: at(12))
        #expect(schedule.nextStart() == .startAt(at(100_003)))
    }

    @Test("an outer task's end does not move a nested task's start, and a nested end moves its own")
    func nestedStartsKeepTheirOwnInstants() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(0))
        schedule.startNested(at: at(10_000), gap: nil)
        schedule.end(at: at(10_500), startedAt: at(10_002))  // the nested task
        schedule.end(at: at(11_000), startedAt: at(1))       // the outer task: `last` is the nested one
        #expect(schedule.nextStart() == .startAt(at(20_002)))
    }
}

/// Nested tasks queued ahead of the queue (`run` inside `run`), `began(at:)`, and how a thread
/// carries out a start (`approach(toStartAt:now:)`), with made-up instants in microseconds.
@Suite("ThrottleSchedule: nested queue, began(at:), approach")
struct ThrottleScheduleApproachTests: MicrosecondInstants {
    // MARK: - Nested tasks queued ahead

    @Test("Nested items start ahead of the queue, in their order, at the nested start (gap from the running task's start), and count as starts")
    func nestedItemsGoAheadOfTheQueue() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        #expect(schedule.start(at: at(0)) == 1)
        schedule.submitNested(11)
        schedule.submitNested(12, gap: .milliseconds(3))
        #expect(schedule.pendingCount == 3)
        #expect(schedule.next == 11)
        // Task 1 still runs: the nested item needs only the gap from its start.
        #expect(schedule.nextStart() == .startAt(at(10_000)))
        #expect(schedule.start(at: at(10_000)) == 11)
        #expect(schedule.running == 2)
        #expect(schedule.next == 12)
        #expect(schedule.nextStart() == .startAt(at(20_000)))
        #expect(schedule.start(at: at(20_000)) == 12)
        #expect(schedule.next == 2)
        #expect(schedule.nextStart() == .awaitingEnd)
        schedule.end(at: at(20_500))  // 12, explicit gap 3 ms, from 20 000
        schedule.end(at: at(21_000))  // 11
        schedule.end(at: at(22_000))  // 1
        #expect(schedule.nextStart() == .startAt(at(23_000)), "task 2 follows the last start, nested 12, and its own gap")
        #expect(schedule.start(at: at(23_000)) == 2)
    }

    @Test("A nested item whose running task has ended follows the monitor in full")
    func nestedItemAfterTheRunningTaskEnded() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .serial, mutability: .all, limit: nil)
        schedule.submit(1)
        _ = schedule.start(at: at(0))
        schedule.submitNested(11)
        schedule.end(at: at(4_000))
        #expect(schedule.nextStart() == .startAt(at(14_000)))
    }

    @Test("removeAll(where:) and setInterval reach nested items; isIdle counts them")
    func nestedItemsAreQueuedTasks() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .defaultOnly, limit: nil)
        schedule.submit(1)
        _ = schedule.start(at: at(0))
        schedule.submitNested(11)
        schedule.submitNested(12, gap: .milliseconds(30))
        schedule.submit(2)
        schedule.end(at: at(1))
        #expect(!schedule.isIdle)
        schedule.setInterval(.milliseconds(1))
        #expect(schedule.start(at: at(1_000)) == 11, "the gap waited changed to 1 ms")
        schedule.end(at: at(1_001))
        #expect(schedule.nextStart() == .startAt(at(2_000)), "nested 11 took the new default interval")
        #expect(schedule.removeAll { $0 == 12 } == [12])
        #expect(schedule.removeAll { _ in true } == [2])
        #expect(schedule.pendingCount == 0)
        #expect(schedule.isIdle)
    }

    // MARK: - began(at:)

    @Test("began(at:) moves the running task's start to its own code's start before it ends: a nested start counts from there")
    func beganMovesTheRunningStart() {
        var schedule = Schedule(interval: .milliseconds(2), monitor: .concurrent, mutability: .all, limit: .rate(5, per: .seconds(1)))
        schedule.submit(1)
        _ = schedule.start(at: at(0))
        schedule.began(at: at(137))
        #expect(schedule.nestedStart() == at(2_137))
        schedule.began(at: at(50))
        #expect(schedule.nestedStart() == at(2_137), "never earlier")
        schedule.startNested(at: at(2_137), gap: nil)
        schedule.began(at: at(3_000))
        #expect(schedule.nestedStart() == at(5_000), "the innermost running task moves")
        schedule.end(at: at(3_100))
        schedule.began(at: at(4_000))
        #expect(schedule.nestedStart() == at(5_000), "once a later task has started, the outer one's start stays")
    }

    // MARK: - approach(toStartAt:now:)

    /// A schedule whose last start was at 0, with a gap of `gap`, and a start margin of 25 µs.
    func scheduleStarted(gap: Duration) -> Schedule {
        var schedule = Schedule(interval: gap, monitor: .concurrent, mutability: .all, limit: nil, startMargin: .microseconds(25))
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(0))
        schedule.end(at: at(1))
        return schedule
    }

    @Test("A start waits for allowed + 25 µs: sleeping until 100 µs before, watching the clock after, at a 10 ms gap")
    func approachAtALongGap() {
        let schedule = scheduleStarted(gap: .milliseconds(10))
        let allowed = at(10_000)
        #expect(schedule.nextStart() == .startAt(allowed))
        #expect(schedule.approach(toStartAt: allowed, now: at(2)) == .sleep(until: at(9_925)))
        #expect(schedule.approach(toStartAt: allowed, now: at(9_924)) == .sleep(until: at(9_925)))
        #expect(schedule.approach(toStartAt: allowed, now: at(9_925)) == .spin(until: at(10_025)))
        #expect(schedule.approach(toStartAt: allowed, now: at(10_010)) == .spin(until: at(10_025)), "past allowed, inside the margin")
        #expect(schedule.approach(toStartAt: allowed, now: at(10_025)) == .startNow)
        #expect(schedule.approach(toStartAt: allowed, now: at(500_000)) == .startNow, "long after: at once")
    }

    @Test("The clock-watching is 1/20 of the time from the last start when that is under 100 µs, and never under the margin",
          arguments: [(Duration.milliseconds(1), 50), (.microseconds(100), 25), (.milliseconds(2), 100), (.seconds(1), 100)])
    func approachIsAShareOfTheSpacing(gap: Duration, watchMicroseconds: Int) {
        let schedule = scheduleStarted(gap: gap)
        guard case .startAt(let allowed) = schedule.nextStart() else {
            Issue.record("expected a start time, got \(schedule.nextStart())")
            return
        }
        let target = allowed.advanced(by: .microseconds(25))
        let wake = target.advanced(by: .microseconds(-watchMicroseconds))
        #expect(schedule.approach(toStartAt: allowed, now: at(1)) == .sleep(until: wake))
        #expect(schedule.approach(toStartAt: allowed, now: wake.advanced(by: .nanoseconds(-1))) == .sleep(until: wake))
        #expect(schedule.approach(toStartAt: allowed, now: wake) == .spin(until: target))
        #expect(schedule.approach(toStartAt: allowed, now: target) == .startNow)
    }

    @Test("A pause far from any start is approached the same way; with no start yet, by sleeping until it ends, then watching the margin")
    func approachToThePauseEnd() {
        var schedule = Schedule(interval: .milliseconds(1), monitor: .concurrent, mutability: .all, limit: nil, startMargin: .microseconds(25))
        schedule.pause(until: at(50_000))
        schedule.submit(1)
        #expect(schedule.nextStart() == .startAt(at(50_000)))
        #expect(schedule.approach(toStartAt: at(50_000), now: at(0)) == .sleep(until: at(50_000)))
        #expect(schedule.approach(toStartAt: at(50_000), now: at(50_000)) == .spin(until: at(50_025)))
        #expect(schedule.approach(toStartAt: at(50_000), now: at(50_025)) == .startNow)
        _ = schedule.start(at: at(50_025))
        schedule.end(at: at(50_030))
        schedule.pause(until: at(90_000))
        schedule.submit(2)
        #expect(schedule.approach(toStartAt: at(90_000), now: at(60_000)) == .sleep(until: at(89_925)))
    }

    @Test("Held back only by the previous task's end, a start needs no margin once the gap has passed by one; else it waits the rest, watching the clock")
    func anEndNeedsNoMargin() {
        func schedule(gap: Duration, endingAt end: Int) -> Schedule {
            var schedule = Schedule(interval: gap, monitor: .concurrent, mutability: .all, limit: nil, startMargin: .microseconds(25))
            schedule.submit(1)
            schedule.submit(2)
            _ = schedule.start(at: at(0))
            schedule.end(at: at(end))
            return schedule
        }
        // No interval, after a task of 30 µs: the start follows the end at once.
        let noGap = schedule(gap: .zero, endingAt: 30)
        #expect(noGap.nextStart() == .startAt(at(30)))
        #expect(noGap.approach(toStartAt: at(30), now: at(30)) == .startNow)
        // After a task of 3 µs, shorter than the margin: the margin after its start, 25.
        #expect(schedule(gap: .zero, endingAt: 3).approach(toStartAt: at(3), now: at(3)) == .spin(until: at(25)))
        // A 10 µs gap passed 90 µs before a task's end at 100: at once too.
        #expect(schedule(gap: .microseconds(10), endingAt: 100).approach(toStartAt: at(100), now: at(100)) == .startNow)
        // A 90 µs gap ending 10 µs before the end at 100: the margin after the gap, 115, watched.
        let close = schedule(gap: .microseconds(90), endingAt: 100)
        #expect(close.approach(toStartAt: at(100), now: at(100)) == .spin(until: at(115)))
        #expect(close.approach(toStartAt: at(100), now: at(115)) == .startNow)
        // The .serial monitor counts its gap from the end: the margin always follows.
        var serial = Schedule(interval: .zero, monitor: .serial, mutability: .all, limit: nil, startMargin: .microseconds(25))
        serial.submit(1)
        serial.submit(2)
        _ = serial.start(at: at(0))
        serial.end(at: at(3))
        #expect(serial.approach(toStartAt: at(3), now: at(3)) == .spin(until: at(28)))
    }

    @Test("A start waits for allowed + the schedule's margin, whatever it is: 1 µs here")
    func approachUsesTheSchedulesMargin() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: nil, startMargin: .microseconds(1))
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(0))
        schedule.end(at: at(1))
        #expect(schedule.approach(toStartAt: at(10_000), now: at(9_950)) == .spin(until: at(10_001)))
        #expect(schedule.approach(toStartAt: at(10_000), now: at(10_000)) == .spin(until: at(10_001)))
        #expect(schedule.approach(toStartAt: at(10_000), now: at(10_001)) == .startNow)
    }

    // MARK: - The start margin, from the clock's reading floor

    @Test("The margin is twice the 99th percentile of the gaps between readings, within 1 and 25 µs")
    func marginFromReadingGaps() {
        // 1,000 gaps: 990 of 40 ns, 10 of 3 µs (an interrupt's worth): the 99th percentile is 3 µs.
        let spoiled = Array(repeating: Duration.nanoseconds(40), count: 990) + Array(repeating: .microseconds(3), count: 10)
        #expect(ReadingFloor.margin(fromReadingGaps: spoiled) == .microseconds(6))
        // 989 fast ones: the 99th percentile is still a fast one, and the margin its floor, 1 µs.
        let fast = Array(repeating: Duration.nanoseconds(40), count: 991) + Array(repeating: .microseconds(3), count: 9)
        #expect(ReadingFloor.margin(fromReadingGaps: fast) == .microseconds(1))
        // A slow clock: 4 µs a reading gives 8 µs; 20 µs a reading is capped at 25 µs.
        #expect(ReadingFloor.margin(fromReadingGaps: Array(repeating: .microseconds(4), count: 100)) == .microseconds(8))
        #expect(ReadingFloor.margin(fromReadingGaps: Array(repeating: .microseconds(20), count: 100)) == .microseconds(25))
        #expect(ReadingFloor.margin(fromReadingGaps: []) == .microseconds(25))
    }

    @Test("The queues' margin, measured on this machine, lies within its bounds")
    func measuredMarginIsBounded() {
        #expect(ReadingFloor.bounds.contains(ThrottledQueue.startMargin))
        #expect(ReadingFloor.bounds.contains(ReadingFloor.measuredMargin()))
    }
}

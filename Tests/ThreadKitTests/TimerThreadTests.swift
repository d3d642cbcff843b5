import Foundation
import Synchronization
import Testing
@testable import ThreadKit
import SeededRandom
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - TimerThread

@Suite struct TimerThreadTests {
    static let late = Duration.milliseconds(250)

    /// A thread's ``ThreadUsage`` handed over through atomics rather than a lock, so that handing it
    /// over cannot itself make the measured thread wait (a voluntary context switch).
    final class UsageSlot: Sendable {
        private let cpuNanoseconds = Atomic<Int>(-1)
        private let voluntarySwitches = Atomic<Int>(0)
        private let involuntarySwitches = Atomic<Int>(0)

        /// Leaves `usage` here; the slot is filled from then on.
        func store(_ usage: ThreadUsage) {
            voluntarySwitches.store(usage.voluntarySwitches, ordering: .relaxed)
            involuntarySwitches.store(usage.involuntarySwitches, ordering: .relaxed)
            let (seconds, attoseconds) = usage.cpuTime.components
            cpuNanoseconds.store(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000), ordering: .releasing)
        }

        /// The usage left here, or `nil` while the slot is empty.
        var usage: ThreadUsage? {
            let cpu = cpuNanoseconds.load(ordering: .acquiring)
            guard cpu >= 0 else { return nil }
            return ThreadUsage(
                cpuTime: .nanoseconds(cpu), voluntarySwitches: voluntarySwitches.load(ordering: .relaxed),
                involuntarySwitches: involuntarySwitches.load(ordering: .relaxed))
        }
    }

    /// Blocks the calling thread until `deadline` (on the timer thread: a long-running call).
    static func sleep(until deadline: MonotonicInstant) {
        var time = deadline.timespecValue
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &time, nil) == EINTR {}
    }

    // MARK: Deadlines

    @Test("20 delayed calls scheduled in shuffled order fire in deadline order, never early, < 250 ms late")
    func twentyCallsFireInDeadlineOrder() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmOrd"))
        defer { timer.dispose() }
        var random = SplitMix64(seed: 20)
        let delays = (1...20).map { Duration.milliseconds(50 * $0) }.shuffled(using: &random)
        let fired = Recorder<(index: Int, at: MonotonicInstant)>()
        var windows: [(earliest: MonotonicInstant, latest: MonotonicInstant)] = []
        for (index, delay) in delays.enumerated() {
            let before = MonotonicInstant.now()
            try timer.schedule(after: delay) { fired.append((index, .now())) }
            windows.append((before.advanced(by: delay), MonotonicInstant.now().advanced(by: delay)))
        }
        #expect(await eventually(timeout: .seconds(5)) { fired.count == 20 })
        let runs = fired.values
        #expect(Set(runs.map(\.index)) == Set(0..<20))
        // Deadline order. Each deadline lies in its window [before + delay, after + delay]; no call
        // may run before one whose window lies wholly before its own. (When scheduling takes less
        // than the 50 ms between delays, as it does unless the machine stalls, this is delay order.)
        var outOfOrder: [(Int, Int)] = []
        for (earlier, later) in zip(runs, runs.dropFirst())
        where windows[later.index].latest < windows[earlier.index].earliest {
            outOfOrder.append((earlier.index, later.index))
        }
        #expect(outOfOrder.isEmpty, "ran before a call due earlier: \(outOfOrder)")
        for run in runs {
            let window = windows[run.index]
            #expect(run.at >= window.earliest, "call \(run.index) (\(delays[run.index])) ran early")
            #expect(window.latest.duration(to: run.at) < Self.late, "call \(run.index) ran late")
        }
        #expect(timer.pendingCount == 0)
    }

    @Test("calls due at the same instant run in the order they were scheduled")
    func equalDeadlinesRunInScheduleOrder() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmEq"))
        defer { timer.dispose() }
        let instant = ContinuousClock.now + .milliseconds(300)
        let order = Recorder<Int>()
        let early = Counter()
        for index in 0..<500 {
            try timer.schedule(at: instant) {
                if ContinuousClock.now < instant { early.increment() }
                order.append(index)
            }
        }
        #expect(await eventually(timeout: .seconds(5)) { order.count == 500 })
        #expect(order.values == Array(0..<500))
        #expect(early.value == 0)
    }

    @Test("a delay counts from the call, not from when the timer thread gets to it")
    func delayCountsFromTheCall() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmFrom"))
        defer { timer.dispose() }
        let blockerStarted = LockedValue<MonotonicInstant?>(nil)
        let blockerEnded = LockedValue<MonotonicInstant?>(nil)
        // The timer thread is busy with a long call for 1.2 s…
        try timer.schedule(after: .zero) {
            let start = MonotonicInstant.now()
            blockerStarted.value = start
            Self.sleep(until: start.advanced(by: .milliseconds(1200)))
            blockerEnded.value = .now()
        }
        // …while another thread schedules a call due 400 ms later, well within the block.
        let before = LockedValue<MonotonicInstant?>(nil)
        let fired = LockedValue<MonotonicInstant?>(nil)
        startThread(named: "TmFromSched") {
            while blockerStarted.value == nil { usleep(500) }
            before.value = .now()
            _ = try? timer.schedule(after: .milliseconds(400)) { fired.value = .now() }
        }
        #expect(await eventually(timeout: .seconds(5)) { fired.value != nil })
        let scheduledAt = try #require(before.value)
        let blockerStart = try #require(blockerStarted.value)
        try #require(scheduledAt.advanced(by: .milliseconds(400)) < blockerStart.advanced(by: .milliseconds(1200)),
                     "the scheduling thread was too slow to schedule inside the block")
        let firedAt = try #require(fired.value)
        let blockEnd = try #require(blockerEnded.value)
        #expect(firedAt >= scheduledAt.advanced(by: .milliseconds(400)))
        #expect(firedAt >= blockEnd)
        // Due long ago, it runs as soon as the blocker ends, not 400 ms after.
        #expect(blockEnd.duration(to: firedAt) < Self.late)
    }

    @Test("schedule(at:) with an instant that has passed runs at once")
    func pastInstantRunsAtOnce() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmPast"))
        defer { timer.dispose() }
        // The timer's thread has started and run a call: what is timed below is the call, not the
        // thread's start (which took more than 250 ms once, under the thread sanitizer on a busy machine).
        let started = LockedValue(false)
        try timer.schedule(after: .zero) { started.value = true }
        #expect(await eventually(timeout: .seconds(10)) { started.value })
        let before = MonotonicInstant.now()
        let fired = LockedValue<MonotonicInstant?>(nil)
        try timer.schedule(at: .now - .seconds(5)) { fired.value = .now() }
        #expect(await eventually(timeout: .seconds(5)) { fired.value != nil })
        #expect(before.duration(to: try #require(fired.value)) < Self.late)

        let zero = LockedValue<MonotonicInstant?>(nil)
        let beforeZero = MonotonicInstant.now()
        try timer.schedule(after: .zero) { zero.value = .now() }
        #expect(await eventually(timeout: .seconds(5)) { zero.value != nil })
        #expect(beforeZero.duration(to: try #require(zero.value)) < Self.late)
    }

    @Test("schedule(at:) honours a ContinuousClock instant: never early, < 250 ms late")
    func continuousClockInstantHonoured() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmAt"))
        defer { timer.dispose() }
        let start = ContinuousClock.now
        let offsets: [Duration] = [.milliseconds(350), .milliseconds(100), .milliseconds(600), .milliseconds(220)]
        let fired = Recorder<(index: Int, at: ContinuousClock.Instant)>()
        for (index, offset) in offsets.enumerated() {
            try timer.schedule(at: start + offset) { fired.append((index, .now)) }
        }
        #expect(await eventually(timeout: .seconds(5)) { fired.count == offsets.count })
        let runs = fired.values
        #expect(runs.map(\.index) == [1, 3, 0, 2])
        for run in runs {
            let instant = start + offsets[run.index]
            #expect(run.at >= instant, "ran \(instant - run.at) early")
            #expect(run.at - instant < Self.late)
        }
    }

    // MARK: Handles

    @Test("cancel before the call fires: true once, and the work never runs")
    func cancelBeforeFire() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCanc"))
        defer { timer.dispose() }
        let ran = Counter()
        let instant = ContinuousClock.now + .milliseconds(500)
        let handle = try timer.schedule(at: instant) { ran.increment() }
        let sentinelRan = Counter()
        // Due at the same instant, after it: once the sentinel has run, the cancelled call would have.
        let sentinel = try timer.schedule(at: instant) { sentinelRan.increment() }
        #expect(timer.pendingCount == 2)
        #expect(!handle.isCancelled)
        #expect(!handle.hasFired)

        #expect(handle.cancel())
        #expect(handle.isCancelled)
        #expect(!handle.hasFired)
        #expect(timer.pendingCount == 1)
        #expect(!handle.cancel())
        #expect(handle.isCancelled)

        #expect(await eventually(timeout: .seconds(5)) { sentinelRan.value == 1 })
        #expect(ran.value == 0)
        #expect(!handle.hasFired)
        #expect(handle.isCancelled)
        #expect(!handle.cancel())
        #expect(sentinel.hasFired)
        #expect(!sentinel.isCancelled)
        #expect(timer.pendingCount == 0)
    }

    @Test("cancel while the call runs or after it ran returns false")
    func cancelDuringAndAfterRun() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRan"))
        defer { timer.dispose() }
        let gate = Latch()
        let started = Counter()
        let finished = Counter()
        let handle = try timer.schedule(after: .zero) {
            started.increment()
            gate.wait(timeout: .seconds(60))
            finished.increment()
        }
        #expect(await eventually(timeout: .seconds(5)) { started.value == 1 })
        #expect(handle.hasFired)
        #expect(!handle.cancel())
        #expect(!handle.isCancelled)
        gate.countDown()
        #expect(await eventually(timeout: .seconds(5)) { finished.value == 1 })
        #expect(!handle.cancel())
        #expect(!handle.cancel())
        #expect(handle.hasFired)
        #expect(!handle.isCancelled)
        #expect(started.value == 1)
        #expect(timer.pendingCount == 0)
    }

    @Test("handles are equal only to themselves")
    func handleIdentity() throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmId"))
        defer { timer.dispose() }
        let a = try timer.schedule(after: .seconds(3600)) {}
        let b = try timer.schedule(after: .seconds(3600)) {}
        #expect(a == a)
        #expect(a != b)
        #expect(Set([a, b, a]).count == 2)
    }

    @Test("the timer lets go of a call's closure once it ran, was cancelled or was dropped")
    func workIsReleased() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRel"))
        // Each closure holds the one tracked object made for it: it is live while the timer holds the closure.
        let tracker = LifetimeTracker()
        let ran = Counter()
        var handles: [TimerHandle] = []
        do {
            let cancelled = tracker.make()
            handles.append(try timer.schedule(after: .seconds(3600)) { withExtendedLifetime(cancelled) {} })
        }
        #expect(tracker.liveCount == 1)
        #expect(handles[0].cancel())
        #expect(tracker.liveCount == 0)  // at once: cancelling drops the closure
        handles.append(try timer.schedule(after: .zero, trackedWork(tracker, ran)))
        #expect(await eventually(timeout: .seconds(5)) { ran.value == 1 && tracker.liveCount == 0 })
        handles.append(try timer.schedule(every: .milliseconds(20), trackedWork(tracker, ran)))
        #expect(await eventually(timeout: .seconds(5)) { ran.value >= 3 })
        #expect(tracker.liveCount == 1)  // a repeating call keeps its closure between runs
        #expect(handles[2].cancel())
        #expect(await eventually(timeout: .seconds(5)) { tracker.liveCount == 0 })
        do {
            let dropped = tracker.make()
            handles.append(try timer.schedule(after: .seconds(3600)) { withExtendedLifetime(dropped) {} })
        }
        #expect(tracker.liveCount == 1)
        #expect(timer.dispose() == 1)
        #expect(tracker.liveCount == 0)  // at once: dispose drops the closures of the calls it drops
        #expect(handles.count == 4)  // the handles outlive their closures
    }

    // MARK: Threads

    @Test("calls run on one thread that carries the timer's name, in Foundation and the kernel")
    func callsRunOnTheNamedTimerThread() async throws {
        let name = KernelThreads.uniqueName("TmName")
        let timer = TimerThread(name: name)
        defer { timer.dispose() }
        #expect(timer.name == name)
        let seen = Recorder<(foundation: String?, kernel: String?, thread: pthread_t)>()
        for delay in [0, 30, 10] {
            try timer.schedule(after: .milliseconds(delay)) {
                seen.append((Thread.current.name, KernelThreads.currentName(), pthread_self()))
            }
        }
        let repeating = try timer.schedule(every: .milliseconds(15)) {
            seen.append((Thread.current.name, KernelThreads.currentName(), pthread_self()))
        }
        #expect(await eventually(timeout: .seconds(5)) { seen.count >= 6 })
        repeating.cancel()
        let records = seen.values
        for record in records {
            #expect(record.foundation == name)
            #expect(record.kernel == name)
            #expect(pthread_equal(record.thread, records[0].thread) != 0)
        }
        #expect(pthread_equal(records[0].thread, pthread_self()) == 0)
    }

    @Test("a name longer than the kernel keeps is cut to 15 bytes there, never inside a character")
    func longNameIsCutForTheKernel() async throws {
        // The unique part first, so the cut name is unique too; "ö" is two bytes and straddles byte 15.
        let unique = KernelThreads.uniqueName("Tm")
        let name = unique + String(repeating: "x", count: 14 - unique.utf8.count) + "ö timer"
        var expected = ""
        for character in name {
            if expected.utf8.count + character.utf8.count > 15 { break }
            expected.append(character)
        }
        #expect(expected.utf8.count == 14)
        let timer = TimerThread(name: name)
        defer { timer.dispose() }
        #expect(timer.name == name)
        let kernelName = LockedValue<String?>(nil)
        try timer.schedule(after: .zero) { kernelName.value = KernelThreads.currentName() }
        #expect(await eventually(timeout: .seconds(5)) { kernelName.value != nil })
        #expect(kernelName.value == expected)
    }

    // MARK: Repeating

    @Test("schedule(every:) runs at a fixed rate: the k-th run never before start + k × interval")
    func repeatingRunsAtFixedRate() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmEvery"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(100)
        let runs = Recorder<MonotonicInstant>()
        let start = MonotonicInstant.now()
        let handle = try timer.schedule(every: interval) { runs.append(.now()) }
        let scheduled = MonotonicInstant.now()
        #expect(timer.pendingCount == 1)
        #expect(!handle.hasFired)

        #expect(await eventually(timeout: .seconds(5)) { runs.count >= 5 })
        #expect(timer.pendingCount == 1)  // a repeating call counts once
        #expect(handle.cancel())
        let runsAtCancel = runs.count
        #expect(handle.isCancelled)
        #expect(handle.hasFired)
        #expect(!handle.cancel())

        // Three more beats pass: at most the one run in progress when cancel returned may appear.
        let sentinel = Counter()
        try timer.schedule(after: interval * 3) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(5)) { sentinel.value == 1 })
        #expect(runs.count <= runsAtCancel + 1)
        #expect(timer.pendingCount == 0)

        let times = runs.values
        for (offset, time) in times.enumerated() {
            let beat = start.advanced(by: interval * (offset + 1))
            #expect(time >= beat, "run \(offset + 1) came \(time.duration(to: beat)) early")
        }
        #expect(scheduled.advanced(by: interval).duration(to: times[0]) < Self.late)
    }

    @Test("a repeating call cancelled from another call of its timer never runs again")
    func repeatingCancelledBetweenRuns() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmStop"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(50)
        let runs = Counter()
        let handle = try timer.schedule(every: interval) { runs.increment() }
        // Calls run serially on the timer thread, so no run is in progress when this one cancels.
        let runsAtCancel = LockedValue<Int?>(nil)
        let cancelResult = LockedValue<Bool?>(nil)
        try timer.schedule(after: .milliseconds(175)) {
            runsAtCancel.value = runs.value
            cancelResult.value = handle.cancel()
        }
        #expect(await eventually(timeout: .seconds(5)) { cancelResult.value != nil })
        let sentinel = Counter()
        try timer.schedule(after: interval * 4) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(5)) { sentinel.value == 1 })
        #expect(cancelResult.value == true)
        let atCancel = try #require(runsAtCancel.value)
        #expect(atCancel >= 1)
        #expect(runs.value == atCancel)
        #expect(handle.isCancelled)
        #expect(!handle.cancel())
        #expect(timer.pendingCount == 0)
    }

    @Test("a repeating call can cancel itself from inside its own run")
    func repeatingCancelsItself() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmSelf"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(30)
        let handleBox = LockedValue<TimerHandle?>(nil)
        let runs = Counter()
        let cancelledAt = LockedValue<(run: Int, result: Bool)?>(nil)
        let handle = try timer.schedule(every: interval) {
            let run = runs.increment()
            if run >= 3, cancelledAt.value == nil, let handle = handleBox.value {
                cancelledAt.value = (run, handle.cancel())
            }
        }
        handleBox.value = handle
        #expect(await eventually(timeout: .seconds(5)) { cancelledAt.value != nil })
        let sentinel = Counter()
        try timer.schedule(after: interval * 5) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(5)) { sentinel.value == 1 })
        let cancelled = try #require(cancelledAt.value)
        #expect(cancelled.result)
        #expect(runs.value == cancelled.run)
        #expect(handle.isCancelled)
        #expect(handle.hasFired)
        #expect(!handle.cancel())
        #expect(timer.pendingCount == 0)
    }

    @Test("beats missed while the timer thread was blocked are skipped, not run in a burst")
    func missedBeatsAreSkipped() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmSkip"))
        defer { timer.dispose() }
        let interval = Duration.milliseconds(100)
        let runs = Recorder<(start: MonotonicInstant, end: MonotonicInstant)>()
        let blockEnd = LockedValue<MonotonicInstant?>(nil)
        let t0 = MonotonicInstant.now()
        let handle = try timer.schedule(every: interval) {
            let start = MonotonicInstant.now()
            runs.append((start, .now()))
        }
        let t1 = MonotonicInstant.now()
        // Mid-beat, a call blocks the timer thread for about four and a half intervals.
        try timer.schedule(after: interval + interval / 2) {
            Self.sleep(until: t0.advanced(by: interval * 6 + interval / 2))
            blockEnd.value = .now()
        }
        #expect(await eventually(timeout: .seconds(5)) {
            guard let end = blockEnd.value else { return false }
            return runs.values.filter { $0.start >= end }.count >= 4
        })
        #expect(handle.cancel())
        let end = try #require(blockEnd.value)
        let all = runs.values

        // Fixed rate from the call: the k-th run never before t0 + k × interval.
        for (offset, run) in all.enumerated() {
            #expect(run.start >= t0.advanced(by: interval * (offset + 1)), "run \(offset + 1) early")
        }
        let after = Array(all.drop { $0.start < end })
        try #require(after.count >= 4)
        // The beat that fell due during the block runs at once when the block ends…
        #expect(end.duration(to: after[0].start) < Self.late)
        // …and the ones after it keep to the grid: each waits for the first beat after the run before
        // it ended. Bunched catch-up runs would follow each other at once.
        for index in 1..<after.count {
            let previousEnd = after[index - 1].end
            // The smallest beat index m with t1 + m × interval ≥ previousEnd; the true start of the
            // grid lies in [t0, t1], so the next run is no earlier than t0 + m × interval.
            let elapsed = t1.duration(to: previousEnd)
            var beat = Int((elapsed / interval).rounded(.up))
            if t1.advanced(by: interval * beat) < previousEnd { beat += 1 }
            let earliest = max(previousEnd, t0.advanced(by: interval * beat))
            #expect(after[index].start >= earliest,
                    "run \(index) after the block came \(after[index].start.duration(to: earliest)) before its beat")
        }
        // Within three intervals of the catch-up run there is room for three beats, not a burst.
        let window = after[0].start.advanced(by: interval * 3)
        #expect(after.filter { $0.start <= window }.count <= 4)
    }

    // MARK: Tags

    @Test("cancelAll(tag:) cancels exactly the pending calls of that tag and counts them")
    func cancelAllByTag() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmTag"))
        defer { timer.dispose() }
        let ran = Counter()
        let far = Duration.seconds(3600)
        let a = try (0..<5).map { _ in try timer.schedule(after: far, tag: "a") { ran.increment() } }
        let intOne = try (0..<3).map { _ in try timer.schedule(after: far, tag: 1) { ran.increment() } }
        let stringOne = try (0..<2).map { _ in try timer.schedule(after: far, tag: "1") { ran.increment() } }
        let untagged = try (0..<4).map { _ in try timer.schedule(after: far) { ran.increment() } }
        let repeating = try timer.schedule(every: far, tag: "a") { ran.increment() }
        #expect(timer.pendingCount == 15)

        // One of "a" is cancelled on its own first: cancelAll does not count it again.
        #expect(a[0].cancel())
        #expect(timer.cancelAll(tag: "a") == 5)
        #expect(a.allSatisfy { $0.isCancelled })
        #expect(repeating.isCancelled)
        #expect(timer.pendingCount == 9)
        #expect(timer.cancelAll(tag: "a") == 0)

        #expect(timer.cancelAll(tag: 1) == 3)
        #expect(intOne.allSatisfy { $0.isCancelled })
        #expect(!stringOne.contains { $0.isCancelled })
        #expect(timer.pendingCount == 6)
        #expect(timer.cancelAll(tag: "1") == 2)
        #expect(stringOne.allSatisfy { $0.isCancelled })
        #expect(timer.cancelAll(tag: "b") == 0)
        #expect(timer.pendingCount == 4)
        #expect(!untagged.contains { $0.isCancelled })

        // A call that has run is not counted.
        let done = Counter()
        let fired = try timer.schedule(after: .zero, tag: "fired") { done.increment() }
        #expect(await eventually(timeout: .seconds(5)) { done.value == 1 })
        #expect(timer.cancelAll(tag: "fired") == 0)
        #expect(!fired.isCancelled)
        #expect(ran.value == 0)
        #expect(untagged.allSatisfy { $0.cancel() })
        #expect(timer.pendingCount == 0)
    }

    @Test("cancelAll(tag:) stops a running repeating call of that tag")
    func cancelAllStopsRepeating() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmTagR"))
        defer { timer.dispose() }
        let runs = Counter()
        let handle = try timer.schedule(every: .milliseconds(20), tag: 7) { runs.increment() }
        #expect(await eventually(timeout: .seconds(5)) { runs.value >= 2 })
        #expect(timer.cancelAll(tag: 7) == 1)
        let atCancel = runs.value
        let sentinel = Counter()
        try timer.schedule(after: .milliseconds(100)) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(5)) { sentinel.value == 1 })
        #expect(runs.value <= atCancel + 1)
        #expect(handle.isCancelled)
        #expect(!handle.cancel())
        #expect(timer.cancelAll(tag: 7) == 0)
    }

    // MARK: dispose

    @Test("dispose() counts the pending calls it drops, cancels their handles and stops the thread")
    func disposeReportsAndStops() async throws {
        let name = KernelThreads.uniqueName("TmDisp")
        let timer = TimerThread(name: name)
        let ran = Counter()
        let done = Counter()
        let fired = try timer.schedule(after: .zero) { done.increment() }
        #expect(await eventually(timeout: .seconds(5)) { done.value == 1 })
        #expect(await eventually(timeout: .seconds(5)) { KernelThreads.names().contains(name) })
        var pending = try (0..<6).map { index in
            try timer.schedule(after: .seconds(3600 + index), tag: index % 2) { ran.increment() }
        }
        pending.append(try timer.schedule(every: .seconds(3600)) { ran.increment() })
        pending.append(try timer.schedule(at: .now + .seconds(3600)) { ran.increment() })
        let cancelled = try timer.schedule(after: .seconds(3600)) { ran.increment() }
        #expect(cancelled.cancel())
        #expect(timer.pendingCount == 8)

        #expect(timer.dispose() == 8)
        #expect(timer.pendingCount == 0)
        for handle in pending {
            #expect(handle.isCancelled)
            #expect(!handle.hasFired)
            #expect(!handle.cancel())
        }
        #expect(fired.hasFired)
        #expect(!fired.isCancelled)
        #expect(timer.cancelAll(tag: 0) == 0)
        #expect(timer.dispose() == 0)

        #expect(await eventually(timeout: .seconds(3)) { !KernelThreads.names().contains(name) },
                "the timer thread \(name) is still alive")
        #expect(ran.value == 0)
    }

    @Test("after dispose() every schedule throws TimerThreadError.disposed naming the timer")
    func scheduleAfterDisposeThrows() throws {
        let name = KernelThreads.uniqueName("TmThrow")
        let timer = TimerThread(name: name)
        #expect(timer.dispose() == 0)
        let ran = Counter()
        #expect(throws: TimerThreadError.disposed(name: name)) { try timer.schedule(after: .zero) { ran.increment() } }
        #expect(throws: TimerThreadError.disposed(name: name)) { try timer.schedule(at: .now) { ran.increment() } }
        #expect(throws: TimerThreadError.disposed(name: name)) {
            try timer.schedule(every: .seconds(1), tag: "t") { ran.increment() }
        }
        let error = #expect(throws: TimerThreadError.self) { try timer.schedule(after: .seconds(1)) {} }
        #expect(try #require(error).description.contains(name))
        #expect(String(describing: try #require(error)).contains(name))
        #expect(timer.pendingCount == 0)
        #expect(timer.dispose() == 0)
        #expect(ran.value == 0)
        // Never started, so no thread was ever made.
        #expect(!KernelThreads.names().contains(name))
    }

    @Test("dispose() while a call runs: the call finishes, a running repeating call stops and counts, the thread exits")
    func disposeWhileRunning() async throws {
        for repeating in [false, true] {
            let name = KernelThreads.uniqueName(repeating ? "TmDrR" : "TmDrO")
            let timer = TimerThread(name: name)
            let gate = Latch()
            let started = Counter()
            let finished = Counter()
            let work: @Sendable () -> Void = {
                started.increment()
                gate.wait(timeout: .seconds(60))
                finished.increment()
            }
            let running = repeating
                ? try timer.schedule(every: .milliseconds(10), work)
                : try timer.schedule(after: .zero, work)
            let ran = Counter()
            let pending = try (0..<3).map { _ in try timer.schedule(after: .seconds(3600)) { ran.increment() } }
            #expect(await eventually(timeout: .seconds(5)) { started.value == 1 })

            // A repeating call mid-run will never run again: it counts with the three dropped calls.
            #expect(timer.pendingCount == (repeating ? 4 : 3))
            #expect(timer.dispose() == (repeating ? 4 : 3))
            #expect(pending.allSatisfy { $0.isCancelled })
            #expect(running.hasFired)
            // A one-shot call that started has run; a repeating one will not run again.
            #expect(running.isCancelled == repeating, "repeating: \(repeating)")
            #expect(!running.cancel())
            gate.countDown()
            #expect(await eventually(timeout: .seconds(5)) { finished.value == 1 })
            #expect(await eventually(timeout: .seconds(3)) { !KernelThreads.names().contains(name) },
                    "the timer thread \(name) is still alive")
            #expect(started.value == 1)
            #expect(ran.value == 0)
            #expect(timer.pendingCount == 0)
            #expect(running.isCancelled == repeating)
            #expect(!running.cancel())
        }
    }

    @Test("dispose() from inside a call of the timer itself")
    func disposeFromInsideACall() async throws {
        let name = KernelThreads.uniqueName("TmDIn")
        let timer = TimerThread(name: name)
        let ran = Counter()
        let pending = try (0..<4).map { _ in try timer.schedule(after: .seconds(3600)) { ran.increment() } }
        let dropped = LockedValue<Int?>(nil)
        try timer.schedule(after: .zero) { dropped.value = timer.dispose() }
        #expect(await eventually(timeout: .seconds(5)) { dropped.value != nil })
        #expect(dropped.value == 4)
        #expect(pending.allSatisfy { $0.isCancelled })
        #expect(await eventually(timeout: .seconds(3)) { !KernelThreads.names().contains(name) })
        #expect(throws: TimerThreadError.disposed(name: name)) { try timer.schedule(after: .zero) {} }
    }

    // MARK: Memory

    @Test("a pending call's handle fits one 64-byte allocation, tagged, untagged or repeating at either spacing")
    func handleIsSmall() throws {
        let timer = TimerThread(name: "TTsize")
        defer { timer.dispose() }
        // malloc.h is not part of Swift's Glibc module; look the function up.
        typealias UsableSize = @convention(c) (UnsafeMutableRawPointer) -> Int
        let address = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_usable_size"))
        let usableSize = unsafeBitCast(address, to: UsableSize.self)
        // malloc may hand out a slightly larger free block rather than split it, so one allocation
        // can read larger than asked; the smallest of many reads what a handle asks for.
        func smallestSize(_ schedule: () throws -> TimerHandle) rethrows -> Int {
            var handles: [TimerHandle] = []
            for _ in 0..<64 { handles.append(try schedule()) }
            return handles.map { usableSize(Unmanaged.passUnretained($0).toOpaque()) }.min()!
        }
        let plain = try smallestSize { try timer.schedule(after: .seconds(3600)) {} }
        let tagged = try smallestSize { try timer.schedule(after: .seconds(3600), tag: "side table") {} }
        let repeating = try smallestSize { try timer.schedule(every: .seconds(3600)) {} }
        let delayed = try smallestSize { try timer.schedule(every: .seconds(3600), spacing: .fixedDelay, tag: "t") {} }
        for size in [plain, tagged, repeating, delayed] {
            #expect(size <= 56, "a TimerHandle takes \(size) bytes")
        }
        #expect(timer.cancelAll(tag: "side table") == 64)
        #expect(timer.cancelAll(tag: "t") == 64)
        #expect(timer.pendingCount == 128)
        // The narrow interval still reads back whole.
        #expect(try timer.schedule(every: .milliseconds(1_500)) {}.interval == .milliseconds(1_500))
        #expect(try timer.schedule(after: .seconds(3600)) {}.interval == nil)
    }

    // MARK: pendingCount

    @Test("pendingCount counts calls waiting for their deadline")
    func pendingCountFollowsCalls() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmPend"))
        defer { timer.dispose() }
        #expect(timer.pendingCount == 0)
        let far = try (0..<10).map { _ in try timer.schedule(after: .seconds(3600)) {} }
        #expect(timer.pendingCount == 10)
        let repeating = try timer.schedule(every: .milliseconds(10)) {}
        #expect(timer.pendingCount == 11)
        let done = Counter()
        try timer.schedule(after: .milliseconds(30)) { done.increment() }
        #expect(timer.pendingCount == 12)
        #expect(await eventually(timeout: .seconds(5)) { done.value == 1 })
        // The one-shot ran and left; the repeating call is back in the heap between runs (or running).
        #expect(await eventually(timeout: .seconds(5)) { timer.pendingCount == 11 })
        #expect(far[3].cancel())
        #expect(far[3].cancel() == false)
        #expect(repeating.cancel())
        #expect(timer.pendingCount == 9)
        #expect(timer.dispose() == 9)
        #expect(timer.pendingCount == 0)
    }

    // MARK: Idle

    @Test("an idle timer thread uses no CPU and does not wake up",
          arguments: [Duration.seconds(3600), .seconds(Int64.max)])
    func idleTimerUsesNoCPU(farFuture: Duration) async throws {
        let name = KernelThreads.uniqueName("TmIdle")
        let timer = TimerThread(name: name)
        defer { timer.dispose() }
        try timer.schedule(after: farFuture) { Issue.record("the far-future call ran") }
        let first = UsageSlot()
        try timer.schedule(after: .zero) { first.store(ThreadUsage.current()) }
        #expect(await eventually(timeout: .seconds(5)) { first.usage != nil })
        // Only the far-future call is pending now: the thread sleeps through the next 1.5 s. The
        // kernel's count of its context switches, read from outside, must not move at all.
        try await Task.sleep(for: .milliseconds(50))
        let thread = try #require(KernelThreads.ids(named: name).first)
        let switchesBefore = try #require(KernelThreads.contextSwitches(ofThread: thread))
        try await Task.sleep(for: .milliseconds(1500))
        let switchesAfter = try #require(KernelThreads.contextSwitches(ofThread: thread))
        #expect(switchesAfter.voluntary == switchesBefore.voluntary)
        #expect(switchesAfter.involuntary == switchesBefore.involuntary)
        // And its CPU time, read by the thread itself, barely moves across the idle stretch.
        let second = UsageSlot()
        try timer.schedule(after: .zero) { second.store(ThreadUsage.current()) }
        #expect(await eventually(timeout: .seconds(5)) { second.usage != nil })
        let before = try #require(first.usage)
        let after = try #require(second.usage)
        #expect(after.cpuTime - before.cpuTime < .milliseconds(20))
        #expect(timer.pendingCount == 1)
    }
}

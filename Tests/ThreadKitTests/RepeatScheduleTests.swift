import Testing
@testable import ThreadKit
import SeededRandom

/// When a repeating call runs next, for both spacings, with made-up instants: no threads, no clock.
@Suite struct RepeatScheduleTests {
    static let ms: UInt64 = 1_000_000
    static let interval = Duration.milliseconds(100)
    /// The beat the run under test was due at.
    static let due: UInt64 = 5_000 * ms

    static func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

    static func next(now: UInt64, due: UInt64 = due, interval: Duration = interval) -> UInt64 {
        RepeatSchedule.nextDeadline(after: at(due), interval: interval, now: at(now)).nanoseconds
    }

    /// The next deadline of a fixed-delay call whose run was due at `due` and returned at `returned`.
    static func nextAfterDelay(returned: UInt64, due: UInt64 = due, interval: Duration = interval) -> UInt64 {
        RepeatSchedule.nextDeadline(after: at(due), interval: interval, spacing: .fixedDelay, now: at(returned)).nanoseconds
    }

    /// 20,000 random runs: a grid step (up to 1 µs, or up to 1 s), the instant the run was due on
    /// that grid, and an instant up to 51 steps after it (when the run is asked for its next beat).
    static func randomRuns(seed: UInt64, smallSteps: Bool) -> [(step: UInt64, due: UInt64, later: UInt64)] {
        var random = SplitMix64(seed: seed)
        return (0..<20_000).map { _ in
            let step = UInt64.random(in: 1...(smallSteps ? 1_000 : 1_000_000_000), using: &random)
            let due = UInt64.random(in: 0...(1 << 50), using: &random)
            let later = due + UInt64.random(in: 0...(step * UInt64.random(in: 0...50, using: &random) + step), using: &random)
            return (step, due, later)
        }
    }

    // MARK: Fixed rate

    @Test("a run that finished on time is followed by the next beat")
    func onTime() {
        #expect(Self.next(now: Self.due) == Self.due + 100 * Self.ms)
        #expect(Self.next(now: Self.due + 1 * Self.ms) == Self.due + 100 * Self.ms)
        #expect(Self.next(now: Self.due + 100 * Self.ms - 1) == Self.due + 100 * Self.ms)
    }

    @Test("a run that started late keeps the grid: the next beat is not pushed back")
    func slightlyLate() {
        #expect(Self.next(now: Self.due + 30 * Self.ms) == Self.due + 100 * Self.ms)
        #expect(Self.next(now: Self.due + 99 * Self.ms) == Self.due + 100 * Self.ms)
    }

    @Test("beats missed entirely are skipped, and the next one is on the grid")
    func missedSeveralBeats() {
        // Beats at +100, +200, +300 and +400 have passed: the next is +500, not +100 (a burst) nor now + 100.
        #expect(Self.next(now: Self.due + 450 * Self.ms) == Self.due + 500 * Self.ms)
        #expect(Self.next(now: Self.due + 100 * Self.ms + 1) == Self.due + 200 * Self.ms)
        #expect(Self.next(now: Self.due + 10_000 * Self.ms + 1) == Self.due + 10_100 * Self.ms)
    }

    @Test("a beat that falls exactly on now is due, as the timer heap treats a deadline equal to now")
    func exactlyOnABeat() {
        #expect(Self.next(now: Self.due + 100 * Self.ms) == Self.due + 100 * Self.ms)
        #expect(Self.next(now: Self.due + 300 * Self.ms) == Self.due + 300 * Self.ms)
        #expect(Self.next(now: Self.due + 300 * Self.ms - 1) == Self.due + 300 * Self.ms)
    }

    @Test("odd intervals and one nanosecond intervals stay on their grid")
    func oddIntervals() {
        let seven = Duration.nanoseconds(7)
        #expect(Self.next(now: 100, due: 100, interval: seven) == 107)
        #expect(Self.next(now: 120, due: 100, interval: seven) == 121)
        #expect(Self.next(now: 121, due: 100, interval: seven) == 121)
        #expect(Self.next(now: 122, due: 100, interval: seven) == 128)
        #expect(Self.next(now: 1_000, due: 0, interval: .nanoseconds(1)) == 1_000)
        // Sub-nanosecond parts of an interval do not stop it advancing.
        #expect(Self.next(now: 10, due: 10, interval: Duration(secondsComponent: 0, attosecondsComponent: 1_000_000_005)) == 11)
    }

    @Test("a beat past the end of the time line saturates instead of wrapping")
    func saturates() {
        #expect(Self.next(now: 0, due: .max - 10) == .max)
        #expect(Self.next(now: .max, due: .max - 10) == .max)
        #expect(Self.next(now: .max, due: 0, interval: .seconds(Int64.max)) == .max)
        #expect(Self.next(now: .max - 1, due: 0, interval: .nanoseconds(Int64.max)) == UInt64.max - 1)
        #expect(Self.next(now: .max - 5, due: 0, interval: .nanoseconds(UInt64.max / 3 + 1)) == .max)
    }

    @Test("random instants: the result is the first beat of the grid at or after now", arguments: 0..<4)
    func randomInstantsStayOnTheGrid(seed: UInt64) {
        var failures: [String] = []
        for (step, due, now) in Self.randomRuns(seed: 0xBEA7 &+ seed, smallSteps: seed.isMultiple(of: 2)) {
            let next = Self.next(now: now, due: due, interval: .nanoseconds(step))
            let onGrid = next > due && (next - due) % step == 0
            let notPast = next >= now
            let noBeatSkippedThatIsStillDue = next - step < now || next - step == due
            if !(onGrid && notPast && noBeatSkippedThatIsStillDue) {
                failures.append("due \(due), step \(step), now \(now): next \(next)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.prefix(3))")
    }

    @Test("fixedRate is the default spacing: the same answers, given explicitly or not", arguments: 0..<2)
    func fixedRateIsTheDefault(seed: UInt64) {
        var random = SplitMix64(seed: 0xDEFA &+ seed)
        for _ in 0..<5_000 {
            let due = UInt64.random(in: 0...(1 << 50), using: &random)
            let now = due + UInt64.random(in: 0...1_000_000_000, using: &random)
            let interval = Duration.nanoseconds(Int64.random(in: 1...300_000_000, using: &random))
            let implicit = RepeatSchedule.nextDeadline(after: Self.at(due), interval: interval, now: Self.at(now))
            let explicit = RepeatSchedule.nextDeadline(after: Self.at(due), interval: interval, spacing: .fixedRate, now: Self.at(now))
            #expect(implicit == explicit)
        }
    }

    // MARK: Fixed delay

    @Test("fixedDelay: the next run is due one interval after the run returned, however late it ran")
    func fixedDelayCountsFromTheReturn() {
        // A 60 ms run due at `due` that started on time returns at +60: next at +160, not +100.
        #expect(Self.nextAfterDelay(returned: Self.due + 60 * Self.ms) == Self.due + 160 * Self.ms)
        // Returned at once: the next is one interval after, as for a fixed rate.
        #expect(Self.nextAfterDelay(returned: Self.due) == Self.due + 100 * Self.ms)
        // Ran long, past several beats: no beat is skipped or caught up, it simply waits an interval.
        #expect(Self.nextAfterDelay(returned: Self.due + 450 * Self.ms) == Self.due + 550 * Self.ms)
        #expect(Self.nextAfterDelay(returned: Self.due + 100 * Self.ms) == Self.due + 200 * Self.ms)
        // Where the last run was due does not matter, only when it returned.
        #expect(Self.nextAfterDelay(returned: 7_000, due: 0) == 7_000 + 100 * Self.ms)
        #expect(Self.nextAfterDelay(returned: 7_000, due: 6_999) == 7_000 + 100 * Self.ms)
    }

    @Test("fixedDelay: odd, one-nanosecond and sub-nanosecond intervals still move the call on")
    func fixedDelayOddIntervals() {
        #expect(Self.nextAfterDelay(returned: 100, due: 90, interval: .nanoseconds(7)) == 107)
        #expect(Self.nextAfterDelay(returned: 100, due: 90, interval: .nanoseconds(1)) == 101)
        #expect(Self.nextAfterDelay(returned: 100, due: 90, interval: .nanoseconds(0.25)) == 101)
        #expect(Self.nextAfterDelay(returned: 10, due: 10, interval: Duration(secondsComponent: 0, attosecondsComponent: 1_000_000_005)) == 11)
    }

    @Test("fixedDelay: past the end of the time line the next run saturates instead of wrapping")
    func fixedDelaySaturates() {
        #expect(Self.nextAfterDelay(returned: .max - 10) == .max)
        #expect(Self.nextAfterDelay(returned: .max) == .max)
        #expect(Self.nextAfterDelay(returned: 5, interval: .seconds(Int64.max)) == 5 + UInt64(Int64.max))
        #expect(Self.nextAfterDelay(returned: 5, interval: .seconds(Int64.max) + .seconds(1)) == 5 + UInt64(Int64.max))
        #expect(Self.nextAfterDelay(returned: .max / 2 + 10, interval: .seconds(Int64.max)) == .max)
    }

    @Test("random instants: a fixed delay is exactly one interval after the return, a fixed rate on the grid; the delay is never sooner",
          arguments: 0..<4)
    func randomInstantsForBothSpacings(seed: UInt64) {
        var failures: [String] = []
        for (step, due, returned) in Self.randomRuns(seed: 0xDE1A &+ seed, smallSteps: seed.isMultiple(of: 2)) {
            let delay = Self.nextAfterDelay(returned: returned, due: due, interval: .nanoseconds(step))
            let rate = Self.next(now: returned, due: due, interval: .nanoseconds(step))
            if delay != returned + step { failures.append("delay: due \(due), step \(step), returned \(returned): \(delay)") }
            // The grid's next beat is within one step of the return; a fixed delay waits the whole step.
            if rate > delay { failures.append("rate after delay: due \(due), step \(step), returned \(returned)") }
        }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.prefix(3))")
    }
}

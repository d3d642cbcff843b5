/// When a repeating timer call runs next: a pure decision, made from instants, for both spacings.
enum RepeatSchedule {
    /// The deadline of the next run of a repeating call whose last run was due at `deadline` and
    /// returned at `now`.
    ///
    /// - `.fixedRate`: beats stay on the grid `deadline + k × interval`. Beats that have already
    ///   passed are skipped, not run in a burst, so a call that fell behind resumes at its normal
    ///   rate. A beat that falls exactly on `now` has not passed: it is due, as the timer heap treats
    ///   a deadline equal to now.
    /// - `.fixedDelay`: `interval` after `now`, whenever the last run was due.
    ///
    /// An interval under one nanosecond counts as one, so the call always moves on. Past the end of
    /// the time line the result saturates at its last instant.
    ///
    /// - Parameters:
    ///   - deadline: When the run that just ended was due.
    ///   - interval: The call's interval; more than zero.
    ///   - spacing: How runs are spaced.
    ///   - now: When the run returned (for `.fixedRate`, any instant since will do).
    static func nextDeadline(
        after deadline: MonotonicInstant, interval: Duration, spacing: TimerThread.Spacing = .fixedRate,
        now: MonotonicInstant
    ) -> MonotonicInstant {
        let step = UInt64(max(1, interval.nanosecondsSaturated))
        switch spacing {
        case .fixedRate:
            return nextBeat(after: deadline, step: step, now: now)
        case .fixedDelay:
            let (next, overflow) = now.nanoseconds.addingReportingOverflow(step)
            return MonotonicInstant(nanoseconds: overflow ? .max : next)
        }
    }

    /// The first beat of the grid `deadline + k × step` (k ≥ 1) at or after `now`, saturating.
    private static func nextBeat(after deadline: MonotonicInstant, step: UInt64, now: MonotonicInstant) -> MonotonicInstant {
        let (next, overflow) = deadline.nanoseconds.addingReportingOverflow(step)
        guard !overflow else { return MonotonicInstant(nanoseconds: .max) }
        guard next < now.nanoseconds else { return MonotonicInstant(nanoseconds: next) }
        // Skip to the first beat at or after now.
        let behind = now.nanoseconds - next
        let beats = behind / step + (behind % step == 0 ? 0 : 1)
        let (offset, productOverflow) = beats.multipliedReportingOverflow(by: step)
        let (result, sumOverflow) = next.addingReportingOverflow(offset)
        return MonotonicInstant(nanoseconds: productOverflow || sumOverflow ? .max : result)
    }
}

/// The fixed-rate beat of a repeating timer call.
enum RepeatSchedule {
    /// The next beat after a run that was due at `deadline`, given that it is `now`.
    ///
    /// Beats stay on the grid `deadline + k × interval`. Beats that have already passed are skipped,
    /// not run in a burst, so a call that fell behind resumes at its normal rate.
    static func nextDeadline(after deadline: MonotonicInstant, interval: Duration, now: MonotonicInstant) -> MonotonicInstant {
        let next = deadline.advanced(by: interval)
        guard next <= now else { return next }
        let step = UInt64(max(1, interval.nanosecondsSaturated))
        let missed = (now.nanoseconds - next.nanoseconds) / step + 1
        let (offset, overflow) = missed.multipliedReportingOverflow(by: step)
        return overflow ? MonotonicInstant(nanoseconds: .max) : next.advanced(by: .nanoseconds(offset))
    }
}

/// The fixed-rate beat of a repeating timer call.
enum RepeatSchedule {
    /// The next beat after a run that was due at `deadline`, given that it is `now`.
    ///
    /// Beats stay on the grid `deadline + k × interval`. Beats that have already passed are skipped,
    /// not run in a burst, so a call that fell behind resumes at its normal rate. A beat that falls
    /// exactly on `now` has not passed: it is due, as the timer heap treats a deadline equal to now.
    /// Past the end of the time line the result saturates at the last instant.
    static func nextDeadline(after deadline: MonotonicInstant, interval: Duration, now: MonotonicInstant) -> MonotonicInstant {
        let step = UInt64(max(1, interval.nanosecondsSaturated))
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

/// How close a deadline must be for the timer thread to spin up to it rather than sleep, learned
/// from how late its timed waits end.
///
/// A timed wait ends some microseconds after its deadline (the kernel's wake-up), and each sleep
/// and wake costs the thread a context switch. For a deadline closer than that lateness, sleeping
/// buys nothing: the call would run about as late as the sleep is long, so the thread might as
/// well watch the clock (yielding the core between looks) and run the call at its deadline, for
/// less CPU than the sleep. So the window is a running average of how late the thread's timed
/// waits ended (each new one weighs 1/8), capped at ``ceiling``, and zero until the thread has
/// slept once: a quiet machine that wakes within a microsecond or two hardly spins, a busy one
/// spins up to the cap. A pure value: the thread reports each wait with its own clock readings.
struct TimerSpinWindow: Equatable {
    /// The longest spin: one late wake (a preempted thread) cannot make the thread spin for long.
    static let ceiling = Duration.microseconds(20)

    /// The running average of timed-wait lateness, in nanoseconds.
    private(set) var averageLateness: Int64 = 0

    /// How close a deadline is spun for, at most ``ceiling``.
    var window: Duration {
        .nanoseconds(min(averageLateness, Self.ceiling.nanosecondsSaturated))
    }

    /// Whether to spin, rather than sleep, for a deadline `gap` away.
    func spins(for gap: Duration) -> Bool {
        gap <= window
    }

    /// A timed wait for `deadline` ended, by its time limit, at `woke`.
    mutating func timedWaitEnded(deadline: MonotonicInstant, woke: MonotonicInstant) {
        guard woke >= deadline else { return }
        // Clamped: one wake hours late (a suspended machine) must not overflow the average.
        let late = Int64(clamping: min(woke.nanoseconds - deadline.nanoseconds, 1_000_000_000))
        averageLateness += (late - averageLateness) / 8
    }
}

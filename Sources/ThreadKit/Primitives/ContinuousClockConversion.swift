import Synchronization

/// Turns `ContinuousClock` instants into the timer's `CLOCK_MONOTONIC` deadlines: the same instant
/// always into the same deadline, and never an earlier one.
///
/// The two clocks advance at the same rate but count from different origins (on Linux
/// `ContinuousClock` counts `CLOCK_BOOTTIME`, which also counts time the system slept). Converting
/// through a fresh reading of both clocks, as ``MonotonicInstant/init(_:)`` does, folds the time
/// between the two readings into every result: two calls for one instant get deadlines some
/// nanoseconds apart, in either order, and `schedule(at:)` calls due at the same instant would not run
/// in the order they were scheduled. So one reading is remembered and each conversion is arithmetic
/// on it.
///
/// Every reading errs late (the continuous clock is read first), so a deadline is never early. A
/// fresh reading replaces the remembered one only when it is earlier by more than ``tolerance``,
/// which happens once the clocks drift apart because the system slept.
///
/// Any instant is accepted, however far from now: one past the end of the monotonic time line
/// (`.now + .seconds(Int64.max)`, in a process that has run for hours) converts to its last instant,
/// "never"; one before its origin converts to 0, "already due". Nothing on the way traps.
enum ContinuousClockConversion {
    /// How much earlier a fresh reading must be to replace the remembered one.
    static let tolerance: UInt64 = 1_000_000

    /// The continuous instant that readings are expressed against.
    private static let reference = ContinuousClock.now

    /// The monotonic time, in nanoseconds, at `reference`: the best of a few first readings, lowered
    /// when the clocks drift apart.
    private static let referenceMonotonic = Atomic<UInt64>(
        (0..<5).map { _ in reading() }.min { $0.spread < $1.spread }!.nanoseconds)

    /// The monotonic deadline at which the continuous clock reaches `instant`.
    static func deadline(for instant: ContinuousClock.Instant) -> MonotonicInstant {
        let fresh = reading().nanoseconds
        var remembered = referenceMonotonic.load(ordering: .relaxed)
        while remembered > fresh, remembered - fresh > tolerance {
            let (exchanged, original) = referenceMonotonic.compareExchange(
                expected: remembered, desired: fresh, ordering: .relaxed)
            remembered = exchanged ? fresh : original
        }
        // Instants this far out lie past either end of the time line whatever the reference; telling
        // them apart first keeps `duration(to:)` clear of Duration's own 128-bit overflow.
        if instant > reference + farOut { return MonotonicInstant(nanoseconds: .max) }
        if instant < reference - farOut { return MonotonicInstant(nanoseconds: 0) }
        return MonotonicInstant(nanoseconds: remembered).advanced(by: reference.duration(to: instant))
    }

    /// Farther than the whole monotonic time line (2⁶⁴ ns is under 600 years), yet well inside the
    /// range of `Duration` (about 5 × 10¹² years each way) when added to or taken from a real instant.
    private static let farOut = Duration.seconds(Int64.max)

    /// One reading of both clocks: the monotonic time at `reference`, never earlier than the true one,
    /// and how long the reading took (the smaller, the more exact).
    private static func reading() -> (nanoseconds: UInt64, spread: Duration) {
        let before = ContinuousClock.now
        let monotonic = MonotonicInstant.now()
        let after = ContinuousClock.now
        return (monotonic.advanced(by: before.duration(to: reference)).nanoseconds, before.duration(to: after))
    }
}

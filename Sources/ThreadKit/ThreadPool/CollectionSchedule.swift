/// When an idle pool thread is retired.
///
/// A collector runs every `interval` from the pool's creation and retires each thread that has been
/// idle for at least `keepAlive`. The ticks do not depend on the pool's load, so steady work can
/// never postpone a collection. The collector is virtual: each idle thread computes the tick that
/// will retire it and sleeps until then, so no extra thread wakes up to check.
struct CollectionSchedule: Sendable {
    /// The collector's first tick, one `interval` after the pool's creation.
    let origin: MonotonicInstant
    let keepAlive: Duration
    let interval: Duration
    /// The distance between ticks in whole nanoseconds; at least 1, so that a sub-nanosecond
    /// interval (more than zero, yet zero nanoseconds) cannot divide by zero.
    private let step: UInt64

    init(createdAt start: MonotonicInstant, keepAlive: Duration, interval: Duration) {
        precondition(interval > .zero, "CollectionSchedule.init: collectionInterval must be more than zero, got \(interval)")
        precondition(keepAlive >= .zero, "CollectionSchedule.init: keepAlive must not be negative, got \(keepAlive)")
        self.step = UInt64(max(1, interval.nanosecondsSaturated))
        self.origin = start.advanced(by: .nanoseconds(step))
        self.keepAlive = keepAlive
        self.interval = interval
    }

    /// The first collector tick at which a thread idle since `idleSince` has been idle for `keepAlive`.
    ///
    /// Saturates at the end of the time line instead of overflowing.
    func retirement(idleSince: MonotonicInstant) -> MonotonicInstant {
        let eligible = idleSince.advanced(by: keepAlive)
        guard eligible > origin else { return origin }
        let distance = eligible.nanoseconds - origin.nanoseconds
        let ticks = distance / step + (distance % step == 0 ? 0 : 1)
        let (offset, overflow) = ticks.multipliedReportingOverflow(by: step)
        let (tick, overflowAgain) = origin.nanoseconds.addingReportingOverflow(offset)
        return MonotonicInstant(nanoseconds: overflow || overflowAgain ? .max : tick)
    }
}

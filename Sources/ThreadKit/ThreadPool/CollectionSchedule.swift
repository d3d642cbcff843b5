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

    init(createdAt start: MonotonicInstant, keepAlive: Duration, interval: Duration) {
        precondition(interval > .zero, "collectionInterval must be > 0, got \(interval)")
        precondition(keepAlive >= .zero, "keepAlive must be ≥ 0, got \(keepAlive)")
        self.origin = start.advanced(by: interval)
        self.keepAlive = keepAlive
        self.interval = interval
    }

    /// The first collector tick at which a thread idle since `idleSince` has been idle for `keepAlive`.
    func retirement(idleSince: MonotonicInstant) -> MonotonicInstant {
        let eligible = idleSince.advanced(by: keepAlive)
        guard eligible > origin else { return origin }
        let step = UInt64(interval.nanosecondsSaturated)
        let ticks = (eligible.nanoseconds - origin.nanoseconds + step - 1) / step
        let (offset, overflow) = ticks.multipliedReportingOverflow(by: step)
        return overflow ? MonotonicInstant(nanoseconds: .max) : origin.advanced(by: .nanoseconds(offset))
    }
}

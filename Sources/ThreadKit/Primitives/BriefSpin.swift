#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Watches `condition`, without any lock, for at most `limit`: alone for its first 2 µs, then
/// yielding the core between looks.
///
/// For a thread that is about to sleep on a condition variable while the thing it waits for is
/// likely to come within microseconds: waking a sleeping thread costs the waker a system call and
/// the sleeper several microseconds, which a stream of short hand-overs would pay every time.
/// A hand-over between two awake cores takes well under 2 µs, and a yield, a system call, would
/// cost more than that; after it, `sched_yield` gives the core to any other runnable thread, so a
/// longer spin never delays the thread it waits for, and the spin is bounded, so an idle thread
/// still settles into sleep at once.
///
/// - Returns: Whether `condition` became true within `limit`.
func spinBriefly(for limit: Duration, until condition: () -> Bool) -> Bool {
    let start = MonotonicInstant.now()
    let deadline = start.advanced(by: limit)
    // First the looks alone, for as long as a hand-over between two awake cores takes: a yield is a
    // system call, which would cost more than the whole round trip it waits for.
    let alone = start.advanced(by: min(limit, lookingAlone))
    repeat {
        for _ in 0..<looksPerYield where condition() { return true }
    } while MonotonicInstant.now() < alone
    while true {
        // A few looks in a row catch a hand-over from another core within nanoseconds; the yield
        // between rounds lets a thread waiting for this core run.
        for _ in 0..<looksPerYield where condition() { return true }
        sched_yield()
        if MonotonicInstant.now() >= deadline { return condition() }
    }
}

/// How many times ``spinBriefly(for:until:)`` looks at its condition between two yields.
private let looksPerYield = 32

/// How long ``spinBriefly(for:until:)`` looks before its first yield: about two round trips between
/// two awake cores of a virtual machine (one is 0.6 µs on the benchmark's 2-core machine).
private let lookingAlone = Duration.microseconds(2)

/// How long a thread that ran out of work watches for more before it sleeps, learned from how soon
/// work came the last times.
///
/// Spinning pays when work comes back within the spin (a stream of short items: no wakeup to pay
/// for) and wastes CPU when it does not (one item every millisecond: a full spin per item, for
/// nothing). So the budget starts at its ceiling and stays there while work comes back soon; each
/// spin that found nothing, followed by a sleep longer than the ceiling, halves it, down to no spin
/// at all after a few; a sleep that ends within the ceiling (a spin would have caught that work)
/// restores it. A spin that finds work changes nothing. A pure value: the caller reports each sleep,
/// with its own clock readings.
struct SpinBudget: Sendable {
    /// The longest spin.
    let ceiling: Duration
    /// How long to spin next time; zero means sleep at once.
    private(set) var current: Duration

    /// Below this, a spin is not worth its setup: the budget drops to zero.
    static let floor = Duration.microseconds(2)

    init(ceiling: Duration) {
        self.ceiling = ceiling
        current = ceiling
    }

    /// The thread slept for `slept` before work came (or it gave up waiting): a short sleep says a
    /// spin would have caught the work, a long one that the spin was wasted.
    mutating func slept(for slept: Duration) {
        if slept < ceiling {
            current = ceiling
        } else {
            let half = current / 2
            current = half < Self.floor ? .zero : half
        }
    }
}

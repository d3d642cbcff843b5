#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Watches `condition`, without any lock, for at most `limit`, yielding the core between looks.
///
/// For a thread that is about to sleep on a condition variable while the thing it waits for is
/// likely to come within microseconds: waking a sleeping thread costs the waker a system call and
/// the sleeper several microseconds, which a stream of short hand-overs would pay every time.
/// `sched_yield` gives the core to any other runnable thread, so a spinner never delays the thread
/// it waits for, and the spin is bounded, so an idle thread still settles into sleep at once.
///
/// - Returns: Whether `condition` became true within `limit`.
func spinBriefly(for limit: Duration, until condition: () -> Bool) -> Bool {
    if condition() { return true }
    let deadline = MonotonicInstant.now().advanced(by: limit)
    while true {
        sched_yield()
        if condition() { return true }
        if MonotonicInstant.now() >= deadline { return false }
    }
}

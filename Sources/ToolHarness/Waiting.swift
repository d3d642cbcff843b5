// Durations as numbers, and the two ways the tools wait: a plain sleep, and a condition polled
// with a deadline.
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension Duration {
    /// The duration in nanoseconds, as a `Double`.
    public var nanoseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
    }

    /// The duration in microseconds, as a `Double`.
    public var microseconds: Double { nanoseconds / 1e3 }

    /// The duration in seconds, as a `Double`.
    public var seconds: Double { nanoseconds / 1e9 }
}

/// Blocks the calling thread for `duration` (not at all if it is not positive), resuming the
/// sleep when a signal interrupts it.
public func sleep(for duration: Duration) {
    guard duration > .zero else { return }
    let (seconds, attoseconds) = duration.components
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0, errno == EINTR {
        request = remaining
    }
}

/// Checks `condition` every millisecond until it holds (`true`) or `timeout` passes (`false`).
///
/// For the tools' edges (a pool retiring, a server's request becoming visible), where a
/// millisecond of polling costs nothing and keeps the waiting independent of what it watches.
public func poll(timeout: Duration, until condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        sleep(for: .milliseconds(1))
    }
    return true
}

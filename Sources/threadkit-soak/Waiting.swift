// Waiting helpers for the drivers: Swift tasks in flight, and conditions polled with a deadline.
import Foundation
import Synchronization

/// Counts the Swift tasks a driver launched at one pool or queue that have not finished, so it can
/// wait for them before it checks that pool's or queue's counts.
final class InFlight: Sendable {
    private let running = Atomic<Int>(0)

    var count: Int { running.load(ordering: .acquiring) }

    func enter() {
        running.wrappingAdd(1, ordering: .relaxed)
    }

    func leave() {
        running.wrappingSubtract(1, ordering: .releasing)
    }

    /// Waits until every task has left; `false` if some are still running after `timeout`.
    func waitUntilNone(timeout: Duration) -> Bool {
        poll(timeout: timeout) { count == 0 }
    }
}

/// Checks `condition` every millisecond until it holds (`true`) or `timeout` passes (`false`).
///
/// The soak only waits like this at its edges (retiring a pool, settling a timer), where a
/// millisecond of polling costs nothing and keeps the waiting independent of what it watches.
func poll(timeout: Duration, until condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        sleep(.milliseconds(1))
    }
    return true
}

/// Blocks the calling thread for `duration` (not at all if it is not positive).
func sleep(_ duration: Duration) {
    guard duration > .zero else { return }
    let (seconds, attoseconds) = duration.components
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0, errno == EINTR {
        request = remaining
    }
}

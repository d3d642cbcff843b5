#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A point on the `CLOCK_MONOTONIC` time line, in nanoseconds.
///
/// Every deadline inside ThreadKit is one of these: eight bytes, ordered, cheap to compare, and never
/// moved by a change of the system's wall clock. Pure scheduling types take them as plain values,
/// so tests make them up with `MonotonicInstant(nanoseconds:)`.
struct MonotonicInstant: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Nanoseconds since the clock's (arbitrary) origin.
    var nanoseconds: UInt64

    init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// An instant that no reading of the clock reaches: 2⁶³ ns, 292 years after its origin (the
    /// system's boot). A deadline at or past it means "never": a far-out duration added to now, or a
    /// far-out `ContinuousClock` instant, saturates there or beyond.
    static let distantFuture = MonotonicInstant(nanoseconds: UInt64(Int64.max))

    /// The current time of `CLOCK_MONOTONIC`.
    static func now() -> MonotonicInstant {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return MonotonicInstant(nanoseconds: UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec))
    }

    /// The monotonic instant at which the continuous clock reaches `instant`, never earlier.
    ///
    /// The same `instant` always gives the same result; see ``ContinuousClockConversion``.
    init(_ instant: ContinuousClock.Instant) {
        self = ContinuousClockConversion.deadline(for: instant)
    }

    /// This instant moved by `duration`, saturating at the ends of the time line.
    ///
    /// Any duration is accepted: one that reaches past either end (say `.seconds(Int64.max) +
    /// .seconds(1)`) gives that end, which for a deadline means "never" or "already due".
    func advanced(by duration: Duration) -> MonotonicInstant {
        let delta = duration.nanosecondsSaturated
        if delta >= 0 {
            let (sum, overflow) = nanoseconds.addingReportingOverflow(UInt64(delta))
            return MonotonicInstant(nanoseconds: overflow ? .max : sum)
        } else {
            let magnitude = delta.magnitude
            return MonotonicInstant(nanoseconds: nanoseconds > magnitude ? nanoseconds - magnitude : 0)
        }
    }

    /// The signed distance from this instant to `other`.
    func duration(to other: MonotonicInstant) -> Duration {
        if other.nanoseconds >= nanoseconds {
            return .nanoseconds(other.nanoseconds - nanoseconds)
        } else {
            return .zero - .nanoseconds(nanoseconds - other.nanoseconds)
        }
    }

    /// The same instant as a `timespec`, for `pthread_cond_timedwait`.
    var timespecValue: timespec {
        timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    }

    static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    var description: String { "\(nanoseconds) ns" }
}

extension Duration {
    /// The duration in whole nanoseconds (sub-nanosecond parts cut toward zero), clamped to the range
    /// of `Int64`.
    ///
    /// Any duration is accepted, however long: `.seconds(Int64.max) + .seconds(1)` gives `Int64.max`
    /// (`components` would trap there: its whole seconds do not fit an `Int64`).
    var nanosecondsSaturated: Int64 {
        // Both divisions round toward zero. The first, on 64 bits, serves every duration under 9 s
        // (spins, timeouts, intervals) at a fraction of the cost of the 128-bit one.
        if let small = Int64(exactly: attoseconds) { return small / 1_000_000_000 }
        return Int64(clamping: attoseconds / 1_000_000_000)
    }
}

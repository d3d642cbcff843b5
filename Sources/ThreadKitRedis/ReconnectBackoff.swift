/// When a client may try to connect again: jittered exponential back-off after failures.
///
/// A pure value: it reads no clock and draws no randomness of its own. Every instant is an offset
/// from an origin the caller picks, and the caller passes the random source, so tests drive it with
/// made-up times and a seeded generator.
///
/// After the n-th failure in a row the next attempt waits a delay drawn uniformly from
/// `ceiling / 2 ... ceiling`, where `ceiling = min(maximum, initial · 2ⁿ⁻¹)`: the delays grow
/// toward `maximum`, a flapping server is not hammered, and processes that failed together spread
/// their attempts out (the jitter) but never retry sooner than half the ceiling. A success ends the
/// run of failures.
struct ReconnectBackoff: Sendable, Equatable {
    /// The ceiling after the first failure.
    let initial: Duration
    /// The highest ceiling.
    let maximum: Duration

    /// Failures since the last success.
    private(set) var failures = 0
    /// No attempt before this offset; `nil` when there is no failure to wait out.
    private(set) var retryAt: Duration?
    /// What the last failure was, for errors and log lines.
    private(set) var lastFailure: String?

    init(initial: Duration = .milliseconds(20), maximum: Duration = .seconds(2)) {
        precondition(initial > .zero, "ReconnectBackoff: initial must be more than zero, got \(initial)")
        precondition(maximum >= initial, "ReconnectBackoff: maximum must be at least initial (\(initial)), got \(maximum)")
        self.initial = initial
        self.maximum = maximum
    }

    /// How long to wait at `now` before trying; `nil` when an attempt may go ahead.
    func wait(at now: Duration) -> Duration? {
        guard let retryAt, retryAt > now else { return nil }
        return retryAt - now
    }

    /// The ceiling of the delay after `failures` failures in a row (at least one).
    func ceiling(afterFailures failures: Int) -> Duration {
        // initial · 2^(failures−1), doubled only while it stays below the maximum: no overflow.
        var ceiling = initial
        var doublings = failures - 1
        while doublings > 0, ceiling < maximum {
            ceiling *= 2
            doublings -= 1
        }
        return min(ceiling, maximum)
    }

    /// Records a failure at `now` (`reason` says what failed) and returns the delay until the next
    /// attempt.
    @discardableResult
    mutating func failed(at now: Duration, reason: String, using random: inout some RandomNumberGenerator) -> Duration {
        failures += 1
        lastFailure = reason
        let ceiling = ceiling(afterFailures: failures)
        let nanoseconds = ceiling.nanosecondsRoundedDown
        let half = nanoseconds / 2
        // One draw scaled onto half...ceiling (the high word of a 64 × 64-bit product): no rejection
        // loop, so any generator, a constant one too, gives an answer; 0 gives half, all ones the ceiling.
        let span = UInt64(nanoseconds - half) + 1
        let delay = Duration.nanoseconds(half + Int64(span.multipliedFullWidth(by: random.next()).high))
        retryAt = now + delay
        return delay
    }

    /// Records a success: the next failure starts from ``initial`` again.
    mutating func succeeded() {
        failures = 0
        retryAt = nil
        lastFailure = nil
    }
}

extension Duration {
    /// The duration in whole nanoseconds, for durations well within ±292 years.
    var nanosecondsRoundedDown: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

/// Whether a client may send a command to a server that has been failing: a circuit breaker.
///
/// A pure value type: it reads no clock and draws no random number; every instant is an offset
/// from an origin the caller picks, and the jitter is given, so tests drive it with made-up times.
///
/// - **Closed**: every command goes. A streak of ``failureThreshold`` failures in a row, or a single
///   timeout (a server that does not answer costs each caller the whole timeout), opens it.
/// - **Open**: nothing goes until a back-off has passed: ``backoff(openings:jitter:)``, doubling
///   with each opening in a row from ``baseBackoff`` up to ``maxBackoff``, jittered so that a fleet
///   of clients does not probe at the same instant.
/// - **Half-open**: once the back-off has passed, one command goes as a probe; the others are
///   refused until its answer. Its success closes the breaker; its failure opens it again, for
///   a longer back-off. A probe whose outcome is not reported within ``probeTimeout`` (one
///   command timeout: it cannot be pending longer) counts as failed: the next command after it is
///   a new probe, counted as one more opening, so a lost report never refuses commands forever.
package struct CircuitBreaker: Sendable, Equatable {
    package enum State: Sendable, Equatable {
        /// Commands go; `failures` in a row so far.
        case closed(failures: Int)
        /// Nothing goes before `until`; it has opened `openings` times in a row.
        case open(until: Duration, openings: Int)
        /// One probe is out, since `since`.
        case halfOpen(since: Duration, openings: Int)
    }

    /// Whether a command may go now.
    package enum Permission: Sendable, Equatable {
        /// The breaker is closed.
        case allowed
        /// The breaker was open and its back-off has passed: this command is the probe.
        case probe
        /// Nothing goes; ask again this much later.
        case refused(retryIn: Duration)
    }

    /// How many failures in a row open the breaker.
    package let failureThreshold: Int
    /// The back-off after the first opening.
    package let baseBackoff: Duration
    /// The longest back-off.
    package let maxBackoff: Duration
    /// How long a probe's outcome may take: the client's command timeout.
    package let probeTimeout: Duration
    package private(set) var state = State.closed(failures: 0)

    package init(
        failureThreshold: Int = 3, baseBackoff: Duration = .milliseconds(50), maxBackoff: Duration = .seconds(5),
        probeTimeout: Duration = .milliseconds(100)
    ) {
        precondition(probeTimeout > .zero, "CircuitBreaker: probeTimeout must be more than zero, got \(probeTimeout)")
        precondition(failureThreshold >= 1, "CircuitBreaker: failureThreshold must be at least 1, got \(failureThreshold)")
        precondition(baseBackoff > .zero, "CircuitBreaker: baseBackoff must be more than zero, got \(baseBackoff)")
        precondition(maxBackoff >= baseBackoff, "CircuitBreaker: maxBackoff must not be below baseBackoff, got \(maxBackoff)")
        self.failureThreshold = failureThreshold
        self.baseBackoff = baseBackoff
        self.maxBackoff = maxBackoff
        self.probeTimeout = probeTimeout
    }

    /// Whether a command may go at `now`; the first one after an open breaker's back-off is the probe.
    package mutating func permit(now: Duration) -> Permission {
        switch state {
        case .closed:
            return .allowed
        case .open(let until, let openings):
            guard now >= until else { return .refused(retryIn: until - now) }
            state = .halfOpen(since: now, openings: openings)
            return .probe
        case .halfOpen(let since, let openings):
            let deadline = since + probeTimeout
            guard now >= deadline else {
                // The probe's outcome comes within one command timeout: ask again then, or sooner.
                return .refused(retryIn: min(baseBackoff, deadline - now))
            }
            // The probe's outcome was lost: it failed, and its back-off (the timeout) has passed.
            state = .halfOpen(since: now, openings: openings + 1)
            return .probe
        }
    }

    /// A command was answered.
    ///
    /// - Returns: Whether this closed a breaker that was not closed (the server is back).
    @discardableResult
    package mutating func succeeded() -> Bool {
        defer { state = .closed(failures: 0) }
        if case .closed = state { return false }
        return true
    }

    /// A command failed at `now`; `timedOut` if it got no answer in time.
    ///
    /// - Parameter jitter: A number in 0..<1 drawn by the caller, which places the back-off in its
    ///   upper half (see ``backoff(openings:jitter:)``).
    /// - Returns: Whether this opened a breaker that was closed.
    @discardableResult
    package mutating func failed(now: Duration, timedOut: Bool, jitter: Double) -> Bool {
        switch state {
        case .closed(let failures):
            guard timedOut || failures + 1 >= failureThreshold else {
                state = .closed(failures: failures + 1)
                return false
            }
            state = .open(until: now + backoff(openings: 1, jitter: jitter), openings: 1)
            return true
        case .halfOpen(_, let openings):
            state = .open(until: now + backoff(openings: openings + 1, jitter: jitter), openings: openings + 1)
            return false
        case .open:
            // A command sent before the breaker opened: the back-off in force stands.
            return false
        }
    }

    /// The back-off after the `openings`-th opening in a row: `d = min(maxBackoff, baseBackoff ×
    /// 2^(openings−1))`, jittered into `d/2 + jitter × d/2` ("equal jitter": never less than half,
    /// so no client hammers the server, and spread over the other half, so a fleet does not probe
    /// in step).
    package func backoff(openings: Int, jitter: Double) -> Duration {
        precondition((0..<1).contains(jitter), "CircuitBreaker.backoff: jitter must be in 0..<1, got \(jitter)")
        var delay = baseBackoff
        for _ in 1..<max(1, openings) where delay < maxBackoff { delay *= 2 }
        delay = min(delay, maxBackoff)
        return delay / 2 + (delay / 2) * jitter
    }
}

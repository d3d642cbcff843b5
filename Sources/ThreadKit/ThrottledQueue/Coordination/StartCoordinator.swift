/// Who decides a coordinated ``ThrottledQueue``'s starts together with other processes: the queue's
/// worker asks it before granting any start, and waits out the reservation on its own clock.
///
/// A later module implements it on Redis (one Lua script mirroring ``SharedThrottle``); the tests
/// implement it in memory on ``SharedThrottle`` itself. Each queue is one asker of the key's
/// `.serial` line (``CoordinatedRequest/asker``, one id per queue, even for queues that share a
/// coordinator), and the coordinator proposes the token of each lease its reserves may take (see
/// ``SharedThrottle``): the protocol does not carry the token, which is the coordinator's own.
///
/// - ``reserve(_:)`` may block for a network round trip. The queue never calls it under its lock,
///   nor on a cooperative thread: it is called by the queue's worker (for `async` work and `run`
///   callers) or by a blocked `sync` caller.
/// - ``finished(token:)`` and ``pause(for:)`` must return at once (send the command, do not wait
///   for its reply): they are called where blocking is not allowed, at the end of `run`'s work on
///   the caller's cooperative thread, and from `pause(for:)`, which async code may call.
package protocol StartCoordinator: AnyObject, Sendable {
    /// Asks for the queue's next start.
    func reserve(_ request: CoordinatedRequest) -> CoordinatorAnswer
    /// A `.serial` start holding the lease `token` ended, or was given up unused: called once for
    /// each reservation that was answered with `token` (nested ones too), so the coordinator can
    /// number the lease's ends (``SharedThrottle/finished(token:number:now:)``) and hand the lease
    /// back with the last.
    func finished(token: UInt64)
    /// No start, in any process, for `duration` from now; a longer pause in force stays.
    func pause(for duration: Duration)

    /// How ``Diagnostics`` names the coordination in a queue's configuration: `shared on "key"`.
    var diagnosticsDescription: String { get }
}

/// What a queue asks its coordinator for its next start.
package struct CoordinatedRequest: Sendable, Equatable {
    /// The gap that follows this start.
    package var gap: Duration
    package var monitor: ThrottledQueue.Monitor
    package var limit: RateLimit?
    /// For a `.serial` start nested in the queue's running task: the token of that task's lease.
    package var holding: UInt64?
    /// The asking queue's place in the key's `.serial` line (``SharedThrottle/Request/asker``): one
    /// random id per queue, in 1...2^53−1.
    package var asker: UInt64

    package init(gap: Duration, monitor: ThrottledQueue.Monitor, limit: RateLimit?, holding: UInt64?, asker: UInt64) {
        self.gap = gap
        self.monitor = monitor
        self.limit = limit
        self.holding = holding
        self.asker = asker
    }

    /// The limit in microseconds, as ``SharedThrottle`` takes it.
    package var limitInMicroseconds: (count: Int, window: Int64)? {
        limit.map { ($0.count, $0.window.microsecondsRoundedUp) }
    }

    /// The rules the request is made under, as ``SharedThrottle`` stores them.
    package var rules: SharedThrottle.Rules {
        SharedThrottle.Rules(
            monitor: monitor,
            limit: limitInMicroseconds.map { SharedThrottle.Limit(count: $0.count, window: $0.window.clampedToMicrosecondLimit) })
    }
}

/// A coordinator's answer to a ``CoordinatedRequest``.
package enum CoordinatorAnswer: Sendable, Equatable {
    /// The start is recorded: start `wait` from the answer's arrival (a `.serial` start holds `token`).
    case reserved(wait: Duration, token: UInt64?)
    /// Too far ahead: nothing was recorded; ask again `retryIn` from now.
    case declined(retryIn: Duration)
    /// The coordinator cannot decide: the queue applies its ``UnavailablePolicy``. `consumed`: the
    /// request was sent and timed out, so it may have been recorded; `retryIn`: when the
    /// coordinator may be asked again (its breaker's back-off).
    case unavailable(consumed: Bool, retryIn: Duration)
    /// The coordinator's state for the key was made under other rules (another monitor or limit,
    /// see ``SharedThrottle/Rules``): nothing was recorded. The queue logs `reason` and treats the
    /// coordinator as unavailable (its policy decides), rather than weaken the stored rules.
    case mismatch(reason: String)
}

extension CoordinatorAnswer {
    /// The answer for a decision of ``SharedThrottle`` (or of the script that mirrors it): its
    /// microseconds as durations, and for a mismatch, what `reason` says of the stored rules.
    package init(_ decision: SharedThrottle.Decision, mismatch reason: (SharedThrottle.Rules) -> String) {
        switch decision {
        case .reserved(_, let wait, let token): self = .reserved(wait: .microseconds(wait), token: token)
        case .declined(let retryIn): self = .declined(retryIn: .microseconds(retryIn))
        case .mismatch(let stored): self = .mismatch(reason: reason(stored))
        }
    }
}

extension StartCoordinator {
    /// `shared`: a coordinator that does not name what it shares.
    package var diagnosticsDescription: String { "shared" }
}

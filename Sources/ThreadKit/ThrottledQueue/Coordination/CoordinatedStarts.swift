/// A coordinated queue's side of its starts: when to ask its ``StartCoordinator``, the reservation it
/// holds, and what it does by its ``UnavailablePolicy`` when the coordinator cannot decide.
///
/// A pure value type, held under the queue's mutex and carried out by
/// `ThrottledQueue+Coordination`. Every start of the queue asks it once the queue's own schedule
/// allows the start (the local rules still apply in full; this only ever adds waiting):
///
/// - with a reservation whose time is not before what the local rules allow: start at its time;
/// - with one that the local rules have since moved past (a pause, a longer interval): give it up
///   (its lease handed back) and ask again, since a stale reservation started late could come
///   closer to another process's start than the gap;
/// - after a decline, or while the coordinator is unavailable under `.failClosed`: wait until the
///   time it gave, then ask again (no polling in between);
/// - otherwise ask, one thread at a time; the others wait for the answer.
///
/// Reservations and tokens belong to the queue, not to a task: whichever task is next uses them.
struct CoordinatedStarts {
    /// A `.serial` start's lease: the coordinator's, or the local fallback's.
    enum Token: Equatable {
        case shared(UInt64)
        case local(UInt64)
    }

    /// A start reserved for `at`; `nested` if asked for while a task ran (a start nested in it).
    struct Reservation: Equatable {
        var at: MonotonicInstant
        var token: Token?
        var nested: Bool
    }

    enum Step: Equatable {
        /// Ask the coordinator, with the mutex let go, then hand the answer to ``answered(_:now:)``.
        case ask(CoordinatedRequest)
        /// Another thread asks: wait for a change.
        case awaitAnswer
        /// Wait until this instant (a decline, or an unavailable coordinator under `.failClosed`).
        case wait(until: MonotonicInstant)
        /// Hand this lease back to the coordinator (a stale reservation), then decide again.
        case release(UInt64)
        /// Start at this instant, the reservation's: carry it out like a local start, then call ``started()``.
        case startAt(MonotonicInstant)
    }

    /// Whether an answer changed the coordinator's availability, for the log.
    enum Availability: Equatable {
        case unchanged
        case lost
        case regained
    }

    let policy: UnavailablePolicy
    private(set) var reservation: Reservation?
    private(set) var askAfter: MonotonicInstant?
    private(set) var isAsking = false
    private(set) var isUnavailable = false
    /// The local fallback throttle, on the monotonic clock in microseconds; every start is recorded
    /// in it, so a switch to the fallback counts from the last coordinated start.
    private(set) var fallback = SharedThrottle()
    /// The tokens of the started tasks that have not ended, innermost last (`nil` for a start without one).
    private(set) var running: [Token?] = []
    /// What the pending ask was for.
    private var asked: (request: CoordinatedRequest, nested: Bool)?

    init(policy: UnavailablePolicy) {
        self.policy = policy
    }

    /// What to do for a start that the local rules allow from `localAllowed`, at `now` (not before it).
    ///
    /// - Parameters:
    ///   - nested: Whether a task runs (the start is nested in it).
    ///   - gap: The gap that follows the start.
    mutating func step(
        localAllowed: MonotonicInstant, now: MonotonicInstant, nested: Bool, gap: Duration,
        monitor: ThrottledQueue.Monitor, limit: RateLimit?
    ) -> Step {
        if isAsking { return .awaitAnswer }
        if let held = reservation {
            guard held.at < localAllowed || held.nested != nested else { return .startAt(held.at) }
            reservation = nil
            switch held.token {
            case .shared(let token)?: return .release(token)
            case .local(let token)?: fallback.finished(token: token, now: Self.microseconds(now))
            case nil: break
            }
        }
        if let askAfter, now < askAfter { return .wait(until: askAfter) }
        askAfter = nil
        isAsking = true
        var holding: UInt64?
        if nested, case .shared(let token)?? = running.last { holding = token }
        let request = CoordinatedRequest(gap: gap, monitor: monitor, limit: limit, holding: holding)
        asked = (request, nested)
        return .ask(request)
    }

    /// The coordinator's answer to the pending ask arrived at `now`.
    mutating func answered(_ answer: CoordinatorAnswer, now: MonotonicInstant) -> Availability {
        guard let (request, nested) = asked else { preconditionFailure("CoordinatedStarts.answered(_:now:) with no ask pending") }
        asked = nil
        isAsking = false
        let wasUnavailable = isUnavailable
        switch answer {
        case .reserved(let wait, let token):
            isUnavailable = false
            let at = now.advanced(by: wait)
            reservation = Reservation(at: at, token: token.map(Token.shared), nested: nested)
            if let rules = fallbackRules(for: request) {
                fallback.recordConsumed(at: Self.microseconds(at), gap: rules.gap, count: rules.limit?.count)
            }
        case .declined(let retryIn):
            isUnavailable = false
            askAfter = now.advanced(by: retryIn)
        case .unavailable(let consumed, let retryIn):
            isUnavailable = true
            unavailable(request, nested: nested, consumed: consumed, retryIn: retryIn, now: now)
        }
        if wasUnavailable == isUnavailable { return .unchanged }
        return isUnavailable ? .lost : .regained
    }

    /// Applies the policy to a start the coordinator could not decide.
    private mutating func unavailable(
        _ request: CoordinatedRequest, nested: Bool, consumed: Bool, retryIn: Duration, now: MonotonicInstant
    ) {
        switch policy {
        case .failOpen:
            reservation = Reservation(at: now, token: nil, nested: nested)
        case .failClosed:
            askAfter = now.advanced(by: retryIn)
        case .localFallback:
            guard let rules = fallbackRules(for: request) else { return }
            let nowMicroseconds = Self.microseconds(now)
            if consumed { fallback.recordConsumed(at: nowMicroseconds, gap: rules.gap, count: rules.limit?.count) }
            var holding: UInt64?
            if nested, case .local(let token)?? = running.last { holding = token }
            let decision = fallback.request(SharedThrottle.Request(
                now: nowMicroseconds, gap: rules.gap, monitor: request.monitor, limit: rules.limit,
                horizon: .max, leaseTTL: .max, holding: holding))
            switch decision {
            case .reserved(let at, _, let token):
                // Not before `now`, which the microseconds cut short: what the local rules allow.
                reservation = Reservation(at: max(now, Self.instant(at)), token: token.map(Token.local), nested: nested)
            case .declined(let retryIn):
                askAfter = now.advanced(by: .microseconds(retryIn))
            }
        }
    }

    /// The local fallback's rules for `request`, under `.localFallback`.
    private func fallbackRules(for request: CoordinatedRequest) -> (gap: Int64, limit: (count: Int, window: Int64)?)? {
        guard case .localFallback(let share) = policy else { return nil }
        return UnavailablePolicy.fallbackRules(
            gap: request.gap.microsecondsRoundedUp, limit: request.limitInMicroseconds, share: share)
    }

    /// The reserved start was carried out.
    mutating func started() {
        running.append(reservation?.token)
        reservation = nil
    }

    /// The innermost running task ended at `now`.
    ///
    /// - Returns: The coordinator's lease to hand back, if it held one.
    mutating func ended(now: MonotonicInstant) -> UInt64? {
        guard let token = running.popLast() else { return nil }
        switch token {
        case .shared(let token)?: return token
        case .local(let token)?: fallback.finished(token: token, now: Self.microseconds(now))
        case nil: break
        }
        return nil
    }

    /// The queue went idle: a reservation left unused is given up.
    ///
    /// - Returns: The coordinator's lease to hand back, if it held one.
    mutating func giveUpReservation(now: MonotonicInstant) -> UInt64? {
        guard let held = reservation else { return nil }
        reservation = nil
        switch held.token {
        case .shared(let token)?: return token
        case .local(let token)?: fallback.finished(token: token, now: Self.microseconds(now))
        case nil: break
        }
        return nil
    }

    /// The instant in whole microseconds of the monotonic clock (the fallback's time line).
    static func microseconds(_ instant: MonotonicInstant) -> Int64 {
        Int64(instant.nanoseconds / 1000)
    }

    /// The monotonic instant of `microseconds`, saturating at the end of the time line.
    static func instant(_ microseconds: Int64) -> MonotonicInstant {
        let (product, overflow) = UInt64(max(0, microseconds)).multipliedReportingOverflow(by: 1000)
        return MonotonicInstant(nanoseconds: overflow ? .max : product)
    }
}

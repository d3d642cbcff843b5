/// A coordinated queue's side of its starts: when to ask its ``StartCoordinator``, the reservation it
/// holds, and what it does by its ``UnavailablePolicy`` when the coordinator cannot decide.
///
/// A pure value type, held under the queue's mutex and carried out by
/// `ThrottledQueue+Coordination`. Every start of the queue asks it once the queue's own schedule
/// allows the start (the local rules still apply in full; this only ever adds waiting):
///
/// - with a reservation whose time is not before what the local rules allow: start at its time;
/// - with one that the local rules have since moved past (a pause, a longer interval), one asked
///   with another gap than the next task's (an interval changed since), one asked for a start
///   nested in a task (or not) when the next is not (or is), or one reached more than its
///   ``latenessAllowance(gap:lateInARow:)`` after its time: give it up (its lease handed back; the start it
///   recorded stays counted, as consumed) and ask again;
/// - after a decline, or while the coordinator is unavailable under `.failClosed`: wait until the
///   time it gave, then ask again (no polling in between);
/// - otherwise ask, one thread at a time; the others wait for the answer.
///
/// Reservations and tokens belong to the queue, not to a task: whichever task is next uses them.
///
/// **The guarantee across processes is defined on reservations, on the coordinator's clock**: no two
/// reserved starts closer than the gap, never more than `count` reserved in a window. A process
/// starts a reservation on its own monotonic clock, no earlier than its time and, since a later one
/// is given up, no more than ``latenessAllowance(gap:lateInARow:)`` after it. So two started tasks
/// of different processes are at least `gap − allowance` apart (and a window of `W − allowance`
/// holds at most `count` of them), apart from the difference between the two processes' answer
/// delays, which erring late keeps on the safe side for the process that waits. A process too
/// loaded to wake within the allowance would give up every reservation and never start: each
/// reservation given up in a row doubles the allowance (up to 64 times), until one is started,
/// so it makes progress, at a precision its load allows.
struct CoordinatedStarts {
    /// A `.serial` start's lease: the coordinator's, or the local fallback's.
    enum Token: Equatable {
        case shared(UInt64)
        case local(UInt64)

        var isShared: Bool {
            if case .shared = self { true } else { false }
        }
    }

    /// A start reserved for `at`, followed by `gap`; `nested` if asked for while a task ran (a start
    /// nested in it).
    struct Reservation: Equatable {
        var at: MonotonicInstant
        var token: Token?
        var nested: Bool
        var gap: Duration
    }

    /// How long after its time a reservation may still be started: 1 ms or a tenth of the gap,
    /// whichever is longer. A thread woken at a deadline on a loaded machine runs up to a
    /// millisecond late, and giving a reservation up costs a round trip and a consumed start, so
    /// not less; a tenth of the gap bounds what lateness takes off the gap between processes.
    /// Each reservation given up late in a row (`lateInARow`, up to 6) doubles it.
    static func latenessAllowance(gap: Duration, lateInARow: Int = 0) -> Duration {
        max(.milliseconds(1), gap / 10) * (1 << min(max(lateInARow, 0), 6))
    }

    /// When a coordinator that answered ``CoordinatorAnswer/mismatch(reason:)`` is asked again
    /// under `.failClosed` (the other policies ask at each start, deciding it meanwhile).
    static let mismatchRetry = Duration.seconds(1)

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
        /// It cannot decide: `reason` says why (unavailable, or the rules mismatch).
        case lost(reason: String)
        case regained
    }

    let policy: UnavailablePolicy
    /// The queue's place in the coordinator's `.serial` line (``CoordinatedRequest/asker``).
    let asker: UInt64
    private(set) var reservation: Reservation?
    private(set) var askAfter: MonotonicInstant?
    private(set) var isAsking = false
    private(set) var isUnavailable = false
    /// How many reservations in a row were given up for being reached late (see ``latenessAllowance(gap:lateInARow:)``).
    private(set) var lateInARow = 0
    /// The local fallback throttle, on the monotonic clock in microseconds; every start is recorded
    /// in it, so a switch to the fallback counts from the last coordinated start.
    private(set) var fallback = SharedThrottle()
    /// The tokens of the started tasks that have not ended, innermost last (`nil` for a start without one).
    private(set) var running: [Token?] = []
    /// What the pending ask was for.
    private var asked: (request: CoordinatedRequest, nested: Bool)?
    /// The last token proposed to the local fallback (its only asker, 1, never waits behind another).
    private var lastLocalToken: UInt64 = 0

    private mutating func nextLocalToken() -> UInt64 {
        lastLocalToken += 1
        return lastLocalToken
    }

    /// - Parameter asker: The queue's id in the `.serial` line, in 1...2^53−1: by default, a random one.
    init(policy: UnavailablePolicy, asker: UInt64 = .random(in: 1...UInt64(SharedThrottle.microsecondLimit))) {
        precondition(SharedThrottle.isID(asker), "CoordinatedStarts: asker must be in 1...2^53-1, got \(asker)")
        self.policy = policy
        self.asker = asker
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
            let inTime = now <= held.at.advanced(by: Self.latenessAllowance(gap: held.gap, lateInARow: lateInARow))
            if held.at >= localAllowed && held.nested == nested && held.gap == gap && inTime { return .startAt(held.at) }
            if !inTime { lateInARow += 1 }
            if let token = giveUpReservation(now: now) { return .release(token) }
        }
        if let askAfter, now < askAfter { return .wait(until: askAfter) }
        askAfter = nil
        isAsking = true
        var holding: UInt64?
        if nested, case .shared(let token)?? = running.last(where: { $0?.isShared == true }) { holding = token }
        let request = CoordinatedRequest(gap: gap, monitor: monitor, limit: limit, holding: holding, asker: asker)
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
            reservation = Reservation(at: at, token: token.map(Token.shared), nested: nested, gap: request.gap)
            if let rules = fallbackRules(for: request) {
                fallback.recordConsumed(at: Self.microseconds(at), gap: rules.gap, rules: rules.shared)
            }
        case .declined(let retryIn):
            isUnavailable = false
            askAfter = now.advanced(by: retryIn)
        case .unavailable(let consumed, let retryIn):
            isUnavailable = true
            unavailable(request, nested: nested, consumed: consumed, retryIn: retryIn, now: now)
        case .mismatch:
            isUnavailable = true
            unavailable(request, nested: nested, consumed: false, retryIn: Self.mismatchRetry, now: now)
        }
        if wasUnavailable == isUnavailable { return .unchanged }
        guard isUnavailable else { return .regained }
        if case .mismatch(let reason) = answer { return .lost(reason: reason) }
        return .lost(reason: "unavailable")
    }

    /// Applies the policy to a start the coordinator could not decide.
    private mutating func unavailable(
        _ request: CoordinatedRequest, nested: Bool, consumed: Bool, retryIn: Duration, now: MonotonicInstant
    ) {
        switch policy {
        case .failOpen:
            reservation = Reservation(at: now, token: nil, nested: nested, gap: request.gap)
        case .failClosed:
            askAfter = now.advanced(by: retryIn)
        case .localFallback:
            guard let rules = fallbackRules(for: request) else { return }
            let nowMicroseconds = Self.microseconds(now)
            if consumed { fallback.recordConsumed(at: nowMicroseconds, gap: rules.gap, rules: rules.shared) }
            // The innermost fallback lease, not merely the innermost token: a task started on the
            // fallback may hold a coordinated start nested in it.
            var holding: UInt64?
            if nested, case .local(let token)?? = running.last(where: { $0?.isShared == false }) { holding = token }
            let decision = fallback.request(SharedThrottle.Request(
                now: nowMicroseconds, gap: rules.gap, monitor: request.monitor, limit: rules.limit,
                horizon: .max, leaseTTL: .max, holding: holding, token: nextLocalToken(), asker: 1))
            switch decision {
            case .reserved(let at, _, let token):
                // Not before `now`, which the microseconds cut short: what the local rules allow.
                reservation = Reservation(
                    at: max(now, Self.instant(at)), token: token.map(Token.local), nested: nested, gap: request.gap)
            case .declined(let fallbackRetry):
                // Not later than the coordinator may answer again (nor sooner than 1 ms: no busy loop).
                askAfter = now.advanced(by: min(.microseconds(fallbackRetry), max(retryIn, .milliseconds(1))))
            case .mismatch(let stored):
                preconditionFailure("CoordinatedStarts: the local fallback's rules changed from \(stored): a queue's monitor and limit are constant")
            }
        }
    }

    /// The local fallback's rules for `request`, under `.localFallback`.
    private func fallbackRules(
        for request: CoordinatedRequest
    ) -> (gap: Int64, limit: (count: Int, window: Int64)?, shared: SharedThrottle.Rules)? {
        guard case .localFallback(let share) = policy else { return nil }
        let rules = UnavailablePolicy.fallbackRules(
            gap: request.gap.microsecondsRoundedUp, limit: request.limitInMicroseconds, share: share)
        let limit = rules.limit.map { SharedThrottle.Limit(count: $0.count, window: $0.window.clampedToMicrosecondLimit) }
        return (rules.gap, rules.limit, SharedThrottle.Rules(monitor: request.monitor, limit: limit))
    }

    /// The reserved start was carried out.
    mutating func started() {
        lateInARow = 0
        running.append(reservation?.token)
        reservation = nil
    }

    /// The innermost running task ended at `now`. Once no task runs, a reservation asked for a start
    /// nested in one is given up too: the task it would have run in has ended (a nested `run` was
    /// cancelled, say), and its lease would otherwise stall every process until it expires.
    ///
    /// - Returns: The coordinator's leases to hand back.
    mutating func ended(now: MonotonicInstant) -> [UInt64] {
        guard let token = running.popLast() else { return [] }
        var leases: [UInt64] = []
        if let lease = handBack(token, now: now) { leases.append(lease) }
        if running.isEmpty, reservation?.nested == true, let lease = giveUpReservation(now: now) { leases.append(lease) }
        return leases
    }

    /// A reservation left unused is given up (the queue went idle, or the reservation went stale):
    /// the start it recorded stays counted, as consumed.
    ///
    /// - Returns: The coordinator's lease to hand back, if it held one.
    mutating func giveUpReservation(now: MonotonicInstant) -> UInt64? {
        guard let held = reservation else { return nil }
        reservation = nil
        return held.token.flatMap { handBack($0, now: now) }
    }

    /// Ends a start's lease at `now`: the fallback's at once; the coordinator's is returned, to hand back.
    private mutating func handBack(_ token: Token?, now: MonotonicInstant) -> UInt64? {
        switch token {
        case .shared(let token)?: return token
        case .local(let token)?:
            // Ends reach the local model in order, one by one: each is the next number.
            fallback.finished(token: token, number: (fallback.lease?.ends ?? 0) + 1, now: Self.microseconds(now))
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

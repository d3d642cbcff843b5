/// The start decision that every process of a fleet shares: the reference for the Lua script that
/// takes it on Redis.
///
/// A pure value type, in integer microseconds as Redis's `TIME` gives them; it reads no clock and
/// each call is one atomic step (one script run). Its state is what the script keeps under the
/// limit's keys (a hash, the log, the token counter):
///
/// - `lastStart`, `lastGap`: the most recent reserved start and the gap that follows it;
/// - `lastEnd`: when that start ended (`.serial` only), `nil` while it runs;
/// - `lease`: for `.serial`, the process whose start runs: a token and an expiry;
/// - `log`: the most recent starts, at most `count` of them, oldest first;
/// - `pausedUntil`: no start before it;
/// - `lastNow`: the latest `now` seen, the clock's high-water mark;
/// - `lastToken`: the last lease token handed out, which outlives the rest.
///
/// Every operation first takes `now = max(now, lastNow)`: a clock that steps back (Redis's `TIME`
/// is a wall clock) never moves a decision back. Then it drops what no longer holds at `now` (an
/// expired lease, a passed pause, the whole state at ``expiry``), so a late `finished` of an
/// expired lease's token changes nothing, whichever operation came first.
///
/// The rules of ``request(_:)``, each as strict as ``ThrottleSchedule``'s (task k starts at s(k),
/// ends at e(k) and carries the gap g(k) that follows it):
///
/// 1. `at = max(now, pausedUntil)`: nothing starts before the pause ends.
/// 2. `.concurrent`: `at ≥ lastStart + lastGap` (s(k+1) ≥ s(k) + g(k)). Within one process its queue
///    also waits for its own task's end; across processes starts may overlap.
/// 3. `.serial`: while another process holds an unexpired lease, nothing is reserved: the request is
///    declined, to ask again when the lease expires or after one horizon, whichever is first (the
///    holder's end is not known in advance). Otherwise `at ≥ lastEnd + lastGap`
///    (s(k+1) ≥ e(k) + g(k)); for a start nested in the holder's running task (`holding` its
///    token), `at ≥ lastStart + lastGap` while that start runs, as the local schedule's nested starts.
/// 4. With a limit of `count` per `window`: `at ≥ log[count−1] + window`, counting back from the
///    newest, once the log holds `count` starts (s(k+n) ≥ s(k) + w).
/// 5. `at − now` within `horizon` (more than zero): the start is recorded at `at` (it counts,
///    whether or not it is used) and reserved; beyond it the request is declined, to ask again
///    `at − now − horizon` later, when it would fall inside the horizon if nothing else changed.
///    Nothing is recorded. A decline never says less than ``minimumRetry`` (1 ms): no busy loop.
///
/// **One set of rules per key.** The first request stores its ``Rules`` (the monitor and the
/// limit) with the state; a request with other rules is answered ``Decision/mismatch(stored:)``
/// and changes nothing, rather than weakening the stored ones (a `.concurrent` process ignoring a
/// `.serial` lease, a smaller count trimming the log). That includes a request without a limit
/// against a state with one: it is a different configuration of the same key, most likely a
/// deployment half rolled out, and it must not start unlogged. The rules are forgotten with the
/// state once nothing in it binds any more (see ``expiry``), so a fleet can change its
/// configuration by letting the key go idle.
///
/// **Numbers.** Every microsecond value is clamped to ±``microsecondLimit`` (2^53 − 1), on input
/// and after every sum: a Lua number is a double, which holds exactly those integers, so the
/// script computes exactly what this model does (a gap of `Duration.seconds(Int64.max)` is about
/// 285 years, not a wrapped negative number).
///
/// State stays bounded: the log holds at most `count` starts in a ring (O(1) per start), an
/// expired lease is dropped (its start is taken to have ended at the expiry), a pause that has
/// passed is dropped, and the whole state is dropped at ``expiry``, when it decides nothing any
/// more (the script's key TTL).
package struct SharedThrottle: Sendable, Equatable {
    /// The largest microsecond value the model (and the script) uses: 2^53 − 1, the largest
    /// integer below which a double holds every integer exactly.
    package static let microsecondLimit: Int64 = (1 << 53) - 1
    /// The least a decline says to wait before asking again, in microseconds: 1 ms.
    package static let minimumRetry: Int64 = 1_000

    /// One process's request for its next start.
    package struct Request: Sendable, Equatable {
        /// The decider's clock: Redis's `TIME`, in microseconds.
        package var now: Int64
        /// The gap that follows this start, in microseconds.
        package var gap: Int64
        package var monitor: ThrottledQueue.Monitor
        /// At most `count` starts in any window of `window` microseconds; `nil` for no cap.
        package var limit: Limit?
        /// The furthest ahead a start is reserved, in microseconds; more than zero.
        package var horizon: Int64
        /// How long a `.serial` lease lasts after its start, in microseconds: longer than any task.
        package var leaseTTL: Int64
        /// For a start nested in the running task of the process that holds the `.serial` lease: its token.
        package var holding: UInt64?

        package init(
            now: Int64, gap: Int64, monitor: ThrottledQueue.Monitor, limit: (count: Int, window: Int64)?,
            horizon: Int64, leaseTTL: Int64, holding: UInt64? = nil
        ) {
            self.now = now.clampedToMicrosecondLimit
            self.gap = gap.clampedToMicrosecondLimit
            self.monitor = monitor
            self.limit = limit.map { Limit(count: $0.count, window: $0.window.clampedToMicrosecondLimit) }
            self.horizon = horizon.clampedToMicrosecondLimit
            self.leaseTTL = leaseTTL.clampedToMicrosecondLimit
            self.holding = holding
        }

        /// The rules the request is made under.
        package var rules: Rules { Rules(monitor: monitor, limit: limit) }
    }

    /// At most `count` starts in any sliding window of `window` microseconds.
    package struct Limit: Sendable, Equatable {
        package var count: Int
        package var window: Int64

        package init(count: Int, window: Int64) {
            self.count = count
            self.window = window
        }
    }

    /// The rules stored with the state: every request for the key must make the same.
    package struct Rules: Sendable, Equatable {
        package var monitor: ThrottledQueue.Monitor
        package var limit: Limit?

        package init(monitor: ThrottledQueue.Monitor, limit: Limit?) {
            self.monitor = monitor
            self.limit = limit
        }
    }

    /// The answer to a request.
    package enum Decision: Sendable, Equatable {
        /// The start is recorded at `at`, `wait` after the request's `now`; a `.serial` start holds
        /// the lease `token`, to hand back with ``SharedThrottle/finished(token:now:)``.
        case reserved(at: Int64, wait: Int64, token: UInt64?)
        /// Nothing was recorded; ask again `retryIn` microseconds later (at least ``minimumRetry``).
        case declined(retryIn: Int64)
        /// The request's rules are not the state's `stored` ones: nothing was recorded.
        case mismatch(stored: Rules)
    }

    /// The `.serial` lease: the process whose start runs.
    package struct Lease: Sendable, Equatable {
        package var token: UInt64
        package var expiry: Int64
        /// How many starts run under it: more than one while tasks nested in the holder's run.
        package var running: Int
    }

    package private(set) var rules: Rules?
    package private(set) var lastStart: Int64?
    package private(set) var lastGap: Int64 = 0
    package private(set) var lastEnd: Int64?
    package private(set) var lease: Lease?
    package private(set) var pausedUntil: Int64?
    /// The last token handed out, `0` before the first; it outlives the state (Redis: a key of its
    /// own with a long TTL). The first token is `now + 1`, then each is one more than the last: a
    /// decider that lost its counter (a restart without persistence) starts above every token it
    /// handed out before, as long as its clock did not step back, so a token still held by a
    /// process that does not know its lease expired is never handed out again.
    package private(set) var lastToken: UInt64 = 0
    /// The clock's high-water mark: the latest `now` an operation took (it outlives the state).
    package private(set) var lastNow: Int64?
    /// The most recent starts, at most `count`, in a ring: once full, `ringOldest` is the oldest
    /// one's index, where the next start is written.
    private var ring: [Int64] = []
    private var ringOldest = 0

    package init() {}

    /// The logged starts, oldest first.
    package var log: [Int64] { Array(ring[ringOldest...] + ring[..<ringOldest]) }

    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.rules == rhs.rules && lhs.lastStart == rhs.lastStart && lhs.lastGap == rhs.lastGap
            && lhs.lastEnd == rhs.lastEnd && lhs.lease == rhs.lease && lhs.pausedUntil == rhs.pausedUntil
            && lhs.lastToken == rhs.lastToken && lhs.lastNow == rhs.lastNow && lhs.log == rhs.log
    }

    /// Decides a start, by the rules in the type's discussion.
    package mutating func request(_ request: Request) -> Decision {
        precondition(request.horizon > 0, "SharedThrottle.request: horizon must be more than zero, got \(request.horizon) µs")
        precondition(request.leaseTTL > 0, "SharedThrottle.request: leaseTTL must be more than zero, got \(request.leaseTTL) µs")
        let now = advance(to: request.now)
        if let rules, rules != request.rules { return .mismatch(stored: rules) }
        var at = max(now, pausedUntil ?? now)
        if request.monitor == .serial, let lease, lease.token != request.holding {
            return .declined(retryIn: max(Self.minimumRetry, min(lease.expiry - now, request.horizon)))
        }
        if let lastStart {
            switch request.monitor {
            case .concurrent: at = max(at, lastStart.addingClamped(lastGap))
            case .serial: at = max(at, (lastEnd ?? lastStart).addingClamped(lastGap))
            }
        }
        if let limit = request.limit, ring.count >= limit.count {
            at = max(at, ring[ringOldest].addingClamped(limit.window))
        }
        let wait = at - now
        guard wait <= request.horizon else {
            return .declined(retryIn: max(Self.minimumRetry, wait - request.horizon))
        }
        rules = request.rules
        record(at: at, gap: request.gap)
        guard request.monitor == .serial else { return .reserved(at: at, wait: wait, token: nil) }
        let expiry = at.addingClamped(request.leaseTTL)
        if var held = lease {
            held.running += 1
            held.expiry = max(held.expiry, expiry)
            lease = held
        } else {
            lastToken = (lastToken == 0 ? UInt64(max(0, now)) : lastToken) &+ 1
            lease = Lease(token: lastToken, expiry: expiry, running: 1)
        }
        return .reserved(at: at, wait: wait, token: lease?.token)
    }

    /// A `.serial` start holding `token` ended at `now` (or was given up unused): the next counts its
    /// gap from here (never from before the start), and the lease is handed back once no start runs
    /// under it.
    ///
    /// - Returns: Whether `token` held the lease; an expired or unknown token changes nothing.
    @discardableResult
    package mutating func finished(token: UInt64, now: Int64) -> Bool {
        let now = advance(to: now)
        guard var held = lease, held.token == token else { return false }
        lastEnd = max(now, lastStart ?? now)
        held.running -= 1
        lease = held.running > 0 ? held : nil
        return true
    }

    /// The `.serial` start holding `token` still runs at `now`: its lease lasts at least `leaseTTL`
    /// from now (never less than it already did), so that a task longer than the lease keeps other
    /// processes out while it runs. A lease that expired is not brought back: its start has ended.
    ///
    /// - Returns: Whether `token` holds the lease.
    @discardableResult
    package mutating func renew(token: UInt64, leaseTTL: Int64, now: Int64) -> Bool {
        let now = advance(to: now)
        guard var held = lease, held.token == token else { return false }
        held.expiry = max(held.expiry, now.addingClamped(leaseTTL.clampedToMicrosecondLimit))
        lease = held
        return true
    }

    /// Records a start at `now` followed by `gap` that took no reservation: a command that timed out
    /// after it was sent may have been carried out, so the local fallback counts it (erring safe).
    /// It ran no task: for `.serial` it has ended at once.
    ///
    /// - Returns: Whether it was recorded: not when `rules` are not the state's.
    @discardableResult
    package mutating func recordConsumed(at now: Int64, gap: Int64, rules consumedRules: Rules) -> Bool {
        let now = advance(to: now)
        if let rules, rules != consumedRules { return false }
        rules = consumedRules
        record(at: max(now, lastStart ?? now), gap: gap.clampedToMicrosecondLimit)
        lastEnd = lastStart
        return true
    }

    /// No start for `duration` from `now`; a later pause already in force stays (a pause is never
    /// shortened), and one of no duration (or less) is none.
    ///
    /// - Returns: The end of the pause in force afterwards, `nil` for none.
    @discardableResult
    package mutating func pause(for duration: Int64, now: Int64) -> Int64? {
        let now = advance(to: now)
        let until = now.addingClamped(duration.clampedToMicrosecondLimit)
        if until > now { pausedUntil = max(pausedUntil ?? until, until) }
        return pausedUntil
    }

    /// When the state stops deciding anything, so that dropping it changes no decision: the
    /// latest of the pause's end, the last start's gap (for `.serial`, from its lease's expiry while
    /// one is held, else from its end), the lease's expiry and the newest logged start's window.
    /// `nil` for an empty state. The script sets the key's expiry to it (plus a margin).
    package var expiry: Int64? {
        guard let lastStart else { return pausedUntil }
        let gapFrom = rules?.monitor == .serial ? (lease?.expiry ?? lastEnd ?? lastStart) : lastStart
        var until = gapFrom.addingClamped(lastGap)
        if let pausedUntil { until = max(until, pausedUntil) }
        if let lease { until = max(until, lease.expiry) }
        if let window = rules?.limit?.window, let newest = ring.isEmpty ? nil : ring[(ringOldest + ring.count - 1) % ring.count] {
            until = max(until, newest.addingClamped(window))
        }
        return until
    }

    private mutating func record(at: Int64, gap: Int64) {
        lastStart = at
        lastGap = gap
        lastEnd = nil
        guard let count = rules?.limit?.count else { return }
        if ring.count < count {
            ring.append(at)
        } else {
            ring[ringOldest] = at
            ringOldest = (ringOldest + 1) % count
        }
    }

    /// Moves the clock's high-water mark to `now` (clamped) if it is later, and drops what no
    /// longer holds then: an expired lease (its start, and any nested in it, is taken to have ended
    /// at the expiry), a pause that has passed, and, at ``expiry``, the whole state (the token
    /// counter and the clock's mark stay).
    ///
    /// - Returns: The operation's `now`: the high-water mark.
    private mutating func advance(to now: Int64) -> Int64 {
        let now = max(now.clampedToMicrosecondLimit, lastNow ?? .min)
        lastNow = now
        dropExpired(now: now)
        return now
    }

    private mutating func dropExpired(now: Int64) {
        if let expiry, expiry <= now {
            self = SharedThrottle(lastToken: lastToken, lastNow: lastNow)
            return
        }
        if let held = lease, held.expiry <= now {
            lastEnd = held.expiry
            lease = nil
        }
        if let until = pausedUntil, until <= now { pausedUntil = nil }
    }

    private init(lastToken: UInt64, lastNow: Int64?) {
        self.lastToken = lastToken
        self.lastNow = lastNow
    }
}

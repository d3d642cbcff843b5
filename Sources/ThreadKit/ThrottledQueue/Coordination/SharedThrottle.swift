/// The start decision that every process of a fleet shares: the reference for the Lua script that
/// takes it on Redis.
///
/// A pure value type, in integer microseconds as Redis's `TIME` gives them; it reads no clock and
/// each call is one atomic step (one script run). Its state is what the script keeps under the
/// limit's keys (the state and the log):
///
/// - `lastStart`, `lastGap`: the most recent reserved start and the gap that follows it;
/// - `lastEnd`: when that start ended (`.serial` only), `nil` while it runs;
/// - `lease`: for `.serial`, the process whose start runs: a token, an expiry, and how many
///   starts were reserved under it and the highest end number handed back (see ``finished(token:number:now:)``);
/// - `waiters`: for `.serial`, the line of processes declined while they wait for the lease,
///   oldest first (see "Served in turn" below);
/// - `log`: the most recent starts, at most `count` of them, oldest first;
/// - `pausedUntil`: no start before it;
/// - `lastNow`: the latest `now` seen, the clock's high-water mark.
///
/// Every operation first takes `now = max(now, lastNow)`: a clock that steps back (Redis's `TIME`
/// is a wall clock) never moves a decision back. Then it drops what no longer holds at `now` (an
/// expired lease, a passed pause, a waiter that stopped asking, the whole state at ``expiry``), so
/// a late `finished` of an expired lease's token changes nothing, whichever operation came first.
///
/// The rules of ``request(_:)``, each as strict as ``ThrottleSchedule``'s (task k starts at s(k),
/// ends at e(k) and carries the gap g(k) that follows it):
///
/// 1. `at = max(now, pausedUntil)`: nothing starts before the pause ends.
/// 2. `.concurrent`: `at ≥ lastStart + lastGap` (s(k+1) ≥ s(k) + g(k)). Within one process its queue
///    also waits for its own task's end; across processes starts may overlap.
/// 3. `.serial`: while another process holds an unexpired lease, nothing is reserved: the request is
///    declined, to ask again after ``waiterPoll``, or sooner when the lease expires or one horizon
///    passes (the holder's end is not known in advance). Otherwise `at ≥ lastEnd + lastGap`
///    (s(k+1) ≥ e(k) + g(k)); for a start nested in the holder's running task (`holding` its
///    token), `at ≥ lastStart + lastGap` while that start runs, as the local schedule's nested starts.
/// 4. With a limit of `count` per `window`: `at ≥ log[count−1] + window`, counting back from the
///    newest, once the log holds `count` starts (s(k+n) ≥ s(k) + w).
/// 5. `.serial`, not nested: when an older waiter is in line, the request is declined (after
///    ``waiterPoll``, or when the start would fall inside the horizon if that is later).
/// 6. `at − now` within `horizon` (more than zero): the start is recorded at `at` (it counts,
///    whether or not it is used) and reserved; beyond it the request is declined, to ask again
///    `at − now − horizon` later, when it would fall inside the horizon if nothing else changed.
///    Nothing is recorded. A decline never says less than ``minimumRetry`` (1 ms): no busy loop.
///
/// **Tokens.** The asker proposes the token of the lease its reserve may make
/// (``Request/token``, drawn at random in 1...2^53−1 for each reservation); a new lease takes it, a
/// start nested in a held lease keeps that lease's. So an asker that does not learn the outcome of
/// its reserve (a reply lost) still knows the token, and hands the lease it may have taken back
/// with ``finished(token:number:now:)`` at once rather than leave it to expire. A drawn token that
/// equals the live lease's does no harm (only `holding` joins a lease); one that equals the token of
/// a lease that ended less than a TTL ago would let that lease's late end or renewal reach the new
/// lease. A handful of such tokens live per key at any time, so a draw meets one with a chance of a
/// few in 2^53 (about 10^−15): a fleet making a million reservations of a key runs a chance of
/// about 10^−9, and then one lease ends early or lasts one TTL longer.
///
/// **Idempotent ends.** A lease counts the starts reserved under it (`reserves`: its first, and one
/// per nested start) and the highest end number handed back (`ends`); the holder numbers its ends
/// of a lease 1, 2, 3…, and the lease ends once `ends ≥ reserves`. An end sent again (its reply
/// lost), or arriving after a later one, changes nothing, so the holder sends each end until it is
/// acknowledged.
///
/// **Served in turn** (`.serial`). Each asker has an id (``Request/asker``: one per queue). A
/// request declined for the lease (rule 3), for an older waiter (rule 5) or for the horizon (rule 6)
/// puts its asker in the line, oldest first, or keeps its place; when the lease is free, only the
/// oldest waiter may take it (anyone when nobody waits), and a grant takes the asker out of the
/// line. So a process with a backlog that hands the lease back and asks again at once finds the
/// process that waited before it first in line, and the lease goes round the waiting processes in
/// turn. Starts nested in the holder's task bypass the line. A waiter is told to ask again within
/// the horizon however long it has to wait (a long gap, a pause), and one that does not ask again
/// within ``waiterGrace`` after the retry it was told (a crashed process, a queue that emptied) is
/// dropped, so it holds the line up by at most that much, and no place outlives its asker by more
/// than the horizon and the grace. The first in line is told to ask again within
/// ``waiterPoll``; those further back, less often (up to ``maxWaiterPoll``); and the line holds at
/// most ``maxWaiters`` askers (one more is declined without a place).
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
/// 285 years, not a wrapped negative number). Tokens and askers are in 1...2^53−1 for the same reason.
///
/// State stays bounded: the log holds at most `count` starts in a ring (O(1) per start), the line
/// at most ``maxWaiters`` askers, each of which asked within the horizon and grace, an expired lease is dropped (its
/// start is taken to have ended at the expiry), a pause that has passed is dropped, and the whole
/// state is dropped at ``expiry``, when it decides nothing any more (the script's key TTL).
package struct SharedThrottle: Sendable, Equatable {
    /// The largest microsecond value the model (and the script) uses: 2^53 − 1, the largest
    /// integer below which a double holds every integer exactly.
    package static let microsecondLimit: Int64 = (1 << 53) - 1
    /// The least a decline says to wait before asking again, in microseconds: 1 ms.
    package static let minimumRetry: Int64 = 1_000
    /// How soon a `.serial` waiter asks again while the lease is held or an older waiter is in line,
    /// in microseconds: 20 ms, the endpoint leases' poll. A lease handed back reaches the next in
    /// line within it.
    package static let waiterPoll: Int64 = 20_000
    /// How long past the retry it was told a waiter keeps its place without asking again, in
    /// microseconds: ten polls, 200 ms. Its next ask comes after one round trip and its thread's
    /// wake-up, which a loaded host or a slow reply (the client's command timeout is 100 ms by
    /// default) may stretch well past the retry; a process that died holds the line up no longer.
    package static let waiterGrace: Int64 = 10 * waiterPoll
    /// How soon a waiter further back in line asks again at most, in microseconds: five polls,
    /// 100 ms. A waiter at rank `r` (0 the first) is told `waiterPoll × (1 + r)` up to this, so the
    /// runs a line costs per second stay about linear in its length, while the first in line hears
    /// of a lease handed back within one poll.
    package static let maxWaiterPoll: Int64 = 5 * waiterPoll
    /// The most askers the line holds: 64. One asking while it is full is declined without a place
    /// (told ``maxWaiterPoll``), and takes one when it asks again once a place is free; every run of
    /// the script reads and writes the whole line, so it stays small.
    package static let maxWaiters = 64

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
        /// The token a new `.serial` lease takes, in 1...2^53−1: the asker draws it at random for
        /// each reservation (a nested start keeps its lease's).
        package var token: UInt64
        /// Who asks, in 1...2^53−1: one id per queue, its place in the `.serial` line.
        package var asker: UInt64

        package init(
            now: Int64, gap: Int64, monitor: ThrottledQueue.Monitor, limit: (count: Int, window: Int64)?,
            horizon: Int64, leaseTTL: Int64, holding: UInt64? = nil, token: UInt64, asker: UInt64
        ) {
            self.now = now.clampedToMicrosecondLimit
            self.gap = gap.clampedToMicrosecondLimit
            self.monitor = monitor
            self.limit = limit.map { Limit(count: $0.count, window: $0.window.clampedToMicrosecondLimit) }
            self.horizon = horizon.clampedToMicrosecondLimit
            self.leaseTTL = leaseTTL.clampedToMicrosecondLimit
            self.holding = holding
            self.token = token
            self.asker = asker
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
        /// the lease `token`, to hand back with ``SharedThrottle/finished(token:number:now:)``.
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
        /// How many starts were reserved under it: its first, and one per start nested in the holder's task.
        package var reserves: Int64
        /// The highest end number handed back: the lease ends once it reaches `reserves`.
        package var ends: Int64
    }

    /// A `.serial` asker in line for the lease.
    package struct Waiter: Sendable, Equatable {
        package var asker: UInt64
        /// When it first asked: its place in the line.
        package var since: Int64
        /// When it is dropped unless it asks again: the retry it was told (at most the horizon) plus
        /// ``SharedThrottle/waiterGrace``.
        package var liveUntil: Int64
    }

    package private(set) var rules: Rules?
    package private(set) var lastStart: Int64?
    package private(set) var lastGap: Int64 = 0
    package private(set) var lastEnd: Int64?
    package private(set) var lease: Lease?
    package private(set) var pausedUntil: Int64?
    /// The `.serial` line, oldest first (the order they first asked in).
    package private(set) var waiters: [Waiter] = []
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
            && lhs.waiters == rhs.waiters && lhs.lastNow == rhs.lastNow && lhs.log == rhs.log
    }

    /// Decides a start, by the rules in the type's discussion.
    package mutating func request(_ request: Request) -> Decision {
        precondition(request.horizon > 0, "SharedThrottle.request: horizon must be more than zero, got \(request.horizon) µs")
        precondition(request.leaseTTL > 0, "SharedThrottle.request: leaseTTL must be more than zero, got \(request.leaseTTL) µs")
        precondition(Self.isID(request.token), "SharedThrottle.request: token must be in 1...2^53-1, got \(request.token)")
        precondition(Self.isID(request.asker), "SharedThrottle.request: asker must be in 1...2^53-1, got \(request.asker)")
        let now = advance(to: request.now)
        if let rules, rules != request.rules { return .mismatch(stored: rules) }
        let nested = request.monitor == .serial && lease != nil && lease?.token == request.holding
        let inLine = request.monitor == .serial && !nested
        if inLine, let lease {
            return enqueue(request.asker, retryIn: min(lease.expiry - now, request.horizon, Self.waiterPoll), horizon: request.horizon, now: now)
        }
        var at = max(now, pausedUntil ?? now)
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
        if inLine, let oldest = waiters.first, oldest.asker != request.asker {
            return enqueue(request.asker, retryIn: max(Self.waiterPoll, wait - request.horizon), horizon: request.horizon, now: now)
        }
        guard wait <= request.horizon else {
            if inLine { return enqueue(request.asker, retryIn: wait - request.horizon, horizon: request.horizon, now: now) }
            return .declined(retryIn: max(Self.minimumRetry, wait - request.horizon))
        }
        rules = request.rules
        record(at: at, gap: request.gap)
        guard request.monitor == .serial else { return .reserved(at: at, wait: wait, token: nil) }
        let expiry = at.addingClamped(request.leaseTTL)
        if nested, var held = lease {
            held.reserves += 1
            held.expiry = max(held.expiry, expiry)
            lease = held
        } else {
            // The oldest waiter, or nobody waits: out of the line.
            if waiters.first?.asker == request.asker { waiters.removeFirst() }
            lease = Lease(token: request.token, expiry: expiry, reserves: 1, ends: 0)
        }
        return .reserved(at: at, wait: wait, token: lease?.token)
    }

    /// Declines `asker`'s `.serial` request, to ask again `retryIn` later, but within `horizon` (at
    /// least ``minimumRetry``; one further back in line than the first, at least ``waiterPoll`` times
    /// one more than its rank, up to ``maxWaiterPoll``): it joins the line (unless it holds
    /// ``maxWaiters`` already), or keeps its place there, live until then (at most `horizon` from
    /// now) plus ``waiterGrace``.
    private mutating func enqueue(_ asker: UInt64, retryIn: Int64, horizon: Int64, now: Int64) -> Decision {
        let index = waiters.firstIndex { $0.asker == asker }
        let rank = index ?? waiters.count
        var retryIn = max(Self.minimumRetry, min(retryIn, horizon))
        if rank > 0 { retryIn = max(retryIn, min(Self.waiterPoll * Int64(1 + rank), Self.maxWaiterPoll)) }
        let liveUntil = now.addingClamped(min(retryIn, horizon)).addingClamped(Self.waiterGrace)
        if let index {
            waiters[index].liveUntil = liveUntil
        } else if waiters.count < Self.maxWaiters {
            waiters.append(Waiter(asker: asker, since: now, liveUntil: liveUntil))
        }
        return .declined(retryIn: retryIn)
    }

    /// Whether `id` is a token or an asker: in 1...2^53−1, which a Lua number holds exactly.
    package static func isID(_ id: UInt64) -> Bool {
        id >= 1 && id <= UInt64(microsecondLimit)
    }

    /// The end numbered `number` of a `.serial` start holding `token`: it ended at `now` (or was
    /// given up unused). The holder numbers its ends of a lease 1, 2, 3…; a number above the
    /// highest seen sets it, the next start counts its gap from here (never from before the last
    /// start), and the lease is handed back once the ends reach the starts reserved under it. A
    /// number seen before (an end sent again, or arriving after a later one) changes nothing.
    ///
    /// - Returns: Whether `token` holds the lease (before this end); an expired or unknown token
    ///   changes nothing.
    @discardableResult
    package mutating func finished(token: UInt64, number: Int64, now: Int64) -> Bool {
        precondition(number >= 1, "SharedThrottle.finished: number must be at least 1, got \(number)")
        let now = advance(to: now)
        guard var held = lease, held.token == token else { return false }
        guard number > held.ends else { return true }
        held.ends = number.clampedToMicrosecondLimit
        lastEnd = max(now, lastStart ?? now)
        lease = held.ends >= held.reserves ? nil : held
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
    /// one is held, else from its end), the lease's expiry, the newest logged start's window and
    /// the waiters' lives. `nil` for an empty state. The script sets the key's expiry to it (plus a
    /// margin).
    package var expiry: Int64? {
        var until = waiters.map(\.liveUntil).max()
        if let pausedUntil { until = max(until ?? pausedUntil, pausedUntil) }
        guard let lastStart else { return until }
        let gapFrom = rules?.monitor == .serial ? (lease?.expiry ?? lastEnd ?? lastStart) : lastStart
        var latest = max(until ?? .min, gapFrom.addingClamped(lastGap))
        if let lease { latest = max(latest, lease.expiry) }
        if let window = rules?.limit?.window, let newest = ring.isEmpty ? nil : ring[(ringOldest + ring.count - 1) % ring.count] {
            latest = max(latest, newest.addingClamped(window))
        }
        return latest
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
    /// at the expiry), a pause that has passed, a waiter past its life, and, at ``expiry``, the
    /// whole state (the clock's mark stays).
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
            self = SharedThrottle(lastNow: lastNow)
            return
        }
        if let held = lease, held.expiry <= now {
            lastEnd = held.expiry
            lease = nil
        }
        if let until = pausedUntil, until <= now { pausedUntil = nil }
        waiters.removeAll { $0.liveUntil <= now }
    }

    private init(lastNow: Int64?) {
        self.lastNow = lastNow
    }
}

/// The start decision that every process of a fleet shares: the reference for the Lua script that
/// takes it on Redis.
///
/// A pure value type, in integer microseconds as Redis's `TIME` gives them; it reads no clock and
/// each call is one atomic step (one script run). Its state is what the script keeps under one key:
///
/// - `lastStart`, `lastGap`: the most recent reserved start and the gap that follows it;
/// - `lastEnd`: when that start ended (`.serial` only), `nil` while it runs;
/// - `lease`: for `.serial`, the process whose start runs: a token and an expiry;
/// - `log`: the most recent starts, at most `count` of them, oldest first;
/// - `pausedUntil`: no start before it.
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
/// 5. `at − now` within `horizon`: the start is recorded at `at` (it counts, whether or not it is
///    used) and reserved; beyond it the request is declined, to ask again `at − now − horizon` later,
///    when it would fall inside the horizon if nothing else changed. Nothing is recorded.
///
/// State stays bounded: the log never holds more than `count` starts, an expired lease is dropped
/// (its start is taken to have ended at the expiry), and a pause that has passed is dropped.
package struct SharedThrottle: Sendable, Equatable {
    /// One process's request for its next start.
    package struct Request: Sendable, Equatable {
        /// The decider's clock: Redis's `TIME`, in microseconds.
        package var now: Int64
        /// The gap that follows this start, in microseconds.
        package var gap: Int64
        package var monitor: ThrottledQueue.Monitor
        /// At most `count` starts in any window of `window` microseconds; `nil` for no cap.
        package var limit: Limit?
        /// The furthest ahead a start is reserved, in microseconds.
        package var horizon: Int64
        /// How long a `.serial` lease lasts after its start, in microseconds: longer than any task.
        package var leaseTTL: Int64
        /// For a start nested in the running task of the process that holds the `.serial` lease: its token.
        package var holding: UInt64?

        package init(
            now: Int64, gap: Int64, monitor: ThrottledQueue.Monitor, limit: (count: Int, window: Int64)?,
            horizon: Int64, leaseTTL: Int64, holding: UInt64? = nil
        ) {
            self.now = now
            self.gap = gap
            self.monitor = monitor
            self.limit = limit.map { Limit(count: $0.count, window: $0.window) }
            self.horizon = horizon
            self.leaseTTL = leaseTTL
            self.holding = holding
        }
    }

    /// At most `count` starts in any sliding window of `window` microseconds.
    package struct Limit: Sendable, Equatable {
        package var count: Int
        package var window: Int64
    }

    /// The answer to a request.
    package enum Decision: Sendable, Equatable {
        /// The start is recorded at `at`, `wait` after the request's `now`; a `.serial` start holds
        /// the lease `token`, to hand back with ``SharedThrottle/finished(token:now:)``.
        case reserved(at: Int64, wait: Int64, token: UInt64?)
        /// Nothing was recorded; ask again `retryIn` microseconds later.
        case declined(retryIn: Int64)
    }

    /// The `.serial` lease: the process whose start runs.
    package struct Lease: Sendable, Equatable {
        package var token: UInt64
        package var expiry: Int64
        /// How many starts run under it: more than one while tasks nested in the holder's run.
        package var running: Int
    }

    package private(set) var lastStart: Int64?
    package private(set) var lastGap: Int64 = 0
    package private(set) var lastEnd: Int64?
    package private(set) var lease: Lease?
    package private(set) var log: [Int64] = []
    package private(set) var pausedUntil: Int64?
    /// The last token handed out (Redis: an `INCR`).
    package private(set) var lastToken: UInt64 = 0

    package init() {}

    /// Decides a start, by the rules in the type's discussion.
    package mutating func request(_ request: Request) -> Decision {
        dropExpired(now: request.now)
        var at = max(request.now, pausedUntil ?? request.now)
        if request.monitor == .serial, let lease, lease.token != request.holding {
            return .declined(retryIn: min(lease.expiry - request.now, request.horizon))
        }
        if let lastStart {
            switch request.monitor {
            case .concurrent: at = max(at, lastStart.addingSaturated(lastGap))
            case .serial: at = max(at, (lastEnd ?? lastStart).addingSaturated(lastGap))
            }
        }
        if let limit = request.limit, log.count >= limit.count {
            at = max(at, log[log.count - limit.count].addingSaturated(limit.window))
        }
        let wait = at - request.now
        guard wait <= request.horizon else { return .declined(retryIn: wait - request.horizon) }
        record(at: at, gap: request.gap, count: request.limit?.count)
        guard request.monitor == .serial else { return .reserved(at: at, wait: wait, token: nil) }
        let expiry = at.addingSaturated(request.leaseTTL)
        if var held = lease {
            held.running += 1
            held.expiry = max(held.expiry, expiry)
            lease = held
        } else {
            lastToken &+= 1
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
        guard var held = lease, held.token == token else { return false }
        lastEnd = max(now, lastStart ?? now)
        held.running -= 1
        lease = held.running > 0 ? held : nil
        return true
    }

    /// Records a start at `now` followed by `gap` that took no reservation: a command that timed out
    /// after it was sent may have been carried out, so the local fallback counts it (erring safe).
    /// It ran no task: for `.serial` it has ended at once.
    package mutating func recordConsumed(at now: Int64, gap: Int64, count: Int?) {
        record(at: max(now, lastStart ?? now), gap: gap, count: count)
        lastEnd = lastStart
    }

    /// No start before `until`; a later pause already in force stays (a pause is never shortened),
    /// and one already past is none.
    package mutating func pause(until: Int64, now: Int64) {
        guard until > now else { return }
        pausedUntil = max(pausedUntil ?? until, until)
    }

    private mutating func record(at: Int64, gap: Int64, count: Int?) {
        lastStart = at
        lastGap = gap
        lastEnd = nil
        guard let count else { return }
        log.append(at)
        if log.count > count { log.removeFirst(log.count - count) }
    }

    /// Drops what no longer holds at `now`: an expired lease (its start is taken to have ended at the
    /// expiry) and a pause that has passed.
    private mutating func dropExpired(now: Int64) {
        if let held = lease, held.expiry <= now {
            lastEnd = lastEnd ?? held.expiry
            lease = nil
        }
        if let until = pausedUntil, until <= now { pausedUntil = nil }
    }
}

extension Int64 {
    /// The sum, clamped to the range of `Int64`: a time far out stays far out instead of wrapping.
    package func addingSaturated(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}

extension Duration {
    /// The duration in whole microseconds, rounded up (a gap or a pause is never shortened), clamped
    /// to the range of `Int64`.
    package var microsecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let fraction = attoseconds / 1_000_000_000_000
        let remainder = attoseconds % 1_000_000_000_000
        let (sum, sumOverflow) = whole.addingReportingOverflow(fraction + (remainder > 0 ? 1 : 0))
        return sumOverflow ? (seconds < 0 ? .min : .max) : sum
    }
}

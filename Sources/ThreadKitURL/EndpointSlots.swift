@_spi(ThreadKitURL) import ThreadKit

/// The slot decisions for one endpoint of a ``URLDispatcher``: a pure state machine.
///
/// Events go in (a request arrives, ends, a pause is set, a wake-up is due, the limits change) and
/// the actions come out as a ``Decision``: which requests start now, and when to wake it up again.
/// It reads no clock, starts no thread, touches no socket; every time is an offset from an origin
/// the caller picks. The dispatcher holds one per endpoint under its lock and carries the decisions out.
///
/// The rules:
/// - at most `maxRequests` requests run, every kind counted; at most `maxLongRequests` of them long;
/// - one FIFO for every waiting request; a long request that waits for a long slot lets the short
///   requests behind it pass, and keeps its place;
/// - work-conserving: after every event, every request that may start does;
/// - starts follow the rate limit and the pause (the throttle's rules, ``StartThrottle``);
/// - every request ends exactly once: a second ``end(_:outcome:now:)`` for it is ignored, so a slot
///   comes back exactly once whatever races to end it;
/// - shared by a fleet (``sharing``), a request that may start also needs a lease from the
///   endpoint's ``EndpointCoordinator``: the slots ask for one lease at a time, for the first
///   request in FIFO order that may start, and give it to that request (or to the first one that
///   may start when it comes; back, if none may). An answer "full" asks again at the time it says,
///   or at once when a request of this process gives its lease back; "paused" pauses the endpoint
///   as a `Retry-After` does; "unavailable" applies the ``Fallback`` until the time it says. A
///   lease goes back exactly once, when its request ends, however it ends. Requests the fallback
///   started are adopted (given a lease whatever the limit) before any new one starts, once the
///   coordinator may be asked again (``EndpointLeaseBook``).
struct EndpointSlots<ID: Hashable & Sendable>: Sendable {
    /// The kind of a request, as the slots see it.
    enum Kind: Equatable, Sendable {
        /// A short request (async, sync or delegate).
        case short
        /// A long request; `waits` says whether it queues when the long limit is reached.
        case long(waits: Bool)

        var isLong: Bool { self != .short }
    }

    /// How a request ended, for the statistics.
    enum Outcome: Equatable, Sendable {
        /// With a whole response, whatever its status.
        case completed
        /// With any error but a ThreadKit timeout (cancel, dispose, transport error, malformed response).
        case failed
        /// With a ThreadKit timeout, in any phase.
        case timedOut
    }

    /// What to do after an event.
    struct Decision: Equatable, Sendable {
        /// The requests that get their slot now, in FIFO order.
        var start: [ID] = []
        /// Arm a wake-up for this offset: a queued request may start then (rate limit or pause).
        /// `nil`: no new wake-up is needed (one already armed for this time or earlier, or none at all).
        var wakeAt: Duration?
        /// Ask the coordinator for a lease; report its answer with this serial
        /// (``leaseAnswered(_:serial:now:)``).
        var acquireLease: Int?
        /// Whether that ask adopts a running request (``EndpointLeaseRequest/adopt``).
        var adoptsLease = false
        /// Running requests that now hold an adopted lease: renew it while they run.
        var adopted: [ID] = []
        /// Give these leases back to the coordinator.
        var releaseLeases: [EndpointLease] = []
    }

    /// The answer to a new request.
    enum Admission: Equatable, Sendable {
        /// The long limit is reached and the request does not wait: refuse it.
        case rejected(limit: Int)
        /// Accepted: it is queued, or among `decision.start` if it starts at once.
        case accepted(Decision)
    }

    /// The answer to the end of a request.
    enum Ending: Equatable, Sendable {
        /// It was still queued and has left the queue; no slot was involved.
        case dequeued
        /// It held a slot, now free; the decision says who starts in its place.
        case released(Decision)
    }

    private struct Waiting: Sendable {
        var id: ID
        var kind: Kind
    }

    private(set) var maxRequests: Int
    private(set) var maxLongRequests: Int
    private var throttle: StartThrottle
    /// The FIFO, with holes left by requests that left it (started, or ended while waiting);
    /// `head` is the first live place. ``compact()`` keeps the holes from `head` on fewer than the
    /// waiting requests (plus a small allowance), so storage and each scan stay proportional to
    /// what waits now, never to the history.
    private var queue: [Waiting?] = []
    private var head = 0
    /// The holes in `queue[head...]`.
    private var holes = 0
    /// Where each waiting request sits in `queue`.
    private var places: [ID: Int] = [:]
    /// The running requests and whether each is long.
    private var running: [ID: Bool] = [:]
    private var queuedLong = 0
    /// The earliest wake-up already asked for, not yet reported by ``wake(now:)``.
    private var armedWake: Duration?
    /// The counts ``URLDispatcher/statistics(for:)`` reports (its `pausedUntil` is the dispatcher's
    /// to fill in, from ``pausedUntil``).
    private(set) var counts = URLDispatcher.EndpointStatistics()
    /// The shared leases, for slots shared by a fleet.
    private(set) var book: EndpointLeaseBook<ID>

    /// Slots with these limits and no request.
    ///
    /// - Parameters:
    ///   - maxRequests: At least 1.
    ///   - maxLongRequests: At least 0, less than `maxRequests`.
    ///   - rate: At most `rate.count` starts in any window of `rate.window`; `nil` for no cap.
    ///   - sharing: For slots shared by a fleet, their coordinator and what a start does while it
    ///     cannot decide; `nil` (the default) for slots of this process alone.
    init(maxRequests: Int, maxLongRequests: Int, rate: RateLimit?, sharing: EndpointSharing? = nil) {
        Self.checkLimits(maxRequests: maxRequests, maxLongRequests: maxLongRequests)
        self.maxRequests = maxRequests
        self.maxLongRequests = maxLongRequests
        throttle = StartThrottle(limit: rate)
        book = EndpointLeaseBook(sharing: sharing)
    }

    static func checkLimits(maxRequests: Int, maxLongRequests: Int, call: String = "URLDispatcher.EndpointLimits.init") {
        precondition(maxRequests >= 1, "\(call): maxRequests must be at least 1, got \(maxRequests)")
        precondition(maxLongRequests >= 0, "\(call): maxLongRequests must not be negative, got \(maxLongRequests)")
        precondition(maxLongRequests < maxRequests,
                     "\(call): maxLongRequests must be less than maxRequests (\(maxRequests)), so that short requests always keep a slot, got \(maxLongRequests)")
    }

    /// The rate limit in force.
    var rate: RateLimit? { throttle.limit }

    /// Where the most recent pause ends (it may have passed).
    var pausedUntil: Duration? { throttle.pausedUntil }

    /// Whether a long request that does not wait would be accepted now.
    var isLongRequestAllowed: Bool { counts.runningLong + queuedLong < maxLongRequests }

    /// Whether nothing runs and nothing waits.
    var isIdle: Bool { running.isEmpty && places.isEmpty }

    /// Whether `id` is queued.
    func isQueued(_ id: ID) -> Bool { places[id] != nil }

    /// Whether `id` holds a slot.
    func isRunning(_ id: ID) -> Bool { running[id] != nil }

    /// The shared lease `id` holds while it runs, if any.
    func lease(of id: ID) -> EndpointLease? { book.lease(of: id) }

    /// The coordinator and fallback of slots shared by a fleet; `nil` for slots of this process alone.
    var sharing: EndpointSharing? { book.sharing }

    /// Whether the coordinator's latest answer was "unavailable": its fallback applies.
    var isCoordinatorUnavailable: Bool { book.isCoordinatorUnavailable }

    // MARK: - Events

    /// A new request arrives at `now`.
    mutating func submit(_ id: ID, kind: Kind, now: Duration) -> Admission {
        precondition(places[id] == nil && running[id] == nil, "EndpointSlots.submit: request \(id) is already known")
        if kind.isLong {
            let refuses = kind == .long(waits: false) ? !isLongRequestAllowed : maxLongRequests == 0
            if refuses {
                counts.failed += 1
                return .rejected(limit: maxLongRequests)
            }
            queuedLong += 1
        }
        places[id] = queue.count
        queue.append(Waiting(id: id, kind: kind))
        counts.queued += 1
        return .accepted(grant(now: now))
    }

    /// Request `id` ended at `now` with `outcome`: finished, failed, timed out or cancelled, queued or
    /// running. Returns `nil` if it had already ended (or was never submitted): nothing changes then.
    mutating func end(_ id: ID, outcome: Outcome, now: Duration) -> Ending? {
        if let place = places.removeValue(forKey: id) {
            if queue[place]?.kind.isLong == true { queuedLong -= 1 }
            queue[place] = nil
            holes += 1
            counts.queued -= 1
            record(outcome)
            compact()
            return .dequeued
        }
        guard let isLong = running.removeValue(forKey: id) else { return nil }
        counts.running -= 1
        if isLong { counts.runningLong -= 1 }
        record(outcome)
        let lease = book.ended(id)
        var decision = grant(now: now)
        if let lease { decision.releaseLeases.insert(lease, at: 0) }
        return .released(decision)
    }

    /// The coordinator answered the ask with `serial` (``Decision/acquireLease``) at `now`. An
    /// answer to an ask that is no longer awaited gives its lease back.
    mutating func leaseAnswered(_ answer: EndpointLeaseAnswer, serial: Int, now: Duration) -> Decision {
        let answered = book.answered(answer, serial: serial, now: now) { running[$0] != nil }
        if let until = answered.pauseUntil { throttle.pause(until: until) }
        var decision = grant(now: now)
        decision.releaseLeases.insert(contentsOf: answered.release, at: 0)
        if let adopted = answered.adopted { decision.adopted.append(adopted) }
        return decision
    }

    /// No request starts before `until` (Retry-After); a later pause already in force stays.
    mutating func pause(until: Duration, now: Duration) -> Decision {
        throttle.pause(until: until)
        return grant(now: now)
    }

    /// A wake-up asked for by an earlier decision is due at `now` (or a stale one came: harmless).
    mutating func wake(now: Duration) -> Decision {
        if let armed = armedWake, armed <= now { armedWake = nil }
        return grant(now: now)
    }

    /// New limits from `now` on. Running requests over a lowered limit finish; no new one starts
    /// until the counts are below it. The rate limit's history starts afresh; a pause stays.
    /// A change of `sharing` (another coordinator, or another fallback) forgets the ask on its way (its
    /// lease, if one is granted, goes back when it comes, as an answer no longer awaited) and the
    /// requests to adopt; running requests keep their leases until they end.
    mutating func setLimits(maxRequests: Int, maxLongRequests: Int, rate: RateLimit?, sharing: EndpointSharing? = nil,
                            now: Duration) -> Decision {
        Self.checkLimits(maxRequests: maxRequests, maxLongRequests: maxLongRequests)
        self.maxRequests = maxRequests
        self.maxLongRequests = maxLongRequests
        book.setSharing(sharing)
        if rate != throttle.limit {
            let pause = throttle.pausedUntil
            throttle = StartThrottle(limit: rate)
            if let pause { throttle.pause(until: pause) }
        }
        return grant(now: now)
    }

    /// A request for this endpoint ended before it was submitted (cancelled first, or refused by a
    /// disposed dispatcher): counted as failed, so every request lands in exactly one count.
    mutating func countUnsubmittedFailure() {
        counts.failed += 1
    }

    /// Empties the queue (the dispatcher is disposed): returns the requests that will never start,
    /// in FIFO order, counted as failed. Running requests are not affected.
    mutating func removeAllQueued() -> [ID] {
        let removed = queue[head...].compactMap { $0?.id }
        queue.removeAll()
        head = 0
        holes = 0
        places.removeAll()
        queuedLong = 0
        counts.queued = 0
        counts.failed += removed.count
        armedWake = nil
        return removed
    }

    // MARK: - Deciding

    /// Starts every queued request that may start at `now`, in FIFO order; a long one that waits for
    /// a long slot keeps its place and lets the ones behind it pass.
    private mutating func grant(now: Duration) -> Decision {
        var decision = Decision()
        // Requests the fallback started get their leases before any new one starts.
        if let serial = book.adoptionAsk(now: now) {
            decision.acquireLease = serial
            decision.adoptsLease = true
        }
        var index = head
        while index < queue.count, counts.running < maxRequests {
            guard let waiting = queue[index] else {
                index += 1
                continue
            }
            if waiting.kind.isLong, counts.runningLong >= maxLongRequests {
                index += 1
                continue
            }
            let allowed = throttle.earliestStart()
            if allowed > now {
                arm(allowed, &decision)
                break
            }
            guard case .start(let lease) = shareStep(now: now, &decision) else { break }
            throttle.recordStart(at: now)
            queue[index] = nil
            holes += 1
            places[waiting.id] = nil
            counts.queued -= 1
            counts.running += 1
            running[waiting.id] = waiting.kind.isLong
            book.started(waiting.id, holding: lease)
            if waiting.kind.isLong {
                queuedLong -= 1
                counts.runningLong += 1
            }
            decision.start.append(waiting.id)
            index += 1
        }
        if let wake = book.adoptionWake(now: now) { arm(wake, &decision) }
        // A lease no request could take goes back.
        if let lease = book.takeUnused() { decision.releaseLeases.append(lease) }
        compact()
        return decision
    }

    /// Whether the request that may start now starts (with the lease that came, or alone: not
    /// shared, or under the fallback); an ask, or the time to look again, goes into `decision`.
    private mutating func shareStep(now: Duration, _ decision: inout Decision) -> EndpointLeaseBook<ID>.Step {
        let step = book.step(running: counts.running, maxRequests: maxRequests, now: now)
        switch step {
        case .start: break
        case .wait(let until): if let until { arm(until, &decision) }
        case .ask(let serial): decision.acquireLease = serial
        }
        return step
    }

    /// Asks for a wake-up at `time`, unless one is armed for then or sooner.
    private mutating func arm(_ time: Duration, _ decision: inout Decision) {
        if armedWake.map({ time < $0 }) ?? true {
            armedWake = time
            decision.wakeAt = time
        }
    }

    private mutating func record(_ outcome: Outcome) {
        switch outcome {
        case .completed: counts.completed += 1
        case .failed: counts.failed += 1
        case .timedOut: counts.timedOut += 1
        }
    }

    /// The most holes the queue keeps beside its waiting requests before it is rebuilt.
    static var holeAllowance: Int { 64 }

    /// How many places the queue stores, holes included (for tests: bounded by what waits now).
    var storedPlaces: Int { queue.count }

    /// Drops the holes at the front, and rebuilds the queue without holes once they outnumber
    /// the waiting requests (and the allowance).
    ///
    /// Holes also pile up behind a request that waits at the front (a long one waiting for a long
    /// slot while short ones pass it): dropping only the front ones would let the queue, and
    /// every ``grant(now:)`` that scans it, grow with the history. A rebuild costs the places it
    /// copies, at most twice the holes made since the last one: amortised O(1) per request.
    private mutating func compact() {
        while head < queue.count, queue[head] == nil {
            head += 1
            holes -= 1
        }
        if head == queue.count {
            queue.removeAll(keepingCapacity: queue.capacity <= 4 * Self.holeAllowance)
            head = 0
            holes = 0
            return
        }
        let waiting = queue.count - head - holes
        guard holes > Self.holeAllowance, holes > waiting else {
            // Also give back the dropped front once it is most of the storage.
            guard head > Self.holeAllowance, head * 2 > queue.count else { return }
            queue.removeFirst(head)
            head = 0
            reindex()
            return
        }
        queue = queue[head...].filter { $0 != nil }
        head = 0
        holes = 0
        reindex()
    }

    /// Rebuilds `places` after the queue's places moved.
    private mutating func reindex() {
        places.removeAll(keepingCapacity: true)
        for (place, waiting) in queue.enumerated() {
            if let waiting { places[waiting.id] = place }
        }
    }
}

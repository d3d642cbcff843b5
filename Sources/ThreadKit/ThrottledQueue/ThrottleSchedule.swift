/// The decisions of a ``ThrottledQueue``: which task starts next, and when it may.
///
/// A pure value type fed with events (submissions, starts, ends, interval changes, pauses) and
/// asked ``nextStart()``. It never reads a clock: every instant is given to it, so tests drive it
/// with made-up times. The rules, with task k starting at s(k), ending at e(k), carrying gap g(k):
///
/// - one task at a time, in submission order;
/// - `.concurrent`: s(k+1) ≥ max(e(k), s(k) + g(k)); `.serial`: s(k+1) ≥ e(k) + g(k);
/// - with a rate limit of n per w: s(k+n) ≥ s(k) + w;
/// - nothing starts before the end of a pause.
///
/// A task nested in the running one (a `sync` or `run` from inside it) starts ahead of the queue,
/// once the gap from the last start, the pause and the rate limit allow; it counts as a start.
/// ``approach(toStartAt:now:)`` says how a thread carries out a start: sleep, watch the clock, or go.
struct ThrottleSchedule<Item> {
    /// A task waiting to start.
    struct Pending {
        var item: Item
        /// The task's own `interval:`, if it was given one.
        var explicitGap: Duration?
        /// The gap that will follow the task, as the mutability rules have left it.
        var gap: Duration
    }

    /// How a thread that is to start a task at an allowed instant spends the time until then.
    enum Approach: Equatable {
        /// Start now.
        case startNow
        /// Sleep (a timed wait, which any change may end early), then ask again.
        case sleep(until: MonotonicInstant)
        /// Watch the clock, yielding the core, until this instant; then ask again.
        case spin(until: MonotonicInstant)
    }

    /// What the queue should do next.
    enum Next: Equatable {
        /// Nothing is queued and nothing runs.
        case idle
        /// A task runs; the next can only start after its end.
        case awaitingEnd
        /// Queued tasks wait; the first may start at this instant (perhaps already past).
        case startAt(MonotonicInstant)
    }

    /// The most recent start, which sets the gap before the next.
    private struct LastStart {
        var start: MonotonicInstant
        var end: MonotonicInstant?
        var gap: Duration
        var isExplicit: Bool
        /// How many tasks ran once it started: 1, or more for a nested `sync`.
        var depth: Int
    }

    let monitor: ThrottledQueue.Monitor
    let mutability: ThrottledQueue.Mutability
    let limit: RateLimit?
    /// How long after the earliest allowed instant a waiting task starts (see
    /// ``ThrottledQueue/startMargin``).
    let startMargin: Duration
    /// The queue's default gap, for tasks submitted without their own.
    private(set) var interval: Duration
    private(set) var pending = RingBuffer<Pending>()
    /// Tasks nested in the running one that wait for their start (a `run` from inside `run`'s
    /// work): they go ahead of `pending`.
    private(set) var nestedPending = RingBuffer<Pending>()
    /// How many started tasks have not ended (more than one only for nested tasks).
    private(set) var running = 0
    private(set) var pausedUntil: MonotonicInstant?
    private var last: LastStart?
    /// The most recent starts, at most `limit.count` of them, oldest first.
    private var recentStarts = RingBuffer<MonotonicInstant>()
    /// How many tasks have started, nested ones included (for ``Diagnostics``).
    private(set) var startedCount: UInt64 = 0
    /// How many started tasks have ended (for ``Diagnostics``).
    private(set) var endedCount: UInt64 = 0

    init(
        interval: Duration, monitor: ThrottledQueue.Monitor, mutability: ThrottledQueue.Mutability, limit: RateLimit?,
        startMargin: Duration = ThrottledQueue.startMargin
    ) {
        self.interval = interval
        self.monitor = monitor
        self.mutability = mutability
        self.limit = limit
        self.startMargin = startMargin
    }

    /// Whether nothing is queued and nothing runs.
    var isIdle: Bool { pending.isEmpty && nestedPending.isEmpty && running == 0 }

    /// How many queued tasks have not started, nested ones included.
    var pendingCount: Int { pending.count + nestedPending.count }

    /// The task that the next ``start(at:)`` starts.
    var next: Item? { (nestedPending.first ?? pending.first)?.item }

    /// The gap that follows the task that the next ``start(at:)`` starts.
    var nextGap: Duration? { (nestedPending.first ?? pending.first)?.gap }

    // MARK: - Events

    /// Queues `item`, to be followed by `explicitGap` or, without one, the queue's interval.
    mutating func submit(_ item: Item, gap explicitGap: Duration? = nil) {
        pending.append(Pending(item: item, explicitGap: explicitGap, gap: explicitGap ?? interval))
    }

    /// Queues `item` ahead of the queue, nested in the running task (a `run` from inside its work):
    /// it starts at ``nestedStart()``, after the nested tasks queued before it.
    mutating func submitNested(_ item: Item, gap explicitGap: Duration? = nil) {
        nestedPending.append(Pending(item: item, explicitGap: explicitGap, gap: explicitGap ?? interval))
    }

    /// Changes the queue's interval; queued tasks and the gap now being waited follow the mutability.
    mutating func setInterval(_ newInterval: Duration) {
        interval = newInterval
        switch mutability {
        case .all:
            pending.updateEach { $0.gap = newInterval }
            nestedPending.updateEach { $0.gap = newInterval }
            last?.gap = newInterval
        case .defaultOnly:
            pending.updateEach { if $0.explicitGap == nil { $0.gap = newInterval } }
            nestedPending.updateEach { if $0.explicitGap == nil { $0.gap = newInterval } }
            if last?.isExplicit == false { last?.gap = newInterval }
        case .none:
            break
        }
    }

    /// No task starts before `instant`; a later pause already in force stays.
    mutating func pause(until instant: MonotonicInstant) {
        pausedUntil = max(pausedUntil ?? instant, instant)
    }

    /// Ends a pause at once.
    mutating func resume() {
        pausedUntil = nil
    }

    /// When the first queued task (a nested one first) may start.
    func nextStart() -> Next {
        if !nestedPending.isEmpty { return .startAt(nestedStart()) }
        if running > 0 { return .awaitingEnd }
        guard !pending.isEmpty else { return .idle }
        return .startAt(earliestStart())
    }

    /// Starts the first queued task (a nested one first) at `now`, which must not be before
    /// ``nextStart()`` allows.
    mutating func start(at now: MonotonicInstant) -> Item {
        guard case .startAt(let allowed) = nextStart(), allowed <= now,
              let first = nestedPending.popFirst() ?? pending.popFirst() else {
            preconditionFailure("ThrottleSchedule.start(at: \(now)) before its time: \(nextStart())")
        }
        recordStart(at: now, gap: first.gap, isExplicit: first.explicitGap != nil)
        return first.item
    }

    /// When a task nested in the running one (a `sync` from inside it) may start: the gap from the
    /// last start, the pause and the rate limit apply; the running task's end cannot. After an earlier
    /// nested task has ended, the monitor's rule applies to that one in full (`.serial` counts from its end).
    func nestedStart() -> MonotonicInstant {
        earliestStart()
    }

    /// Starts a nested task at `now`, ahead of the queue; it counts as a start.
    mutating func startNested(at now: MonotonicInstant, gap explicitGap: Duration?) {
        precondition(nestedStart() <= now, "ThrottleSchedule.startNested(at: \(now)) before its time")
        recordStart(at: now, gap: explicitGap ?? interval, isExplicit: explicitGap != nil)
    }

    /// The running task (the innermost, if nested) began its own code at `startedAt`.
    ///
    /// That is a little after its start was granted: the thread still had to get to it. Gaps and
    /// the rate limit then count from that instant, so no two task bodies ever begin closer than
    /// the rules allow, as seen from inside them. A task reports it at its end (``end(at:startedAt:)``),
    /// or earlier, when a task nested in it asks for its start. It never moves a start earlier, and
    /// it changes nothing once a later task has started.
    mutating func began(at startedAt: MonotonicInstant) {
        guard running > 0, let granted = last?.start, last?.depth == running, startedAt > granted else { return }
        last?.start = startedAt
        if recentStarts.last == granted { recentStarts.replaceLast(with: startedAt) }
    }

    /// The running task (the innermost, if nested) ended at `now`.
    ///
    /// - Parameter startedAt: When the task's own code began, if known; see ``began(at:)``.
    mutating func end(at now: MonotonicInstant, startedAt: MonotonicInstant? = nil) {
        precondition(running > 0, "ThrottleSchedule.end(at:) with no task running")
        if let startedAt { began(at: startedAt) }
        running -= 1
        endedCount &+= 1
        last?.end = now
    }

    /// Removes the queued tasks (nested ones too) that match `shouldRemove`; running ones are not affected.
    mutating func removeAll(where shouldRemove: (Item) -> Bool) -> [Item] {
        nestedPending.removeAll { shouldRemove($0.item) }.map(\.item)
            + pending.removeAll { shouldRemove($0.item) }.map(\.item)
    }

    // MARK: - Carrying out a start

    /// How a thread that may start the next task at `allowed` spends the time from `now`.
    ///
    /// Every start, by the worker or by a `sync` caller, nested or not, follows this one rule: the
    /// task starts at `allowed` + ``startMargin``; the thread sleeps until a little
    /// before, and watches the clock for the rest: ``ThrottledQueue/finalApproach``, or
    /// 1/``ThrottledQueue/approachShare`` of the time from the last start to `allowed` if that is
    /// less, but never less than the margin. The margin itself is never slept: a timed wait that
    /// short would wake tens of microseconds late (every task of a queue with no interval would
    /// pay that, as its start waits out the margin after the previous task's end).
    func approach(toStartAt allowed: MonotonicInstant, now: MonotonicInstant) -> Approach {
        let target = startTarget(allowed: allowed)
        guard now < target else { return .startNow }
        let spacing = last.map { $0.start.duration(to: allowed) } ?? .zero
        let watch = max(startMargin, min(ThrottledQueue.finalApproach, spacing / ThrottledQueue.approachShare))
        let wake = target.advanced(by: .zero - watch)
        return now < wake ? .sleep(until: wake) : .spin(until: target)
    }

    // MARK: - Diagnostics

    /// When the next queued task may start and what holds it until then, at `now`; `nil` when
    /// nothing is queued. The same rules as ``nextStart()``, naming the one that decides: of the
    /// gap, the rate limit's window and the pause, the latest (on a tie, a pause before the
    /// window before the gap); while a task runs that the next must wait for, its end.
    func explainNextStart(now: MonotonicInstant) -> (at: MonotonicInstant, hindrance: StartHindrance)? {
        guard pendingCount > 0 else { return nil }
        var at = now
        var hindrance = StartHindrance.due
        if let last {
            if nestedPending.isEmpty && running > 0 {
                // The earliest it could be: the gap from the running task's start.
                return (max(now, last.start.advanced(by: last.gap)), .end)
            }
            let gapEnd = gapEnd(after: last)
            if gapEnd > at { (at, hindrance) = (gapEnd, .gap) }
        }
        if let limit, recentStarts.count == limit.count, let oldest = recentStarts.first {
            let windowEnd = oldest.advanced(by: limit.window)
            if windowEnd > now, windowEnd >= at { (at, hindrance) = (windowEnd, .window) }
        }
        if let pausedUntil, pausedUntil > now, pausedUntil >= at { (at, hindrance) = (pausedUntil, .pause) }
        return (at, hindrance)
    }

    // MARK: - Rules

    private mutating func recordStart(at now: MonotonicInstant, gap: Duration, isExplicit: Bool) {
        running += 1
        startedCount &+= 1
        last = LastStart(start: now, end: nil, gap: gap, isExplicit: isExplicit, depth: running)
        if let limit {
            recentStarts.append(now)
            if recentStarts.count > limit.count { _ = recentStarts.popFirst() }
        }
    }

    /// The earliest start the rules allow after the last one: its gap, the pause, the rate limit.
    private func earliestStart() -> MonotonicInstant {
        var earliest = MonotonicInstant(nanoseconds: 0)
        if let last { earliest = gapEnd(after: last) }
        return constrained(earliest)
    }

    /// When a start allowed at `allowed` is made: the margin after it, when a rule of time holds it
    /// there (a gap, the pause, the rate limit's window). When only the previous task's end does
    /// (`.concurrent`, a gap shorter than the task), at `allowed` itself, if every rule of time has
    /// passed by the margin then: the margin guards the gaps the rules of time set, and nothing
    /// counts the time from an end to the next start.
    private func startTarget(allowed: MonotonicInstant) -> MonotonicInstant {
        let withMargin = allowed.advanced(by: startMargin)
        guard monitor == .concurrent, running == 0, let last, let end = last.end, end == allowed else { return withMargin }
        return max(allowed, constrained(last.start.advanced(by: last.gap)).advanced(by: startMargin))
    }

    /// The end of the gap after `last`: by the monitor once it has ended; while it still runs (only a
    /// nested start asks then), its gap from the start.
    private func gapEnd(after last: LastStart) -> MonotonicInstant {
        guard let end = last.end else { return last.start.advanced(by: last.gap) }
        switch monitor {
        case .concurrent: return max(end, last.start.advanced(by: last.gap))
        case .serial: return end.advanced(by: last.gap)
        }
    }

    /// `earliest`, pushed past the pause and the rate limit's window.
    private func constrained(_ earliest: MonotonicInstant) -> MonotonicInstant {
        var result = earliest
        if let pausedUntil { result = max(result, pausedUntil) }
        if let limit, recentStarts.count == limit.count, let oldest = recentStarts.first {
            result = max(result, oldest.advanced(by: limit.window))
        }
        return result
    }
}

extension ThrottleSchedule: Sendable where Item: Sendable {}
extension ThrottleSchedule.Pending: Sendable where Item: Sendable {}

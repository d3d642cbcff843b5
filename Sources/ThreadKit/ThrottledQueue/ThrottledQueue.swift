/// A serial queue that keeps a minimum time between its tasks, to stay inside a rate limit.
///
/// The first task on an idle queue starts at once; each later one waits until the rules allow:
/// with the default `.concurrent` monitor, `interval` after the previous task's start (or at its
/// end, if it ran longer); with `.serial`, `interval` after its end. An optional ``RateLimit`` caps
/// starts per sliding window, and ``pause(for:)`` holds every start, for an HTTP 429's `Retry-After`.
///
/// `async` tasks run on one worker thread of a ``ThreadPool``, which waits out each gap with a
/// timed wait on the monotonic clock and goes back to the pool when no such task is queued. A
/// ``sync(_:)`` caller waits out its own turn on its own thread and needs no pool thread. Queues
/// are independent: one queue's gaps never delay another's.
///
/// ```swift
/// let api = ThrottledQueue(label: "GitHub", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
/// try api.async { fetchNextPage() }
/// let user = try await api.run { try await client.user(id) }
/// ```
///
/// **Arguments.** A negative `interval` (given to the initializer, set on ``interval``, or passed
/// to `async(interval:)` or `sync(interval:)`) cannot work: it stops with a precondition failure
/// naming the queue, the argument and the value. A zero interval means no gap; one however far out
/// (`.seconds(Int64.max)` and beyond) holds the next task until it is cancelled, or until a new
/// interval reaches it (see ``Mutability``). A pause is a time that may have passed: ``pause(for:)`` with zero or a negative
/// duration, or ``pause(until:)`` with an instant already past, is no pause; one however far out
/// holds every start until ``resume()``. The limit's own rules are ``RateLimit``'s.
public final class ThrottledQueue: @unchecked Sendable {
    // Sendable: `schedule`, `worker`, `queuedForWorker`, `refusal`, `idleWaiters`, the three runners' vars,
    // every `Ticket`'s vars and `coordination.starts` are guarded by `mutex`.

    /// Where the gap between two tasks is measured from.
    public enum Monitor: Sendable, Equatable {
        /// From the previous task's start: a task longer than the gap is followed at once.
        case concurrent
        /// From the previous task's end.
        case serial
    }

    /// Which queued tasks a change of ``interval`` reaches.
    public enum Mutability: Sendable, Equatable {
        /// Every queued task, and the gap being waited, explicit intervals included.
        case all
        /// Only queued tasks submitted without an explicit `interval:`.
        case defaultOnly
        /// None: each task keeps the gap in force when it was submitted.
        case none
    }

    /// The queue's name, used for its pool's thread and its log lines.
    public let label: String
    /// Where gaps are measured from.
    public let monitor: Monitor
    /// Which queued tasks a change of interval reaches.
    public let mutability: Mutability
    /// The cap on starts per window, if any.
    public let limit: RateLimit?

    // The state below is shared with the extensions that carry out the queue's concerns, one file
    // each: the worker (ThrottledQueue+Worker), the turns of `sync` callers and nested tasks
    // (ThrottledQueue+Turns), `run` callers (ThrottledQueue+Async), and how a thread carries out a
    // start (ThrottledQueue+Start). Every decision about starts is the `schedule`'s.

    /// Where the worker runs: the pool given to `init`, or one of the queue's own.
    let pool: ThreadPool
    /// Whether `pool` is the queue's own, disposed with the queue.
    private let ownsPool: Bool
    let mutex = PThreadMutex()
    /// Signalled for the worker: work arrived or left, a task ended, the interval or a pause changed.
    let changed = MonotonicCondition()
    /// Broadcast when a task ends or leaves the queue, for `waitUntilIdle`; and when the interval
    /// or a pause changes, for a nested `sync` waiting out its gap. (A `sync` caller waiting for its
    /// turn sleeps on its own ``Turn``, woken only once it is next.)
    let progress = MonotonicCondition()
    var schedule: ThrottleSchedule<Item>
    var worker = Worker.none
    /// Queued tasks that the worker starts: `async` work and `run` callers (`sync` callers start
    /// their own).
    var queuedForWorker = 0
    /// The tasks suspended in the async ``waitUntilIdle()``, resumed when the queue next becomes
    /// idle (see ``takeIdleWaiters()``).
    var idleWaiters = EventWaiters()
    /// Set once the pool dropped the worker before it ran (the pool's `disposeNow()`): the pool is
    /// gone, and what needs a worker is refused with this.
    var refusal: ThreadPoolError?
    /// The coordinator that decides the starts together with other processes, if the queue has one
    /// (see ThrottledQueue+Coordination); `nil` costs its path one check.
    let coordination: SharedStarts?
    /// For ``Diagnostics`` (ThrottledQueue+Diagnostics): the worker's thread while it drives, whether
    /// it runs a task now, and the thread of the `sync` caller running one (set once per `sync`).
    var workerActivity: ThreadActivity?
    var workerRunsTask = false
    var syncRunner: ThreadActivity?

    /// Creates a queue.
    ///
    /// Without an `interval`, the gap depends on `limit`: with a limit it is zero, so the limit
    /// alone decides (`ThrottledQueue(limit: .rate(5, per: .seconds(1)))` starts 5 tasks a second,
    /// at once one after the other, then waits for the window); without one it is 500 ms, the
    /// original AHDispatch's default. Give both to space neighbours and cap bursts.
    ///
    /// ```swift
    /// let api = ThrottledQueue(label: "API", limit: .rate(5, per: .seconds(1)))   // 5 a second
    /// let polite = ThrottledQueue(label: "Scraper")                               // one every 500 ms
    /// ```
    ///
    /// - Parameters:
    ///   - label: Names the queue's thread and log lines.
    ///   - interval: The default gap between tasks; not negative. `nil` (the default): zero with a
    ///     `limit`, 500 ms without one.
    ///   - monitor: Whether gaps count from a task's start (`.concurrent`) or end (`.serial`).
    ///   - mutability: Which queued tasks a later change of `interval` reaches.
    ///   - limit: At most so many starts in any sliding window.
    ///   - pool: Where the queue's worker runs; by default a pool of one thread of its own, so the
    ///     queue holds no thread once idle long enough to be collected, nor once the queue is gone.
    ///     A shared pool needs a thread for each queue busy at the same time, or queues wait for
    ///     each other.
    public convenience init(
        label: String = "ThrottledQueue", interval: Duration? = nil,
        monitor: Monitor = .concurrent, mutability: Mutability = .all,
        limit: RateLimit? = nil, pool: ThreadPool? = nil
    ) {
        self.init(label: label, interval: interval, monitor: monitor, mutability: mutability, limit: limit, pool: pool, coordinator: nil)
    }

    /// Creates a queue whose starts `coordination` decides: the queue alone (``Coordination/local``),
    /// or together with every process of a fleet that shares a limit (ThreadKitRedis's
    /// `.redis(client, key: "api.example.com")`).
    ///
    /// Every queue that shares a limit must be made with the same `monitor` and `limit`; each
    /// process keeps its own `interval`, which is the gap its starts ask for. ``pause(for:)``
    /// pauses every process sharing the limit (a longer pause in force stays); ``resume()``
    /// lifts this process's own pause only.
    ///
    /// - Parameters:
    ///   - label: Names the queue's thread and log lines.
    ///   - interval: The default gap between tasks; not negative. `nil` (the default): zero with a
    ///     `limit`, 500 ms without one.
    ///   - monitor: Whether gaps count from a task's start (`.concurrent`) or end (`.serial`).
    ///   - mutability: Which queued tasks a later change of `interval` reaches.
    ///   - limit: At most so many starts in any sliding window.
    ///   - pool: Where the queue's worker runs (see ``init(label:interval:monitor:mutability:limit:pool:)``).
    ///   - coordination: Who decides the starts with the queue.
    public convenience init(
        label: String = "ThrottledQueue", interval: Duration? = nil,
        monitor: Monitor = .concurrent, mutability: Mutability = .all,
        limit: RateLimit? = nil, pool: ThreadPool? = nil, coordination: Coordination
    ) {
        self.init(
            label: label, interval: interval, monitor: monitor, mutability: mutability, limit: limit, pool: pool,
            coordinator: coordination.coordinator, whenUnavailable: coordination.whenUnavailable)
    }

    /// Creates a queue whose starts `coordinator` decides together with other processes' queues
    /// (see ThrottledQueue+Coordination), or, with `nil`, a queue of its own like the public initializer's.
    ///
    /// - Parameter whenUnavailable: What each start does when the coordinator cannot decide it.
    package init(
        label: String = "ThrottledQueue", interval: Duration? = nil,
        monitor: Monitor = .concurrent, mutability: Mutability = .all,
        limit: RateLimit? = nil, pool: ThreadPool? = nil,
        coordinator: (any StartCoordinator)?, whenUnavailable: UnavailablePolicy = .standard
    ) {
        whenUnavailable.validate("ThrottledQueue '\(label)': whenUnavailable")
        self.coordination = coordinator.map { SharedStarts(coordinator: $0, policy: whenUnavailable) }
        let interval = interval ?? Self.defaultInterval(limit: limit)
        precondition(interval >= .zero, "ThrottledQueue '\(label)'.init: interval must not be negative, got \(interval)")
        self.label = label
        self.monitor = monitor
        self.mutability = mutability
        self.limit = limit
        self.ownsPool = pool == nil
        self.pool = pool ?? ThreadPool(name: label, size: 1, isListed: false)
        self.schedule = ThrottleSchedule(interval: interval, monitor: monitor, mutability: mutability, limit: limit)
        DiagnosticsRegistry.add(self)
    }

    /// The gap of a queue made without an `interval`: zero with a `limit`, which then decides
    /// alone; without one, 500 ms, the original's default.
    static func defaultInterval(limit: RateLimit?) -> Duration {
        limit == nil ? .milliseconds(500) : .zero
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(self))
        // A worker holds the queue while tasks are queued, so the queue is idle: nothing will use
        // its own pool again. Its thread exits now instead of when the pool would collect it.
        if ownsPool { pool.dispose() }
    }

    /// The gap that follows tasks submitted without their own; changing it reaches queued tasks
    /// according to ``mutability``. Not negative.
    ///
    /// It starts as the `interval` given to ``init(label:interval:monitor:mutability:limit:pool:)``,
    /// or, when none was given, as zero with a ``limit`` and 500 ms without one.
    public var interval: Duration {
        get { mutex.withLock { schedule.interval } }
        set {
            precondition(newValue >= .zero, "ThrottledQueue '\(label)'.interval: interval must not be negative, got \(newValue)")
            mutex.withLock {
                schedule.setInterval(newValue)
                changed.signal()
                wakeWaiters()
            }
        }
    }

    // MARK: - Submitting

    /// Queues `work`, followed by the queue's interval.
    ///
    /// `work` stays `@Sendable` (``run(isolation:_:)``'s runs on the caller's actor): it runs on
    /// the queue's worker, a thread of its pool, and ``cancelAll()`` may release it on whichever
    /// thread calls it.
    ///
    /// - Throws: ``ThreadPoolError`` if the queue's pool refused its worker (it was disposed, or
    ///   could not start a thread); the work is then not queued.
    public func async(_ work: @escaping @Sendable () -> Void) throws {
        try mutex.withLock { () throws(ThreadPoolError) in try enqueueForWorker(.work(work), gap: nil, nested: false) }
    }

    /// Queues `work`, followed by `interval` instead of the queue's interval (for this one task).
    ///
    /// `work` stays `@Sendable`, as ``async(_:)``'s does: it runs on the queue's worker, a thread
    /// of its pool, and ``cancelAll()`` may release it on whichever thread calls it.
    ///
    /// - Parameters:
    ///   - interval: The gap after this task; not negative.
    ///   - work: The task; it runs on the queue's worker when its turn comes.
    /// - Throws: ``ThreadPoolError`` if the queue's pool refused its worker (it was disposed, or
    ///   could not start a thread); the work is then not queued.
    public func async(interval: Duration, _ work: @escaping @Sendable () -> Void) throws {
        precondition(interval >= .zero, "ThrottledQueue '\(label)'.async(interval:_:): interval must not be negative, got \(interval)")
        try mutex.withLock { () throws(ThreadPoolError) in try enqueueForWorker(.work(work), gap: interval, nested: false) }
    }

    /// Runs `work` on the calling thread when its turn comes, and returns its result.
    ///
    /// Returns as soon as `work` has run, not after the gap that follows. The calling thread waits
    /// out its own turn (a timed wait, then the same start margin as every start), so `sync` needs
    /// no pool thread: it works on a queue whose pool is busy or was disposed. It does wait for the
    /// tasks queued ahead of it, which the queue's worker starts.
    ///
    /// Called from inside one of this queue's tasks (or from `run`'s work), it does not deadlock: it
    /// waits out the gap on this thread and runs at once, ahead of queued tasks, counting as a start.
    ///
    /// Precondition: not called from a task of another queue that runs on the only thread of this
    /// queue's pool (a shared `ThreadPool` of size 1) while `async` work or `run` callers are queued
    /// here: their worker would need that very thread, so the call would wait forever. It stops
    /// with a message naming both queues and the pool.
    ///
    /// It blocks the calling thread, so async code uses ``run(isolation:_:)`` instead.
    @available(*, noasync, message: "it blocks the thread; use 'try await run { }' in async code")
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        try runHere(gap: nil, work)
    }

    /// Like ``sync(_:)``, with `interval` as the gap after this one task.
    ///
    /// It blocks the calling thread, so async code uses ``run(isolation:_:)`` instead.
    @available(*, noasync, message: "it blocks the thread; use 'try await run { }' in async code")
    public func sync<T>(interval: Duration, _ work: () throws -> T) rethrows -> T {
        precondition(interval >= .zero, "ThrottledQueue '\(label)'.sync(interval:_:): interval must not be negative, got \(interval)")
        return try runHere(gap: interval, work)
    }

    // MARK: - Controlling

    /// Starts no task for `duration` from now (a longer pause already in force stays).
    ///
    /// A zero or negative `duration` (what a `Retry-After` date already past gives) means no pause:
    /// it changes nothing, and never shortens a pause in force.
    public func pause(for duration: Duration) {
        pause(until: MonotonicInstant.now().advanced(by: max(duration, .zero)))
    }

    /// Starts no task before `deadline` (a longer pause already in force stays).
    ///
    /// A `deadline` already past means no pause: it changes nothing, and never shortens a pause in
    /// force.
    public func pause(until deadline: ContinuousClock.Instant) {
        pause(until: MonotonicInstant(deadline))
    }

    /// Ends a pause at once.
    public func resume() {
        mutex.withLock {
            schedule.resume()
            changed.signal()
            wakeWaiters()
        }
        Log.log(.throttle, "\(label): resumed")
    }

    /// Removes every queued task that has not started.
    ///
    /// Removed `async` tasks never run (their closures are released); waiting ``run(isolation:_:)`` callers
    /// throw `CancellationError`. Threads blocked in ``sync(_:)`` keep their place: they must get
    /// their result. A worker left with nothing to start goes back to its pool at once.
    ///
    /// - Returns: How many tasks will never run.
    @discardableResult
    public func cancelAll() -> Int {
        let removal = mutex.withLock { removeForWorker(where: { _ in true }) }
        removal.resumeWaiters(throwing: CancellationError())
        if !removal.removed.isEmpty { Log.log(.throttle, "\(label): cancelled \(removal.removed.count) queued tasks") }
        return removal.removed.count
        // `removal`, with the closures of the removed tasks, is released here, outside the mutex.
    }

    /// Blocks until every accepted task has finished (not the gap after the last).
    ///
    /// Must not be called from inside one of the queue's own tasks (`run`'s work included), which
    /// could never finish; nor, while `async` work or `run` callers are queued, from a task of
    /// another queue on the only thread of this queue's pool, which their worker needs. Either
    /// stops with a precondition failure. It blocks the calling thread, so async code awaits the
    /// async twin, ``waitUntilIdle()-5us73``, instead: `await queue.waitUntilIdle()` picks it
    /// in an async function, an actor or a `Task` closure. Not in a `main.swift`'s top-level code,
    /// where Swift picks this blocking overload (top-level code does not get the async one of two
    /// that differ only by `async`) and reports the `noasync` diagnostic: call it from an async
    /// function there, or name the twin's type, `await (queue.waitUntilIdle as () async -> Void)()`.
    @available(*, noasync, message: "it blocks the thread; use 'await waitUntilIdle()' (the async overload) in async code")
    public func waitUntilIdle() {
        mutex.lock()
        checkIdleWaitCanEnd()
        ExecutionContexts.blocking(for: SerialContext(.throttled(self)), kind: "idle") {
            while !schedule.isIdle { progress.wait(mutex) }
        }
        mutex.unlock()
    }

    /// Stops the process if a wait for idleness by the calling thread or task could never end:
    /// from inside one of the queue's own tasks, or from a task of another queue on the only
    /// thread of this queue's pool. Mutex held.
    func checkIdleWaitCanEnd() {
        let threadHold = Hold.ofThread
        // Held directly, or through a thread that runs this queue's task and waits for this one.
        if held(thread: threadHold, task: Hold.ofTask) != nil || ExecutionContexts.holds(SerialContext(.throttled(self))) {
            mutex.unlock()
            preconditionFailure("ThrottledQueue '\(label)': waitUntilIdle() from inside its own task would wait forever")
        }
        if let message = starvedPoolMessage(for: "waitUntilIdle()", threadHold: threadHold) {
            mutex.unlock()
            preconditionFailure(message)
        }
    }

    /// How many accepted tasks have not started.
    public var pendingCount: Int {
        mutex.withLock { schedule.pendingCount }
    }


    // MARK: - Internals

    enum Item {
        /// An `async` task: the worker starts it and runs it.
        case work(@Sendable () -> Void)
        /// A `run` caller: the worker starts it, and the caller's task runs its work.
        case run(Ticket)
        /// A `sync` caller: it starts its own turn and runs its work on its own thread.
        case sync(Turn)

        var isSync: Bool {
            if case .sync = self { true } else { false }
        }
    }

    /// A `run` caller's continuation, resumed when its turn comes or it leaves the queue.
    typealias Waiter = CheckedContinuation<Void, any Error>

    /// What ``removeForWorker(where:)`` took out, to carry out once the mutex is let go.
    struct Removal {
        /// The removed tasks, to release after the mutex (a capture's deinit may use the queue).
        var removed: [Item]
        /// The continuations of the `run` callers among them.
        var waiters: [Waiter]
        /// The tasks awaiting idleness, if the removal left the queue idle.
        var idle: EventOccurred

        /// Resumes the removed `run` callers, throwing `error`, and the tasks awaiting idleness.
        func resumeWaiters(throwing error: any Error) {
            for waiter in waiters { waiter.resume(throwing: error) }
            idle.resumeWaiters()
        }
    }

    /// Takes the queued tasks that the worker would start (`async` work, `run` callers) and that
    /// match `shouldRemove` out of the queue, cancels the `run` callers among them, and lets the
    /// worker and the waiters re-decide. Mutex held.
    func removeForWorker(where shouldRemove: (Item) -> Bool) -> Removal {
        let removed = schedule.removeAll { !$0.isSync && shouldRemove($0) }
        queuedForWorker -= removed.count
        var waiters: [Waiter] = []
        for case .run(let ticket) in removed {
            ticket.phase = .cancelled
            if let continuation = ticket.takeContinuation() { waiters.append(continuation) }
        }
        changed.signal()
        wakeWaiters()
        return Removal(removed: removed, waiters: waiters, idle: takeIdleWaiters())
    }

    /// If the queue is idle, takes out the tasks suspended in the async ``waitUntilIdle()``, to
    /// resume once the mutex is let go. Called wherever a task ends or leaves the queue, where the
    /// blocked `waitUntilIdle()` callers are woken. Mutex held.
    func takeIdleWaiters() -> EventOccurred {
        schedule.isIdle ? idleWaiters.takeAll() : .none
    }

    /// Wakes whoever may go on after a task ended or left, or the interval or a pause changed:
    /// `waitUntilIdle` callers, a nested `sync` waiting out its gap, and the `sync` caller that is
    /// next, if one is. Mutex held.
    func wakeWaiters() {
        progress.broadcast()
        if case .sync(let turn)? = schedule.next { turn.isNext.signal() }
    }

    private func pause(until instant: MonotonicInstant) {
        let now = MonotonicInstant.now()
        // A pause that has ended already holds nothing: the schedule keeps the one in force.
        guard instant > now else { return }
        mutex.withLock {
            schedule.pause(until: instant)
            changed.signal()
            wakeWaiters()
        }
        coordination?.coordinator.pause(for: now.duration(to: instant))
        Log.log(.throttle, "\(label): paused for \(now.duration(to: instant))")
    }

    /// The innermost hold of this queue's running task by the calling thread or task: a call from
    /// inside it is nested. Mutex held.
    func held(thread: Hold?, task: Hold?) -> Hold? {
        thread?.innermost(of: self) ?? task?.innermost(of: self)
    }

    /// Why a wait by the calling thread could never end, if it is the only thread of this queue's
    /// pool, running another queue's task, while the tasks queued here wait in that pool for the
    /// worker that needs that thread. Mutex held.
    func starvedPoolMessage(for call: String, threadHold: Hold?) -> String? {
        guard pool.size == 1, queuedForWorker > 0, case .waiting(let waitingIn) = worker, waitingIn === pool,
              let holder = threadHold?.first(onThreadOf: pool) else { return nil }
        return "ThrottledQueue '\(label)': \(call) from a task of ThrottledQueue '\(holder.queue.label)' on the same "
            + "one-thread ThreadPool '\(pool.name)' would wait forever: the pool has no thread left for '\(label)'"
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
public final class ThrottledQueue: @unchecked Sendable {
    // Sendable: `schedule`, `worker`, `queuedForWorker`, `refusal` and every `Ticket`'s vars are
    // guarded by `mutex`.

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

    /// Where the worker runs: the pool given to `init`, or one of the queue's own.
    private let pool: ThreadPool
    /// Whether `pool` is the queue's own, disposed with the queue.
    private let ownsPool: Bool
    private let mutex = PThreadMutex()
    /// Signalled for the worker: work arrived or left, a task ended, the interval or a pause changed.
    private let changed = MonotonicCondition()
    /// Broadcast when a task ends or leaves the queue, for `waitUntilIdle`; and when the interval
    /// or a pause changes, for a nested `sync` waiting out its gap. (A `sync` caller waiting for its
    /// turn sleeps on its own ``Turn``, woken only once it is next.)
    private let progress = MonotonicCondition()
    private var schedule: ThrottleSchedule<Item>
    private var worker = Worker.none
    /// Queued tasks that the worker starts: `async` work and `run` callers (`sync` callers start
    /// their own).
    private var queuedForWorker = 0
    /// Set once the pool dropped the worker before it ran (the pool's `disposeNow()`): the pool is
    /// gone, and what needs a worker is refused with this.
    private var refusal: ThreadPoolError?

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - label: Names the queue's thread and log lines.
    ///   - interval: The default gap between tasks; not negative.
    ///   - monitor: Whether gaps count from a task's start (`.concurrent`) or end (`.serial`).
    ///   - mutability: Which queued tasks a later change of `interval` reaches.
    ///   - limit: At most so many starts in any sliding window.
    ///   - pool: Where the queue's worker runs; by default a pool of one thread of its own, so the
    ///     queue holds no thread once idle long enough to be collected, nor once the queue is gone.
    ///     A shared pool needs a thread for each queue busy at the same time, or queues wait for
    ///     each other.
    public init(
        label: String = "ThrottledQueue", interval: Duration = .milliseconds(500),
        monitor: Monitor = .concurrent, mutability: Mutability = .all,
        limit: RateLimit? = nil, pool: ThreadPool? = nil
    ) {
        precondition(interval >= .zero, "ThrottledQueue '\(label)': interval must not be negative, got \(interval)")
        self.label = label
        self.monitor = monitor
        self.mutability = mutability
        self.limit = limit
        self.ownsPool = pool == nil
        self.pool = pool ?? ThreadPool(name: label, size: 1)
        self.schedule = ThrottleSchedule(interval: interval, monitor: monitor, mutability: mutability, limit: limit)
    }

    deinit {
        // A worker holds the queue while tasks are queued, so the queue is idle: nothing will use
        // its own pool again. Its thread exits now instead of when the pool would collect it.
        if ownsPool { pool.dispose() }
    }

    /// The gap that follows tasks submitted without their own; changing it reaches queued tasks
    /// according to ``mutability``. Not negative.
    public var interval: Duration {
        get { mutex.withLock { schedule.interval } }
        set {
            precondition(newValue >= .zero, "ThrottledQueue '\(label)': interval must not be negative, got \(newValue)")
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
    /// - Throws: ``ThreadPoolError`` if the queue's pool refused its worker (it was disposed, or
    ///   could not start a thread); the work is then not queued.
    public func async(_ work: @escaping @Sendable () -> Void) throws {
        try mutex.withLock { () throws(ThreadPoolError) in try enqueueForWorker(.work(work), gap: nil, nested: false) }
    }

    /// Queues `work`, followed by `interval` instead of the queue's interval (for this one task).
    ///
    /// - Parameter interval: The gap after this task; not negative.
    /// - Throws: ``ThreadPoolError`` if the queue's pool refused its worker (it was disposed, or
    ///   could not start a thread); the work is then not queued.
    public func async(interval: Duration, _ work: @escaping @Sendable () -> Void) throws {
        precondition(interval >= .zero, "ThrottledQueue '\(label)': interval must not be negative, got \(interval)")
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
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        try runHere(gap: nil, work)
    }

    /// Like ``sync(_:)``, with `interval` as the gap after this one task.
    public func sync<T>(interval: Duration, _ work: () throws -> T) rethrows -> T {
        precondition(interval >= .zero, "ThrottledQueue '\(label)': interval must not be negative, got \(interval)")
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
    /// Removed `async` tasks never run (their closures are released); waiting ``run(_:)`` callers
    /// throw `CancellationError`. Threads blocked in ``sync(_:)`` keep their place: they must get
    /// their result. A worker left with nothing to start goes back to its pool at once.
    ///
    /// - Returns: How many tasks will never run.
    @discardableResult
    public func cancelAll() -> Int {
        let (removed, waiters) = mutex.withLock { () -> ([Item], [CheckedContinuation<Void, any Error>]) in
            let removed = schedule.removeAll { !$0.isSync }
            queuedForWorker -= removed.count
            var waiters: [CheckedContinuation<Void, any Error>] = []
            for case .run(let ticket) in removed {
                ticket.phase = .cancelled
                if let continuation = ticket.takeContinuation() { waiters.append(continuation) }
            }
            changed.signal()
            wakeWaiters()
            return (removed, waiters)
        }
        for waiter in waiters { waiter.resume(throwing: CancellationError()) }
        if !removed.isEmpty { Log.log(.throttle, "\(label): cancelled \(removed.count) queued tasks") }
        return removed.count
        // `removed`, with the closures of the removed tasks, is released here, outside the mutex.
    }

    /// Blocks until every accepted task has finished (not the gap after the last).
    ///
    /// Must not be called from inside one of the queue's own tasks (`run`'s work included), which
    /// could never finish; nor, while `async` work or `run` callers are queued, from a task of
    /// another queue on the only thread of this queue's pool, which their worker needs. Either
    /// stops with a precondition failure.
    public func waitUntilIdle() {
        let threadHold = Hold.ofThread, taskHold = Hold.ofTask
        mutex.lock()
        let context = SerialContext(.throttled(self))
        // Held directly, or through a thread that runs this queue's task and waits for this one.
        if held(thread: threadHold, task: taskHold) != nil || ExecutionContexts.holds(context) {
            mutex.unlock()
            preconditionFailure("ThrottledQueue '\(label)': waitUntilIdle() from inside its own task would wait forever")
        }
        if let message = starvedPoolMessage(for: "waitUntilIdle()", threadHold: threadHold) {
            mutex.unlock()
            preconditionFailure(message)
        }
        ExecutionContexts.blocking(for: context) {
            while !schedule.isIdle { progress.wait(mutex) }
        }
        mutex.unlock()
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

    /// A `run` caller waiting for the worker to start its turn.
    final class Ticket: @unchecked Sendable {
        // Sendable: `phase` and `continuation` are guarded by the queue's mutex.
        enum Phase { case new, queued, granted, ended, cancelled }
        var phase = Phase.new
        /// A `run` caller's, resumed when the worker starts it.
        var continuation: CheckedContinuation<Void, any Error>?
        /// For a nested `run`, the running task it is nested in, which it waits for if another task
        /// nested in it runs (see ``Hold/hasNestedTaskRunning``).
        var nestedIn: Hold?

        func takeContinuation() -> CheckedContinuation<Void, any Error>? {
            defer { continuation = nil }
            return continuation
        }
    }

    /// A `sync` caller's place in the queue, and the condition it sleeps on until it is next.
    ///
    /// One condition per caller, signalled only for the caller that is next: a queue with many
    /// `sync` callers does not wake them all at each end, to compete for the cores while the next
    /// one starts its work.
    final class Turn: Sendable {
        let isNext = MonotonicCondition()
    }

    /// Who starts the tasks that the worker serves (`async` work and `run` callers).
    private enum Worker {
        /// Nobody: no such task is queued.
        case none
        /// Submitted to this pool, waiting there for a thread.
        case waiting(in: ThreadPool)
        /// Running its loop on a pool thread.
        case driving
    }

    /// Queues `item`, which the worker starts, and makes sure a worker serves the queue. Mutex held.
    ///
    /// - Parameter nested: Whether `item` is nested in the running task (a `run` from inside `run`'s
    ///   work), to start ahead of the queue.
    /// - Throws: The pool's refusal; nothing is then queued.
    func enqueueForWorker(_ item: Item, gap: Duration?, nested: Bool) throws(ThreadPoolError) {
        if let refusal { throw refusal }
        if case .none = worker {
            try submitWorker(to: pool, onAbandon: { [self] in workerWasDropped() })
        }
        if nested { schedule.submitNested(item, gap: gap) } else { schedule.submit(item, gap: gap) }
        queuedForWorker += 1
        changed.signal()
    }

    /// Submits the worker to `workerPool`. Mutex held.
    ///
    /// The worker is submitted under the queue's mutex, so a refusing pool rejects exactly the item
    /// being queued and no other submitter can count on a worker that never comes. That is safe:
    /// the pool's submission calls out to nothing (not even a log delegate), and a task submitted
    /// past the queue limit neither blocks nor runs on the caller.
    ///
    /// The worker holds the queue until its loop ends, so a queue dropped with tasks queued still
    /// runs them all.
    private func submitWorker(to workerPool: ThreadPool, onAbandon: (@Sendable () -> Void)?) throws(ThreadPoolError) {
        let task = ScheduledTask(pool: workerPool, work: { [self] in runWorker(on: workerPool) }, onAbandon: onAbandon)
        try workerPool.submit(.task(task), ignoringLimit: true)
        worker = .waiting(in: workerPool)
    }

    /// Called by the pool's `disposeNow()`, outside its lock, when it dropped the worker before
    /// the worker ran: the pool is gone.
    ///
    /// What was accepted still runs, on a worker of the queue's own: a pool of one thread named
    /// after the queue, disposed at once so that its thread exits when the queue is drained. Later
    /// `async` and `run` calls throw ``ThreadPoolError/disposed(pool:)``; `sync` needs no worker.
    private func workerWasDropped() {
        let disposed = ThreadPoolError.disposed(pool: pool.name)
        var fallback: ThreadPool?
        var failure: ThreadPoolError?
        let (dropped, waiters) = mutex.withLock { () -> ([Item], [CheckedContinuation<Void, any Error>]) in
            refusal = disposed
            worker = .none
            guard queuedForWorker > 0 else { return ([], []) }
            let own = ThreadPool(name: label, size: 1)
            do throws(ThreadPoolError) {
                try submitWorker(to: own, onAbandon: nil)
                fallback = own
                return ([], [])
            } catch {
                // No thread to run them: they leave the queue, and `run` callers get the error.
                failure = error
                let dropped = schedule.removeAll { !$0.isSync }
                queuedForWorker = 0
                var waiters: [CheckedContinuation<Void, any Error>] = []
                for case .run(let ticket) in dropped {
                    ticket.phase = .cancelled
                    if let continuation = ticket.takeContinuation() { waiters.append(continuation) }
                }
                wakeWaiters()
                return (dropped, waiters)
            }
        }
        if let fallback {
            fallback.dispose()
            Log.log(.throttle, "\(label): ThreadPool '\(pool.name)' was disposed with the queue's worker waiting; the accepted tasks run on a thread of the queue's own")
        }
        if let failure {
            for waiter in waiters { waiter.resume(throwing: failure) }
            Log.log(.throttle, "\(label): ThreadPool '\(pool.name)' was disposed with the queue's worker waiting, and no thread of the queue's own could start (\(failure)): \(dropped.count) accepted tasks never run")
        }
    }

    /// The worker: starts the tasks it serves (`async` work, `run` callers) when the schedule
    /// allows, until none is queued; then its thread goes back to `workerPool`.
    private func runWorker(on workerPool: ThreadPool) {
        mutex.lock()
        worker = .driving
        while queuedForWorker > 0 {
            guard case .startAt(let allowed) = schedule.nextStart(), schedule.next?.isSync == false,
                  !nextRunWaitsForSibling else {
                // A task runs, or a `sync` caller is next and starts its own turn, or a nested `run`
                // waits for a sibling nested in the same task to end: each ends with a signal.
                _blockingWaitForChange()
                continue
            }
            guard let now = _blockingApproach(toStartAt: allowed, on: changed) else { continue }
            queuedForWorker -= 1
            var work: (@Sendable () -> Void)?
            var granted: CheckedContinuation<Void, any Error>?
            switch schedule.start(at: now) {
            case .work(let closure):
                work = closure
            case .run(let ticket):
                ticket.phase = .granted
                ticket.nestedIn?.hasNestedTaskRunning = true
                granted = ticket.takeContinuation()
            case .sync:
                preconditionFailure("ThrottledQueue '\(label)': the worker started a sync caller's turn")
            }
            mutex.unlock()
            granted?.resume()
            if work != nil {
                // The closure is released with this call's argument, before the mutex is taken
                // again: a capture's deinit may use the queue.
                let (startedAt, endedAt) = perform(work.take()!, on: workerPool)
                mutex.lock()
                schedule.end(at: endedAt, startedAt: startedAt)
                wakeWaiters()
            } else {
                mutex.lock()
            }
        }
        worker = .none
        mutex.unlock()
    }

    /// Runs an `async` task's work on the worker's thread, which holds the queue meanwhile. Mutex
    /// not held.
    ///
    /// - Returns: When the work began and when it ended.
    private func perform(_ work: @Sendable () -> Void, on workerPool: ThreadPool) -> (MonotonicInstant, MonotonicInstant) {
        let hold = Hold(queue: self, pool: workerPool, outer: Hold.ofThread)
        Hold.withThreadHold(hold) { work() }
        return (hold.startedAt, MonotonicInstant.now())
    }

    /// How long after the earliest allowed instant a waiting task starts.
    ///
    /// A task body reads the clock a moment after the queue starts it, and that moment varies by a
    /// microsecond or two, by tens when an interrupt lands in between. Aiming this much later means
    /// the task bodies themselves never observe two starts closer than the rules allow. (A task that
    /// arrives after its gap has passed by more than this starts at once.)
    static let startMargin = Duration.microseconds(25)

    /// The longest a thread watches the clock before a start, instead of sleeping.
    ///
    /// A thread woken by the kernel at a deadline runs tens of microseconds after it (more on a
    /// virtual machine); an API's rate limit counts from the request, so a thread sleeps until a
    /// little before the start and spends the rest yielding the core. At short intervals
    /// ``approachShare`` makes it shorter.
    static let finalApproach = Duration.microseconds(100)

    /// The share of the time between two starts that watching the clock may take: 1/20.
    ///
    /// With ``finalApproach`` it bounds the clock-watching to min(100 µs, 5 %) of the time from the
    /// previous start: at most 5 % of a core at any interval (1 % at 10 ms), where a fixed 100 µs
    /// cost 10 % at a 1 ms interval and all of a core at 100 µs. The price is precision at short
    /// intervals only: a start 1 ms after the last watches the clock for the last 50 µs.
    static let approachShare = 20

    /// Wakes whoever may go on after a task ended or left, or the interval or a pause changed:
    /// `waitUntilIdle` callers, a nested `sync` waiting out its gap, and the `sync` caller that is
    /// next, if one is. Mutex held.
    private func wakeWaiters() {
        progress.broadcast()
        if case .sync(let turn)? = schedule.next { turn.isNext.signal() }
    }

    private func _blockingWaitForChange() {
        changed.wait(mutex)
    }

    /// One step toward a start allowed at `allowed`, by the schedule's rule: sleeps on `condition`
    /// (which any change signals) or watches the clock, then returns `nil` for the caller to decide
    /// again; or, once it is time, returns the instant to start at. Mutex held.
    private func _blockingApproach(toStartAt allowed: MonotonicInstant, on condition: MonotonicCondition) -> MonotonicInstant? {
        let now = MonotonicInstant.now()
        switch schedule.approach(toStartAt: allowed, now: now) {
        case .startNow:
            return now
        case .sleep(let wake):
            condition.wait(mutex, until: wake)
        case .spin(let target):
            mutex.unlock()
            Self._spinUntil(target)
            mutex.lock()
        }
        return nil
    }

    /// Yields the core until `deadline`, which is at most ``finalApproach`` away.
    /// Mutex not held.
    private static func _spinUntil(_ deadline: MonotonicInstant) {
        while MonotonicInstant.now() < deadline { sched_yield() }
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
        Log.log(.throttle, "\(label): paused for \(now.duration(to: instant))")
    }

    /// The innermost hold of this queue's running task by the calling thread or task: a call from
    /// inside it is nested. Mutex held.
    private func held(thread: Hold?, task: Hold?) -> Hold? {
        thread?.innermost(of: self) ?? task?.innermost(of: self)
    }

    /// Why a wait by the calling thread could never end, if it is the only thread of this queue's
    /// pool, running another queue's task, while the tasks queued here wait in that pool for the
    /// worker that needs that thread. Mutex held.
    private func starvedPoolMessage(for call: String, threadHold: Hold?) -> String? {
        guard pool.size == 1, queuedForWorker > 0, case .waiting(let waitingIn) = worker, waitingIn === pool,
              let holder = threadHold?.first(onThreadOf: pool) else { return nil }
        return "ThrottledQueue '\(label)': \(call) from a task of ThrottledQueue '\(holder.queue.label)' on the same "
            + "one-thread ThreadPool '\(pool.name)' would wait forever: the pool has no thread left for '\(label)'"
    }

    /// Runs a `sync` caller's work on its own thread once its turn has come.
    private func runHere<T>(gap: Duration?, _ work: () throws -> T) rethrows -> T {
        let threadHold = Hold.ofThread, taskHold = Hold.ofTask
        mutex.lock()
        let context = SerialContext(.throttled(self))
        // Nested in this queue's running task, which waits for it: run by this thread or task, or
        // by a thread blocked waiting for this one (through a dedicated thread, a
        // DispatchMethod.sync, …), which handed its hold on.
        let holder = held(thread: threadHold, task: taskHold) ?? ExecutionContexts.heldHold(of: self)
        if let holder {
            // It starts ahead of the queue, its gap counted from the running task's own code, in
            // the holder's nested turn: the child tasks of `run`'s work, and the threads they wait
            // for, take it one at a time.
            schedule.began(at: holder.startedAt)
            _blockingWaitForNestedStart(in: holder, gap: gap)
        } else if ExecutionContexts.holds(context) {
            // Held without a known task (not reached: every hold of a queue carries its task).
            _blockingWaitForNestedStart(in: nil, gap: gap)
        } else {
            if let message = starvedPoolMessage(for: "sync", threadHold: threadHold) {
                mutex.unlock()
                preconditionFailure(message)
            }
            let turn = Turn()
            schedule.submit(.sync(turn), gap: gap)
            ExecutionContexts.blocking(for: context) { _blockingWaitForTurn(turn) }
        }
        mutex.unlock()
        let hold = Hold(queue: self, pool: nil, outer: threadHold, nestedIn: holder)
        defer { endTask(startedAt: hold.startedAt, ticket: nil, nestedIn: holder) }
        return try Hold.withThreadHold(hold) { try work() }
    }

    /// Waits until `turn` is next and its start is allowed, then starts it: a `sync` caller
    /// waits out its own turn, the way the worker would. Mutex held.
    private func _blockingWaitForTurn(_ turn: Turn) {
        while true {
            guard case .sync(let next)? = schedule.next, next === turn,
                  case .startAt(let allowed) = schedule.nextStart() else {
                turn.isNext.wait(mutex)
                continue
            }
            if let now = _blockingApproach(toStartAt: allowed, on: turn.isNext) {
                _ = schedule.start(at: now)
                return
            }
        }
    }

    /// Waits until a task nested in the running one may start, then starts it: after its gap, and
    /// once no other task nested in `holder` runs (concurrent child tasks of `run`'s work each get
    /// the queue to themselves, one after another). Mutex held.
    private func _blockingWaitForNestedStart(in holder: Hold?, gap: Duration?) {
        while true {
            if let holder, holder.hasNestedTaskRunning {
                // A sibling's nested task runs: a wait for the holder's nested turn, which that
                // sibling's thread (or task) holds, and which may close a cycle through what that
                // sibling waits for. Not for the queue: the holder's family holds that, the callers
                // blocked waiting for this thread included.
                ExecutionContexts.blocking(for: SerialContext(.nestedTurn(holder))) { progress.wait(mutex) }
                continue
            }
            if let now = _blockingApproach(toStartAt: schedule.nestedStart(), on: progress), holder?.hasNestedTaskRunning != true {
                schedule.startNested(at: now, gap: gap)
                holder?.hasNestedTaskRunning = true
                return
            }
        }
    }

    /// Whether the next task is a nested `run` whose holder runs another nested task. Mutex held.
    private var nextRunWaitsForSibling: Bool {
        guard case .run(let ticket)? = schedule.next else { return false }
        return ticket.nestedIn?.hasNestedTaskRunning == true
    }

    /// Queues a `run` caller, which the worker resumes when its turn comes; nested in this queue's
    /// running task if `outer` holds it.
    ///
    /// - Returns: Why it was not queued: it was cancelled already, or the pool refused a worker.
    func queueRun(_ ticket: Ticket, _ continuation: CheckedContinuation<Void, any Error>, within outer: Hold?) -> (any Error)? {
        mutex.withLock { () -> (any Error)? in
            guard ticket.phase == .new else { return CancellationError() }
            let holder = outer?.innermost(of: self)
            if let holder { schedule.began(at: holder.startedAt) }
            ticket.nestedIn = holder
            do {
                try enqueueForWorker(.run(ticket), gap: nil, nested: holder != nil)
            } catch {
                return error
            }
            ticket.continuation = continuation
            ticket.phase = .queued
            return nil
        }
    }

    /// Takes a cancelled `run` caller out of the queue, if its turn has not come, and lets the
    /// worker re-decide (it goes back to its pool if nothing else is queued).
    ///
    /// - Returns: The continuation to resume with `CancellationError`, if it was queued.
    func leave(_ ticket: Ticket) -> CheckedContinuation<Void, any Error>? {
        mutex.withLock {
            switch ticket.phase {
            case .new:
                ticket.phase = .cancelled
                return nil
            case .queued:
                let removed = schedule.removeAll { item in
                    if case .run(let queued) = item { queued === ticket } else { false }
                }
                queuedForWorker -= removed.count
                ticket.phase = .cancelled
                changed.signal()
                wakeWaiters()
                return ticket.takeContinuation()
            case .granted, .ended, .cancelled:
                return nil
            }
        }
    }

    /// Records the end of a task that a caller ran itself, at once; a task nested in `holder` lets
    /// the next one nested in it start.
    func endTask(startedAt: MonotonicInstant, ticket: Ticket?, nestedIn holder: Hold? = nil) {
        let now = MonotonicInstant.now()
        mutex.withLock {
            schedule.end(at: now, startedAt: startedAt)
            (holder ?? ticket?.nestedIn)?.hasNestedTaskRunning = false
            ticket?.nestedIn = nil
            ticket?.phase = .ended
            changed.signal()
            wakeWaiters()
        }
    }
}

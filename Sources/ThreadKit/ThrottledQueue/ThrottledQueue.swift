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
/// Tasks run on one worker thread of a ``ThreadPool``, which waits out each gap with a timed wait
/// on the monotonic clock and goes back to the pool when the queue is idle. Queues are independent:
/// one queue's gaps never delay another's.
///
/// ```swift
/// let api = ThrottledQueue(label: "GitHub", interval: .milliseconds(200), limit: .rate(3, per: .seconds(1)))
/// try api.async { fetchNextPage() }
/// let user = try await api.run { try await client.user(id) }
/// ```
public final class ThrottledQueue: @unchecked Sendable {
    // Sendable: `schedule`, `hasWorker`, `runningThread` and every `Ticket`'s vars are guarded by `mutex`.

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

    private let pool: ThreadPool
    private let mutex = PThreadMutex()
    /// Signalled for the worker: work arrived, a task ended, the interval or a pause changed.
    private let changed = MonotonicCondition()
    /// Broadcast when a ticket is granted or a task ends, for `sync` callers and `waitUntilIdle`; and
    /// when the interval or a pause changes, for a nested `sync` waiting out its gap.
    private let progress = MonotonicCondition()
    private var schedule: ThrottleSchedule<Item>
    private var hasWorker = false
    /// The thread running the current task, to recognise a `sync` from inside it.
    private var runningThread: pthread_t?

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - label: Names the queue's thread and log lines.
    ///   - interval: The default gap between tasks; not negative.
    ///   - monitor: Whether gaps count from a task's start (`.concurrent`) or end (`.serial`).
    ///   - mutability: Which queued tasks a later change of `interval` reaches.
    ///   - limit: At most so many starts in any sliding window.
    ///   - pool: Where the queue's worker runs; by default a pool of one thread of its own, so the
    ///     queue holds no thread once idle long enough to be collected. A shared pool needs a thread
    ///     for each queue busy at the same time, or queues wait for each other.
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
        self.pool = pool ?? ThreadPool(name: label, size: 1)
        self.schedule = ThrottleSchedule(interval: interval, monitor: monitor, mutability: mutability, limit: limit)
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
                progress.broadcast()
            }
        }
    }

    // MARK: - Submitting

    /// Queues `work`, followed by the queue's interval.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` if the queue's pool was disposed.
    public func async(_ work: @escaping @Sendable () -> Void) throws {
        try mutex.withLock { () throws(ThreadPoolError) in try enqueue(.work(work), gap: nil) }
    }

    /// Queues `work`, followed by `interval` instead of the queue's interval (for this one task).
    ///
    /// - Parameter interval: The gap after this task; not negative.
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` if the queue's pool was disposed.
    public func async(interval: Duration, _ work: @escaping @Sendable () -> Void) throws {
        precondition(interval >= .zero, "ThrottledQueue '\(label)': interval must not be negative, got \(interval)")
        try mutex.withLock { () throws(ThreadPoolError) in try enqueue(.work(work), gap: interval) }
    }

    /// Runs `work` on the calling thread when its turn comes, and returns its result.
    ///
    /// Returns as soon as `work` has run, not after the gap that follows. Called from inside one of
    /// this queue's tasks, it does not deadlock: it waits out the gap on this thread and runs at
    /// once, ahead of queued tasks, counting as a start.
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
    public func pause(for duration: Duration) {
        precondition(duration >= .zero, "ThrottledQueue '\(label)': pause duration must not be negative, got \(duration)")
        pause(until: MonotonicInstant.now().advanced(by: duration))
    }

    /// Starts no task before `deadline` (a longer pause already in force stays).
    public func pause(until deadline: ContinuousClock.Instant) {
        pause(until: MonotonicInstant(deadline))
    }

    /// Ends a pause at once.
    public func resume() {
        mutex.withLock {
            schedule.resume()
            changed.signal()
            progress.broadcast()
        }
        Log.log(.throttle, "\(label): resumed")
    }

    /// Removes every queued task that has not started.
    ///
    /// Removed `async` tasks never run; waiting ``run(_:)`` callers throw `CancellationError`. Threads
    /// blocked in ``sync(_:)`` keep their place: they must get their result.
    ///
    /// - Returns: How many tasks will never run.
    @discardableResult
    public func cancelAll() -> Int {
        let removed: [Item] = mutex.withLock {
            let removed = schedule.removeAll { item in
                if case .ticket(let ticket) = item { return ticket.continuation != nil }
                return true
            }
            for case .ticket(let ticket) in removed { ticket.phase = .cancelled }
            progress.broadcast()
            return removed
        }
        for case .ticket(let ticket) in removed {
            ticket.takeContinuation()?.resume(throwing: CancellationError())
        }
        if !removed.isEmpty { Log.log(.throttle, "\(label): cancelled \(removed.count) queued tasks") }
        return removed.count
    }

    /// Blocks until every accepted task has finished (not the gap after the last).
    ///
    /// Must not be called from inside one of the queue's own tasks, which could never finish.
    public func waitUntilIdle() {
        mutex.withLock {
            precondition(!isRunningOnCurrentThread, "ThrottledQueue '\(label)': waitUntilIdle() from inside its own task would wait forever")
            while !schedule.isIdle { progress.wait(mutex) }
        }
    }

    /// How many accepted tasks have not started.
    public var pendingCount: Int {
        mutex.withLock { schedule.pending.count }
    }

    // MARK: - Internals

    enum Item {
        /// An `async` task, run by the worker.
        case work(@Sendable () -> Void)
        /// A `sync` or `run` caller, which runs its own work once granted its start.
        case ticket(Ticket)
    }

    /// A caller waiting to run its own work on its own thread or task.
    final class Ticket: @unchecked Sendable {
        // Sendable: `phase` and `continuation` are guarded by the queue's mutex.
        enum Phase { case new, queued, granted, cancelled }
        var phase = Phase.new
        /// Set for `run` callers; `sync` callers wait on the queue's `progress` condition instead.
        var continuation: CheckedContinuation<Void, any Error>?

        func takeContinuation() -> CheckedContinuation<Void, any Error>? {
            defer { continuation = nil }
            return continuation
        }
    }

    /// Queues `item` and makes sure a worker serves the queue. Mutex held.
    ///
    /// The worker is submitted under the queue's mutex, so a refusing pool rejects exactly this
    /// item and no other submitter can count on a worker that never comes. That is safe: the pool's
    /// submission calls out to nothing (not even a log delegate), and executor-style submission
    /// neither blocks nor runs on the caller.
    func enqueue(_ item: Item, gap: Duration?) throws(ThreadPoolError) {
        if !hasWorker {
            try pool.submit(.closure { [self] in runWorker() }, ignoringLimit: true)
            hasWorker = true
        }
        schedule.submit(item, gap: gap)
        if case .ticket(let ticket) = item { ticket.phase = .queued }
        changed.signal()
    }

    private var isRunningOnCurrentThread: Bool {
        guard let runningThread else { return false }
        return pthread_equal(runningThread, pthread_self()) != 0
    }

    private func pause(until instant: MonotonicInstant) {
        mutex.withLock {
            schedule.pause(until: instant)
            changed.signal()
            progress.broadcast()
        }
        Log.log(.throttle, "\(label): paused for \(MonotonicInstant.now().duration(to: instant))")
    }

    /// The worker: starts each task when the schedule allows, until the queue is idle.
    private func runWorker() {
        mutex.lock()
        while true {
            switch schedule.nextStart() {
            case .idle:
                hasWorker = false
                mutex.unlock()
                return
            case .awaitingEnd:
                _blockingWaitForTaskEnd()
            case .startAt(let allowed):
                let now = MonotonicInstant.now()
                guard allowed <= now else {
                    let target = allowed.advanced(by: Self.startMargin)
                    let approach = target.advanced(by: .zero - Self.finalApproach)
                    if now < approach {
                        _blockingWaitForGap(until: approach)
                    } else {
                        mutex.unlock()
                        _spinUntil(target)
                        mutex.lock()
                    }
                    continue
                }
                switch schedule.start(at: now) {
                case .work(let work):
                    runningThread = pthread_self()
                    mutex.unlock()
                    let startedAt = MonotonicInstant.now()
                    work()
                    let endedAt = MonotonicInstant.now()
                    mutex.lock()
                    runningThread = nil
                    schedule.end(at: endedAt, startedAt: startedAt)
                    progress.broadcast()
                case .ticket(let ticket):
                    ticket.phase = .granted
                    progress.broadcast()
                    if let continuation = ticket.takeContinuation() {
                        mutex.unlock()
                        continuation.resume()
                        mutex.lock()
                    }
                }
            }
        }
    }

    private func _blockingWaitForTaskEnd() {
        changed.wait(mutex)
    }

    /// How long after the earliest allowed instant a waiting task starts.
    ///
    /// A task body reads the clock a moment after the queue starts it, and that moment varies by a
    /// microsecond or two, by tens when an interrupt lands in between. Aiming this much later means
    /// the task bodies themselves never observe two starts closer than the rules allow. (A task that
    /// arrives after its gap has passed still starts at once.)
    static let startMargin = Duration.microseconds(25)

    /// How long before a start the worker stops sleeping and watches the clock instead.
    ///
    /// A thread woken by the kernel at a deadline runs tens of microseconds after it (more on a
    /// virtual machine); an API's rate limit counts from the request, so the worker sleeps until
    /// this much before the start and spends the rest yielding the core. It costs at most this
    /// much CPU per gap: 1 % for a 10 ms interval, nothing noticeable for the usual hundreds of ms.
    static let finalApproach = Duration.microseconds(100)

    /// The share of the time between two starts that watching the clock may take: 1/20.
    ///
    /// With ``finalApproach`` it bounds the clock-watching to min(100 µs, 5 %) of the time from the
    /// previous start: at most 5 % of a core at any interval (1 % at 10 ms), where a fixed 100 µs
    /// cost 10 % at a 1 ms interval and all of a core at 100 µs. The price is precision at short
    /// intervals only: a start 1 ms after the last watches the clock for the last 50 µs.
    static let approachShare = 20

    private func _blockingWaitForGap(until deadline: MonotonicInstant) {
        changed.wait(mutex, until: deadline)
    }

    /// Yields the core until `deadline`, which is at most ``finalApproach`` away. Mutex not held.
    private func _spinUntil(_ deadline: MonotonicInstant) {
        while MonotonicInstant.now() < deadline { sched_yield() }
    }

    /// Runs a `sync` caller's work on its own thread once its start is granted.
    private func runHere<T>(gap: Duration?, _ work: () throws -> T) rethrows -> T {
        mutex.lock()
        if isRunningOnCurrentThread {
            while true {
                let allowed = schedule.nestedStart()
                let now = MonotonicInstant.now()
                if allowed <= now {
                    schedule.startNested(at: now, gap: gap)
                    break
                }
                progress.wait(mutex, until: allowed)
            }
        } else {
            let ticket = Ticket()
            do {
                try enqueue(.ticket(ticket), gap: gap)
            } catch {
                mutex.unlock()
                preconditionFailure("ThrottledQueue '\(label)': sync needs a worker, but \(error)")
            }
            while ticket.phase != .granted { progress.wait(mutex) }
            runningThread = pthread_self()
        }
        mutex.unlock()
        let startedAt = MonotonicInstant.now()
        defer { endTask(startedAt: startedAt) }
        return try work()
    }

    /// Runs `body` with the mutex held.
    func withMutex<Result>(_ body: () -> Result) -> Result {
        mutex.withLock(body)
    }

    /// Takes a cancelled `run` caller out of the queue, if its turn has not come.
    ///
    /// - Returns: The continuation to resume with `CancellationError`, if it was queued.
    func leave(_ ticket: Ticket) -> CheckedContinuation<Void, any Error>? {
        mutex.withLock {
            switch ticket.phase {
            case .new:
                ticket.phase = .cancelled
                return nil
            case .queued:
                _ = schedule.removeAll { item in
                    if case .ticket(let queued) = item { queued === ticket } else { false }
                }
                ticket.phase = .cancelled
                progress.broadcast()
                return ticket.takeContinuation()
            case .granted, .cancelled:
                return nil
            }
        }
    }

    /// Records the end of a task that a caller ran itself, at once.
    func endTask(startedAt: MonotonicInstant) {
        let now = MonotonicInstant.now()
        mutex.withLock {
            schedule.end(at: now, startedAt: startedAt)
            if schedule.running == 0 { runningThread = nil }
            changed.signal()
            progress.broadcast()
        }
    }
}

import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A fixed-size pool of named threads that recycles idle threads and collects them when idle.
///
/// Threads are made lazily, one at a time, only when no thread is idle, and never more than `size`
/// of them. Tasks start in the order they were accepted; while fewer than `size` tasks run, none
/// waits in the queue. An idle thread sleeps on its own condition (it never polls), takes the next
/// task handed to it, and is retired by the collector once it has been idle for `keepAlive`.
///
/// ```swift
/// let pool = ThreadPool(name: "Images", size: 4)
/// try pool.execute { resize(image) }
/// let task = try pool.schedule { upload(file) }
/// task.wait()
/// let thumbnail = try await pool.run { render(page) }
/// pool.dispose()
/// ```
public final class ThreadPool: TaskExecutor, @unchecked Sendable {
    // Sendable: `state` and every `Worker.assignment` are guarded by `mutex`; the other stored
    // properties are constants or atomics.

    /// What a submission does when the queue already holds `queueLimit` tasks.
    public enum OverflowPolicy: Sendable, Equatable {
        /// The submitting thread waits until the queue has room (or the pool is disposed).
        case block
        /// The submission throws ``ThreadPoolError/queueFull(pool:limit:)``.
        case reject
        /// The submitting thread runs the task itself, at once.
        case runOnCaller
    }

    /// The pool's name, used for its threads (`"<name> Thread<N>"`), its log lines and its errors.
    public let name: String
    /// The most threads, and so the most tasks running at once.
    public let size: Int
    /// How long an idle thread is kept for reuse before the collector may retire it.
    public let keepAlive: Duration
    /// How often the collector looks for threads idle for `keepAlive`.
    public let collectionInterval: Duration
    /// The most tasks that may wait for a thread, or `nil` for no limit.
    public let queueLimit: Int?
    /// What a submission does when the queue is full.
    public let overflowPolicy: OverflowPolicy

    private let collection: CollectionSchedule
    private let mutex = PThreadMutex()
    /// Signalled when a queued task leaves the queue while submitters are blocked on a full queue.
    private let queueHasRoom = MonotonicCondition()
    /// Broadcast when the last thread of a disposed pool exits.
    private let threadsGone = MonotonicCondition()
    private let completedCount = Atomic<Int>(0)
    /// Bumped when a spinning worker has something to look at: queued work, or a shutdown.
    private let spinnerNudge = Atomic<Int>(0)
    /// The pool's state, guarded by `mutex`. It lives behind a pointer so that the hot paths do not
    /// pay for Swift's dynamic exclusivity checks on a class's stored property: the mutex already
    /// guarantees exclusive access.
    private let stateStorage: UnsafeMutablePointer<State> = {
        let storage = UnsafeMutablePointer<State>.allocate(capacity: 1)
        storage.initialize(to: State())
        return storage
    }()

    private var state: State {
        unsafeAddress { UnsafePointer(stateStorage) }
        unsafeMutableAddress { stateStorage }
    }

    /// Creates a pool; no thread starts until the first task arrives.
    ///
    /// - Parameters:
    ///   - name: Names the threads, log lines and errors.
    ///   - size: The most threads and running tasks; at least 1.
    ///   - keepAlive: How long an idle thread stays to be reused; not negative.
    ///   - collectionInterval: How often idle threads are checked for retirement; more than zero.
    ///   - queueLimit: The most tasks waiting for a thread, at least 1, or `nil` for no limit.
    ///   - whenFull: What a submission does when `queueLimit` tasks are waiting.
    public init(
        name: String, size: Int,
        keepAlive: Duration = .seconds(10),
        collectionInterval: Duration = .seconds(15),
        queueLimit: Int? = nil, whenFull: OverflowPolicy = .block
    ) {
        precondition(size >= 1, "ThreadPool '\(name)': size must be at least 1, got \(size)")
        precondition(keepAlive >= .zero, "ThreadPool '\(name)': keepAlive must not be negative, got \(keepAlive)")
        precondition(
            collectionInterval > .zero,
            "ThreadPool '\(name)': collectionInterval must be more than zero, got \(collectionInterval)")
        if let queueLimit {
            precondition(queueLimit >= 1, "ThreadPool '\(name)': queueLimit must be at least 1, got \(queueLimit)")
        }
        self.name = name
        self.size = size
        self.keepAlive = keepAlive
        self.collectionInterval = collectionInterval
        self.queueLimit = queueLimit
        self.overflowPolicy = whenFull
        self.collection = CollectionSchedule(
            createdAt: .now(), keepAlive: keepAlive, interval: collectionInterval)
    }

    deinit {
        stateStorage.deinitialize(count: 1)
        stateStorage.deallocate()
    }

    // MARK: - Submitting work

    /// Runs `work` on a pool thread, with no handle: the fastest way in.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` after ``dispose()``;
    ///   ``ThreadPoolError/queueFull(pool:limit:)`` when the queue is full and the policy is `.reject`.
    public func execute(_ work: @escaping @Sendable () -> Void) throws {
        try submit(.closure(work))
    }

    /// Runs `work` on a pool thread and returns a handle to cancel it or wait for it.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` after ``dispose()``;
    ///   ``ThreadPoolError/queueFull(pool:limit:)`` when the queue is full and the policy is `.reject`.
    @discardableResult
    public func schedule(_ work: @escaping @Sendable () -> Void) throws -> ScheduledTask {
        let task = ScheduledTask(pool: self, work: work)
        try submit(.task(task))
        return task
    }

    // MARK: - Shutting down

    /// Refuses new work, runs what is already queued, then lets every thread exit.
    ///
    /// Returns at once; ``awaitTermination(timeout:)`` waits for the end. Submitters blocked on a
    /// full queue get ``ThreadPoolError/disposed(pool:)``. Calling it again does nothing.
    public func dispose() {
        let idle: [Worker]? = mutex.withLock {
            guard case .running = state.lifecycle else { return nil }
            state.lifecycle = .draining
            return wakeForShutdown()
        }
        guard let idle else { return }
        for worker in idle { worker.wakeUp.signal() }
        Log.log(.threadPool, "\(name): disposed; running the \(statistics.queuedTasks) queued tasks first")
    }

    /// Refuses new work and hands back every task that had not started.
    ///
    /// Tasks already running finish; then the threads exit. The returned tasks are cancelled
    /// (``ScheduledTask/isCancelled`` is `true`, waiters wake), in the order they were accepted;
    /// tasks submitted with ``execute(_:)`` come back as new handles. Queued Swift task jobs (the
    /// pool as a `TaskExecutor`) are not handed back but moved to the global concurrent executor,
    /// and ``run(_:)`` calls whose work had not started throw ``ThreadPoolError/disposed(pool:)``,
    /// so no Swift task is left suspended forever.
    ///
    /// - Returns: The tasks that will never run; empty if the pool was already stopped.
    public func disposeNow() -> [ScheduledTask] {
        var jobs: [UnownedJob] = []
        var abandoned: [@Sendable () -> Void] = []
        let result: (idle: [Worker], handedBack: [ScheduledTask])? = mutex.withLock {
            if case .stopped = state.lifecycle { return nil }
            state.lifecycle = .stopped
            var handedBack: [ScheduledTask] = []
            while let work = state.queue.popFirst() {
                switch work {
                case .job(let job):
                    // A Swift task's job is not the caller's to take back; it must run somewhere.
                    jobs.append(job)
                    state.queuedCount -= 1
                case .closure(let closure):
                    let task = ScheduledTask(pool: nil, work: closure)
                    _ = task.handBack()
                    handedBack.append(task)
                    state.queuedCount -= 1
                case .task(let task):
                    // A task the user cancelled a moment ago is theirs already; they count it.
                    if task.handBack() {
                        state.queuedCount -= 1
                        if let abandon = task.takeAbandonHandler() {
                            abandoned.append(abandon)
                        } else {
                            handedBack.append(task)
                        }
                    }
                }
            }
            return (wakeForShutdown(), handedBack)
        }
        guard let result else { return [] }
        for worker in result.idle { worker.wakeUp.signal() }
        for job in jobs { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
        for abandon in abandoned { abandon() }
        Log.log(.threadPool, "\(name): disposed now; handed back \(result.handedBack.count) tasks, moved \(jobs.count) Swift task jobs to the global executor")
        return result.handedBack
    }

    /// Blocks until a disposed pool's threads have all exited, or `timeout` has passed.
    ///
    /// - Parameter timeout: The longest to wait; not negative.
    /// - Returns: `true` if the pool was disposed and has no threads left, `false` on timeout
    ///   (including when the pool was never disposed).
    public func awaitTermination(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "ThreadPool '\(name)': awaitTermination timeout must not be negative, got \(timeout)")
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        return mutex.withLock {
            while !state.isTerminated {
                if MonotonicInstant.now() >= deadline { return false }
                threadsGone.wait(mutex, until: deadline)
            }
            return true
        }
    }

    /// A consistent snapshot of the pool's threads and tasks.
    public var statistics: Statistics {
        mutex.withLock {
            let idleThreads = state.idleWorkers.count + state.spinningWorkers
            return Statistics(
                threads: state.threads, idleThreads: idleThreads,
                busyThreads: state.threads - idleThreads, queuedTasks: state.queuedCount,
                completedTasks: completedCount.load(ordering: .relaxed), peakThreads: state.peakThreads)
        }
    }

    // MARK: - Internals

    /// A unit of accepted work. A `.task` in the queue may have been cancelled meanwhile.
    enum Work: Sendable {
        case closure(@Sendable () -> Void)
        case task(ScheduledTask)
        /// A Swift concurrency job, from the pool's `TaskExecutor` side: run, never handed back.
        case job(UnownedJob)
    }

    /// One pool thread's mailbox: an idle worker sleeps on `wakeUp` until given an assignment.
    private final class Worker: @unchecked Sendable {
        // Sendable: `assignment` is guarded by the pool's mutex.
        let number: Int
        let wakeUp = MonotonicCondition()
        var assignment: Work?

        init(number: Int) {
            self.number = number
        }
    }

    private enum Lifecycle {
        /// Accepting work.
        case running
        /// ``dispose()`` was called: running what is queued, then exiting.
        case draining
        /// ``disposeNow()`` was called: the queue was handed back; threads exit after their task.
        case stopped
    }

    private struct State {
        var lifecycle = Lifecycle.running
        var queue = RingBuffer<Work>()
        /// Entries of `queue` not cancelled: the tasks waiting for a thread.
        var queuedCount = 0
        /// Idle workers, the most recently idle last: reused first, so the others age and retire.
        var idleWorkers: [Worker] = []
        /// Workers briefly spinning for more work before they sleep (at most one at a time).
        var spinningWorkers = 0
        var threads = 0
        var peakThreads = 0
        var threadsStarted = 0
        var blockedSubmitters = 0

        var isTerminated: Bool {
            if case .running = lifecycle { return false }
            return threads == 0
        }
    }

    /// What a submission found it must do, decided under the lock and done outside it.
    private enum Placement {
        case handedToIdle(Worker)
        case newThread(number: Int)
        case queued
        case runOnCaller
    }

    /// Accepts `work`, or throws why not.
    ///
    /// - Parameter ignoringLimit: Executor jobs skip `queueLimit`: blocking or refusing them would
    ///   stall or lose a Swift task.
    func submit(_ work: Work, ignoringLimit: Bool = false) throws(ThreadPoolError) {
        let placement = try mutex.withLock { () throws(ThreadPoolError) -> Placement in
            while true {
                guard case .running = state.lifecycle else { throw .disposed(pool: name) }
                if state.queue.count < state.spinningWorkers {
                    // A spinning worker takes it within microseconds, with no wakeup to pay for.
                    state.queue.append(work)
                    state.queuedCount += 1
                    spinnerNudge.wrappingAdd(1, ordering: .releasing)
                    return .queued
                }
                if let worker = state.idleWorkers.popLast() {
                    worker.assignment = claimed(work)
                    return .handedToIdle(worker)
                }
                if state.threads < size {
                    state.threads += 1
                    state.threadsStarted += 1
                    state.peakThreads = max(state.peakThreads, state.threads)
                    return .newThread(number: state.threadsStarted)
                }
                guard let limit = queueLimit, !ignoringLimit, state.queuedCount >= limit else {
                    state.queue.append(work)
                    state.queuedCount += 1
                    return .queued
                }
                switch overflowPolicy {
                case .reject:
                    throw .queueFull(pool: name, limit: limit)
                case .runOnCaller:
                    return .runOnCaller
                case .block:
                    state.blockedSubmitters += 1
                    _blockingWaitForRoomInQueue()
                    state.blockedSubmitters -= 1
                }
            }
        }
        switch placement {
        case .handedToIdle(let worker):
            worker.wakeUp.signal()
        case .newThread(let number):
            startThread(number: number, firstWork: claimed(work))
        case .queued:
            break
        case .runOnCaller:
            perform(claimed(work))
        }
    }

    /// `work`, with a task moved from pending to running: it is about to run for sure.
    private func claimed(_ work: Work) -> Work {
        if case .task(let task) = work {
            let claimed = task.claim()
            assert(claimed, "a task is claimed once, before anyone else can see it")
        }
        return work
    }

    private func _blockingWaitForRoomInQueue() {
        queueHasRoom.wait(mutex)
    }

    /// Called by a queued task's ``ScheduledTask/cancel()``: it no longer waits for a thread.
    func queuedTaskWasCancelled() {
        mutex.withLock {
            state.queuedCount -= 1
            if state.blockedSubmitters > 0 { queueHasRoom.signal() }
        }
    }

    private func startThread(number: Int, firstWork: Work) {
        let threadName = "\(name) Thread\(number)"
        // The thread's closure lives as long as the thread, so it holds the first work only through
        // a handoff that the thread empties: a closure must not outlive its run.
        let handoff = FirstWork(firstWork)
        NamedThread.start(name: threadName) { [self] in
            // Logged by the new thread: a submission never calls out to a log delegate, so callers
            // (a ThrottledQueue among them) may submit while holding a lock of their own.
            Log.log(.threadPool, "\(name): Thread\(number) started")
            runWorker(Worker(number: number), firstWork: handoff)
        }
    }

    /// Carries a new thread's first work to it, once.
    private final class FirstWork: @unchecked Sendable {
        // Sendable: written before the thread starts (which orders it), then taken by that thread alone.
        private var work: Work?

        init(_ work: Work) {
            self.work = work
        }

        func take() -> Work? {
            work.take()
        }
    }

    /// The body of every pool thread: run a task, take the next, until retired or shut down.
    ///
    /// No variable holds work that has run: `perform` gets a temporary that dies with the call, so
    /// an idle thread keeps nothing alive (a `while let work` binding would live on, in debug
    /// builds, through the wait for the next task).
    private func runWorker(_ worker: Worker, firstWork: FirstWork) {
        var next = firstWork.take()
        while next != nil {
            perform(next.take()!)
            next = takeNextWork(for: worker)
        }
    }

    /// Runs claimed work on the calling thread.
    private func perform(_ work: Work) {
        switch work {
        case .closure(let closure):
            closure()
            completedCount.wrappingAdd(1, ordering: .relaxed)
        case .task(let task):
            task.runClaimed(countingInto: completedCount)
        case .job(let job):
            job.runSynchronously(on: asUnownedTaskExecutor())
            completedCount.wrappingAdd(1, ordering: .relaxed)
        }
    }

    /// Why a worker stopped asking for work.
    private enum Exit {
        case collected(idle: Duration)
        case shutDown
    }

    /// How long a worker that ran out of work watches for more before it sleeps.
    ///
    /// Waking a sleeping thread costs a system call for the submitter and several microseconds for
    /// the thread; a stream of short tasks would pay that per task. The spin is bounded, yields the
    /// core to any other runnable thread, and only one worker spins at a time, so an idle pool
    /// still settles into sleep at once.
    static let spinBeforeSleeping = Duration.microseconds(50)

    /// The next claimed work for `worker`, waiting while idle; `nil` when the thread should exit.
    private func takeNextWork(for worker: Worker) -> Work? {
        mutex.lock()
        if let work = popQueuedWork() {
            mutex.unlock()
            return work
        }
        if case .running = state.lifecycle, state.spinningWorkers == 0 {
            state.spinningWorkers += 1
            let nudge = spinnerNudge.load(ordering: .acquiring)
            mutex.unlock()
            _spinBrieflyForWork(since: nudge)
            mutex.lock()
            state.spinningWorkers -= 1
            if let work = popQueuedWork() {
                mutex.unlock()
                return work
            }
        }
        var exit = Exit.shutDown
        if case .running = state.lifecycle {
            let idleSince = MonotonicInstant.now()
            state.idleWorkers.append(worker)
            if let work = _blockingWaitForWork(worker, until: collection.retirement(idleSince: idleSince)) {
                mutex.unlock()
                return work
            }
            state.idleWorkers.removeAll { $0 === worker }
            if case .running = state.lifecycle { exit = .collected(idle: idleSince.duration(to: .now())) }
        }
        state.threads -= 1
        if state.isTerminated { threadsGone.broadcast() }
        mutex.unlock()
        switch exit {
        case .collected(let idle):
            Log.log(.threadPool, "\(name): collected \(name) Thread\(worker.number), idle for \(idle)")
        case .shutDown:
            Log.log(.threadPool, "\(name): Thread\(worker.number) exits, the pool is disposed")
        }
        return nil
    }

    /// The first queued work that was not cancelled, claimed. Mutex held.
    private func popQueuedWork() -> Work? {
        while let work = state.queue.popFirst() {
            if case .task(let task) = work, !task.claim() { continue }  // cancelled while queued
            state.queuedCount -= 1
            if state.blockedSubmitters > 0 { queueHasRoom.signal() }
            return work
        }
        return nil
    }

    /// Watches, without the mutex, for a nudge from a submitter or a shutdown, for a few microseconds.
    private func _spinBrieflyForWork(since nudge: Int) {
        let deadline = MonotonicInstant.now().advanced(by: Self.spinBeforeSleeping)
        while spinnerNudge.load(ordering: .acquiring) == nudge {
            sched_yield()
            if MonotonicInstant.now() >= deadline { return }
        }
    }

    /// Sleeps until `worker` is handed work (returned), the pool shuts down, or `retirement` comes
    /// (both `nil`). Called with the mutex held.
    private func _blockingWaitForWork(_ worker: Worker, until retirement: MonotonicInstant) -> Work? {
        while true {
            if let work = worker.assignment {
                worker.assignment = nil
                return work
            }
            guard case .running = state.lifecycle else { return nil }
            if !worker.wakeUp.wait(mutex, until: retirement), worker.assignment == nil {
                return nil
            }
        }
    }

    /// Wakes blocked submitters (they throw) and returns the idle workers to signal after unlocking.
    private func wakeForShutdown() -> [Worker] {
        queueHasRoom.broadcast()
        spinnerNudge.wrappingAdd(1, ordering: .releasing)
        if state.isTerminated { threadsGone.broadcast() }
        return state.idleWorkers
    }
}

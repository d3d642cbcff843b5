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
    /// When the queue is full and the policy is ``OverflowPolicy/block``, a call from one of this
    /// pool's own threads runs `work` on the calling thread instead of waiting: that thread is one
    /// of those the queue waits for, so waiting could never end.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` after ``dispose()``;
    ///   ``ThreadPoolError/queueFull(pool:limit:)`` when the queue is full and the policy is `.reject`;
    ///   ``ThreadPoolError/threadStartFailed(pool:errno:)`` when the pool has no thread and the
    ///   system refused to start one.
    public func execute(_ work: @escaping @Sendable () -> Void) throws {
        try submit(.closure(work))
    }

    /// Runs `work` on a pool thread and returns a handle to cancel it or wait for it.
    ///
    /// A full queue is handled as in ``execute(_:)``.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` after ``dispose()``;
    ///   ``ThreadPoolError/queueFull(pool:limit:)`` when the queue is full and the policy is `.reject`;
    ///   ``ThreadPoolError/threadStartFailed(pool:errno:)`` when the pool has no thread and the
    ///   system refused to start one.
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
    /// full queue get ``ThreadPoolError/disposed(pool:)``, and so do ``run(_:)`` callers still
    /// waiting for room in it. Calling it again does nothing.
    public func dispose() {
        let shutdown: Shutdown? = mutex.withLock {
            guard case .running = state.lifecycle else { return nil }
            state.lifecycle = .draining
            return beginShutdown()
        }
        guard let shutdown else { return }
        shutdown.carryOut()
        Log.log(.threadPool, "\(name): disposed; running the \(statistics.queuedTasks) queued tasks first")
    }

    /// Refuses new work and hands back every task that had not started.
    ///
    /// Tasks already running finish; then the threads exit. The returned tasks are cancelled
    /// (``ScheduledTask/isCancelled`` is `true`, waiters wake), in the order they were accepted;
    /// tasks submitted with ``execute(_:)`` come back as new handles. Queued Swift task jobs (the
    /// pool as a `TaskExecutor`) are not handed back but moved to the global concurrent executor,
    /// and ``run(_:)`` calls whose work had not started throw ``ThreadPoolError/disposed(pool:)``,
    /// so no Swift task is left suspended forever. Every closure handed back is released after the
    /// pool's lock is let go, so a capture's `deinit` may use the pool.
    ///
    /// - Returns: The tasks that will never run; empty if the pool was already stopped.
    public func disposeNow() -> [ScheduledTask] {
        var jobs: [UnownedJob] = []
        let result: (shutdown: Shutdown, handedBack: [ScheduledTask])? = mutex.withLock {
            if case .stopped = state.lifecycle { return nil }
            state.lifecycle = .stopped
            var handedBack: [ScheduledTask] = []
            var shutdown = beginShutdown()
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
                    guard task.handBack() else { continue }
                    state.queuedCount -= 1
                    if let abandon = task.takeAbandonHandler() {
                        shutdown.abandoned.append((task, abandon))
                    } else {
                        handedBack.append(task)
                    }
                }
            }
            return (shutdown, handedBack)
        }
        guard let result else { return [] }
        for task in result.handedBack { task.releaseHandedBack() }
        result.shutdown.carryOut()
        for job in jobs { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
        Log.log(.threadPool, "\(name): disposed now; handed back \(result.handedBack.count) tasks, moved \(jobs.count) Swift task jobs to the global executor")
        return result.handedBack
    }

    /// Blocks until a disposed pool's threads have all exited, or `timeout` has passed.
    ///
    /// A thread counts as exited once it has done its last piece of ThreadKit work (its log line
    /// included): after this returns `true`, the pool calls nothing of yours again.
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
    fileprivate final class Worker: @unchecked Sendable {
        // Sendable: `assignment` and the idle-list links are guarded by the pool's mutex.
        let number: Int
        let wakeUp = MonotonicCondition()
        var assignment: Work?
        /// Neighbours in the pool's ``IdleWorkers`` list while idle.
        fileprivate var earlier: Worker?
        fileprivate var later: Worker?
        fileprivate var isIdle = false

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
        /// ``run(_:)`` calls waiting for room in a full queue, oldest first: they suspend instead of
        /// blocking their thread, and enter the queue as room appears. Not counted in `queuedCount`.
        var waitingForRoom = RingBuffer<ScheduledTask>()
        /// Idle workers: the most recently idle is reused first, so the others age and retire.
        var idleWorkers = IdleWorkers()
        /// Workers briefly spinning for more work before they sleep (at most one at a time).
        var spinningWorkers = 0
        /// How long the next worker to run out of work spins, learned from the last sleeps.
        var spinBudget = SpinBudget(ceiling: ThreadPool.spinBeforeSleeping)
        var threads = 0
        var peakThreads = 0
        var threadsStarted = 0
        var blockedSubmitters = 0
        /// How long the next retry waits, after a thread start failed with work left unserved.
        var startRetryDelay = Duration.milliseconds(10)

        /// Disposed, with no thread left and nothing queued (work left by a failed thread start
        /// still waits for the retry that serves it).
        var isTerminated: Bool {
            if case .running = lifecycle { return false }
            return threads == 0 && queuedCount == 0
        }
    }

    /// Whether the queue holds `queueLimit` tasks. Mutex held.
    private var isQueueFull: Bool {
        guard let queueLimit else { return false }
        return state.queuedCount >= queueLimit
    }

    /// What a submission found it must do, decided under the lock and done outside it.
    private enum Placement {
        case handedToIdle(Worker)
        /// A new thread starts with the work; or, if older work waits in the queue (a thread
        /// failed to start earlier), the work is queued and the new thread starts with the queue.
        case newThread(number: Int, carriesWork: Bool)
        case queued
        case runOnCaller
        /// A ``run(_:)`` call waits, suspended, for room in the queue.
        case waitingForRoom
    }

    /// How a submission that finds the queue full waits for room.
    enum Waiting {
        /// The submitting thread blocks (``execute(_:)``, ``schedule(_:)``).
        case blockThread
        /// The submission joins `waitingForRoom` and the caller stays suspended (``run(_:)``).
        case suspend
    }

    /// Accepts `work`, or throws why not.
    ///
    /// - Parameters:
    ///   - ignoringLimit: Executor jobs skip `queueLimit`: blocking or refusing them would stall or
    ///     lose a Swift task.
    ///   - waiting: How to wait for room under ``OverflowPolicy/block``; a `.suspend` submission
    ///     must be a `.task` whose work resumes its caller.
    func submit(_ work: Work, ignoringLimit: Bool = false, waiting: Waiting = .blockThread) throws(ThreadPoolError) {
        let placement = try mutex.withLock { () throws(ThreadPoolError) -> Placement in
            try place(work, ignoringLimit: ignoringLimit, waiting: waiting)
        }
        switch placement {
        case .handedToIdle(let worker):
            worker.wakeUp.signal()
        case .newThread(let number, let carriesWork):
            try startThread(number: number, firstWork: carriesWork ? work : nil)
        case .queued, .waitingForRoom:
            break
        case .runOnCaller:
            perform(claimed(work))
        }
    }

    /// Decides where `work` goes. Mutex held; it may wait on `queueHasRoom`, releasing the mutex.
    private func place(_ work: Work, ignoringLimit: Bool, waiting: Waiting) throws(ThreadPoolError) -> Placement {
        while true {
            guard case .running = state.lifecycle else { throw .disposed(pool: name) }
            if state.queue.count < state.spinningWorkers {
                // A spinning worker takes it within microseconds, with no wakeup to pay for.
                enqueue(work)
                spinnerNudge.wrappingAdd(1, ordering: .releasing)
                return .queued
            }
            if let worker = state.idleWorkers.popMostRecent() {
                worker.assignment = claimed(work)
                return .handedToIdle(worker)
            }
            if state.threads < size {
                state.threads += 1
                state.threadsStarted += 1
                state.peakThreads = max(state.peakThreads, state.threads)
                let carriesWork = state.queue.isEmpty
                if !carriesWork { enqueue(work) }
                return .newThread(number: state.threadsStarted, carriesWork: carriesWork)
            }
            guard !ignoringLimit, isQueueFull, let limit = queueLimit else {
                enqueue(work)
                return .queued
            }
            switch (overflowPolicy, waiting) {
            case (.reject, _):
                throw .queueFull(pool: name, limit: limit)
            case (.runOnCaller, .blockThread):
                return .runOnCaller
            case (.block, .blockThread):
                // A thread of this pool waiting for its own queue could wait forever: the room it
                // waits for is made by threads like itself. So could one that holds a one-thread
                // pool (its thread is blocked waiting for the caller).
                let context = size == 1 ? SerialContext(.pool(self)) : nil
                if isCurrentThreadMember || context.map(ExecutionContexts.holds) == true { return .runOnCaller }
                state.blockedSubmitters += 1
                if let context {
                    ExecutionContexts.blocking(for: context) { _blockingWaitForRoomInQueue() }
                } else {
                    _blockingWaitForRoomInQueue()
                }
                state.blockedSubmitters -= 1
            case (.block, .suspend), (.runOnCaller, .suspend):
                guard case .task(let task) = work else { preconditionFailure("only a task can wait suspended") }
                state.waitingForRoom.append(task)
                return .waitingForRoom
            }
        }
    }

    /// Appends `work` to the queue. Mutex held.
    private func enqueue(_ work: Work) {
        state.queue.append(work)
        state.queuedCount += 1
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

    /// Called by a pending task's ``ScheduledTask/cancel()``: it no longer waits for a thread.
    func queuedTaskWasCancelled(_ task: ScheduledTask) {
        mutex.withLock {
            if !state.waitingForRoom.isEmpty, !state.waitingForRoom.removeAll(where: { $0 === task }).isEmpty {
                return  // a run(_:) call that was waiting for room, never counted in the queue
            }
            state.queuedCount -= 1
            queueGainedRoom()
        }
    }

    /// After a task left the queue: lets in a suspended ``run(_:)`` call, or wakes a blocked
    /// submitter. Mutex held.
    private func queueGainedRoom() {
        while !isQueueFull, let task = state.waitingForRoom.popFirst() {
            enqueue(.task(task))
        }
        if state.blockedSubmitters > 0, !isQueueFull { queueHasRoom.signal() }
    }

    /// Runs a queued `task` on the calling thread, if no thread has taken it: for a waiter that
    /// holds this one-thread pool, which only it can run the task for.
    ///
    /// - Returns: `false` if the task was taken or cancelled already.
    func runInline(_ task: ScheduledTask) -> Bool {
        guard task.claim() else { return false }
        mutex.withLock {
            // Its queue entry stays, to be skipped; it no longer counts as queued.
            state.queuedCount -= 1
            queueGainedRoom()
        }
        task.runClaimed(countingInto: completedCount)
        return true
    }

    /// Whether the calling thread is one of this pool's threads.
    var isCurrentThreadMember: Bool {
        Self.memberOf.current == Unmanaged.passUnretained(self).toOpaque()
    }

    /// Each pool thread's pool. The pool outlives its threads: each holds it until it exits.
    private static let memberOf = ThreadLocalPointer()

    /// Starts pool thread `number`, with its first work or else to take work from the queue.
    ///
    /// If the system refuses the thread, its bookkeeping is undone and `work` finds another place:
    /// an idle thread, the queue (a running thread will take it), or, when the pool has no thread
    /// at all, a thrown error. Nothing accepted is left without a thread to run it.
    private func startThread(number: Int, firstWork work: Work?) throws(ThreadPoolError) {
        let fullName = "\(name) Thread\(number)"
        // The thread's closure lives as long as the thread, so it holds the first work only through
        // a handoff that the thread empties: a closure must not outlive its run.
        let handoff = FirstWork(work.map(claimed))
        do {
            try NamedThread.start(
                name: fullName, kernelName: NamedThread.kernelName(for: name, keepingSuffix: " Thread\(number)")
            ) { [self] in
                Self.memberOf.current = Unmanaged.passUnretained(self).toOpaque()
                if size == 1 { ExecutionContexts.holdForever(SerialContext(.pool(self))) }
                // Logged by the new thread: a submission never calls out to a log delegate, so callers
                // (a ThrottledQueue among them) may submit while holding a lock of their own.
                Log.log(.threadPool, "\(name): Thread\(number) started")
                runWorker(Worker(number: number), firstWork: handoff)
            }
        } catch {
            _ = handoff.take()
            if case .task(let task) = work { task.unclaim() }
            try placeAfterFailedStart(of: number, work, errno: error.errno)
        }
    }

    /// After thread `number` could not start: undoes its count and finds `work` (if it carried
    /// some) another place: an idle thread, or the queue when other threads run (they take it).
    /// When no thread is left, `work` goes back to its submitter as a thrown error; work that other
    /// submitters queued meanwhile gets a thread from a retry on ``TimerThread/shared``, a little
    /// later each time the system refuses, so nothing accepted waits for a thread that never comes.
    ///
    /// The failure is logged from the timer thread, never from the submitter, which may hold a
    /// lock of its own (a ``ThrottledQueue`` submits under its mutex).
    private func placeAfterFailedStart(of number: Int, _ work: Work?, errno: Int32) throws(ThreadPoolError) {
        let (idle, retryAfter, refused) = mutex.withLock { () -> (Worker?, Duration?, Bool) in
            state.threads -= 1
            if let worker = state.idleWorkers.popMostRecent() {
                if let work { enqueue(work) }
                worker.assignment = popQueuedWork()
                return (worker, nil, false)
            }
            if state.threads > 0 {
                if let work { enqueue(work) }  // a running thread takes it
                return (nil, nil, false)
            }
            let retryAfter = state.queuedCount > 0 ? nextStartRetry() : nil
            if state.isTerminated { threadsGone.broadcast() }
            return (nil, retryAfter, work != nil)
        }
        idle?.wakeUp.signal()
        if Log.isEnabled(.threadPool) {
            let message = "\(name): Thread\(number) could not start (errno \(errno))"
            _ = try? TimerThread.shared.schedule(after: .zero) { Log.log(.threadPool, message) }
        }
        if let retryAfter {
            _ = try? TimerThread.shared.schedule(after: retryAfter) { [self] in retryThreadStart() }
        }
        if refused { throw .threadStartFailed(pool: name, errno: errno) }
    }

    /// The wait before the next retry to start a thread for stranded work: 10 ms, doubling up to
    /// 1 s while the system keeps refusing. Mutex held.
    private func nextStartRetry() -> Duration {
        let delay = state.startRetryDelay
        state.startRetryDelay = min(delay * 2, .seconds(1))
        return delay
    }

    /// Starts a thread for queued work that has none (its start failed), unless one exists by now.
    private func retryThreadStart() {
        let number: Int? = mutex.withLock {
            if case .stopped = state.lifecycle { return nil }
            guard state.threads == 0, state.queuedCount > 0 else { return nil }
            state.threads += 1
            state.threadsStarted += 1
            state.peakThreads = max(state.peakThreads, state.threads)
            return state.threadsStarted
        }
        guard let number else { return }
        try? startThread(number: number, firstWork: nil)  // it carries no work: nothing to refuse
    }

    /// Carries a new thread's first work to it, once.
    private final class FirstWork: @unchecked Sendable {
        // Sendable: written before the thread starts (which orders it), then taken by that thread alone.
        private var work: Work?

        init(_ work: Work?) {
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
        var next = firstWork.take() ?? takeNextWork(for: worker)
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

    /// The longest a worker that ran out of work watches for more before it sleeps.
    ///
    /// Waking a sleeping thread costs a system call for the submitter and several microseconds for
    /// the thread; a stream of short tasks would pay that per task. The spin is bounded, yields the
    /// core to any other runnable thread, and only one worker spins at a time, so an idle pool
    /// still settles into sleep at once. It shrinks to nothing while work keeps coming later than
    /// this (see ``SpinBudget``): sparse tasks do not pay a spin each.
    static let spinBeforeSleeping = Duration.microseconds(50)

    /// The next claimed work for `worker`, waiting while idle; `nil` when the thread should exit.
    private func takeNextWork(for worker: Worker) -> Work? {
        mutex.lock()
        if let work = popQueuedWork() {
            mutex.unlock()
            return work
        }
        if case .running = state.lifecycle, state.spinningWorkers == 0, state.spinBudget.current > .zero {
            state.spinningWorkers += 1
            let nudge = spinnerNudge.load(ordering: .acquiring)
            let budget = state.spinBudget.current
            mutex.unlock()
            _spinBrieflyForWork(since: nudge, for: budget)
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
            state.idleWorkers.add(worker)
            let work = _blockingWaitForWork(worker, until: collection.retirement(idleSince: idleSince))
            state.spinBudget.slept(for: idleSince.duration(to: .now()))
            if let work {
                mutex.unlock()
                return work
            }
            state.idleWorkers.remove(worker)
            if case .running = state.lifecycle { exit = .collected(idle: idleSince.duration(to: .now())) }
        }
        // The thread still counts while it logs its exit, so awaitTermination cannot return before.
        // Meanwhile it is neither idle nor spinning: work that arrives finds it in the queue.
        mutex.unlock()
        switch exit {
        case .collected(let idle):
            Log.log(.threadPool, "\(name): collected \(name) Thread\(worker.number), idle for \(idle)")
        case .shutDown:
            Log.log(.threadPool, "\(name): Thread\(worker.number) exits, the pool is disposed")
        }
        mutex.lock()
        if let work = popQueuedWork() {
            mutex.unlock()
            return work
        }
        state.threads -= 1
        if state.isTerminated { threadsGone.broadcast() }
        mutex.unlock()
        return nil
    }

    /// The first queued work that was not cancelled, claimed. Mutex held.
    private func popQueuedWork() -> Work? {
        while let work = state.queue.popFirst() {
            if case .task(let task) = work, !task.claim() { continue }  // cancelled while queued
            state.queuedCount -= 1
            queueGainedRoom()
            return work
        }
        return nil
    }

    /// Watches, without the mutex, for a nudge from a submitter or a shutdown, for a few microseconds.
    private func _spinBrieflyForWork(since nudge: Int, for budget: Duration) {
        _ = spinBriefly(for: budget) { spinnerNudge.load(ordering: .acquiring) != nudge }
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

    /// What a shutdown must do once the mutex is released: wake the idle threads, and fail the
    /// ``run(_:)`` calls still waiting for room in the queue.
    private struct Shutdown {
        var idle: [Worker]
        var abandoned: [(task: ScheduledTask, handler: @Sendable () -> Void)] = []

        func carryOut() {
            for worker in idle { worker.wakeUp.signal() }
            for (task, handler) in abandoned {
                handler()
                task.releaseHandedBack()
            }
        }
    }

    /// Starts a shutdown under the mutex: wakes blocked submitters (they throw) and spinners, and
    /// takes the suspended ``run(_:)`` calls out of `waitingForRoom`.
    private func beginShutdown() -> Shutdown {
        queueHasRoom.broadcast()
        spinnerNudge.wrappingAdd(1, ordering: .releasing)
        if state.isTerminated { threadsGone.broadcast() }
        var shutdown = Shutdown(idle: state.idleWorkers.all)
        // A task whose caller cancelled it a moment ago stays: its canceller takes it out.
        for task in state.waitingForRoom.removeAll(where: { $0.handBack() }) {
            if let handler = task.takeAbandonHandler() { shutdown.abandoned.append((task, handler)) }
        }
        return shutdown
    }
}

/// The idle workers of a pool, a doubly linked list in the order they went idle.
///
/// Reuse takes the most recent (so the others age and retire); retirement removes any, in O(1),
/// so a thousand threads retiring at one collector tick cost a thousand steps, not a million.
/// Guarded by the pool's mutex.
private struct IdleWorkers {
    private var oldest: ThreadPool.Worker?
    private var newest: ThreadPool.Worker?
    private(set) var count = 0

    mutating func add(_ worker: ThreadPool.Worker) {
        precondition(!worker.isIdle, "a worker is in the idle list once")
        worker.isIdle = true
        worker.earlier = newest
        newest?.later = worker
        newest = worker
        if oldest == nil { oldest = worker }
        count += 1
    }

    mutating func remove(_ worker: ThreadPool.Worker) {
        guard worker.isIdle else { return }
        worker.isIdle = false
        if let earlier = worker.earlier { earlier.later = worker.later } else { oldest = worker.later }
        if let later = worker.later { later.earlier = worker.earlier } else { newest = worker.earlier }
        worker.earlier = nil
        worker.later = nil
        count -= 1
    }

    mutating func popMostRecent() -> ThreadPool.Worker? {
        guard let worker = newest else { return nil }
        remove(worker)
        return worker
    }

    /// Every idle worker, oldest first.
    var all: [ThreadPool.Worker] {
        var result: [ThreadPool.Worker] = []
        var next = oldest
        while let worker = next {
            result.append(worker)
            next = worker.later
        }
        return result
    }
}

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
    // Sendable: `state` and every `Worker.assignment` are guarded by `mutex`; `intake` is a
    // lock-free queue; the other stored properties are constants or atomics.

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
    /// Tasks completed by threads that have exited, and by callers that ran a task themselves;
    /// each live worker counts its own (`Worker.completed`), so workers share no counter.
    private let completedCount = Atomic<Int>(0)
    /// The tasks waiting for a thread, in the order they were accepted. Submitters push and workers
    /// pop without the mutex; it is closed, under the mutex, when the pool is disposed.
    private let intake = IntakeQueue<Work>()
    /// Entries of `intake` whose task was cancelled or run by a waiter: the pop that meets one
    /// skips it. Counted apart so that submitting and taking share no counter.
    private let deadEntries = Atomic<Int>(0)
    /// The idle workers, sleeping and spinning, packed as an ``IdleWord``: a submitter reads both
    /// in one load. Changed with sequentially consistent operations, for the wake protocol (see
    /// ``push(_:mutexHeld:mayStartThread:)``).
    private let idleWord = Atomic<Int>(0)
    /// Threads alive (started and not exited): changed only under the mutex (``changeThreadCount``),
    /// read without it by submitters.
    private let threadCount = Atomic<Int>(0)
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
    public func execute(_ work: consuming @escaping @Sendable () -> Void) throws {
        try submit(.closure(consume work))
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
        let shutdown: (Shutdown, Helper)? = mutex.withLock {
            guard case .running = state.lifecycle else { return nil }
            state.lifecycle = .draining
            let shutdown = beginShutdown()
            // Queued work with no thread left to run it (the last start failed, and its retry has
            // not come yet): a thread starts for it now, so that the pool can end.
            let helper: Helper = threads == 0 && queuedCount > 0
                ? .start(number: countNewThread(), carriesWork: false) : .none
            return (shutdown, helper)
        }
        guard let (shutdown, helper) = shutdown else { return }
        shutdown.carryOut()
        try? help(helper)  // the thread carries no work: nothing to refuse
        Log.log(.threadPool, "\(name): disposed; running the \(statistics.queuedTasks) queued tasks first")
    }

    /// Refuses new work and hands back every task that had not started.
    ///
    /// Tasks already running finish; then the threads exit. The returned tasks are cancelled
    /// (``ScheduledTask/isCancelled`` is `true`, waiters wake), in the order they were accepted;
    /// tasks submitted with ``execute(_:)`` come back as new handles, and a
    /// ``DispatchMethod/after(_:on:)`` step that waited for room in a full queue comes back after
    /// them (its chain fails with `CancellationError`). Queued Swift task jobs (the
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
            // The intake is closed: these are all the tasks that will ever be queued, less those a
            // thread takes meanwhile (they start, and so are not handed back).
            while let work = intake.pop() {
                switch work {
                case .job(let job):
                    // A Swift task's job is not the caller's to take back; it must run somewhere.
                    jobs.append(job)
                case .closure(let closure):
                    let task = ScheduledTask(pool: nil, work: closure)
                    _ = task.handBack()
                    handedBack.append(task)
                case .task(let task):
                    // A task the user cancelled a moment ago is theirs already; they count it.
                    guard task.handBack() else {
                        deadEntries.wrappingSubtract(1, ordering: .relaxed)
                        continue
                    }
                    if let abandon = task.takeAbandonHandler() {
                        shutdown.abandoned.append((task, abandon))
                    } else {
                        handedBack.append(task)
                    }
                }
            }
            // Tasks that waited for room were accepted after every queued one.
            handedBack += shutdown.handedBack
            shutdown.handedBack = []
            // With no thread left (a start that failed), draining the intake may end the pool.
            if isTerminated { threadsGone.broadcast() }
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
            while !isTerminated {
                if MonotonicInstant.now() >= deadline { return false }
                threadsGone.wait(mutex, until: deadline)
            }
            return true
        }
    }

    /// A snapshot of the pool's threads and tasks.
    ///
    /// The thread counts are read under the pool's lock; the queued, idle and completed counts are
    /// atomics that submissions and workers change without it, so while tasks flow they may be a
    /// moment apart from the thread counts.
    public var statistics: Statistics {
        mutex.withLock {
            let idle = loadIdleWord()
            let idleThreads = min(threads, idle.sleepers + idle.spinners)
            return Statistics(
                threads: threads, idleThreads: idleThreads,
                busyThreads: threads - idleThreads, queuedTasks: queuedCount,
                completedTasks: state.liveWorkers.values.reduce(completedCount.load(ordering: .relaxed)) {
                    $0 + $1.completed.load(ordering: .relaxed)
                },
                peakThreads: state.peakThreads)
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

    /// One pool thread's mailbox: an idle worker sleeps on `wakeUp` until it is taken off the idle
    /// list, with an assignment or to look in the queue.
    fileprivate final class Worker: @unchecked Sendable {
        // Sendable: `assignment` and the idle-list links are guarded by the pool's mutex.
        let number: Int
        let wakeUp = MonotonicCondition()
        /// Tasks this thread completed; only it writes, others read for ``ThreadPool/statistics``.
        let completed = Atomic<Int>(0)
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
        /// ``run(_:)`` calls waiting for room in a full queue, oldest first: they suspend instead of
        /// blocking their thread, and enter the queue as room appears. Not counted in `queuedCount`.
        var waitingForRoom = RingBuffer<ScheduledTask>()
        /// Sleeping workers: the most recently idle is reused first, so the others age and retire.
        /// Counted in the idle word too: add and remove through the pool's helpers.
        var idleWorkers = IdleWorkers()
        /// Every worker that has started and not decided to exit, by thread number, for their
        /// completed counts.
        var liveWorkers: [Int: Worker] = [:]
        /// How long the next worker to run out of work spins, learned from the last sleeps.
        var spinBudget = SpinBudget(ceiling: ThreadPool.spinBeforeSleeping)
        /// The most threads at once, as ``Statistics/peakThreads`` shows it: counted when a thread
        /// is about to start, and taken back to ``peakStarted`` if its start fails.
        var peakThreads = 0
        /// The most threads that had really started, at once (`liveWorkers` at its largest).
        var peakStarted = 0
        /// Threads that have decided to exit and are logging it: no longer counted in `threads`
        /// (they take no more work), but the pool has not terminated until they are done.
        var exitingThreads = 0
        var threadsStarted = 0
        var blockedSubmitters = 0
        /// How long the next retry waits, after a thread start failed with work left unserved.
        var startRetryDelay = Duration.milliseconds(10)
    }

    /// Disposed, with no thread left (none exiting either) and nothing queued (work left by a
    /// failed thread start still waits for the thread that serves it). Mutex held.
    private var isTerminated: Bool {
        if case .running = state.lifecycle { return false }
        return threads == 0 && state.exitingThreads == 0 && queuedCount == 0
    }

    /// Accepted tasks waiting for a thread: the intake's entries less the dead ones. While
    /// workers race cancellers it may be off by the few entries in flight, never below zero.
    private var queuedCount: Int {
        max(0, intake.count - deadEntries.load(ordering: .relaxed))
    }

    /// Whether the queue holds `queueLimit` tasks. Mutex held.
    private var isQueueFull: Bool {
        guard let queueLimit else { return false }
        return queuedCount >= queueLimit
    }

    /// Which thread will take queued work, decided under the lock and acted on outside it.
    private enum Helper {
        /// A running or spinning thread will.
        case none
        /// A sleeping worker, taken off the idle list, which may carry an assignment.
        case wake(Worker)
        /// A new thread, that starts with the submitted work (`carriesWork`) or with the queue.
        case start(number: Int, carriesWork: Bool)
    }

    /// What a submission found it must do, decided under the lock and done outside it.
    private enum Placement {
        /// Handed to a worker, or queued, with a thread to wake or start.
        case helped(Helper)
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
    ///
    /// When every thread exists and the queue has no limit to check, the work is pushed onto the
    /// lock-free intake without the mutex (see ``push(_:mutexHeld:mayStartThread:)``). Otherwise
    /// the mutex decides: a free thread gets it, or the queue, or the policy for a full queue.
    func submit(_ work: consuming Work, ignoringLimit: Bool = false, waiting: Waiting = .blockThread) throws(ThreadPoolError) {
        if queueLimit == nil || ignoringLimit, threadCount.load(ordering: .relaxed) == size {
            let helper = try push(work, mutexHeld: false)
            try? help(helper)  // a thread it starts carries no work: nothing to refuse
            return
        }
        let placement = try mutex.withLock { () throws(ThreadPoolError) -> Placement in
            try place(work, ignoringLimit: ignoringLimit, waiting: waiting)
        }
        switch placement {
        case .helped(let helper):
            try help(helper, carrying: work)
        case .waitingForRoom:
            break
        case .runOnCaller:
            perform(claimed(work), countingInto: completedCount)
        }
    }

    /// Pushes `work` onto the intake and finds the thread that will take it. Every push into the
    /// intake goes through here; the caller carries out the returned helper (``help(_:carrying:)``)
    /// once it holds no lock.
    ///
    /// **Finding the thread.** With the mutex held, whether the spinning workers will take the work
    /// is decided before the push: once it is pushed, a spinner may take it and leave the count, and
    /// a look after the push would wake a sleeper for nothing. If they will not,
    /// ``helperForQueuedWork(mayStartThread:)`` wakes a sleeper or starts a thread. Without the mutex
    /// (`mutexHeld` false, only for ``submit``'s fast path, which runs once all `size` threads
    /// exist), the work is pushed first, then the idle word and the thread count are read, and the
    /// mutex is taken only when a sleeper must be woken or a thread has left meanwhile.
    ///
    /// **Why no task is left without a thread.** A thread that is counted in `threadCount` and is not
    /// asleep on the idle list looks in the intake again before it can sleep or exit: a busy thread
    /// when its task ends, a new or woken thread when it runs, a spinner before it sleeps, and a
    /// thread about to sleep or exit has its last look after it announced itself as a sleeper or
    /// uncounted itself (see ``takeNextWork(for:)``). So a pushed task needs a thread found for it
    /// only when a worker sleeps or fewer than `size` threads exist, and that is what the helper is:
    /// - With the mutex held, nothing of that changes meanwhile: a sleeper is woken, or a thread is
    ///   started while fewer than `size` exist; `.none` only when every thread is counted and awake
    ///   (so each looks again), or when the spinners counted before the push outnumber the tasks
    ///   already waiting (each looks again before it sleeps, under this mutex).
    /// - Without the mutex, the push and the loads of the idle word and the thread count after it
    ///   are sequentially consistent, as are a worker's announcement as a sleeper (or its uncounting
    ///   as it exits) and its last look after that. Of the two threads, whichever comes second sees
    ///   the other's first step: the worker's look finds the task, or this load finds the sleeper
    ///   (woken unless the spinners will take every waiting task) or the lower thread count (a
    ///   thread is started).
    ///
    /// **Who calls it**, and why each caller's helper is enough:
    /// - ``submit``'s fast path: without the mutex, as above.
    /// - ``place``, when the queue has room and no thread is free: every thread is counted, awake
    ///   and busy (or a spinner has work for it already), so `.none`, and one of them takes it.
    /// - ``handOver``, when a thread is free but older work waits or a spinner watches: the spinner
    ///   takes it, or a sleeper is woken, or a thread started.
    /// - ``queueGainedRoom``, which lets in ``run(_:)`` calls that waited for room: called by a worker
    ///   that took a task or skipped a cancelled one, a canceller, or a waiter that ran a task
    ///   inline. Each helper goes back to that caller, which carries it out after unlocking: a call
    ///   let in while the pool's only thread is going to sleep (or has exited) gets it woken (or a
    ///   new thread). A worker whose last look before it sleeps lets calls in does not sleep but
    ///   carries out their helpers and looks again; one whose last look before it exits does so
    ///   counted again if it found work (so the helpers never start a thread past `size`), or else
    ///   carries them out as it leaves.
    /// - ``placeAfterFailedStart``, with `mayStartThread` false (a start just failed, another would
    ///   too): only while other threads exist. A sleeper is woken, or a counted, awake thread takes
    ///   it; with no thread left, the work is not pushed but goes back to its submitter.
    ///
    /// - Throws: ``ThreadPoolError/disposed(pool:)`` when the intake is closed, which can only be
    ///   seen without the mutex: it closes under it, with the lifecycle, and the callers holding it
    ///   checked the lifecycle first. The refused work is dropped with no lock held.
    @inline(__always)
    private func push(_ work: consuming Work, mutexHeld: Bool, mayStartThread: Bool = true) throws(ThreadPoolError) -> Helper {
        if mutexHeld {
            let spinnersWillTakeIt = intake.count < loadIdleWord().spinners
            let refused = intake.push(work)
            precondition(refused == nil, "the intake closes only under the mutex, with the lifecycle")
            return spinnersWillTakeIt ? .none : helperForQueuedWork(mayStartThread: mayStartThread)
        }
        if let refused = intake.push(work) {
            _ = consume refused
            throw .disposed(pool: name)
        }
        // A sleeper is woken unless spinning workers will take all that waits. With sleepers, the
        // queue's length is read before the idle word is read again: a spinner still counted there
        // has not popped yet, so the length holds everything it will take.
        var idle = loadIdleWord()
        var sleeperNeeded = false
        if idle.sleepers > 0 {
            let waiting = intake.count
            idle = loadIdleWord()
            sleeperNeeded = idle.sleepers > 0 && waiting > idle.spinners
        }
        // A thread may have exited (or failed to start) since `threadCount` was read before the
        // push: it uncounts itself before its last look, so either that look found this work or
        // this second read sees the lower count.
        guard sleeperNeeded || threadCount.load(ordering: .sequentiallyConsistent) < size else { return .none }
        return mutex.withLock { helperForQueuedWork(mayStartThread: mayStartThread) }
    }

    /// Wakes the worker, or starts the thread, that `helper` names: after the mutex is let go.
    private func help(_ helper: Helper, carrying work: Work? = nil) throws(ThreadPoolError) {
        switch helper {
        case .none:
            break
        case .wake(let worker):
            worker.wakeUp.signal()
        case .start(let number, let carriesWork):
            try startThread(number: number, firstWork: carriesWork ? work : nil)
        }
    }

    /// Carries out helpers found for work that a worker or a canceller moved into the queue (see
    /// ``queueGainedRoom``): after the mutex is let go.
    private func help(_ helpers: [Helper]) {
        for helper in helpers { try? help(helper) }  // the threads carry no work: nothing to refuse
    }

    /// Decides where `work` goes. Mutex held; it may wait on `queueHasRoom`, releasing the mutex.
    private func place(_ work: Work, ignoringLimit: Bool, waiting: Waiting) throws(ThreadPoolError) -> Placement {
        while true {
            guard case .running = state.lifecycle else { throw .disposed(pool: name) }
            let spinners = loadIdleWord().spinners
            if intake.count < spinners || threads < size || !state.idleWorkers.isEmpty {
                // A thread is free: no limit applies, as the work waits for nothing.
                return .helped(try handOver(work))
            }
            guard !ignoringLimit, isQueueFull, let limit = queueLimit else {
                return .helped(try push(work, mutexHeld: true))
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

    /// Hands `work` to a sleeping worker or a new thread while nothing older waits and no worker
    /// spins, or else queues it; and finds the thread that will take it. Mutex held, lifecycle running.
    private func handOver(_ work: Work) throws(ThreadPoolError) -> Helper {
        if intake.count == 0, loadIdleWord().spinners == 0 {
            if let worker = popSleeper() {
                worker.assignment = claimed(work)
                return .wake(worker)
            }
            if threads < size {
                return .start(number: countNewThread(), carriesWork: true)
            }
        }
        return try push(work, mutexHeld: true)
    }

    /// The thread that will take the work just queued: a spinning worker (no wakeup to pay for) if
    /// one watches for each queued task; else a sleeping worker, woken; else a new thread, while
    /// the pool has fewer than `size` and `mayStartThread`. `.none` when every thread is busy: one
    /// will take it when it finishes. Mutex held.
    private func helperForQueuedWork(mayStartThread: Bool = true) -> Helper {
        let waiting = intake.count  // before the spinners, as in ``push(_:mutexHeld:mayStartThread:)``
        if waiting <= loadIdleWord().spinners { return .none }
        if let worker = popSleeper() { return .wake(worker) }
        guard mayStartThread, threads < size else { return .none }
        switch state.lifecycle {
        case .running:
            return .start(number: countNewThread(), carriesWork: false)
        case .draining where threads == 0:
            // Work pushed just before the intake closed, after the last thread left: it still runs.
            return .start(number: countNewThread(), carriesWork: false)
        case .draining, .stopped:
            return .none
        }
    }

    /// Threads alive. Mutex held (so the count is exact: only holders change it).
    private var threads: Int { threadCount.load(ordering: .relaxed) }

    /// Counts threads starting (`delta` 1) or exiting (-1). Mutex held. Sequentially consistent: a
    /// thread that exits uncounts itself before its last look in the intake (see ``submit``).
    private func changeThreadCount(by delta: Int) {
        threadCount.wrappingAdd(delta, ordering: .sequentiallyConsistent)
    }

    /// Counts a thread about to start, and returns its number. Mutex held.
    ///
    /// The peak counts it at once, so that the statistics never show more threads than their peak;
    /// if the start fails, ``placeAfterFailedStart`` takes the peak back.
    private func countNewThread() -> Int {
        changeThreadCount(by: 1)
        state.threadsStarted += 1
        state.peakThreads = max(state.peakThreads, threads)
        return state.threadsStarted
    }

    /// Records a thread that has started, before it logs or runs anything: it counts in the
    /// statistics' completed tasks, and in the peak of threads that really started. Mutex held.
    private func register(_ worker: Worker) {
        state.liveWorkers[worker.number] = worker
        state.peakStarted = max(state.peakStarted, state.liveWorkers.count)
        state.peakThreads = max(state.peakThreads, state.peakStarted)
    }

    /// The idle workers as they are now, sleeping and spinning (sequentially consistent).
    @inline(__always)
    func loadIdleWord() -> IdleWord {
        IdleWord(rawValue: idleWord.load(ordering: .sequentiallyConsistent))
    }

    /// Counts the calling worker as spinning. Called with the mutex held.
    private func addSpinner() {
        idleWord.wrappingAdd(IdleWord.oneSpinner, ordering: .sequentiallyConsistent)
    }

    /// Stops counting the calling worker as spinning.
    private func removeSpinner() {
        idleWord.wrappingSubtract(IdleWord.oneSpinner, ordering: .sequentiallyConsistent)
    }

    /// Puts `worker` on the idle list and announces it as a sleeper in the idle word. Mutex held.
    private func addSleeper(_ worker: Worker) {
        state.idleWorkers.add(worker)
        idleWord.wrappingAdd(IdleWord.oneSleeper, ordering: .sequentiallyConsistent)
    }

    /// Takes `worker` off the idle list, if it is on it. Mutex held.
    private func removeSleeper(_ worker: Worker) {
        guard worker.isIdle else { return }
        state.idleWorkers.remove(worker)
        idleWord.wrappingSubtract(IdleWord.oneSleeper, ordering: .sequentiallyConsistent)
    }

    /// Takes the most recently idle worker off the idle list. Mutex held.
    private func popSleeper() -> Worker? {
        guard let worker = state.idleWorkers.popMostRecent() else { return nil }
        idleWord.wrappingSubtract(IdleWord.oneSleeper, ordering: .sequentiallyConsistent)
        return worker
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
        let helpers = mutex.withLock { () -> [Helper] in
            if !state.waitingForRoom.isEmpty, !state.waitingForRoom.removeAll(where: { $0 === task }).isEmpty {
                return []  // a run(_:) call that was waiting for room, never counted in the queue
            }
            deadEntries.wrappingAdd(1, ordering: .relaxed)
            let helpers = queueGainedRoom()
            // A worker that skipped this entry before it was counted dead saw one task too many.
            if isTerminated { threadsGone.broadcast() }
            return helpers
        }
        help(helpers)
    }

    /// After a task left the queue: lets in suspended ``run(_:)`` calls while there is room, and
    /// wakes a blocked submitter. Mutex held.
    ///
    /// - Returns: The threads to wake or start for the calls let in (see
    ///   ``push(_:mutexHeld:mayStartThread:)``), for the caller to carry out once it has let go
    ///   of the mutex. Empty, without allocating, when no call waited.
    private func queueGainedRoom() -> [Helper] {
        var helpers: [Helper] = []
        // Once shut down, the tasks left waiting are their cancellers' to take out: the intake is closed.
        while case .running = state.lifecycle, !isQueueFull, let task = state.waitingForRoom.popFirst() {
            do {
                let helper = try push(.task(task), mutexHeld: true)
                if case .none = helper { continue }
                helpers.append(helper)
            } catch {
                preconditionFailure("the intake closes only under the mutex, with the lifecycle: \(error)")
            }
        }
        if state.blockedSubmitters > 0, !isQueueFull { queueHasRoom.signal() }
        return helpers
    }

    /// Runs a queued `task` on the calling thread, if no thread has taken it: for a waiter that
    /// holds this one-thread pool, which only it can run the task for.
    ///
    /// - Returns: `false` if the task was taken or cancelled already.
    func runInline(_ task: ScheduledTask) -> Bool {
        guard task.claim() else { return false }
        let helpers = mutex.withLock { () -> [Helper] in
            // Its queue entry stays, to be skipped; it no longer counts as queued.
            deadEntries.wrappingAdd(1, ordering: .relaxed)
            let helpers = queueGainedRoom()
            if isTerminated { threadsGone.broadcast() }
            return helpers
        }
        help(helpers)
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
                let worker = Worker(number: number)
                mutex.withLock { register(worker) }
                // Logged by the new thread: a submission never calls out to a log delegate, so callers
                // (a ThrottledQueue among them) may submit while holding a lock of their own.
                Log.log(.threadPool, "\(name): Thread\(number) started")
                runWorker(worker, firstWork: handoff)
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
        let (helper, retryAfter, refused) = try mutex.withLock { () throws(ThreadPoolError) -> (Helper, Duration?, Bool) in
            changeThreadCount(by: -1)
            // The thread never existed: the peak goes back to what really started, and the
            // threads still starting.
            state.peakThreads = max(state.peakStarted, threads)
            // A pool disposed meanwhile takes no more work: the submitter hears of the failure.
            let canQueue = work == nil || !intake.isClosed
            if canQueue, threads > 0 {
                // Another start would fail too: a sleeper is woken, or a running thread takes it.
                guard let work else { return (helperForQueuedWork(mayStartThread: false), nil, false) }
                return (try push(work, mutexHeld: true, mayStartThread: false), nil, false)
            }
            let retryAfter = queuedCount > 0 ? nextStartRetry() : nil
            if isTerminated { threadsGone.broadcast() }
            return (.none, retryAfter, work != nil)
        }
        try? help(helper)  // it starts no thread
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
            guard threads == 0, queuedCount > 0 else { return nil }
            return countNewThread()
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
            perform(next.take()!, countingInto: worker.completed)
            next = takeNextWork(for: worker)
        }
    }

    /// Runs claimed work on the calling thread, and counts it into `completed`.
    private func perform(_ work: Work, countingInto completed: borrowing Atomic<Int>) {
        switch work {
        case .closure(let closure):
            closure()
            completed.wrappingAdd(1, ordering: .relaxed)
        case .task(let task):
            task.runClaimed(countingInto: completed)
        case .job(let job):
            job.runSynchronously(on: asUnownedTaskExecutor())
            completed.wrappingAdd(1, ordering: .relaxed)
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
    ///
    /// Work is popped from the intake without the mutex. Only a worker that found the intake
    /// empty takes the mutex: to spin (one worker at a time), then to sleep. Before it sleeps it
    /// announces itself in the idle word and looks in the intake once more; before it exits it
    /// uncounts itself and looks once more (see ``push(_:mutexHeld:mayStartThread:)``). It logs
    /// its exit only once that last look has found nothing: a thread that logged "collected" never
    /// runs another task.
    private func takeNextWork(for worker: Worker) -> Work? {
        while true {
            if let work = takeQueuedWork() { return work }
            mutex.lock()
            if case .running = state.lifecycle, state.spinBudget.current > .zero, loadIdleWord().spinners == 0 {
                let budget = state.spinBudget.current
                addSpinner()
                mutex.unlock()
                if _spinBrieflyForWork(for: budget) {
                    // No longer idle before it looks: a submitter that still counts it leaves its
                    // work to it, and it looks after this, so it finds that work or a sleeper is woken.
                    removeSpinner()
                    continue
                }
                // From spinning to sleeping under the mutex, so that a submitter holding it never
                // sees this thread as neither idle nor busy (and starts another thread instead).
                mutex.lock()
                removeSpinner()
            }
            addSleeper(worker)
            var helpers: [Helper] = []
            let found = takeQueuedWorkLocked(helpers: &helpers)
            if found != nil || !helpers.isEmpty {
                // Work, or run() calls let in whose threads must be woken or started: not while
                // holding the mutex, so this thread does not sleep on it but looks again after.
                removeSleeper(worker)
                mutex.unlock()
                help(helpers)
                if let found { return found }
                continue
            }
            var exit = Exit.shutDown
            if case .running = state.lifecycle {
                let idleSince = MonotonicInstant.now()
                let outcome = _blockingWaitForWork(worker, until: collection.retirement(idleSince: idleSince))
                state.spinBudget.slept(for: idleSince.duration(to: .now()))
                switch outcome {
                case .assigned(let work):
                    mutex.unlock()
                    return work
                case .woken:
                    mutex.unlock()
                    continue
                case .timedOut, .shutDown:
                    break
                }
                if case .running = state.lifecycle { exit = .collected(idle: idleSince.duration(to: .now())) }
            }
            removeSleeper(worker)
            // Uncounted before it looks once more, as a sleeper announces itself: a submitter that
            // still counted this thread (and so started none) queued work that this look finds.
            changeThreadCount(by: -1)
            let (work, skipped) = popQueuedWork()
            // A thread that stays counts again before run() calls are let in, so that the threads
            // found for them never make more than `size`.
            if work != nil { changeThreadCount(by: 1) }
            if work != nil || skipped { helpers += queueGainedRoom() }
            if let work {
                mutex.unlock()
                help(helpers)
                return work
            }
            // It exits. It takes no more work, but the pool has not terminated until it has logged
            // its exit, so that awaitTermination cannot return before. The calls its look let in
            // get their threads (a new one, in its place, if it was the last).
            state.liveWorkers[worker.number] = nil
            completedCount.wrappingAdd(worker.completed.load(ordering: .relaxed), ordering: .relaxed)
            state.exitingThreads += 1
            mutex.unlock()
            help(helpers)
            switch exit {
            case .collected(let idle):
                Log.log(.threadPool, "\(name): collected \(name) Thread\(worker.number), idle for \(idle)")
            case .shutDown:
                Log.log(.threadPool, "\(name): Thread\(worker.number) exits, the pool is disposed")
            }
            mutex.withLock {
                state.exitingThreads -= 1
                if isTerminated { threadsGone.broadcast() }
            }
            return nil
        }
    }

    /// The first queued work that was not cancelled, claimed; without the mutex.
    private func takeQueuedWork() -> Work? {
        let (work, skipped) = popQueuedWork()
        if work != nil || skipped, queueLimit != nil { help(mutex.withLock { queueGainedRoom() }) }
        return work
    }

    /// The first queued work that was not cancelled, claimed. Mutex held; the threads to wake or
    /// start for ``run(_:)`` calls let into the queue are added to `helpers`, for the caller to
    /// carry out once it has let go of the mutex.
    private func takeQueuedWorkLocked(helpers: inout [Helper]) -> Work? {
        let (work, skipped) = popQueuedWork()
        if work != nil || skipped { helpers += queueGainedRoom() }
        return work
    }

    /// Pops queued work until one is not cancelled, and claims it.
    ///
    /// - Returns: The work, and whether entries of cancelled tasks were skipped on the way. After
    ///   either, the caller looks for room in the queue (``queueGainedRoom``) under the mutex. For
    ///   a skipped entry that matters too: the canceller's own look reads the queue's length and
    ///   its dead entries one after the other, and this pop may fall between the two reads (it saw
    ///   the entry still there, then no longer dead), so the canceller can find the queue full that
    ///   this pop has just emptied. The look after the pop, under the mutex, sees both changes.
    private func popQueuedWork() -> (work: Work?, skipped: Bool) {
        var skipped = false
        while let work = intake.pop() {
            if case .task(let task) = work, !task.claim() {
                deadEntries.wrappingSubtract(1, ordering: .relaxed)  // cancelled or run while queued
                skipped = true
                continue
            }
            return (work, skipped)
        }
        return (nil, skipped)
    }

    /// Watches the intake, without the mutex, for a few microseconds.
    ///
    /// - Returns: Whether work appeared.
    private func _spinBrieflyForWork(for budget: Duration) -> Bool {
        spinBriefly(for: budget) { !intake.isEmpty }
    }

    /// How a sleeping worker's wait ended.
    private enum WaitOutcome {
        /// A submitter handed it work.
        case assigned(Work)
        /// It was taken off the idle list to look in the queue.
        case woken
        case timedOut
        case shutDown
    }

    /// Sleeps until `worker` is taken off the idle list (with or without an assignment), the pool
    /// shuts down, or `retirement` comes. Called with the mutex held and `worker` on the idle list.
    private func _blockingWaitForWork(_ worker: Worker, until retirement: MonotonicInstant) -> WaitOutcome {
        while true {
            if !worker.isIdle {
                guard let work = worker.assignment.take() else { return .woken }
                return .assigned(work)
            }
            guard case .running = state.lifecycle else { return .shutDown }
            if !worker.wakeUp.wait(mutex, until: retirement), worker.isIdle {
                return .timedOut
            }
        }
    }

    /// What a shutdown must do once the mutex is released: wake the idle threads, fail the
    /// ``run(_:)`` calls still waiting for room in the queue, and release the other tasks that
    /// waited for room.
    private struct Shutdown {
        var idle: [Worker]
        var abandoned: [(task: ScheduledTask, handler: @Sendable () -> Void)] = []
        /// Tasks that waited for room with no abandon handler (a ``DispatchMethod/after(_:on:)``
        /// step, see ``DispatchTarget/submitWithoutWaiting(_:)``), handed back: `disposeNow()`
        /// returns them with the queued tasks; either way their work is released here, after
        /// unlocking, since releasing it may fail a chain and so call its followers.
        var handedBack: [ScheduledTask] = []

        func carryOut() {
            for worker in idle { worker.wakeUp.signal() }
            for (task, handler) in abandoned {
                handler()
                task.releaseHandedBack()
            }
            for task in handedBack { task.releaseHandedBack() }
        }
    }

    /// Starts a shutdown under the mutex: closes the intake, wakes blocked submitters (they throw),
    /// and takes the suspended ``run(_:)`` calls out of `waitingForRoom`.
    private func beginShutdown() -> Shutdown {
        intake.close()
        queueHasRoom.broadcast()
        if isTerminated { threadsGone.broadcast() }
        var shutdown = Shutdown(idle: state.idleWorkers.all)
        // A task whose caller cancelled it a moment ago stays: its canceller takes it out.
        for task in state.waitingForRoom.removeAll(where: { $0.handBack() }) {
            if let handler = task.takeAbandonHandler() {
                shutdown.abandoned.append((task, handler))
            } else {
                shutdown.handedBack.append(task)
            }
        }
        return shutdown
    }
}

extension ThreadPool {
    /// The pool's idle workers in one word, so that a submitter reads them with one load: the
    /// sleeping workers (on the idle list, woken only by a signal) in the upper half, the spinning
    /// ones (watching the intake for a moment, one at a time) in the lower half.
    ///
    /// Each half counts up to 2³² − 1 workers (65,535 on a 32-bit platform).
    struct IdleWord {
        /// The word as stored.
        let rawValue: Int

        /// What one sleeping worker adds to the word.
        static let oneSleeper = 1 << (Int.bitWidth / 2)
        /// What one spinning worker adds to the word.
        static let oneSpinner = 1

        /// The workers asleep on the idle list.
        var sleepers: Int { rawValue / Self.oneSleeper }
        /// The workers spinning before they sleep.
        var spinners: Int { rawValue % Self.oneSleeper }
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

    var isEmpty: Bool { count == 0 }

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

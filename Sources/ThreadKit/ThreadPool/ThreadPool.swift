import Synchronization

/// A fixed-size pool of named threads that recycles idle threads and collects them when idle.
///
/// Threads are made lazily, one at a time, only when no thread is idle, and never more than `size`
/// of them (a pool made with `minimumThreads` starts that many at once and keeps them). Tasks
/// start in the order they were accepted; while fewer than `size` tasks run, none waits in the
/// queue. An idle thread sleeps on its own futex word (on Linux; a condition elsewhere), never
/// polling, takes the next task handed to it, and is retired by the collector once it has been
/// idle for `keepAlive` (never below `minimumThreads`).
///
/// ```swift
/// let pool = ThreadPool(name: "Images", size: 4)
/// try pool.execute { resize(image) }
/// let task = try pool.schedule { upload(file) }
/// task.wait()
/// let thumbnail = try await pool.run { render(page) }
/// pool.dispose()
/// ```
///
/// **Arguments.** `size` and `queueLimit` below 1, a negative `keepAlive` and a `collectionInterval`
/// of zero or less cannot work: each stops with a precondition failure naming the pool, the argument
/// and the value (`ThreadPool 'Images': size must be at least 1, got 0`). Every other value works:
/// `Int.max` threads or queued tasks is no limit in practice (threads are made only when needed), a
/// zero `keepAlive` retires an idle thread at the next collection, and a duration however far out
/// (`.seconds(Int64.max)` and beyond) means "never". A zero timeout of ``awaitTermination(timeout:)``
/// or ``ScheduledTask/wait(timeout:)`` is a time already up: the call checks once and returns
/// without waiting, as GCD's and Java's timed waits do; a negative one stops with a precondition
/// failure naming the pool (for `awaitTermination`), the timeout and the value. (ThreadKit's design rule:
/// a negative duration means "now" only for a pause or a `Retry-After` date.)
public final class ThreadPool: TaskExecutor, @unchecked Sendable {
    // Sendable: the state machine, `terminationWaiters` and every `Worker.assignment` are guarded
    // by `mutex`; `intake` is a lock-free queue; the other stored properties are constants or atomics.

    /// What a submission does when the queue already holds `queueLimit` tasks.
    public enum OverflowPolicy: Sendable, Equatable {
        /// The submitting thread waits until the queue has room (or the pool is disposed).
        case block
        /// The submission throws ``ThreadPoolError/queueFull(pool:limit:)``.
        case reject
        /// The submitting thread runs the task itself, at once.
        case runOnCaller
    }

    /// What the pool was made with, in one value that the state machine shares.
    let configuration: Configuration

    /// The pool's name, used for its threads (`"<name> Thread<N>"`), its log lines and its errors.
    public var name: String { configuration.name }
    /// The most threads, and so the most tasks running at once.
    public var size: Int { configuration.size }
    /// The threads started with the pool and kept alive past `keepAlive`: the collector never
    /// retires a thread while no more than this many exist.
    public var minimumThreads: Int { configuration.minimumThreads }
    /// How long an idle thread is kept for reuse before the collector may retire it.
    public var keepAlive: Duration { configuration.keepAlive }
    /// How often the collector looks for threads idle for `keepAlive`.
    public var collectionInterval: Duration { configuration.collectionInterval }
    /// The most tasks that may wait for a thread, or `nil` for no limit.
    public var queueLimit: Int? { configuration.queueLimit }
    /// What a submission does when the queue is full.
    public var overflowPolicy: OverflowPolicy { configuration.overflowPolicy }

    /// Guards the state machine and the workers' assignments.
    let mutex = PThreadMutex()
    /// Signalled when a queued task leaves the queue while submitters are blocked on a full queue.
    let queueHasRoom = MonotonicCondition()
    /// Broadcast when the last thread of a disposed pool exits (see ``announceTermination()``).
    let threadsGone = MonotonicCondition()
    /// The tasks suspended in ``awaitTermination()``, resumed when the last thread of a disposed
    /// pool exits. Guarded by `mutex`.
    var terminationWaiters = EventWaiters()
    /// Tasks completed by threads that have exited, and by callers that ran a task themselves;
    /// each live worker counts its own (`Worker.completed`), so workers share no counter.
    let completedCount = Atomic<Int>(0)
    /// The tasks waiting for a thread, in the order they were accepted. Submitters push and workers
    /// pop without the mutex; it is closed, under the mutex, when the pool is disposed.
    let intake = IntakeQueue<Work>()
    /// Entries of `intake` whose task was cancelled or run by a waiter: the pop that meets one
    /// skips it. Counted apart so that submitting and taking share no counter.
    let deadEntries = Atomic<Int>(0)
    /// The idle workers, sleeping and spinning, as submitters read them without the mutex.
    let idleWorkers = IdleWorkers()
    /// The state machine's ``StateMachine/threads``, published for submitters that read it
    /// without the mutex (see ``decide(_:)``).
    let threadCount = Atomic<Int>(0)
    /// The state machine, guarded by `mutex`. It lives behind a pointer so that the hot paths do
    /// not pay for Swift's dynamic exclusivity checks on a class's stored property: the mutex
    /// already guarantees exclusive access. Changed only through ``decide(_:)``.
    let machineStorage: UnsafeMutablePointer<Machine>

    typealias Machine = StateMachine<Worker, ScheduledTask>

    /// The state machine, to read. Mutex held; changes go through ``decide(_:)``.
    var machine: Machine {
        unsafeAddress { UnsafePointer(machineStorage) }
    }

    /// Creates a pool; with the default `minimumThreads` of 0, no thread starts until the first
    /// task arrives.
    ///
    /// A pool whose first tasks must not wait for a thread to start passes `minimumThreads`: that
    /// many threads start at once, here, and the collector never retires one while no more than
    /// that many exist (threads beyond them come and go as without it). ``dispose()`` and
    /// ``disposeNow()`` still end them all, and such a pool must be disposed: its kept threads
    /// hold it and never exit by themselves, so one that is only let go of stays, with them, until
    /// the process ends (Java's rule for core threads; with the default 0, every idle thread
    /// retires and a pool let go of ends by itself). A thread the system refuses to start here is
    /// not an error: the pool makes it later, when a task needs it, as it does for any other thread.
    ///
    /// - Parameters:
    ///   - name: Names the threads, log lines and errors.
    ///   - size: The most threads and running tasks; at least 1.
    ///   - minimumThreads: Threads started now and kept while idle; from 0 (the default: threads
    ///     only when needed) up to `size`.
    ///   - keepAlive: How long an idle thread stays to be reused; not negative.
    ///   - collectionInterval: How often idle threads are checked for retirement; more than zero.
    ///   - queueLimit: The most tasks waiting for a thread, at least 1, or `nil` for no limit.
    ///   - whenFull: What a submission does when `queueLimit` tasks are waiting.
    public convenience init(
        name: String, size: Int, minimumThreads: Int = 0,
        keepAlive: Duration = .seconds(10),
        collectionInterval: Duration = .seconds(15),
        queueLimit: Int? = nil, whenFull: OverflowPolicy = .block
    ) {
        self.init(
            name: name, size: size, minimumThreads: minimumThreads, keepAlive: keepAlive,
            collectionInterval: collectionInterval, queueLimit: queueLimit, whenFull: whenFull, isListed: true)
    }

    /// A pool; with `isListed` false, one that ``Diagnostics`` does not list: a throttled queue's
    /// own pool, whose thread the queue lists as its worker.
    init(
        name: String, size: Int, minimumThreads: Int = 0, keepAlive: Duration = .seconds(10),
        collectionInterval: Duration = .seconds(15), queueLimit: Int? = nil, whenFull: OverflowPolicy = .block,
        isListed: Bool
    ) {
        precondition(size >= 1, "ThreadPool '\(name)'.init: size must be at least 1, got \(size)")
        precondition(
            (0...size).contains(minimumThreads),
            "ThreadPool '\(name)'.init: minimumThreads must be in 0...size (0...\(size)), got \(minimumThreads)")
        precondition(keepAlive >= .zero, "ThreadPool '\(name)'.init: keepAlive must not be negative, got \(keepAlive)")
        precondition(
            collectionInterval > .zero,
            "ThreadPool '\(name)'.init: collectionInterval must be more than zero, got \(collectionInterval)")
        if let queueLimit {
            precondition(queueLimit >= 1, "ThreadPool '\(name)'.init: queueLimit must be at least 1, got \(queueLimit)")
        }
        configuration = Configuration(
            name: name, size: size, minimumThreads: minimumThreads, keepAlive: keepAlive,
            collectionInterval: collectionInterval, queueLimit: queueLimit, overflowPolicy: whenFull)
        machineStorage = .allocate(capacity: 1)
        machineStorage.initialize(to: Machine(configuration, createdAt: .now()))
        if isListed { DiagnosticsRegistry.add(self) }
        if minimumThreads > 0 {
            for number in mutex.withLock({ decide { $0.startMinimumThreads() } }) {
                try? startThread(number, firstWork: nil)  // it carries no work: nothing to refuse
            }
        }
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(self))
        machineStorage.deinitialize(count: 1)
        machineStorage.deallocate()
    }

    // MARK: - Submitting work

    /// Runs `work` on a pool thread, with no handle: the fastest way in.
    ///
    /// When the queue is full and the policy is ``OverflowPolicy/block``, a call from one of this
    /// pool's own threads runs `work` on the calling thread instead of waiting: that thread is one
    /// of those the queue waits for, so waiting could never end.
    ///
    /// `work` stays `@Sendable` (``run(_:)``'s is `sending`): nobody waits for it, and whichever
    /// thread comes to it runs or drops it — a pool thread, the submitter (``OverflowPolicy/runOnCaller``),
    /// or the thread that calls ``disposeNow()`` — so what it captures must be safe to share.
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
    /// A full queue is handled as in ``execute(_:)``. `work` stays `@Sendable`, as there: the
    /// returned handle, which any thread may hold, keeps it until it runs, and a thread that waits
    /// on a one-thread pool's task may run it itself, while ``ScheduledTask/cancel()`` releases it
    /// on the cancelling thread.
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

    /// A snapshot of the pool's threads and tasks.
    ///
    /// The thread counts are read under the pool's lock; the queued, idle and completed counts are
    /// atomics that submissions and workers change without it, so while tasks flow they may be a
    /// moment apart from the thread counts.
    public var statistics: Statistics {
        mutex.withLock {
            let threads = machine.threads
            let idle = idleWorkers.current
            let idleThreads = min(threads, idle.sleepers + idle.spinners)
            return Statistics(
                threads: threads, idleThreads: idleThreads,
                busyThreads: threads - idleThreads, queuedTasks: readIntake().queued,
                completedTasks: machine.workers.all.reduce(completedCount.load(ordering: .relaxed)) {
                    $0 + $1.completed.load(ordering: .relaxed)
                },
                peakThreads: machine.peakThreads)
        }
    }
}

extension ThreadPool {
    /// What a pool was made with (see the public properties of the same names).
    struct Configuration: Sendable, Equatable {
        var name: String
        var size: Int
        /// Threads started with the pool and never retired while no more exist.
        var minimumThreads = 0
        /// When idle threads retire.
        var keepAlive, collectionInterval: Duration
        /// The bound on the queue, and what a submission to a full one does.
        var queueLimit: Int?
        var overflowPolicy: OverflowPolicy
    }

    /// A unit of accepted work. A `.task` in the queue may have been cancelled meanwhile.
    enum Work: Sendable {
        case closure(@Sendable () -> Void)
        case task(ScheduledTask)
        /// A Swift concurrency job, from the pool's `TaskExecutor` side: run, never handed back.
        case job(UnownedJob)
    }
}

import Synchronization

/// One named thread that runs work in FIFO order, for thread-affine resources and as an actor's executor.
///
/// Closures (``execute(_:)``, ``sync(_:)``, ``run(_:)``) and Swift jobs (an actor whose executor it
/// is, or tasks that prefer it) share one queue and run one at a time, in the order they arrived, on
/// the one thread, whose identity never changes: a SQLite connection or a C library with
/// thread-local state can live on it. The thread starts at once and lives until disposed; while it
/// has nothing to do, or is paused, it sleeps on a condition and uses no CPU.
///
/// ```swift
/// let db = DedicatedThread(name: "SQLite")
/// try db.execute { connection.vacuum() }
/// let count = db.sync { connection.count() }
/// actor Store {
///     let thread = DedicatedThread(name: "Store")
///     nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
/// }
/// ```
public final class DedicatedThread: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // Sendable: `state` is guarded by `mutex`, `batch` by `batchMutex` (taken inside `mutex` when
    // both are needed); `workNudge` and each `SyncRequest.phase` are atomics; the rest is constant.

    /// The thread's name, for `Thread.current.name` (the kernel keeps its first 15 bytes), log
    /// records and errors.
    public let name: String

    private let mutex = PThreadMutex()
    /// Signalled for the sleeping thread: work arrived, a pause ended, or a dispose.
    private let workArrived = MonotonicCondition()
    /// Broadcast when a `sync` item whose caller sleeps has run, and when the thread has exited.
    private let progress = MonotonicCondition()
    private var state = State()
    /// The items the thread took out of the queue in one go, to run one by one. Submitters never
    /// take this lock, so the thread and its submitters meet on `mutex` once per batch, not once
    /// per item; ``pause()``, ``pendingCount`` and ``disposeNow()`` look at both.
    private let batchMutex = PThreadMutex()
    private var batch = Batch()
    /// Bumped by a submitter that finds the thread spinning for work: it need not be woken.
    private let workNudge = Atomic<Int>(0)

    /// Creates the thread and starts it at once.
    ///
    /// If the system refuses to start a thread, the failure is kept: ``execute(_:)`` and ``run(_:)``
    /// throw ``DedicatedThreadError/threadStartFailed(name:errno:)``, and ``sync(_:)`` or a Swift
    /// job stops the process with a message naming the thread.
    ///
    /// - Parameter name: Names the thread, its log lines and errors.
    public init(name: String) {
        self.name = name
        do {
            try NamedThread.start(name: name) { [self] in runThread() }
        } catch {
            state.lifecycle = .failedToStart(errno: error.errno)
            state.hasExited = true
        }
    }

    // MARK: - Submitting work

    /// Runs `work` on the thread, after everything submitted before it.
    ///
    /// - Throws: ``DedicatedThreadError/disposed(name:)`` after ``dispose()`` or ``disposeNow()``.
    public func execute(_ work: @escaping @Sendable () -> Void) throws {
        try submit(.closure(work, onDrop: nil))
    }

    /// Runs `work` on the thread and returns its result, blocking the calling thread until then.
    ///
    /// Called on the thread itself, it runs `work` at once, inline: waiting for itself could never
    /// end. Called from elsewhere, `work` runs after everything submitted before it. The thread
    /// must be running: a `sync` on a disposed thread, or while the thread is paused and nothing
    /// will resume it, cannot return. The first stops the process with a message naming the thread.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw.
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        try sync(work, refused: { preconditionFailure("sync on DedicatedThread '\(name)' cannot run: \($0)") },
                 rethrowing: { throw $0 })
    }

    /// Like ``sync(_:)``, but a refusal (a disposed thread, or one that never started) is thrown.
    func syncOrThrow<T>(_ work: () throws -> T) throws -> T {
        try sync(work, refused: { throw $0 }, rethrowing: { throw $0 })
    }

    /// Runs `work` on the thread and suspends (without blocking a thread) until it has run.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, or ``DedicatedThreadError/disposed(name:)`` if the thread was
    ///   disposed before it ran (``disposeNow()`` drops it; later calls are refused).
    public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let item = Item.closure(
                { continuation.resume(with: Result { try work() }) },
                onDrop: { [name] in continuation.resume(throwing: DedicatedThreadError.disposed(name: name)) })
            do {
                try submit(item)
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }

    /// Runs a Swift concurrency job on the thread, in FIFO order with the closures.
    ///
    /// This makes the thread an actor's executor (`thread.asUnownedSerialExecutor()`) and a task
    /// executor (`withTaskExecutorPreference(thread) { … }`). A job cannot move elsewhere without
    /// breaking an actor's isolation, so a job that arrives after ``dispose()`` stops the process
    /// with a message naming the thread.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        do {
            try submit(.job(job))
        } catch {
            preconditionFailure("actor used after its DedicatedThread '\(name)' was disposed: \(error)")
        }
    }

    /// Stops the process unless called on this thread: an actor's isolation check.
    public func checkIsolated() {
        precondition(isCurrent, "expected to run on DedicatedThread '\(name)', but running on thread '\(NamedThread.currentName())'")
    }

    // MARK: - Controlling

    /// After the item running now, starts nothing until ``resume()``. Work may still be submitted;
    /// it waits in the queue while the thread sleeps. A disposed thread ignores it.
    public func pause() {
        mutex.withLock {
            // A disposed thread drains its queue; a pause now would strand it.
            guard case .running = state.lifecycle else { return }
            setPaused(true)
        }
    }

    /// Lets a paused thread take the next item again.
    public func resume() {
        mutex.withLock {
            setPaused(false)
            wakeThread()
        }
    }

    /// Whether the thread is paused.
    public var isPaused: Bool {
        mutex.withLock { state.isPaused }
    }

    /// Whether the calling thread is this thread.
    public var isCurrent: Bool {
        Self.current.current == Unmanaged.passUnretained(self).toOpaque()
    }

    /// Stops the process unless called on this thread, with a message naming it and the caller.
    public func preconditionIsCurrent(file: StaticString = #fileID, line: UInt = #line) {
        precondition(
            isCurrent, "expected to run on DedicatedThread '\(name)', but running on thread '\(NamedThread.currentName())'",
            file: file, line: line)
    }

    /// Refuses new work, runs everything already queued, then lets the thread exit.
    ///
    /// A paused thread resumes to do so. Returns at once; ``awaitTermination(timeout:)`` waits for
    /// the end. Calling it again does nothing.
    public func dispose() {
        mutex.withLock {
            guard case .running = state.lifecycle else { return }
            state.lifecycle = .draining
            setPaused(false)
            wakeThread()
        }
    }

    /// Refuses new work, drops the queued closures, and lets the thread exit after the item running now.
    ///
    /// Dropped ``execute(_:)`` closures never run; dropped ``run(_:)`` callers throw
    /// ``DedicatedThreadError/disposed(name:)``. Queued Swift jobs and ``sync(_:)`` calls still run
    /// first: a job belongs to a task that would otherwise wait forever, and a `sync` caller is
    /// blocked waiting for its result. Closures are released after the thread's lock is let go.
    ///
    /// - Returns: How many queued closures will never run; 0 if the thread was already stopped.
    @discardableResult
    public func disposeNow() -> Int {
        let dropped: [Item] = mutex.withLock {
            switch state.lifecycle {
            case .running, .draining: break
            case .stopped, .failedToStart: return []
            }
            state.lifecycle = .stopped
            setPaused(false)
            let isClosure = { (item: Item) in if case .closure = item { true } else { false } }
            // The batch was queued first: its closures are dropped first.
            let dropped = batchMutex.withLock { batch.items.removeAll(where: isClosure) }
                + state.queue.removeAll(where: isClosure)
            wakeThread()
            return dropped
        }
        for case .closure(_, let onDrop?) in dropped { onDrop() }
        return dropped.count
    }

    /// Blocks until the thread has exited after a dispose, or `timeout` has passed.
    ///
    /// - Parameter timeout: The longest to wait; not negative.
    /// - Returns: `true` once the thread is gone (or never started), `false` on timeout, and always
    ///   `false` while it was not disposed.
    public func awaitTermination(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "DedicatedThread '\(name)': awaitTermination timeout must not be negative, got \(timeout)")
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        return mutex.withLock {
            while !state.hasExited {
                if MonotonicInstant.now() >= deadline { return false }
                progress.wait(mutex, until: deadline)
            }
            return true
        }
    }

    /// How many closures and jobs wait in the queue (not the one running).
    public var pendingCount: Int {
        mutex.withLock { state.queue.count + batchMutex.withLock { batch.items.count } }
    }

    // MARK: - Internals

    private enum Lifecycle {
        case running
        /// ``dispose()``: running what is queued, then exiting.
        case draining
        /// ``disposeNow()``: queued closures dropped; running jobs and `sync` calls, then exiting.
        case stopped
        /// The system refused to start the thread.
        case failedToStart(errno: Int32)
    }

    private struct State {
        var lifecycle = Lifecycle.running
        var queue = RingBuffer<Item>()
        var isPaused = false
        var hasExited = false
        /// The thread is watching `workNudge` before it sleeps.
        var isSpinning = false
        /// How long the thread watches for work before it sleeps, learned from its last sleeps.
        var spinBudget = SpinBudget(ceiling: DedicatedThread.spinBeforeSleeping)
        /// The thread sleeps on `workArrived`.
        var isSleeping = false
    }

    /// What the thread took out of the queue and has not started yet, oldest first.
    private struct Batch {
        var items = RingBuffer<Item>()
        /// A copy of `State.isPaused`, for the thread to look at between items.
        var isPaused = false
    }

    /// One unit of work in the queue.
    private enum Item {
        /// From ``execute(_:)`` or ``run(_:)``; `onDrop` resumes a `run` caller that ``disposeNow()`` dropped.
        case closure(@Sendable () -> Void, onDrop: (@Sendable () -> Void)?)
        case job(UnownedJob)
        /// A blocked ``sync(_:)`` caller's work.
        case sync(SyncRequest)
    }

    /// A `sync` caller's work, run on the thread while the caller waits for `phase` to be `done`.
    private final class SyncRequest: Sendable {
        static let pending = 0, done = 1, callerSleeps = 2
        /// `work` is a loan (see ``BorrowedWork``).
        let work: BorrowedWork
        /// `pending`, then `done` once the thread has run the work. A caller that stops spinning
        /// moves `pending` to `callerSleeps` under the thread's mutex before it sleeps, and the
        /// thread, finding that, broadcasts `progress` under the mutex: no wakeup is lost.
        let phase = Atomic<Int>(SyncRequest.pending)

        init(_ work: @escaping () -> Void) {
            self.work = BorrowedWork(work)
        }
    }

    /// How long a `sync` caller, and (at most) the thread when it runs out of work, watch for the
    /// other side before sleeping: a round trip between two awake threads costs well under a
    /// microsecond, a wakeup several. Both sides yield the core while they watch (see
    /// ``spinBriefly(for:until:)``); the thread's spin shrinks to nothing while work keeps coming
    /// later than this (see ``SpinBudget``).
    static let spinBeforeSleeping = Duration.microseconds(20)

    /// The dedicated thread running now, if the calling thread is one.
    private static let current = ThreadLocalPointer()

    private func submit(_ item: Item) throws(DedicatedThreadError) {
        try mutex.withLock { () throws(DedicatedThreadError) in
            switch state.lifecycle {
            case .running: break
            case .draining, .stopped: throw .disposed(name: name)
            case .failedToStart(let errno): throw .threadStartFailed(name: name, errno: errno)
            }
            state.queue.append(item)
            if state.queue.count == 1 { wakeThread() }
        }
    }

    /// Tells the thread to look again if it spins or sleeps. Mutex held.
    private func wakeThread() {
        if state.isSleeping {
            workArrived.signal()
        } else if state.isSpinning {
            workNudge.wrappingAdd(1, ordering: .releasing)
        }
    }

    /// Pauses or resumes, in the state and in the batch's copy the thread reads. Mutex held.
    private func setPaused(_ isPaused: Bool) {
        state.isPaused = isPaused
        batchMutex.withLock { batch.isPaused = isPaused }
    }

    /// `sync`, with the error path spelled out so that `sync` itself only rethrows `work`'s errors.
    ///
    /// Follows the rules of ``ExecutionContexts``: inline when the caller holds this thread (it is
    /// this thread, or runs work for which this thread is blocked waiting); a stop if waiting would
    /// close a cycle; else the work runs here holding what the caller held.
    private func sync<T>(
        _ work: () throws -> T, refused: (DedicatedThreadError) throws -> Never,
        rethrowing rethrow: (any Error) throws -> Never
    ) rethrows -> T {
        let context = SerialContext(.thread(self))
        if isCurrent || ExecutionContexts.holds(context) { return try work() }
        var result: Result<T, any Error>?
        var refusal: DedicatedThreadError?
        ExecutionContexts.includingTaskHolds {
            let handover = ExecutionContexts.handover(in: nil)  // the thread holds its own context
            withoutActuallyEscaping(work) { work in
                let request = SyncRequest { handover.run { result = Result { try work() } } }
                do throws(DedicatedThreadError) {
                    try submit(.sync(request))
                } catch {
                    refusal = error
                    return
                }
                ExecutionContexts.blocking(for: context) { _blockingWaitForSync(request) }
            }
        }
        if let refusal { try refused(refusal) }
        switch result! {
        case .success(let value): return value
        case .failure(let error): try rethrow(error)
        }
    }

    private func _blockingWaitForSync(_ request: SyncRequest) {
        if spinBriefly(for: Self.spinBeforeSleeping, until: { request.phase.load(ordering: .acquiring) == SyncRequest.done }) {
            return
        }
        mutex.withLock {
            guard request.phase.compareExchange(
                expected: SyncRequest.pending, desired: SyncRequest.callerSleeps, ordering: .acquiringAndReleasing
            ).exchanged else { return }  // done meanwhile
            while request.phase.load(ordering: .acquiring) != SyncRequest.done { progress.wait(mutex) }
        }
    }

    /// Tells a `sync` caller that its work has run.
    private func finish(_ request: SyncRequest) {
        if request.phase.exchange(SyncRequest.done, ordering: .acquiringAndReleasing) == SyncRequest.callerSleeps {
            mutex.withLock { progress.broadcast() }
        }
    }

    /// The thread's body: run the batch item by item; when it is empty, take the whole queue as the
    /// next batch, or watch briefly for work and then sleep; until disposed and drained.
    private func runThread() {
        Self.current.current = Unmanaged.passUnretained(self).toOpaque()
        ExecutionContexts.holdForever(SerialContext(.thread(self)))
        // No binding outlives a run: `perform` consumes a temporary taken out of `next`, so the
        // item's closure is released before a lock is taken again.
        var next: Item?
        var hasSpun = false
        while true {
            batchMutex.lock()
            if !batch.isPaused { next = batch.items.popFirst() }
            batchMutex.unlock()
            if next != nil {
                if let request = perform(next.take()!) { finish(request) }
                hasSpun = false
                continue
            }
            mutex.lock()
            switch nextStep(hasSpun: hasSpun) {
            case .runBatch:
                mutex.unlock()
                hasSpun = false
            case .spin:
                state.isSpinning = true
                let nudge = workNudge.load(ordering: .acquiring)
                let budget = state.spinBudget.current
                mutex.unlock()
                _ = spinBriefly(for: budget) { workNudge.load(ordering: .acquiring) != nudge }
                mutex.lock()
                state.isSpinning = false
                mutex.unlock()
                hasSpun = true
            case .sleep:
                state.isSleeping = true
                let asleepSince = MonotonicInstant.now(), isWaitingForWork = !state.isPaused
                _blockingWaitForWork()
                state.isSleeping = false
                if isWaitingForWork { state.spinBudget.slept(for: asleepSince.duration(to: .now())) }
                mutex.unlock()
                hasSpun = false
            case .exit:
                state.hasExited = true
                progress.broadcast()
                mutex.unlock()
                return
            }
        }
    }

    private enum Step {
        /// The batch has items to run (it was refilled from the queue, or a resume came meanwhile).
        case runBatch
        case spin
        case sleep
        case exit
    }

    /// What the thread does once its batch is empty or paused; refills the batch from the queue.
    /// Mutex held.
    private func nextStep(hasSpun: Bool) -> Step {
        if state.isPaused { return .sleep }  // a dispose resumes it to drain
        let batchIsEmpty = batchMutex.withLock {
            // The batch is empty here, unless a resume came after the thread saw it paused.
            if batch.items.isEmpty { swap(&batch.items, &state.queue) }
            return batch.items.isEmpty
        }
        if !batchIsEmpty { return .runBatch }
        guard case .running = state.lifecycle else { return .exit }
        return hasSpun || state.spinBudget.current == .zero ? .sleep : .spin
    }

    /// Runs `item`; returns the `sync` request whose caller is to be told.
    private func perform(_ item: consuming Item) -> SyncRequest? {
        switch consume item {
        case .closure(let work, _):
            work()
            return nil
        case .job(let job):
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            return nil
        case .sync(let request):
            request.work.run()
            return request
        }
    }

    private func _blockingWaitForWork() {
        workArrived.wait(mutex)
    }
}

/// Why a ``DedicatedThread`` refused work.
public enum DedicatedThreadError: Error, Equatable, CustomStringConvertible {
    /// The thread was disposed; it accepts no more work.
    case disposed(name: String)
    /// The system refused to start the thread when it was created: `errno` is `pthread_create`'s error.
    case threadStartFailed(name: String, errno: Int32)

    public var description: String {
        switch self {
        case .disposed(let name):
            "DedicatedThread '\(name)' is disposed and accepts no more work"
        case .threadStartFailed(let name, let errno):
            "DedicatedThread '\(name)' has no thread: the system would not start it (errno \(errno))"
        }
    }
}

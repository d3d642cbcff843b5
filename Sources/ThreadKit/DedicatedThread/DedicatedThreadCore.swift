import Synchronization

/// The queue, the lock and the thread of one ``DedicatedThread``: what its thread holds on to.
///
/// A ``DedicatedThread`` is a front that owns its core. The thread, the serial context its record
/// holds, and the Swift jobs it runs (the core is the executor that actors and tasks see)
/// reference the core, never the front, so a dedicated thread its user lets go of is
/// deinitialised like any object, and tells its core with ``release()``: the core then runs what
/// is queued, as after ``dispose()``, and its thread exits. Work that captures the front keeps it
/// alive until that work has run.
final class DedicatedThreadCore: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // Sendable: `state` is guarded by `mutex`, `batch` by `batchMutex` (taken inside `mutex` when
    // both are needed); `workNudge` is an atomic; the rest is constant.

    let name: String

    private let mutex = PThreadMutex()
    /// Signalled for the sleeping thread: work arrived, a pause ended, or a dispose.
    private let workArrived = MonotonicCondition()
    /// Broadcast when the thread has exited.
    private let exited = MonotonicCondition()
    private var state = State()
    /// The items the thread took out of the queue in one go, to run one by one. Submitters never
    /// take this lock, so the thread and its submitters meet on `mutex` once per batch, not once
    /// per item; ``pause()``, ``pendingCount`` and ``disposeNow()`` look at both.
    private let batchMutex = PThreadMutex()
    private var batch = Batch()
    /// Bumped by a submitter that finds the thread spinning for work: it need not be woken.
    private let workNudge = Atomic<Int>(0)

    /// Creates the core and starts its thread; a refusal is kept (see ``DedicatedThread/init(name:)``).
    init(name: String) {
        self.name = name
        do {
            try NamedThread.start(name: name) { [self] in runThread() }
        } catch {
            state.lifecycle = .failedToStart(errno: error.errno)
            state.hasExited = true
        }
    }

    // MARK: - Submitting work

    /// ``DedicatedThread/execute(_:)``.
    func execute(_ work: @escaping @Sendable () -> Void) throws {
        try submit(.closure(work, onDrop: nil))
    }

    /// ``DedicatedThread/sync(_:)``.
    func sync<T>(_ work: () throws -> T) rethrows -> T {
        try sync(work, refused: { preconditionFailure("sync on DedicatedThread '\(name)' cannot run: \($0)") },
                 rethrowing: { throw $0 })
    }

    /// Like ``sync(_:)``, but a refusal (a disposed thread, or one that never started) is thrown.
    func syncOrThrow<T>(_ work: () throws -> T) throws -> T {
        try sync(work, refused: { throw $0 }, rethrowing: { throw $0 })
    }

    /// ``DedicatedThread/run(_:)``.
    func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        // Without this, a cancelled caller would queue work that an idle thread starts at once.
        try Task.checkCancellation()
        let call = RunCall(work)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                // Exactly one of four resumes the caller: the thread starting the work, the
                // cancellation, disposeNow() dropping it, or the refusal below.
                guard call.attach(continuation) else { return }
                do {
                    try submit(.closure({ call.start() }, onDrop: { [name] in call.end(throwing: DedicatedThreadError.disposed(name: name)) }))
                } catch {
                    call.end(throwing: error)
                }
            }
        } onCancel: {
            call.end(throwing: CancellationError())
        }
    }

    /// ``DedicatedThread/enqueue(_:)``: the core is the executor that actors and tasks see.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        do {
            try submit(.job(job))
        } catch {
            preconditionFailure("actor used after its DedicatedThread '\(name)' was disposed: \(error)")
        }
    }

    /// Stops the process unless called on this thread: an actor's isolation check.
    func checkIsolated() {
        precondition(isCurrent, "expected to run on DedicatedThread '\(name)', but running on thread '\(NamedThread.currentName())'")
    }

    // MARK: - Controlling

    /// ``DedicatedThread/pause()``.
    func pause() {
        mutex.withLock {
            // A disposed thread drains its queue; a pause now would strand it.
            guard case .running = state.lifecycle else { return }
            setPaused(true)
        }
    }

    /// ``DedicatedThread/resume()``.
    func resume() {
        mutex.withLock {
            setPaused(false)
            wakeThread()
        }
    }

    /// ``DedicatedThread/isPaused``.
    var isPaused: Bool {
        mutex.withLock { state.isPaused }
    }

    /// ``DedicatedThread/isCurrent``.
    var isCurrent: Bool {
        Self.current.current == Unmanaged.passUnretained(self).toOpaque()
    }

    /// ``DedicatedThread/dispose()``.
    func dispose() {
        drain()
    }

    /// The ``DedicatedThread`` was let go of: nothing can submit closures any more, so the thread
    /// runs what is queued, as after ``dispose()`` (a paused thread resumes: nobody is left to
    /// resume it), then exits.
    func release() {
        drain()
    }

    /// Refuses new work, runs everything already queued, then lets the thread exit.
    private func drain() {
        mutex.withLock {
            guard case .running = state.lifecycle else { return }
            state.lifecycle = .draining
            setPaused(false)
            wakeThread()
        }
    }

    /// ``DedicatedThread/disposeNow()``.
    func disposeNow() -> Int {
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

    /// ``DedicatedThread/awaitTermination(timeout:)``.
    func awaitTermination(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "DedicatedThread '\(name)': awaitTermination timeout must not be negative, got \(timeout)")
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        return mutex.withLock {
            while !state.hasExited {
                if MonotonicInstant.now() >= deadline { return false }
                _ = exited.wait(mutex, until: deadline)
            }
            return true
        }
    }

    /// ``DedicatedThread/pendingCount``.
    var pendingCount: Int {
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
        var spinBudget = SpinBudget(ceiling: DedicatedThreadCore.spinBeforeSleeping)
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

    /// A `sync` caller's work, run on the thread while the caller waits for its completion.
    private final class SyncRequest: Sendable {
        /// `work` is a loan (see ``BorrowedWork``).
        let work: BorrowedWork
        /// Done once the thread has run the work. The caller waits for it on its own parker, where
        /// it serves nested requests for a thread-affine context it runs (A → B → A).
        let completion = ExecutionContexts.Completion()

        /// A request for the calling thread to wait for.
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

    /// The core of the dedicated thread running now, if the calling thread is one.
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
    /// Follows the rules of ``ExecutionContexts``: on this thread, inline; when the caller holds
    /// this thread through other contexts (A → B → A), the work runs on this thread, which serves
    /// it in its own `sync` wait; a stop if waiting would close a cycle; else the work runs here,
    /// after what was queued before it, holding what the caller held.
    private func sync<T>(
        _ work: () throws -> T, refused: (DedicatedThreadError) throws -> Never,
        rethrowing rethrow: (any Error) throws -> Never
    ) rethrows -> T {
        if isCurrent { return try work() }
        let context = SerialContext(.thread(self))
        var result: Result<T, any Error>?
        var refusal: DedicatedThreadError?
        if !ExecutionContexts.reenter(context, { result = Result { try work() } }) {
            ExecutionContexts.includingMainQueue {
                ExecutionContexts.includingTaskHolds {
                    // The thread holds its own context. The caller waits serving: the work may
                    // send it a piece of a thread-affine context it runs.
                    let handover = ExecutionContexts.handover(in: nil, serving: true)
                    withoutActuallyEscaping(work) { work in
                        let request = SyncRequest { handover.run { result = Result { try work() } } }
                        do throws(DedicatedThreadError) {
                            try submit(.sync(request))
                        } catch {
                            refusal = error
                            return
                        }
                        ExecutionContexts.blocking(for: context) {
                            request.completion._blockingWait(spinningFor: Self.spinBeforeSleeping)
                        }
                    }
                }
            }
        }
        if let refusal { try refused(refusal) }
        switch result! {
        case .success(let value): return value
        case .failure(let error): try rethrow(error)
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
                if let request = perform(next.take()!) { request.completion.finish() }
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
                exited.broadcast()
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

/// One ``DedicatedThread/run(_:)`` call: its work and its caller, joined to the caller's
/// cancellation.
///
/// Exactly one of ``start()`` and ``end(throwing:)`` takes the work and the continuation: the
/// thread starting the work, or its end without running (the caller's cancellation, a dropped or
/// refused submission). The work is released by whoever took it, outside the lock.
private final class RunCall<T: Sendable>: Sendable {
    private struct State: Sendable {
        var work: (@Sendable () throws -> T)?
        var continuation: CheckedContinuation<T, any Error>?
        /// Started or ended: nothing is left to take.
        var isTaken = false
    }

    private let state: Locked<State>

    init(_ work: @escaping @Sendable () throws -> T) {
        state = Locked(State(work: work))
    }

    /// Keeps the caller's continuation; `false` (and the caller resumed) if the call ended first.
    func attach(_ continuation: CheckedContinuation<T, any Error>) -> Bool {
        let ended = state.withLock { state in
            if !state.isTaken { state.continuation = continuation }
            return state.isTaken
        }
        if ended { continuation.resume(throwing: CancellationError()) }
        return !ended
    }

    /// On the thread: runs the work and resumes the caller with its result, unless the call ended.
    func start() {
        guard let (work, continuation) = take() else { return }
        continuation.resume(with: Result { try work() })
    }

    /// Ends the call without running the work, if it has not started: the caller throws `error`.
    func end(throwing error: any Error) {
        guard let (work, continuation) = take() else { return }
        _ = work  // released here, after the lock
        continuation.resume(throwing: error)
    }

    /// The work and the continuation, once; `nil` for every later call. A call that ends before
    /// ``attach(_:)`` leaves no continuation: `attach` resumes the caller.
    private func take() -> (work: @Sendable () throws -> T, continuation: CheckedContinuation<T, any Error>)? {
        var work: (@Sendable () throws -> T)?
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard !state.isTaken else { return nil }
            state.isTaken = true
            work = state.work.take()
            return state.continuation.take()
        }
        guard let work, let continuation else { return nil }
        return (work, continuation)
    }
}

import Synchronization

/// The queue, the lock and the thread of one ``DedicatedThread``: what its thread holds on to.
///
/// A ``DedicatedThread`` is a front that owns its core. The thread, the serial context its record
/// holds, and the Swift jobs it runs (the core is the executor that actors and tasks see)
/// reference the core, never the front, so a dedicated thread its user lets go of is
/// deinitialised like any object, and tells its core with ``release()``: the core then runs what
/// is queued, as after ``dispose()``, and its thread exits. Work that captures the front keeps it
/// alive until that work has run.
///
/// The core is the shell of a ``DedicatedThreadStateMachine``: every decision (take or refuse
/// work, pause, dispose, what the thread does next, whom to wake) is the machine's, made under
/// `mutex`; the core carries it out (signals, nudges, sleeps, runs items) and runs every closure
/// outside its locks.
final class DedicatedThreadCore: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // Sendable: `machine`, `exitWaiters` and `threadActivity` are guarded by `mutex`, `batch` and `completedCount`
    // by `batchMutex` (taken inside `mutex` when both are needed); `handOff` is an atomic; the rest is constant.

    let name: String

    private let mutex = PThreadMutex()
    /// Signalled for the sleeping thread: work arrived, a pause ended, or a dispose.
    private let workArrived = MonotonicCondition()
    /// Broadcast when the thread has exited.
    private let exited = MonotonicCondition()
    /// The tasks suspended in ``awaitTermination()``, resumed when the thread has exited.
    private var exitWaiters = EventWaiters()
    private var machine: DedicatedThreadStateMachine<Item>
    /// The items the thread took out of the queue in one go, to run one by one. Submitters never
    /// take this lock, so the thread and its submitters meet on `mutex` once per batch, not once
    /// per item; ``pause()``, ``pendingCount`` and ``disposeNow()`` look at both.
    private let batchMutex = PThreadMutex()
    private var batch = RingBuffer<Item>()
    /// What the thread watches while it spins for work: ``HandOff/open`` while it spins with
    /// nothing queued, ``HandOff/nudged`` once work was queued (or the thread must look at its
    /// state again), or a `sync` caller's work handed straight to it (see ``handOver(_:)``).
    private let handOff = Atomic<Int>(HandOff.closed)
    /// What the thread reports to ``Diagnostics``, from its start until it exits.
    private var threadActivity: ThreadActivity?
    /// How many items the thread has run to their end: counted when it takes the next item out of
    /// its batch, under `batchMutex`, which it takes then anyway.
    private var completedCount: UInt64 = 0

    /// Creates the core and starts its thread; a refusal is kept (see ``DedicatedThread/init(name:)``).
    init(name: String) {
        self.name = name
        machine = DedicatedThreadStateMachine(name: name, spinCeiling: Self.spinBeforeSleeping)
        do {
            try NamedThread.start(name: name) { [self] in runThread() }
        } catch {
            machine.threadFailedToStart(errno: error.errno)
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
    func run<T: Sendable>(_ work: SendingWork<T>) async throws -> T {
        // Without this, a cancelled caller would queue work that an idle thread starts at once.
        try Task.checkCancellation()
        let call = RunCall { try work() }
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

    /// ``DedicatedThread/pause()``: a `sync` caller's work handed to the spinning thread and
    /// not yet taken goes back to the queue's front, so that nothing starts after the pause.
    func pause() {
        mutex.withLock {
            batchMutex.withLock {
                machine.pause(batch: &batch) {
                    HandOff.work(in: handOff.exchange(HandOff.nudged, ordering: .acquiringAndReleasing)).map(Item.sync)
                }
            }
        }
    }

    /// ``DedicatedThread/resume()``.
    func resume() {
        mutex.withLock { wake(machine.resume()) }
    }

    /// ``DedicatedThread/isPaused``.
    var isPaused: Bool {
        mutex.withLock { machine.isPaused }
    }

    /// ``DedicatedThread/isCurrent``.
    var isCurrent: Bool {
        Self.current.current == Unmanaged.passUnretained(self).toOpaque()
    }

    /// ``DedicatedThread/dispose()``.
    func dispose() {
        mutex.withLock { wake(machine.dispose()) }
    }

    /// The ``DedicatedThread`` was let go of: nothing can submit closures any more, so the thread
    /// runs what is queued, as after ``dispose()`` (a paused thread resumes: nobody is left to
    /// resume it), then exits.
    func release() {
        dispose()
    }

    /// ``DedicatedThread/disposeNow()``.
    func disposeNow() -> Int {
        let dropped: [Item] = mutex.withLock {
            let dropping = batchMutex.withLock { machine.disposeNow(batch: &batch, dropping: \.isClosure) }
            wake(dropping.wake)
            return dropping.dropped
        }
        // Released, and their `run` callers resumed, after the lock is let go.
        for case .closure(_, let onDrop?) in dropped { onDrop() }
        return dropped.count
    }

    /// ``DedicatedThread/awaitTermination(timeout:)``.
    func awaitTermination(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "DedicatedThread '\(name)'.awaitTermination(timeout:): timeout must not be negative, got \(timeout)")
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        return ThreadActivity.current.blocked("termination", on: self) {
            mutex.withLock { _blockingWaitForExit(until: deadline) }
        }
    }

    /// ``DedicatedThread/awaitTermination()``.
    func awaitTermination() async -> Bool {
        let waiter = EventWaiter()
        let exited = mutex.withLock {
            if machine.hasExited { return true }
            exitWaiters.add(waiter)
            return false
        }
        if exited { return true }
        return await waiter.wait(onCancel: { [self] in mutex.withLock { exitWaiters.remove(waiter) } })
    }

    /// How many tasks are suspended in ``awaitTermination()``.
    var exitWaiterCount: Int {
        mutex.withLock { exitWaiters.count }
    }

    /// ``DedicatedThread/pendingCount``.
    var pendingCount: Int {
        mutex.withLock { machine.queue.count + batchMutex.withLock { batch.count } + handedOverCount }
    }

    /// 1 while a `sync` caller's work waits in ``handOff`` for the thread to take it.
    private var handedOverCount: Int {
        HandOff.holdsWork(handOff.load(ordering: .relaxed)) ? 1 : 0
    }

    /// What ``Diagnostics`` shows of the thread, copied in one brief hold of its locks.
    struct DiagnosticsState {
        /// Items waiting, and items run to their end.
        var queued: Int, completed: UInt64
        /// `running`, `paused`, `disposed` or `exited`.
        var lifecycle: String
        /// The thread's, while it is alive.
        var activity: ThreadActivity?
    }

    /// The thread's state for a snapshot: one brief hold of `mutex` (and `batchMutex` inside it).
    func diagnosticsState() -> DiagnosticsState {
        mutex.withLock {
            let (batched, completed) = batchMutex.withLock { (batch.count, completedCount) }
            let lifecycle = machine.hasExited ? "exited" : machine.refusal != nil ? "disposed" : machine.isPaused ? "paused" : "running"
            return DiagnosticsState(
                queued: machine.queue.count + batched + handedOverCount, completed: completed, lifecycle: lifecycle, activity: threadActivity)
        }
    }

    /// The thread's activity while it is alive: what a wait for this thread waits on.
    var holdingThread: ThreadActivity? {
        mutex.withLock { threadActivity }
    }

    // MARK: - Internals

    /// One unit of work in the queue.
    private enum Item {
        /// From ``execute(_:)`` or ``run(_:)``; `onDrop` resumes a `run` caller that ``disposeNow()`` dropped.
        case closure(@Sendable () -> Void, onDrop: (@Sendable () -> Void)?)
        case job(UnownedJob)
        /// A blocked ``sync(_:)`` caller's work, lent while the caller waits.
        case sync(ExecutionContexts.LentWork)

        /// What ``disposeNow()`` drops: closures. A job belongs to a task that would otherwise
        /// wait for ever, and a `sync` caller is blocked waiting for its result.
        var isClosure: Bool {
            if case .closure = self { true } else { false }
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
        try mutex.withLock { () throws(DedicatedThreadError) in wake(try machine.submit(item)) }
    }

    /// Carries out the machine's wakeup. Mutex held.
    private func wake(_ wake: DedicatedThreadStateMachine<Item>.Wake) {
        switch wake {
        case .none: break
        case .signal: workArrived.signal()
        // Closes the hand-off too. Work handed over already stays: the thread runs it, then
        // finds what was queued after it.
        case .nudge: _ = handOff.compareExchange(expected: HandOff.open, desired: HandOff.nudged, ordering: .acquiringAndReleasing)
        }
    }

    /// The values of ``handOff`` besides a handed-over `sync` caller's work, which is the
    /// address of its retained ``ExecutionContexts/LentWork`` (never 0, 1 or 2).
    private enum HandOff {
        /// The thread is not spinning for work: submitters take the lock.
        static let closed = 0
        /// The thread spins with nothing queued, taking work: one `sync` caller may hand its
        /// work over without the lock.
        static let open = 1
        /// Work was queued, or the thread's state changed, while it spun.
        static let nudged = 2

        /// Whether `value` is handed-over work: any other value (an address may have its top bit set).
        static func holdsWork(_ value: Int) -> Bool {
            value != closed && value != open && value != nudged
        }

        /// The work handed over in `value`, if any: the reference the hand-over retained.
        static func work(in value: Int) -> ExecutionContexts.LentWork? {
            guard holdsWork(value), let address = UnsafeRawPointer(bitPattern: value) else { return nil }
            return Unmanaged<ExecutionContexts.LentWork>.fromOpaque(address).takeRetainedValue()
        }
    }

    /// Hands a `sync` caller's work straight to the thread if it spins with nothing queued, as a
    /// two-thread round trip does (no lock, no queue): the thread sees it within nanoseconds.
    /// Anything submitted after it queues behind it. Else `false`: the caller submits it.
    private func handOver(_ lent: ExecutionContexts.LentWork) -> Bool {
        guard handOff.load(ordering: .relaxed) == HandOff.open else { return false }
        let retained = Unmanaged.passRetained(lent)
        let value = Int(bitPattern: retained.toOpaque())
        if handOff.compareExchange(expected: HandOff.open, desired: value, ordering: .acquiringAndReleasing).exchanged { return true }
        retained.release()  // the caller's own reference keeps the loan: this never ends it
        return false
    }

    /// `sync`, with the error path spelled out so that `sync` itself only rethrows `work`'s errors.
    ///
    /// Follows the rules of ``ExecutionContexts``: on this thread, inline; when the caller holds
    /// this thread through other contexts (A → B → A), the work runs on this thread, which serves
    /// it in its own `sync` wait; a refusal (a disposed thread, or one that never started) is
    /// thrown as for every other submission; else the work is lent to this thread, to run after
    /// what was queued before it, holding what the caller held.
    ///
    /// The caller watches for the result for ``spinBeforeSleeping`` first, which ends most calls
    /// to an idle thread, and registers its wait only if it must sleep: the check that the wait
    /// closes no cycle (a stop if it does) and the `blocked` state ``Diagnostics`` shows. A
    /// deadlock is still found: every thread of a cycle sleeps, and the last one to register
    /// sees the others' edges. A thread that only watches shows `running`, as while any other
    /// brief spin.
    private func sync<T>(
        _ work: () throws -> T, refused: (DedicatedThreadError) throws -> Never,
        rethrowing rethrow: (any Error) throws -> Never
    ) rethrows -> T {
        if isCurrent { return try work() }
        // The result goes into a slot of `T` rather than a `Result<T, any Error>?`: in this
        // generic code, that box costs runtime metadata look-ups on every call.
        let slot = UnsafeMutablePointer<T>.allocate(capacity: 1)
        defer { slot.deallocate() }
        var thrown: (any Error)?
        var refusal: DedicatedThreadError?
        func runWork() {
            do { slot.initialize(to: try work()) } catch { thrown = error }
        }
        let context = SerialContext(.thread(self))
        if !ExecutionContexts.reenter(context, runWork) {
            ExecutionContexts.includingMainQueue {
                ExecutionContexts.includingTaskHolds {
                    // The thread holds its own context. The caller waits serving: the work may
                    // send it a piece of a thread-affine context it runs.
                    let handover = ExecutionContexts.handover(in: nil, serving: true)
                    do throws(DedicatedThreadError) {
                        // The thread runs every sync it takes (a dispose runs them, disposeNow keeps them).
                        _ = try ExecutionContexts.LentWork._blockingLend(
                            { handover.run(runWork) }, spinningFor: Self.spinBeforeSleeping, runsEveryLoan: true,
                            to: { lent throws(DedicatedThreadError) in if !handOver(lent) { try submit(.sync(lent)) } },
                            sleeping: { isOver, sleep in ExecutionContexts.blocking(for: context, isOver: isOver, sleep) })
                    } catch {
                        refusal = error
                    }
                }
            }
        }
        if let refusal { try refused(refusal) }
        // The work ran (a refusal left through `refused` above): it filled the slot or threw.
        if let thrown { try rethrow(thrown) }
        return slot.move()
    }

    /// The thread's body: runs its batch item by item, and asks the machine for the next one
    /// whenever it is empty, until disposed and drained.
    private func runThread() {
        Self.current.current = Unmanaged.passUnretained(self).toOpaque()
        ExecutionContexts.holdForever(SerialContext(.thread(self)))
        let activity = ThreadActivity.current
        mutex.withLock { threadActivity = activity }
        // No binding outlives a run: `perform` consumes a temporary taken out of `next`, so the
        // item's closure is released before a lock is taken again.
        var next: Item?
        // The item run since the last look at the batch, counted at the next look (under its lock).
        var ran: UInt64 = 0
        while true {
            batchMutex.lock()
            completedCount &+= ran
            next = batch.popFirst()
            batchMutex.unlock()
            if next != nil {
                perform(next.take()!)
                ran = 1
            } else {
                ran = 0
                if !_blockingTakeNextBatch(activity) {
                    // Exited: a task that begins to wait from now on sees it; those waiting already
                    // are resumed after the lock is let go.
                    mutex.withLock {
                        threadActivity = nil
                        return exitWaiters.takeAll()
                    }.resumeWaiters()
                    return
                }
            }
        }
    }

    /// With the batch empty, carries out the machine's steps (spin, sleep) until it has refilled
    /// the batch (`true`) or the thread is to exit (`false`). The thread reports itself sleeping to
    /// `activity` while it sleeps (not while it spins: that lasts microseconds, and ends most
    /// `sync` round trips).
    private func _blockingTakeNextBatch(_ activity: ThreadActivity) -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        var step = batchMutex.withLock { machine.threadRanOutOfWork(refilling: &batch) }
        while true {
            switch step {
            case .runBatch:
                return true
            case .spin(let budget):
                handOff.store(HandOff.open, ordering: .releasing)
                mutex.unlock()
                _ = spinBriefly(for: budget) { handOff.load(ordering: .acquiring) != HandOff.open }
                // Closed before the machine hears of the spin's end: a hand-over is taken now or never.
                var handedOver = HandOff.work(in: handOff.exchange(HandOff.closed, ordering: .acquiringAndReleasing))
                let ranHandedOver = handedOver != nil
                // Run outside the locks, and released (a temporary) before they are taken again.
                if ranHandedOver { perform(.sync(handedOver.take()!)) }
                mutex.lock()
                step = batchMutex.withLock {
                    if ranHandedOver { completedCount &+= 1 }
                    return machine.spinEnded(refilling: &batch, ranHandedOver: ranHandedOver)
                }
            case .sleep:
                let asleepSince = MonotonicInstant.now()
                activity.sleeping()
                workArrived.wait(mutex)
                activity.running("task")
                let slept = asleepSince.duration(to: .now())
                step = batchMutex.withLock { machine.threadWokeUp(afterSleeping: slept, refilling: &batch) }
            case .exit:
                exited.broadcast()
                return false
            }
        }
    }

    /// Waits until the thread has exited or `deadline` has passed; whether it has. Mutex held.
    private func _blockingWaitForExit(until deadline: MonotonicInstant) -> Bool {
        while !machine.hasExited {
            if MonotonicInstant.now() >= deadline { return false }
            _ = exited.wait(mutex, until: deadline)
        }
        return true
    }

    /// Runs `item` on the thread.
    private func perform(_ item: consuming Item) {
        switch consume item {
        case .closure(let work, _):
            work()
        case .job(let job):
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
        case .sync(let lent):
            lent.run()
        }
    }
}

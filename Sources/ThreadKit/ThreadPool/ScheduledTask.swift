import Synchronization

/// A unit of work accepted by a ``ThreadPool``, which can be cancelled until a thread takes it and
/// waited on until it has run.
///
/// Exactly one of two things happens to a task: it runs once, or it is cancelled (by ``cancel()``,
/// or by ``ThreadPool/disposeNow()`` handing it back). ``cancel()`` returns `true` only in the second case.
///
/// **Arguments.** A zero timeout of ``wait(timeout:)`` is a time already up: the call checks once
/// and does not wait (GCD's and Java's rule); one however far out waits as long as it takes. A
/// negative timeout cannot work: it stops with a precondition failure naming it and the value
/// (`ScheduledTask.wait(timeout:): timeout must not be negative, got -1.0 seconds`). ThreadKit's
/// design rule: a negative duration means "now" only where a time in the past makes sense (a
/// pause, a `Retry-After` date), and a timeout is neither.
public final class ScheduledTask: @unchecked Sendable {
    // Sendable: `work`, `onAbandon` and `pool` are read and cleared only by the one thread that
    // moves `state` out of `pending` (the worker that claims the task, the canceller, or the pool
    // handing it back); that transition is the lock.

    /// The task's life, one atomic word: a phase in the low bits, ``waiterFlag`` above them.
    private enum Phase: Int {
        case pending = 0, running = 1, completed = 2, cancelled = 3
    }
    private static let phaseMask = 0b11
    private static let waiterFlag = 0b100

    private let state = Atomic<Int>(Phase.pending.rawValue)
    private var work: (@Sendable () -> Void)?
    /// For a task nobody outside the pool holds (``ThreadPool/run(_:)``'s): what to do instead of
    /// handing it back at ``ThreadPool/disposeNow()``. Owned like `work`.
    private var onAbandon: (@Sendable () -> Void)?
    /// The pool that holds the task while it is pending, told when the task is cancelled.
    ///
    /// A counted reference, dropped by whoever ends the pending phase: the canceller still needs
    /// the pool after its compare-and-swap, when the pool's last thread may already have exited.
    private var pool: ThreadPool?
    /// The pool, when it has one thread: a serial context, for the re-entry and deadlock rules of
    /// ``wait()``. Weak, so that a handle never keeps a finished pool alive.
    private weak let serialPool: ThreadPool?
    /// The pool's identity, for a wait to find it in ``DiagnosticsRegistry`` (it costs no reference).
    private let poolID: ObjectIdentifier?
    /// The `label:` of ``ThreadPool/schedule(label:_:)``, for the description of a wait.
    private let label: String?

    init(
        pool: ThreadPool?, work: @escaping @Sendable () -> Void, onAbandon: (@Sendable () -> Void)? = nil,
        label: String? = nil
    ) {
        self.pool = pool
        self.serialPool = pool?.size == 1 ? pool : nil
        self.poolID = pool.map(ObjectIdentifier.init)
        self.work = work
        self.onAbandon = onAbandon
        self.label = label
    }

    /// Stops the task from running, if no thread has taken it yet.
    ///
    /// Safe to call at any time from any thread, whatever has become of the pool.
    ///
    /// - Returns: `true` if this call stopped a task that would otherwise have run; `false` if it
    ///   has started, finished, or was already cancelled.
    @discardableResult
    public func cancel() -> Bool {
        guard transition(from: .pending, to: .cancelled) else { return false }
        let pool = self.pool.take()
        // Released here, with no lock held: a capture's deinit may call back into the pool.
        let released = (work.take(), onAbandon.take())
        pool?.queuedTaskWasCancelled(self)
        _ = released
        return true
    }

    /// Whether the task was cancelled before it ran (by ``cancel()`` or ``ThreadPool/disposeNow()``).
    public var isCancelled: Bool { phase == .cancelled }

    /// Whether the task has run to its end.
    public var isCompleted: Bool { phase == .completed }

    /// Blocks the calling thread until the task has run or was cancelled.
    ///
    /// On a pool of size 1, a wait from a thread that holds the pool (its own thread, or one running
    /// work its thread is blocked waiting for) runs a queued task inline: only this thread can. A
    /// wait that would close a cycle of blocked threads stops the process with a message naming it.
    ///
    /// It blocks the calling thread, so async code submits with ``ThreadPool/run(_:)`` and awaits
    /// the result instead.
    @available(*, noasync, message: "it blocks the thread; submit with 'try await pool.run { }' in async code")
    public func wait() {
        _ = wait(until: nil)
    }

    /// Blocks the calling thread until the task has run or was cancelled, or `timeout` has passed.
    ///
    /// Re-entry and deadlock rules as for ``wait()``; a task run inline runs to its end. It blocks
    /// the calling thread, so async code submits with ``ThreadPool/run(_:)`` instead.
    ///
    /// - Parameter timeout: The longest to wait; not negative. Zero: it checks once and does not
    ///   wait (as GCD's `wait(timeout:)` and Java's `Future.get` do); far out
    ///   (`.seconds(Int64.max)` and beyond): as long as it takes.
    /// - Returns: `true` if the task has finished (run or cancelled), `false` on timeout.
    @available(*, noasync, message: "it blocks the thread; submit with 'try await pool.run { }' in async code")
    public func wait(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "ScheduledTask.wait(timeout:): timeout must not be negative, got \(timeout)")
        return wait(until: MonotonicInstant.now().advanced(by: timeout))
    }

    private func wait(until deadline: MonotonicInstant?) -> Bool {
        guard !isFinished, let serialPool else { return blockingWait(until: deadline) }
        let context = SerialContext(.pool(serialPool))
        if ExecutionContexts.holds(context), serialPool.runInline(self) { return true }
        // A timed wait ends by itself: it takes no part in cycles.
        guard deadline == nil else { return blockingWait(until: deadline) }
        return ExecutionContexts.blocking(for: context, kind: "wait") { blockingWait(until: nil) }
    }

    // MARK: - For the pool

    /// Takes the task for running. Only one caller of `claim`, `handBack` or `cancel` ever succeeds.
    func claim() -> Bool {
        transition(from: .pending, to: .running)
    }

    /// Returns a task that its submitter claimed to the pending phase, because the thread meant
    /// to run it could not be started. Only the submitter calls this, before anyone else has seen
    /// the task.
    func unclaim() {
        let returned = transition(from: .running, to: .pending)
        precondition(returned, "a task is returned to pending only by its submitter, before it runs")
    }

    /// Cancels the task on behalf of the pool, which hands it back and does its own counting.
    ///
    /// May be called under the pool's lock: it releases nothing. The closures stay until
    /// ``releaseHandedBack()``, which the pool calls after unlocking.
    ///
    /// - Returns: `false` if the task was claimed or cancelled already.
    func handBack() -> Bool {
        transition(from: .pending, to: .cancelled)
    }

    /// After a successful ``handBack()``: the handler to call instead of returning the task to the
    /// caller of ``ThreadPool/disposeNow()``, if it has one. Releases nothing.
    func takeAbandonHandler() -> (@Sendable () -> Void)? {
        onAbandon.take()
    }

    /// After a successful ``handBack()``, with no lock held: releases the work and the pool.
    func releaseHandedBack() {
        let released = (work.take(), onAbandon.take(), pool.take())
        _ = released
    }

    /// Runs a claimed task's work, releases it, and wakes its waiters.
    ///
    /// Also used for a task that a waiter runs inline (see ``wait()``).
    func runClaimed(countingInto completed: borrowing Atomic<Int>) {
        onAbandon = nil
        pool = nil
        work!()
        work = nil
        completed.wrappingAdd(1, ordering: .relaxed)
        finish(as: .completed)
    }

    // MARK: - Internals

    private var phase: Phase {
        Phase(rawValue: state.load(ordering: .acquiring) & Self.phaseMask)!
    }

    private var isFinished: Bool {
        let phase = self.phase
        return phase == .completed || phase == .cancelled
    }

    private func transition(from old: Phase, to new: Phase) -> Bool {
        var current = state.load(ordering: .relaxed)
        while current & Self.phaseMask == old.rawValue {
            let desired = (current & ~Self.phaseMask) | new.rawValue
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: desired, ordering: .acquiringAndReleasing)
            if exchanged {
                if new == .cancelled { wakeWaiters(ifFlagged: original) }
                return true
            }
            current = original
        }
        return false
    }

    private func finish(as phase: Phase) {
        let original = state.exchange(phase.rawValue, ordering: .acquiringAndReleasing)
        wakeWaiters(ifFlagged: original)
    }

    private func wakeWaiters(ifFlagged original: Int) {
        guard original & Self.waiterFlag != 0 else { return }
        let monitor = WaitMonitor.shared
        monitor.mutex.withLock { monitor.condition.broadcast() }
    }

    /// Waits on the shared monitor, reported as a `"wait"` for this task (see ``TaskWaitTarget``).
    private func blockingWait(until deadline: MonotonicInstant?) -> Bool {
        if isFinished { return true }
        // The pool is only looked up: the target keeps it weakly, and the wait does not keep it alive.
        let target = TaskWaitTarget(self, pool: poolID.flatMap { DiagnosticsRegistry.component($0) as? ThreadPool }, label: label)
        return ThreadActivity.current.blocked("wait", on: target) { parkedWait(until: deadline) }
    }

    /// Waits on the shared monitor; the waiter flag makes the finishing thread broadcast to it.
    private func parkedWait(until deadline: MonotonicInstant?) -> Bool {
        let monitor = WaitMonitor.shared
        monitor.mutex.lock()
        defer { monitor.mutex.unlock() }
        // Set the flag while the task is unfinished; a finisher that sees it broadcasts under the
        // monitor's mutex, which this thread holds until it waits, so the wakeup cannot be missed.
        var current = state.load(ordering: .acquiring)
        while true {
            let phase = current & Self.phaseMask
            if phase == Phase.completed.rawValue || phase == Phase.cancelled.rawValue { return true }
            if current & Self.waiterFlag != 0 { break }
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: current | Self.waiterFlag, ordering: .acquiringAndReleasing)
            if exchanged { break }
            current = original
        }
        while !isFinished {
            if let deadline {
                if MonotonicInstant.now() >= deadline { return false }
                monitor.condition.wait(monitor.mutex, until: deadline)
            } else {
                monitor.condition.wait(monitor.mutex)
            }
        }
        return true
    }
}

/// The one monitor that threads waiting on any ``ScheduledTask`` sleep on.
///
/// Waiting on a task is rare next to running tasks, so tasks carry no condition of their own; a
/// finishing task broadcasts here only if a waiter flagged it.
private final class WaitMonitor: Sendable {
    static let shared = WaitMonitor()
    let mutex = PThreadMutex()
    let condition = MonotonicCondition()
}

import Synchronization

/// The result of a step run by a ``DispatchMethod``, to chain further steps on, wait for, or cancel.
///
/// Each step runs exactly once, after the step before it finished, with its value. A thrown error
/// skips the remaining steps and comes out of ``wait()`` and ``value``. ``then(_:_:)`` may be called
/// before or after the step finished, from any thread; several `then` on one link all run (fan-out).
///
/// ```swift
/// let page = DispatchMethod.async(on: .pool(network)).execute { try download(url) }
///     .then(.async(on: .thread(db))) { data in try store(data) }
///     .then(.async(on: .main)) { id in show(id) }
/// ```
public final class ExecutionChain<Value: Sendable>: ChainLink, @unchecked Sendable {
    // Sendable: `state`, `step`, `previous`, `stepBegan` and `cancellerKey` are guarded by
    // `group.mutex`, which every link of a chain shares.

    // The stored properties and the finished link's init are usable from inlinable code, so that
    // `DispatchMethod.execute` makes a finished link with its `Value` known: no type metadata is
    // looked up at run time on the `.inline` and `.sync` paths.

    /// The chain's shared lock and cancellation; made on first use for a link that starts finished.
    @usableFromInline let lazyGroup: AtomicLazyReference<ChainGroup>
    var group: ChainGroup {
        lazyGroup.load() ?? lazyGroup.storeIfNil(ChainGroup())
    }
    /// The link whose value this one's step takes, until this one's step is dispatched (a waiter
    /// then looks no further back) or finished: a chain keeps no finished history alive.
    @usableFromInline var previous: (any ChainLink)?
    @usableFromInline var state: State
    /// This link's step once dispatched to a target, until it starts.
    @usableFromInline var step: PendingStep?
    /// Whether this link's step has begun to run: from then on it runs to its end, and the
    /// cancellation of a task awaiting ``value`` no longer removes it.
    @usableFromInline var stepBegan: Bool
    /// This link's entry among its group's cancellers while it is unfinished (0: none).
    @usableFromInline var cancellerKey: Int

    @usableFromInline enum State {
        /// Not finished: what to call with the result once it comes.
        case pending(followers: [@Sendable (Result<Value, any Error>) -> Void])
        case finished(Result<Value, any Error>)
    }

    init(group: ChainGroup, previous: (any ChainLink)?) {
        lazyGroup = AtomicLazyReference()
        _ = lazyGroup.storeIfNil(group)
        self.previous = previous
        state = .pending(followers: [])
        stepBegan = false
        cancellerKey = 0
        // The key is stored under the lock it is registered under: a `cancel()` from another
        // thread may call the canceller, which reads it, before this initializer returns.
        let canceller: @Sendable () -> Void = { [weak self] in self?.complete(.failure(CancellationError())) }
        let isRegistered = group.mutex.withLock { () -> Bool in
            guard let key = group.addLocked(canceller) else { return false }
            cancellerKey = key
            return true
        }
        if !isRegistered { canceller() }
    }

    /// A first link whose step has run already (`.inline` and `.sync`): nothing is shared or
    /// allocated beyond the link itself until a `then`, `wait` or `cancel` needs it.
    @inlinable
    init(finished result: Result<Value, any Error>) {
        lazyGroup = AtomicLazyReference()
        previous = nil
        state = .finished(result)
        step = nil
        stepBegan = true
        cancellerKey = 0
    }

    /// Runs `work` with this step's value, as `method` says, once this step has finished.
    ///
    /// If this step failed or the chain was cancelled, `work` never runs and the returned link
    /// fails with the same error. `.sync(on:)` runs as `.async(on:)` here: nobody is blocked
    /// waiting for a step that follows another (``wait()`` is how to block for one).
    ///
    /// `work` is `@Sendable`: it waits in the chain until this step finishes, and whichever thread
    /// finishes this step (or cancels the chain) dispatches or releases it.
    ///
    /// - Returns: The link that carries `work`'s result.
    @discardableResult
    public func then<Next: Sendable>(
        _ method: DispatchMethod, _ work: @escaping @Sendable (Value) throws -> Next
    ) -> ExecutionChain<Next> {
        method.checkArguments()
        let next = ExecutionChain<Next>(group: group, previous: self)
        // Nobody waits for a step that follows another: a `.sync` one is queued like `.async`, so
        // that the thread finishing this step is not blocked, and a waiter can see where it waits.
        let method = if case .sync(let target) = method { DispatchMethod.async(on: target) } else { method }
        whenFinished { result in
            switch result {
            case .success(let value):
                method.dispatch(for: next) { try work(value) }
            case .failure(let error):
                next.complete(.failure(error))
            }
        }
        return next
    }

    /// Blocks the calling thread until this step has finished, and returns its value.
    ///
    /// Re-entry aware: if a step this link waits for is queued on a serial context that the
    /// calling thread holds (it runs that context's work, or work that the context's holder is
    /// blocked waiting for), or that the calling Swift task holds (it runs a
    /// ``ThrottledQueue/run(isolation:_:)``'s work), the step cannot wait for its context's queue: it runs
    /// without waiting (a delayed step once its time has come), where any re-entered work runs. On
    /// the calling thread, except for a thread-affine context (a ``DedicatedThread``, a serial
    /// queue, the main queue) whose work another thread runs: that thread is blocked in a wait
    /// that led here (A → B → a wait for a step on A), serves the step there, and this call waits
    /// for it. A wait that would close a cycle of blocked threads stops the
    /// process with a message naming it; so does a wait from inside a step of this chain that the
    /// waited-for step comes after (or is), which could never end.
    ///
    /// It blocks the calling thread, so async code awaits ``value`` instead.
    ///
    /// - Throws: The error of this step or of one before it, or `CancellationError` if the chain
    ///   was cancelled before this step ran.
    @available(*, noasync, message: "it blocks the thread; use 'try await chain.value' in async code")
    public func wait() throws -> Value {
        group.mutex.lock()
        defer { group.mutex.unlock() }
        // No binding outlives an inline run: it takes the claimed step out of `claimed`, so the
        // step's closure is released before the lock is taken again.
        var claimed: (PendingStep, @Sendable () -> Void)?
        while true {
            if case .finished(let result) = state { return try result.get() }
            if RunningSteps.contains(earliestUnfinished()) {
                group.mutex.unlock()
                preconditionFailure(
                    "deadlock: ExecutionChain.wait() from inside a step of the same chain, waiting for that step "
                        + "or one after it: the step cannot finish while it waits")
            }
            claimed = claimStepToRunInline()
            if claimed != nil {
                group.mutex.unlock()
                Self.runHeld(claimed.take()!)
                group.mutex.lock()
                continue
            }
            if let context = waitedForStep()?.context {
                ExecutionContexts.blocking(for: context, kind: "chain") { _blockingWaitForChange() }
            } else {
                _blockingWaitForChange()
            }
        }
    }

    /// Runs a claimed step for a waiter that holds the step's context, by rule 1 of re-entry (see
    /// ``ExecutionContexts/reenter(_:_:)``): a throttled queue's step as a nested `sync`, which
    /// waits out the queue's gap and counts as a start; a thread-affine context's step on the
    /// thread that runs that context's work, which serves it in its wait, when the waiter holds
    /// the context through other contexts (A → B → a wait for a step on A); else on the calling
    /// thread.
    private static func runHeld(_ claimed: (step: PendingStep, work: @Sendable () -> Void)) {
        claimed.step._blockingSleepUntilDue()
        guard let context = claimed.step.context else { return claimed.work() }
        if case .throttled(let queue) = context.kind {
            queue.sync(claimed.work)
        } else if !ExecutionContexts.reenter(context, claimed.work) {
            // Held by the task only, never by the thread: not reached for a context that is not a
            // throttled queue, but the step is claimed and must run.
            claimed.work()
        }
    }

    /// This step's value, once it has finished; the caller suspends, no thread blocks.
    ///
    /// Cancelling the awaiting task before this step has begun removes the step: it never runs,
    /// this link fails with `CancellationError` (so do the steps after it, which never run either),
    /// and so does this await. A step that has begun runs to its end, and the await returns its
    /// result. Steps before this one are not affected.
    ///
    /// Re-entry aware, as ``wait()`` is: a step this link waits for that is queued on a serial
    /// context the calling task holds (inside ``ThrottledQueue/run(isolation:_:)``'s work, for a step on that
    /// queue) can only run here, so it runs in the calling task, as a nested task of the queue.
    ///
    /// - Throws: The error of this step or of one before it, or `CancellationError` if the chain
    ///   or the awaiting task was cancelled before this step began.
    public var value: Value {
        get async throws {
            try await withTaskCancellationHandler {
                try await runHeldStepsInline()
                return try await withCheckedThrowingContinuation { continuation in
                    whenFinished { continuation.resume(with: $0) }
                }
            } onCancel: {
                cancelUnlessBegun()
            }
        }
    }

    /// For ``value``: runs in the calling task each step this link waits for that sits on a
    /// context the calling task holds (nobody else can run it), until none does. A delayed step is
    /// awaited, not slept for, until it is due.
    ///
    /// Only the task's holds count: a context the thread holds (a dedicated thread or a one-thread
    /// pool that runs the task's jobs) runs the step itself once the task suspends.
    private func runHeldStepsInline() async throws {
        while true {
            let (due, claimed) = group.mutex.withLock { () -> (MonotonicInstant?, (PendingStep, @Sendable () -> Void)?) in
                guard case .pending = state, let step = waitedForStep(), let context = step.context,
                      ThrottledQueue.Hold.taskHolds(context) else { return (nil, nil) }
                if let due = step.due, MonotonicInstant.now() < due { return (due, nil) }
                return (nil, step.claim().map { (step, $0) })
            }
            if let claimed {
                Self.runHeld(claimed)
            } else if let due {
                try await Task.sleep(for: MonotonicInstant.now().duration(to: due))
            } else {
                return
            }
        }
    }

    /// Cancels the chain, from any of its links: steps that have not started never run, and every
    /// link not finished yet fails at once with `CancellationError` (its waiters wake). A step that
    /// is running finishes; its result is not passed on.
    public func cancel() {
        group.cancel()
    }

    // MARK: - Internals

    /// Finishes this step with `result`, once; later results are ignored.
    func complete(_ result: Result<Value, any Error>) {
        finish(result, unlessBegun: false)
    }

    /// Fails this link with `CancellationError` if its step has not begun (the awaiting task of
    /// ``value`` was cancelled): the step never runs. A step that has begun runs to its end.
    func cancelUnlessBegun() {
        finish(.failure(CancellationError()), unlessBegun: true)
    }

    /// Runs this link's step, `work`, on the calling thread, unless the link has finished already
    /// (the chain was cancelled, or the task awaiting it was, before the step began), and finishes
    /// the link with its result. The thread is known to run a step of this link meanwhile, so that
    /// a ``wait()`` for it from inside is reported instead of hanging.
    func runStep(_ work: () throws -> Value) {
        let begins = group.mutex.withLock { () -> Bool in
            guard case .pending = state, !group.isCancelledLocked else { return false }
            stepBegan = true
            return true
        }
        guard begins else { return complete(.failure(CancellationError())) }
        complete(RunningSteps.running(self) { Result { try work() } })
    }

    /// Whether this link has finished; takes the chain's lock.
    var hasFinished: Bool {
        group.mutex.withLock { isFinished }
    }

    private func finish(_ result: Result<Value, any Error>, unlessBegun: Bool) {
        typealias Released = (PendingStep?, (@Sendable () -> Void)?, (any ChainLink)?, (@Sendable () -> Void)?)
        let (followers, released) = group.mutex.withLock {
            () -> ([@Sendable (Result<Value, any Error>) -> Void]?, Released) in
            guard case .pending(let followers) = state, !(unlessBegun && stepBegan) else { return (nil, (nil, nil, nil, nil)) }
            state = .finished(result)
            group.changed.broadcast()
            let unclaimedWork = step?.claim()
            return (followers, (step.take(), unclaimedWork, previous.take(), group.removeCanceller(cancellerKey)))
        }
        // An unclaimed step's work (it will never run), the earlier links' values and this link's
        // canceller are released here, not under the lock.
        withExtendedLifetime(released) {}
        for follower in followers ?? [] { follower(result) }
    }

    /// Records this link's step, dispatched and not yet started, for waiters that may run it inline.
    func dispatched(_ pendingStep: PendingStep) {
        let earlier: (any ChainLink)? = group.mutex.withLock {
            guard case .pending = state else { return nil }
            step = pendingStep
            group.changed.broadcast()
            return previous.take()
        }
        withExtendedLifetime(earlier) {}  // released here, not under the lock
    }

    /// Calls `follower` with the result: at once (on this thread) if finished, else when it comes.
    private func whenFinished(_ follower: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        let result: Result<Value, any Error>? = group.mutex.withLock {
            switch state {
            case .pending(var followers):
                followers.append(follower)
                state = .pending(followers: followers)
                return nil
            case .finished(let result):
                return result
            }
        }
        if let result { follower(result) }
    }

    @usableFromInline var isFinished: Bool {
        if case .finished = state { true } else { false }
    }

    @usableFromInline var pendingStep: PendingStep? { step }

    private func _blockingWaitForChange() {
        group.changed.wait(group.mutex)
    }
}

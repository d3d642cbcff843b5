import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
    // Sendable: `state` and `step` are guarded by `group.mutex`, which every link of a chain shares.

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
        group.add { [weak self] in self?.complete(.failure(CancellationError())) }
    }

    /// A first link whose step has run already (`.inline` and `.sync`): nothing is shared or
    /// allocated beyond the link itself until a `then`, `wait` or `cancel` needs it.
    @inlinable
    init(finished result: Result<Value, any Error>) {
        lazyGroup = AtomicLazyReference()
        previous = nil
        state = .finished(result)
        step = nil
    }

    /// Runs `work` with this step's value, as `method` says, once this step has finished.
    ///
    /// If this step failed or the chain was cancelled, `work` never runs and the returned link
    /// fails with the same error. `.sync(on:)` runs as `.async(on:)` here: nobody is blocked
    /// waiting for a step that follows another (``wait()`` is how to block for one).
    ///
    /// - Returns: The link that carries `work`'s result.
    @discardableResult
    public func then<Next: Sendable>(
        _ method: DispatchMethod, _ work: @escaping @Sendable (Value) throws -> Next
    ) -> ExecutionChain<Next> {
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
    /// blocked waiting for), the step can only run here, so it runs inline (a delayed step once its
    /// time has come). A wait that would close a cycle of blocked threads stops the process with a
    /// message naming it.
    ///
    /// - Throws: The error of this step or of one before it, or `CancellationError` if the chain
    ///   was cancelled before this step ran.
    public func wait() throws -> Value {
        group.mutex.lock()
        defer { group.mutex.unlock() }
        // No binding outlives an inline run: it takes the claimed step out of `claimed`, so the
        // step's closure is released before the lock is taken again.
        var claimed: (PendingStep, @Sendable () -> Void)?
        while true {
            if case .finished(let result) = state { return try result.get() }
            claimed = claimStepToRunInline()
            if claimed != nil {
                group.mutex.unlock()
                Self.runInline(claimed.take()!)
                group.mutex.lock()
                continue
            }
            if let context = waitedForStep()?.context {
                ExecutionContexts.blocking(for: context) { _blockingWaitForChange() }
            } else {
                _blockingWaitForChange()
            }
        }
    }

    /// Runs a claimed step on the calling thread, which holds the step's context: a throttled
    /// queue's step as a nested `sync`, which waits out the queue's gap and counts as a start.
    private static func runInline(_ claimed: (step: PendingStep, work: @Sendable () -> Void)) {
        claimed.step.sleepUntilDue()
        if case .throttled(let queue)? = claimed.step.context?.kind {
            queue.sync(claimed.work)
        } else {
            claimed.work()
        }
    }

    /// This step's value, once it has finished; the caller suspends, no thread blocks.
    public var value: Value {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                whenFinished { continuation.resume(with: $0) }
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
        let (followers, released) = group.mutex.withLock {
            () -> ([@Sendable (Result<Value, any Error>) -> Void]?, (PendingStep?, (any ChainLink)?)) in
            guard case .pending(let followers) = state else { return (nil, (nil, nil)) }
            state = .finished(result)
            group.changed.broadcast()
            return (followers, (step.take(), previous.take()))
        }
        // An unclaimed step's work and the earlier links' values are released here, not under the lock.
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

/// A link of a chain, seen from a waiter walking back to the step it waits for. Every call is made
/// with the chain's mutex held.
@usableFromInline
protocol ChainLink: AnyObject, Sendable {
    var previous: (any ChainLink)? { get }
    var isFinished: Bool { get }
    var pendingStep: PendingStep? { get }
}

extension ChainLink {
    /// The dispatched, unstarted step of the earliest unfinished link up to this one: the step
    /// whose run this link waits for. `nil` while that link's step is not dispatched yet.
    func waitedForStep() -> PendingStep? {
        var earliestUnfinished: any ChainLink = self
        var link = previous
        while let current = link, !current.isFinished {
            earliestUnfinished = current
            link = current.previous
        }
        return earliestUnfinished.pendingStep
    }

    /// The waited-for step, claimed, if it sits on a context the calling thread holds: only this
    /// thread can run it.
    func claimStepToRunInline() -> (PendingStep, @Sendable () -> Void)? {
        guard let step = waitedForStep(), let context = step.context, ExecutionContexts.holds(context),
              let work = step.claim() else { return nil }
        return (step, work)
    }
}

/// A step handed to its target and not yet started: whoever claims it first runs it, the target,
/// or a waiter that holds the target's context and so must run it inline.
@usableFromInline
final class PendingStep: Sendable {
    /// The serial context the step was queued on, if any.
    let context: SerialContext?
    /// For a delayed step: not before this.
    let due: MonotonicInstant?
    private let work: Locked<(@Sendable () -> Void)?>

    init(context: SerialContext?, due: MonotonicInstant?, work: @escaping @Sendable () -> Void) {
        self.context = context
        self.due = due
        self.work = Locked(work)
    }

    /// The step's work, for the one caller that claims it first.
    func claim() -> (@Sendable () -> Void)? {
        work.withLock { $0.take() }
    }

    /// Sleeps until the step is due (never for a step without a delay).
    func sleepUntilDue() {
        guard let due else { return }
        var deadline = due.timespecValue
        while MonotonicInstant.now() < due {
            _ = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil)
        }
    }
}

/// What the links of one chain share: their lock, whether the chain was cancelled, and how to fail
/// each link then.
@usableFromInline
final class ChainGroup: @unchecked Sendable {
    // Sendable: `isCancelledFlag` and `cancellers` are guarded by `mutex`.
    let mutex = PThreadMutex()
    /// Broadcast when a link finishes or a step is dispatched, for waiters.
    let changed = MonotonicCondition()
    private var isCancelledFlag = false
    /// Fail each link with `CancellationError` (a link already finished ignores it).
    private var cancellers: [@Sendable () -> Void] = []

    var isCancelled: Bool { mutex.withLock { isCancelledFlag } }

    /// Registers a link's canceller; called at once if the chain is cancelled already.
    func add(_ canceller: @escaping @Sendable () -> Void) {
        let cancelNow = mutex.withLock {
            if !isCancelledFlag { cancellers.append(canceller) }
            return isCancelledFlag
        }
        if cancelNow { canceller() }
    }

    func cancel() {
        let cancellers: [@Sendable () -> Void] = mutex.withLock {
            guard !isCancelledFlag else { return [] }
            isCancelledFlag = true
            defer { self.cancellers = [] }
            return self.cancellers
        }
        for canceller in cancellers { canceller() }
    }
}

/// Runs a step when its target does, or fails it when its target drops it unrun
/// (``ThreadPool/disposeNow()``, ``DedicatedThread/disposeNow()``, ``ThrottledQueue/cancelAll()``),
/// so that nobody waits for it forever. The closure given to the target is its only other holder.
final class DropWatch: Sendable {
    private let step: PendingStep
    private let onDrop: @Sendable () -> Void

    init(_ step: PendingStep, onDrop: @escaping @Sendable () -> Void) {
        self.step = step
        self.onDrop = onDrop
    }

    /// Runs the step if nobody claimed it yet.
    func run() {
        step.claim()?()
    }

    deinit {
        // Unclaimed at the end: the target let go of it without running it.
        if step.claim() != nil { onDrop() }
    }
}

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
public final class ExecutionChain<Value: Sendable>: @unchecked Sendable {
    // Sendable: `state` is guarded by `mutex`.

    let group: ChainGroup
    private let mutex = PThreadMutex()
    private let finished = MonotonicCondition()
    private var state = State.pending(followers: [])

    private enum State {
        /// Not finished: what to call with the result once it comes.
        case pending(followers: [@Sendable (Result<Value, any Error>) -> Void])
        case finished(Result<Value, any Error>)
    }

    init(group: ChainGroup) {
        self.group = group
        group.add { [weak self] in self?.complete(.failure(CancellationError())) }
    }

    /// Runs `work` with this step's value, as `method` says, once this step has finished.
    ///
    /// If this step failed or the chain was cancelled, `work` never runs and the returned link
    /// fails with the same error.
    ///
    /// - Returns: The link that carries `work`'s result.
    @discardableResult
    public func then<Next: Sendable>(
        _ method: DispatchMethod, _ work: @escaping @Sendable (Value) throws -> Next
    ) -> ExecutionChain<Next> {
        let next = ExecutionChain<Next>(group: group)
        whenFinished { result in
            switch result {
            case .success(let value):
                method.dispatch(for: next.group, complete: next.complete) { try work(value) }
            case .failure(let error):
                next.complete(.failure(error))
            }
        }
        return next
    }

    /// Blocks the calling thread until this step has finished, and returns its value.
    ///
    /// - Throws: The error of this step or of one before it, or `CancellationError` if the chain
    ///   was cancelled before this step ran.
    public func wait() throws -> Value {
        try mutex.withLock { () throws -> Value in
            while true {
                if case .finished(let result) = state { return try result.get() }
                finished.wait(mutex)
            }
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
        let followers: [@Sendable (Result<Value, any Error>) -> Void]? = mutex.withLock {
            guard case .pending(let followers) = state else { return nil }
            state = .finished(result)
            finished.broadcast()
            return followers
        }
        for follower in followers ?? [] { follower(result) }
    }

    /// Calls `follower` with the result: at once (on this thread) if finished, else when it comes.
    private func whenFinished(_ follower: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        let result: Result<Value, any Error>? = mutex.withLock {
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
}

/// What the links of one chain share: whether it was cancelled, and how to fail each link then.
final class ChainGroup: Sendable {
    private struct State {
        var isCancelled = false
        /// Fail each link with `CancellationError` (a link already finished ignores it).
        var cancellers: [@Sendable () -> Void] = []
    }

    private let state = Locked(State())

    var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Registers a link's canceller; called at once if the chain is cancelled already.
    func add(_ canceller: @escaping @Sendable () -> Void) {
        let cancelNow = state.withLock { state in
            if !state.isCancelled { state.cancellers.append(canceller) }
            return state.isCancelled
        }
        if cancelNow { canceller() }
    }

    func cancel() {
        let cancellers: [@Sendable () -> Void] = state.withLock { state in
            guard !state.isCancelled else { return [] }
            state.isCancelled = true
            defer { state.cancellers = [] }
            return state.cancellers
        }
        for canceller in cancellers { canceller() }
    }
}

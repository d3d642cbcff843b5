/// One ``DedicatedThread/run(_:)`` call: its work and its caller, joined to the caller's
/// cancellation.
///
/// Exactly one of ``start()`` and ``end(throwing:)`` takes the work and the continuation: the
/// thread starting the work, or its end without running (the caller's cancellation, a dropped or
/// refused submission). The work is released by whoever took it, outside the lock.
final class RunCall<T: Sendable>: Sendable {
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

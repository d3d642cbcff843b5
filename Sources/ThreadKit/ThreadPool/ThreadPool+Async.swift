extension ThreadPool {
    /// Runs `work` on a pool thread and suspends (without blocking a thread) until it has run.
    ///
    /// `work` is `sending`: it runs once, on one pool thread, so it may use non-Sendable values
    /// the caller made and hands over (code on an actor can pass a value it created, and no longer
    /// touches it); it cannot use the caller's actor-isolated state, which lives elsewhere.
    ///
    /// If the calling task is already cancelled, the work is not submitted; if it is cancelled
    /// before a thread takes the work, the work is removed from the queue. Either way the work never
    /// runs and this throws `CancellationError`. Once started, the work runs to its end.
    ///
    /// When the queue is full (`queueLimit`), the policy ``OverflowPolicy/reject`` throws, and both
    /// ``OverflowPolicy/block`` and ``OverflowPolicy/runOnCaller`` suspend the caller until the queue
    /// has room: an async caller's thread belongs to Swift's small cooperative pool, which must
    /// never be blocked, nor kept busy by the work itself.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or a ``ThreadPoolError`` if the pool refused
    ///   the work or ``disposeNow()`` dropped it before it started.
    public func run<T: Sendable>(_ work: sending @escaping () throws -> T) async throws -> T {
        let work = SendingWork(work)
        // Without this, a cancelled caller would hand its work to an idle thread, which claims it
        // at once: too late for the cancellation to remove it.
        try Task.checkCancellation()
        let link = CancellationLink<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                // Exactly one of three resumes the caller: the work running, the cancellation
                // removing it from the queue, or disposeNow() abandoning it.
                let task = ScheduledTask(
                    pool: self, work: { continuation.resume(with: Result { try work() }) },
                    onAbandon: { [name] in continuation.resume(throwing: ThreadPoolError.disposed(pool: name)) })
                do {
                    try submit(.task(task), waiting: .suspend)
                } catch {
                    continuation.resume(throwing: error)
                    return
                }
                link.attach(task, continuation)
            }
        } onCancel: {
            link.cancel()
        }
    }
}

/// Joins a `run` call's task cancellation to its scheduled work, whichever comes first.
///
/// `ScheduledTask.cancel()` succeeds only while the work has not started, so exactly one of the
/// work and the cancellation resumes the continuation.
private final class CancellationLink<T: Sendable>: Sendable {
    private enum Phase {
        case waiting
        case scheduled(ScheduledTask, CheckedContinuation<T, any Error>)
        case cancelled
    }

    private let phase = Locked(Phase.waiting)

    func attach(_ task: ScheduledTask, _ continuation: CheckedContinuation<T, any Error>) {
        let cancelledEarly = phase.withLock { phase in
            if case .cancelled = phase { return true }
            phase = .scheduled(task, continuation)
            return false
        }
        if cancelledEarly, task.cancel() {
            continuation.resume(throwing: CancellationError())
        }
    }

    func cancel() {
        let scheduled = phase.withLock { phase -> (ScheduledTask, CheckedContinuation<T, any Error>)? in
            defer { phase = .cancelled }
            if case .scheduled(let task, let continuation) = phase { return (task, continuation) }
            return nil
        }
        if let (task, continuation) = scheduled, task.cancel() {
            continuation.resume(throwing: CancellationError())
        }
    }
}

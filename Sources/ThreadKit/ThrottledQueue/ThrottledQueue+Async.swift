extension ThrottledQueue {
    /// Waits for this task's turn without blocking a thread, then runs `work` in the calling task.
    ///
    /// The start follows the queue's rules like any other task, and its end is reported when
    /// `work` returns or throws (which `.serial` counts from). If the calling task is cancelled
    /// before its turn, it leaves the queue, `work` never runs, and this throws `CancellationError`.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or ``ThreadPoolError/disposed(pool:)`` if
    ///   the queue's pool was disposed.
    public func run<T: Sendable>(_ work: @Sendable () async throws -> T) async throws -> T {
        let ticket = Ticket()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let refusal: (any Error)? = withMutex {
                    guard ticket.phase == .new else { return CancellationError() }
                    ticket.continuation = continuation
                    do {
                        try enqueue(.ticket(ticket), gap: nil)
                        return nil
                    } catch {
                        ticket.continuation = nil
                        return error
                    }
                }
                if let refusal { continuation.resume(throwing: refusal) }
            }
        } onCancel: {
            leave(ticket)?.resume(throwing: CancellationError())
        }
        let startedAt = MonotonicInstant.now()
        defer { endTask(startedAt: startedAt) }
        return try await work()
    }
}

extension ThrottledQueue {
    /// Waits for this task's turn without blocking a thread, then runs `work` in the calling task.
    ///
    /// The start follows the queue's rules like any other task, and its end is reported when
    /// `work` returns or throws (which `.serial` counts from). If the calling task is cancelled
    /// before its turn (or before the call), it leaves the queue, `work` never runs, and this throws
    /// `CancellationError`; once its turn has come, `work` runs to its end and this returns its
    /// result.
    ///
    /// Inside `work`, across its awaits and in the structured child tasks it starts (`async let`,
    /// task groups), the queue knows its task is running: a `sync` or `run` on the same queue, or
    /// work queued on it through ``DispatchMethod`` and waited for (``ExecutionChain/wait()``,
    /// ``ExecutionChain/value``, ``DispatchMethod/run(_:)``), is nested, waiting out its gap and
    /// running at once, ahead of queued tasks; `waitUntilIdle()` stops with a precondition failure
    /// instead of waiting forever. An unstructured `Task` started inside `work` is separate work,
    /// not the holder: it waits for its turn like any other caller.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or a ``ThreadPoolError`` if the queue's
    ///   pool refused its worker (it was disposed, or could not start a thread).
    public func run<T: Sendable>(_ work: @Sendable () async throws -> T) async throws -> T {
        let outer = Hold.ofTask
        let ticket = Ticket()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if let refusal = queueRun(ticket, continuation, within: outer) {
                    continuation.resume(throwing: refusal)
                }
            }
        } onCancel: {
            leave(ticket)?.resume(throwing: CancellationError())
        }
        let hold = Hold(queue: self, pool: nil, outer: outer, nestedIn: outer?.innermost(of: self))
        defer { endTask(startedAt: hold.startedAt, ticket: ticket) }
        return try await Hold.withTaskHold(hold) { try await work() }
    }
}

extension ThrottledQueue {
    /// Waits for this task's turn without blocking a thread, then runs `work` in the calling task.
    ///
    /// The start follows the queue's rules like any other task, and its end is reported when
    /// `work` returns or throws (which `.serial` counts from). If the calling task is cancelled
    /// before its turn (or before the call), it leaves the queue, `work` never runs, and this throws
    /// `CancellationError`; once its turn has come, `work` runs to its end and this returns its
    /// result.
    ///
    /// `work` runs in the calling task, on the caller's own actor (`isolation`, the caller's
    /// isolation by default), so it is neither `@Sendable` nor `sending`: code on an actor can use
    /// the actor's own state and its non-Sendable values in it, and get back a non-Sendable result.
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
    public func run<T>(
        isolation: isolated (any Actor)? = #isolation, _ work: () async throws -> T
    ) async throws -> T {
        let outer = Hold.ofTask
        let ticket = Ticket()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: Waiter) in
                if let refusal = queueRun(ticket, continuation, within: outer) {
                    continuation.resume(throwing: refusal)
                }
            }
        } onCancel: {
            leave(ticket)
        }
        let hold = Hold(queue: self, pool: nil, outer: outer, nestedIn: outer?.innermost(of: self))
        defer { endTask(startedAt: hold.startedAt, ticket: ticket) }
        return try await Hold.withTaskHold(hold) { try await work() }
    }

    /// A `run` caller waiting for the worker to start its turn.
    final class Ticket: @unchecked Sendable {
        // Sendable: `phase`, `continuation` and `nestedIn` are guarded by the queue's mutex.
        enum Phase { case new, queued, granted, ended, cancelled }
        var phase = Phase.new
        /// A `run` caller's, resumed when the worker starts it.
        var continuation: Waiter?
        /// For a nested `run`, the running task it is nested in, which it waits for if another task
        /// nested in it runs (see ``Hold/hasNestedTaskRunning``).
        var nestedIn: Hold?

        func takeContinuation() -> Waiter? {
            defer { continuation = nil }
            return continuation
        }
    }

    /// Queues a `run` caller, which the worker resumes when its turn comes; nested in this queue's
    /// running task if `outer` holds it.
    ///
    /// - Returns: Why it was not queued: it was cancelled already, or the pool refused a worker.
    private func queueRun(_ ticket: Ticket, _ continuation: Waiter, within outer: Hold?) -> (any Error)? {
        mutex.withLock { () -> (any Error)? in
            guard ticket.phase == .new else { return CancellationError() }
            let holder = outer?.innermost(of: self)
            if let holder { schedule.began(at: holder.startedAt) }
            ticket.nestedIn = holder
            do {
                try enqueueForWorker(.run(ticket), gap: nil, nested: holder != nil)
            } catch {
                return error
            }
            ticket.continuation = continuation
            ticket.phase = .queued
            return nil
        }
    }

    /// Takes a cancelled `run` caller out of the queue, if its turn has not come, and lets the
    /// worker re-decide (it goes back to its pool if nothing else is queued); the caller, if it was
    /// queued, throws `CancellationError`.
    private func leave(_ ticket: Ticket) {
        mutex.withLock { () -> Removal? in
            switch ticket.phase {
            case .new:
                ticket.phase = .cancelled
                return nil
            case .queued:
                return removeForWorker(where: { item in
                    if case .run(let queued) = item { queued === ticket } else { false }
                })
            case .granted, .ended, .cancelled:
                return nil
            }
        }?.resumeWaiters(throwing: CancellationError())
    }

    /// Suspends, without blocking a thread, until every accepted task has finished (not the gap
    /// after the last).
    ///
    /// The async twin of the blocking `waitUntilIdle()`, which differs from it only by `async`:
    /// in async code (an async function, an actor, a `Task` closure) `await queue.waitUntilIdle()`
    /// picks this one. In a `main.swift`'s top-level code Swift picks the blocking one instead and
    /// reports its `noasync` diagnostic (top-level code does not get the async overload of two
    /// that differ only by `async`): call this from an async function there, or name its type,
    /// `await (queue.waitUntilIdle as () async -> Void)()`. It is resumed when a task ends
    /// or leaves the queue and leaves it idle, as the blocking one is woken; on an idle queue it
    /// returns at once. Cancelling the awaiting task ends the wait at once, and the queue is not
    /// affected. Like the blocking one, it stops with a precondition failure when called where it
    /// could never end: from inside `run`'s work on this queue.
    public func waitUntilIdle() async {
        let waiter = EventWaiter()
        let idle = mutex.withLock {
            checkIdleWaitCanEnd()
            if schedule.isIdle { return true }
            idleWaiters.add(waiter)
            return false
        }
        if idle { return }
        _ = await waiter.wait(onCancel: { [self] in mutex.withLock { idleWaiters.remove(waiter) } })
    }
}

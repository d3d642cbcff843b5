extension ThrottledQueue {
    /// Who starts the tasks that the worker serves (`async` work and `run` callers).
    enum Worker {
        /// Nobody: no such task is queued.
        case none
        /// Submitted to this pool, waiting there for a thread.
        case waiting(in: ThreadPool)
        /// Running its loop on a pool thread.
        case driving
    }

    /// Queues `item`, which the worker starts, and makes sure a worker serves the queue. Mutex held.
    ///
    /// - Parameter nested: Whether `item` is nested in the running task (a `run` from inside `run`'s
    ///   work), to start ahead of the queue.
    /// - Throws: The pool's refusal; nothing is then queued.
    func enqueueForWorker(_ item: Item, gap: Duration?, nested: Bool) throws(ThreadPoolError) {
        if let refusal { throw refusal }
        if case .none = worker {
            try submitWorker(to: pool, onAbandon: { [self] in workerWasDropped() })
        }
        if nested { schedule.submitNested(item, gap: gap) } else { schedule.submit(item, gap: gap) }
        queuedForWorker += 1
        changed.signal()
    }

    /// Submits the worker to `workerPool`. Mutex held.
    ///
    /// The worker is submitted under the queue's mutex, so a refusing pool rejects exactly the item
    /// being queued and no other submitter can count on a worker that never comes. That is safe:
    /// the pool's submission calls out to nothing (not even a log delegate), and a task submitted
    /// past the queue limit neither blocks nor runs on the caller.
    ///
    /// The worker holds the queue until its loop ends, so a queue dropped with tasks queued still
    /// runs them all.
    private func submitWorker(to workerPool: ThreadPool, onAbandon: (@Sendable () -> Void)?) throws(ThreadPoolError) {
        let task = ScheduledTask(pool: workerPool, work: { [self] in runWorker(on: workerPool) }, onAbandon: onAbandon)
        try workerPool.submit(.task(task), ignoringLimit: true)
        worker = .waiting(in: workerPool)
    }

    /// Called by the pool's `disposeNow()`, outside its lock, when it dropped the worker before
    /// the worker ran: the pool is gone.
    ///
    /// What was accepted still runs, on a worker of the queue's own: a pool of one thread named
    /// after the queue, disposed at once so that its thread exits when the queue is drained. Later
    /// `async` and `run` calls throw ``ThreadPoolError/disposed(pool:)``; `sync` needs no worker.
    private func workerWasDropped() {
        let disposed = ThreadPoolError.disposed(pool: pool.name)
        var fallback: ThreadPool?
        var failure: ThreadPoolError?
        // Made before the mutex, as every component is (see `DiagnosticsRegistry`); unused, it
        // starts no thread and goes at the end of this call.
        let own = ThreadPool(name: label, size: 1, isListed: false)
        let removal = mutex.withLock { () -> Removal? in
            refusal = disposed
            worker = .none
            guard queuedForWorker > 0 else { return nil }
            do throws(ThreadPoolError) {
                try submitWorker(to: own, onAbandon: nil)
                fallback = own
                return nil
            } catch {
                // No thread to run them: they leave the queue, and `run` callers get the error.
                failure = error
                return removeForWorker(where: { _ in true })
            }
        }
        if let fallback {
            fallback.dispose()
            Log.log(.throttle, "\(label): ThreadPool '\(pool.name)' was disposed with the queue's worker waiting; the accepted tasks run on a thread of the queue's own")
        }
        if let failure, let removal {
            removal.resumeWaiters(throwing: failure)
            Log.log(.throttle, "\(label): ThreadPool '\(pool.name)' was disposed with the queue's worker waiting, and no thread of the queue's own could start (\(failure)): \(removal.removed.count) accepted tasks never run")
        }
    }

    /// The worker: starts the tasks it serves (`async` work, `run` callers) when the schedule
    /// allows, until none is queued; then its thread goes back to `workerPool`.
    private func runWorker(on workerPool: ThreadPool) {
        // The tasks awaiting idleness, once the last task ended: the loop ends then, as nothing
        // is queued, and they are resumed after the mutex.
        var idle = EventOccurred.none
        // Reported sleeping while it waits out a start or a task's end (once per wait, not per task).
        let activity = ThreadActivity.current
        mutex.lock()
        worker = .driving
        workerActivity = activity
        while queuedForWorker > 0 {
            guard let allowed = workerStart else {
                _blockingWaitForChange(activity)
                continue
            }
            guard let now = _blockingApproach(toStartAt: allowed, on: changed, reporting: activity) else { continue }
            queuedForWorker -= 1
            var work: (@Sendable () -> Void)?
            var granted: Waiter?
            switch schedule.start(at: now) {
            case .work(let closure):
                work = closure
            case .run(let ticket):
                ticket.phase = .granted
                ticket.nestedIn?.hasNestedTaskRunning = true
                granted = ticket.takeContinuation()
            case .sync:
                preconditionFailure("ThrottledQueue '\(label)': the worker started a sync caller's turn")
            }
            workerRunsTask = work != nil
            mutex.unlock()
            granted?.resume()
            if work != nil {
                // The closure is released with this call's argument, before the mutex is taken
                // again: a capture's deinit may use the queue.
                let (startedAt, endedAt) = perform(work.take()!, on: workerPool)
                if let coordination { reportEnd(to: coordination, at: endedAt) }
                mutex.lock()
                workerRunsTask = false
                schedule.end(at: endedAt, startedAt: startedAt)
                wakeWaiters()
                idle.append(takeIdleWaiters())
            } else {
                mutex.lock()
            }
        }
        worker = .none
        workerActivity = nil
        let unused = _takeUnusedReservation()
        mutex.unlock()
        handBack(unused)
        idle.resumeWaiters()
    }

    /// When the worker may start the next task, as the schedule says; `nil` while that start is
    /// not the worker's to make. Mutex held.
    ///
    /// It is not while a task runs, or a `sync` caller is next (that caller starts its own turn),
    /// or the next is a nested `run` whose holder runs another nested task: each of those ends
    /// with a signal of `changed`.
    private var workerStart: MonotonicInstant? {
        guard case .startAt(let allowed) = schedule.nextStart(), let next = schedule.next else { return nil }
        switch next {
        case .work:
            return allowed
        case .run(let ticket):
            return ticket.nestedIn?.hasNestedTaskRunning == true ? nil : allowed
        case .sync:
            return nil
        }
    }

    /// Runs an `async` task's work on the worker's thread, which holds the queue meanwhile. Mutex
    /// not held.
    ///
    /// - Returns: When the work began and when it ended.
    private func perform(_ work: @Sendable () -> Void, on workerPool: ThreadPool) -> (MonotonicInstant, MonotonicInstant) {
        let hold = Hold(queue: self, pool: workerPool, outer: Hold.ofThread)
        Hold.withThreadHold(hold) { work() }
        return (hold.startedAt, MonotonicInstant.now())
    }

    /// Sleeps until the worker has something to decide again, reported sleeping. Mutex held.
    private func _blockingWaitForChange(_ activity: ThreadActivity) {
        activity.sleeping()
        changed.wait(mutex)
        activity.running("task")
    }
}

extension ThreadPool {
    /// Refuses new work, runs what is already queued, then lets every thread exit.
    ///
    /// Returns at once; ``awaitTermination(timeout:)`` waits for the end. Submitters blocked on a
    /// full queue get ``ThreadPoolError/disposed(pool:)``, and so do ``run(_:)`` callers still
    /// waiting for room in it. Calling it again does nothing.
    public func dispose() {
        mutex.lock()
        let intake = readIntake()
        guard let shutdown = decide({ $0.dispose(intake) }) else { return mutex.unlock() }
        let released = closeIntake(for: shutdown)
        mutex.unlock()
        released.carryOut(waking: shutdown.sleepers)
        help(shutdown.helper)
        Log.log(.threadPool, "\(name): disposed; running the \(statistics.queuedTasks) queued tasks first")
    }

    /// Refuses new work and hands back every task that had not started.
    ///
    /// Tasks already running finish; then the threads exit. The returned tasks are cancelled
    /// (``ScheduledTask/isCancelled`` is `true`, waiters wake), in the order they were accepted;
    /// tasks submitted with ``execute(_:)`` come back as new handles, and a
    /// ``DispatchMethod/after(_:on:)`` step that waited for room in a full queue comes back after
    /// them (its chain fails with `CancellationError`). Queued Swift task jobs (the
    /// pool as a `TaskExecutor`) are not handed back but moved to the global concurrent executor,
    /// and ``run(_:)`` calls whose work had not started throw ``ThreadPoolError/disposed(pool:)``,
    /// so no Swift task is left suspended forever. Every closure handed back is released after the
    /// pool's lock is let go, so a capture's `deinit` may use the pool.
    ///
    /// - Returns: The tasks that will never run; empty if the pool was already stopped.
    public func disposeNow() -> [ScheduledTask] {
        mutex.lock()
        let intake = readIntake()
        guard let shutdown = decide({ $0.disposeNow(intake) }) else {
            mutex.unlock()
            return []
        }
        var released = closeIntake(for: shutdown)
        var handedBack: [ScheduledTask] = []
        var jobs: [UnownedJob] = []
        // The intake is closed: these are all the tasks that will ever be queued, less those a
        // thread takes meanwhile (they start, and so are not handed back).
        while let work = self.intake.pop() {
            switch work {
            case .job(let job):
                // A Swift task's job is not the caller's to take back; it must run somewhere.
                jobs.append(job)
            case .closure(let closure):
                let task = ScheduledTask(pool: nil, work: closure)
                _ = task.handBack()
                handedBack.append(task)
            case .task(let task):
                // A task the user cancelled a moment ago is theirs already; they count it.
                guard task.handBack() else {
                    deadEntries.wrappingSubtract(1, ordering: .relaxed)
                    continue
                }
                if let abandon = task.takeAbandonHandler() {
                    released.abandoned.append((task, abandon))
                } else {
                    handedBack.append(task)
                }
            }
        }
        // Tasks that waited for room were accepted after every queued one.
        handedBack += released.handedBack
        released.handedBack = []
        // With no thread left (a start that failed), draining the intake may end the pool.
        if machine.isTerminated(readIntake()) { released.terminated.append(announceTermination()) }
        mutex.unlock()
        for task in handedBack { task.releaseHandedBack() }
        released.carryOut(waking: shutdown.sleepers)
        for job in jobs { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
        Log.log(.threadPool, "\(name): disposed now; handed back \(handedBack.count) tasks, moved \(jobs.count) Swift task jobs to the global executor")
        return handedBack
    }

    /// Blocks until a disposed pool's threads have all exited, or `timeout` has passed.
    ///
    /// A thread counts as exited once it has done its last piece of ThreadKit work (its log line
    /// included): after this returns `true`, the pool calls nothing of yours again. It blocks the
    /// calling thread, so async code awaits ``awaitTermination()`` instead.
    ///
    /// - Parameter timeout: The longest to wait; not negative. Zero: it checks once and does not
    ///   wait (as Java's `ExecutorService.awaitTermination` does); far out: as long as it takes.
    /// - Returns: `true` if the pool was disposed and has no threads left, `false` on timeout
    ///   (including when the pool was never disposed).
    @available(*, noasync, message: "it blocks the thread; use 'await awaitTermination()' in async code")
    public func awaitTermination(timeout: Duration) -> Bool {
        precondition(timeout >= .zero, "ThreadPool '\(name)'.awaitTermination(timeout:): timeout must not be negative, got \(timeout)")
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        return mutex.withLock {
            if machine.isTerminated(readIntake()) { return true }
            if MonotonicInstant.now() >= deadline { return false }
            return ThreadActivity.current.blocked("termination", on: self) {
                while !machine.isTerminated(readIntake()) {
                    if MonotonicInstant.now() >= deadline { return false }
                    threadsGone.wait(mutex, until: deadline)
                }
                return true
            }
        }
    }

    /// Suspends, without blocking a thread, until a disposed pool's threads have all exited.
    ///
    /// The async twin of ``awaitTermination(timeout:)``: it is resumed by the exit of the pool's
    /// last thread, as that call is woken, and after it returns `true` the pool calls nothing of
    /// yours again. Called after the pool has ended, it returns `true` at once. It waits for the
    /// pool to be disposed first, so a pool that is never disposed (or never let go of) keeps it
    /// waiting; to bound the wait, cancel the awaiting task (for example from a task group with a
    /// timer child).
    ///
    /// Cancelling the awaiting task ends the wait at once; the pool is not affected.
    ///
    /// - Returns: `true` once the pool was disposed and has no threads left; `false` if the
    ///   awaiting task was cancelled first.
    @discardableResult
    public func awaitTermination() async -> Bool {
        let waiter = EventWaiter()
        let terminated = mutex.withLock {
            if machine.isTerminated(readIntake()) { return true }
            terminationWaiters.add(waiter)
            return false
        }
        if terminated { return true }
        return await waiter.wait(onCancel: { [self] in mutex.withLock { terminationWaiters.remove(waiter) } })
    }

    /// The pool has ended: wakes the threads blocked in ``awaitTermination(timeout:)`` and takes
    /// out the tasks suspended in ``awaitTermination()``, to resume once the mutex is let go.
    /// Mutex held.
    func announceTermination() -> EventOccurred {
        threadsGone.broadcast()
        return terminationWaiters.takeAll()
    }

    /// What a shutdown releases once the mutex is let go: the ``run(_:)`` calls that waited for
    /// room fail, and the other tasks that waited for room are released.
    private struct Released {
        var abandoned: [(task: ScheduledTask, handler: @Sendable () -> Void)] = []
        /// Tasks that waited for room with no abandon handler (a ``DispatchMethod/after(_:on:)``
        /// step, see ``DispatchTarget/submitWithoutWaiting(_:)``), handed back: `disposeNow()`
        /// returns them with the queued tasks; either way their work is released here, after
        /// unlocking, since releasing it may fail a chain and so call its followers.
        var handedBack: [ScheduledTask] = []
        /// The tasks suspended in ``awaitTermination()``, if the shutdown ended the pool.
        var terminated = EventOccurred.none

        /// Wakes the sleeping workers (they see the shutdown and exit) and the tasks awaiting the
        /// pool's end, then releases.
        func carryOut(waking sleepers: [Worker]) {
            for worker in sleepers { worker.wakeUp.post() }
            terminated.resumeWaiters()
            for (task, handler) in abandoned {
                handler()
                task.releaseHandedBack()
            }
            for task in handedBack { task.releaseHandedBack() }
        }
    }

    /// Carries out the locked part of a shutdown: closes the intake, wakes blocked submitters
    /// (they throw), and hands back the tasks that waited for room. Mutex held.
    private func closeIntake(for shutdown: Machine.Shutdown) -> Released {
        intake.close()
        queueHasRoom.broadcast()
        var released = Released()
        if shutdown.poolTerminated { released.terminated = announceTermination() }
        for task in shutdown.waitingForRoom {
            // A task whose caller cancelled it a moment ago stays: its canceller takes it out.
            guard task.handBack() else {
                decide { $0.keepWaitingForRoom(task) }
                continue
            }
            if let handler = task.takeAbandonHandler() {
                released.abandoned.append((task, handler))
            } else {
                released.handedBack.append(task)
            }
        }
        return released
    }
}

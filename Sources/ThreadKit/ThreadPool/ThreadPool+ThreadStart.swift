extension ThreadPool {
    /// Whether the calling thread is one of this pool's threads.
    var isCurrentThreadMember: Bool {
        Self.memberOf.current == Unmanaged.passUnretained(self).toOpaque()
    }

    /// Each pool thread's pool. The pool outlives its threads: each holds it until it exits.
    private static let memberOf = ThreadLocalPointer()

    /// Carries a new thread's first work to it, once.
    final class FirstWork: @unchecked Sendable {
        // Sendable: written before the thread starts (which orders it), then taken by that thread alone.
        private var work: Work?

        init(_ work: Work?) {
            self.work = work
        }

        func take() -> Work? {
            work.take()
        }
    }

    /// Starts pool thread `number` (counted already by the state machine), with its first work or
    /// else to take work from the intake.
    ///
    /// If the system refuses the thread, the state machine decides where `work` goes
    /// (``StateMachine/threadStartFailed(carryingWork:_:)``): an idle thread, the intake (a
    /// running thread will take it), or, when the pool has no thread at all, back to its
    /// submitter as a thrown error. Nothing accepted is left without a thread to run it.
    func startThread(_ number: Int, firstWork work: Work?) throws(ThreadPoolError) {
        let fullName = "\(name) Thread\(number)"
        // The thread's closure lives as long as the thread, so it holds the first work only through
        // a handoff that the thread empties: a closure must not outlive its run.
        let handoff = FirstWork(work.map(claimed))
        do {
            try NamedThread.start(
                name: fullName, kernelName: NamedThread.kernelName(for: name, keepingSuffix: " Thread\(number)")
            ) { [self] in
                Self.memberOf.current = Unmanaged.passUnretained(self).toOpaque()
                if size == 1 { ExecutionContexts.holdForever(SerialContext(.pool(self))) }
                let worker = Worker(number: number)
                let id = mutex.withLock { decide { $0.threadStarted(worker) } }
                // Logged by the new thread: a submission never calls out to a log delegate, so callers
                // (a ThrottledQueue among them) may submit while holding a lock of their own.
                Log.log(.threadPool, "\(name): Thread\(number) started")
                runWorker(worker, id, firstWork: handoff)
            }
        } catch {
            _ = handoff.take()
            if case .task(let task) = work { task.unclaim() }
            try placeAfterFailedStart(of: number, work, errno: error.errno)
        }
    }

    /// Carries out the state machine's decision after thread `number` could not start. Queued
    /// work left with no thread gets one from a retry on ``TimerThread/shared``, a little later
    /// each time the system refuses, so nothing accepted waits for a thread that never comes.
    ///
    /// The failure is logged from the timer thread, never from the submitter, which may hold a
    /// lock of its own (a ``ThrottledQueue`` submits under its mutex).
    private func placeAfterFailedStart(of number: Int, _ work: Work?, errno: Int32) throws(ThreadPoolError) {
        var helper = Machine.Helper.none
        var retryAfter: Duration?
        var refused = false
        var terminated = EventOccurred.none
        mutex.lock()
        let intake = readIntake()
        switch decide({ $0.threadStartFailed(carryingWork: work != nil, intake) }) {
        case .enqueueWork(let found):
            _ = enqueue(work!, .decided(found))
            helper = found
        case .serveQueue(let found):
            helper = found
        case .noThreadLeft(let refusingWork, let retry, let poolTerminated):
            if poolTerminated { terminated = announceTermination() }
            retryAfter = retry
            refused = refusingWork
        }
        mutex.unlock()
        terminated.resumeWaiters()
        help(helper)  // never a start: another would fail too
        if Log.isEnabled(.threadPool) {
            let message = "\(name): Thread\(number) could not start (errno \(errno))"
            _ = try? TimerThread.shared.schedule(after: .zero) { Log.log(.threadPool, message) }
        }
        if let retryAfter {
            _ = try? TimerThread.shared.schedule(after: retryAfter) { [self] in retryThreadStart() }
        }
        if refused { throw .threadStartFailed(pool: name, errno: errno) }
    }

    /// Starts a thread for queued work that has none (its start failed), unless one exists by now.
    private func retryThreadStart() {
        help(mutex.withLock {
            let intake = readIntake()
            return decide { $0.startRetryDue(intake) }
        })
    }
}

import Synchronization

extension ThreadPool {
    /// How a submission that finds the queue full waits for room.
    enum Waiting {
        /// The submitting thread blocks (``execute(_:)``, ``schedule(_:)``).
        case blockThread
        /// The submission joins the calls waiting for room and the caller stays suspended (``run(_:)``).
        case suspend
    }

    /// Accepts `work`, or throws why not.
    ///
    /// - Parameters:
    ///   - ignoringLimit: Executor jobs skip `queueLimit`: blocking or refusing them would stall or
    ///     lose a Swift task.
    ///   - waiting: How to wait for room under ``OverflowPolicy/block``; a `.suspend` submission
    ///     must be a `.task` whose work resumes its caller.
    ///
    /// When every thread exists and the queue has no limit to check, the work goes onto the
    /// lock-free intake without the mutex (``enqueue(_:_:)``). Otherwise the state machine decides
    /// (``StateMachine/submit(from:_:)``): a free thread gets it, or the queue, or the policy for a
    /// full queue.
    func submit(_ work: consuming Work, ignoringLimit: Bool = false, waiting: Waiting = .blockThread) throws(ThreadPoolError) {
        if configuration.queueLimit == nil || ignoringLimit, threadCount.load(ordering: .relaxed) == configuration.size {
            guard let helper = enqueue(work, .findAfterPush) else { throw .disposed(pool: name) }
            help(helper)
            return
        }
        let submitter: Machine.Submitter
        if ignoringLimit {
            submitter = .ignoringLimit
        } else if case .suspend = waiting {
            guard case .task(let task) = work else { preconditionFailure("only a task can wait suspended") }
            submitter = .suspendedCall(task)
        } else {
            let mayWait = configuration.queueLimit == nil || configuration.overflowPolicy != .block || callerMayWaitForRoom
            submitter = .thread(mayWait: mayWait)
        }
        mutex.lock()
        while true {
            let intake = readIntake()
            switch decide({ $0.submit(from: submitter, intake) }) {
            case .waitForRoom:
                _blockingWaitForRoomInQueue()
                decide { $0.stoppedWaitingForRoom() }
                continue
            case .handOver(let worker):
                worker.assignment = claimed(work)
                mutex.unlock()
                worker.wakeUp.post()
            case .startThread(let number):
                mutex.unlock()
                try startThread(number, firstWork: work)
            case .enqueue(let helper):
                _ = enqueue(work, .decided(helper))
                mutex.unlock()
                help(helper)
            case .runOnCaller:
                mutex.unlock()
                perform(claimed(work), countingInto: completedCount)
            case .suspended:
                mutex.unlock()
            case .refuse(let error):
                mutex.unlock()
                throw error  // the refused work is released after unlocking
            }
            return
        }
    }

    /// How ``enqueue(_:_:)`` finds the thread for the work it pushes.
    enum ThreadForEntry {
        /// The state machine found it, under the mutex that the caller holds, before the push.
        case decided(Machine.Helper)
        /// Without the mutex: found after the push, from the idle word and the thread count.
        case findAfterPush
    }

    /// Pushes `work` onto the intake and returns the thread that will take it, for the caller to
    /// wake or start (``help(_:)``) once it holds no lock. Every push into the intake goes
    /// through here: a submission (with the mutex or without it), a suspended call let in when
    /// the queue gains room, and the work of a thread that failed to start.
    ///
    /// **Why no task is left without a thread.** A thread that is counted in `threadCount` and is
    /// not asleep on the idle list looks in the intake again before it can sleep or exit: a busy
    /// thread when its task ends, a new or woken thread when it runs, a spinner before it sleeps,
    /// and a thread about to sleep or exit has its last look after it announced itself as a
    /// sleeper or was uncounted (``ThreadPool/takeNextWork(for:_:)``). So a pushed task needs a
    /// thread found for it only when a worker sleeps or fewer than `size` threads exist:
    /// - With the mutex held (`.decided`), nothing of that changes meanwhile, and the state
    ///   machine decided from a reading taken before the push: a sleeper is woken, or a thread is
    ///   started while fewer than `size` exist; none only when every thread is counted and awake
    ///   (each looks again), or when the spinners outnumber the entries already waiting (each
    ///   looks again before it sleeps, under this mutex). It decides before the push because once
    ///   pushed, a spinner may take the work and leave the count, and a look after the push would
    ///   wake a sleeper for nothing. A worker whose last look before sleeping lets suspended calls
    ///   in does not sleep but carries out their helpers and looks again; one whose last look
    ///   before it exits does so counted again if it found work (so its helpers never start a
    ///   thread past `size`), or else carries them out as it leaves. After a failed start the
    ///   machine starts no other thread (it would fail too): with no thread left, the work is
    ///   never pushed but goes back to its submitter.
    /// - Without the mutex (`.findAfterPush`, only for ``submit(_:ignoringLimit:waiting:)``'s fast
    ///   path, once all `size` threads exist), the push, the loads of the idle word and of the
    ///   thread count after it are sequentially consistent, as are a worker's announcement as a
    ///   sleeper (or its uncounting as it exits) and its last look after that. Of the two threads,
    ///   whichever comes second sees the other's first step: the worker's look finds the task, or
    ///   these loads find the sleeper (woken unless the spinners will take every waiting task) or
    ///   the lower thread count (the state machine then finds a thread, under the mutex). With
    ///   sleepers, the queue's length is read before the idle word is read again: a spinner still
    ///   counted there has not popped yet, so the length holds everything it will take.
    ///
    /// - Returns: The thread to wake or start, or `nil` if the intake is closed and `work` was
    ///   dropped. That is only seen without the mutex: the intake closes under it, with the
    ///   lifecycle, and the machine checked the lifecycle before deciding.
    @inline(__always)
    func enqueue(_ work: consuming Work, _ thread: ThreadForEntry) -> Machine.Helper? {
        switch thread {
        case .decided(let helper):
            let refused = intake.push(work)
            precondition(refused == nil, "the intake closes only under the mutex, with the lifecycle")
            return helper
        case .findAfterPush:
            if let refused = intake.push(work) {
                _ = consume refused
                return nil
            }
            var idle = idleWorkers.current
            var sleeperNeeded = false
            if idle.sleepers > 0 {
                let waiting = intake.count
                idle = idleWorkers.current
                sleeperNeeded = idle.sleepers > 0 && waiting > idle.spinners
            }
            guard sleeperNeeded || threadCount.load(ordering: .sequentiallyConsistent) < configuration.size else {
                return Machine.Helper.none
            }
            return mutex.withLock {
                let intake = readIntake()
                return decide { $0.threadForPushedWork(intake) }
            }
        }
    }

    /// Wakes the worker, or starts the thread, that `helper` names: after the mutex is let go.
    func help(_ helper: Machine.Helper) {
        switch helper {
        case .none:
            break
        case .wake(let worker):
            worker.wakeUp.post()
        case .start(let number):
            try? startThread(number, firstWork: nil)  // it carries no work: nothing to refuse
        }
    }

    /// Carries out `room` under the mutex: pushes the calls it lets in, in order, and signals a
    /// blocked submitter. Their helpers follow after unlocking (``help(_:)-(Room)``).
    func admit(_ room: Machine.Room) {
        for admission in room.admitted { _ = enqueue(.task(admission.task), .decided(admission.helper)) }
        if room.signalsBlockedSubmitter { queueHasRoom.signal() }
    }

    /// Wakes or starts the threads found for the calls that `room` let in: after the mutex is let go.
    func help(_ room: Machine.Room) {
        for admission in room.admitted { help(admission.helper) }
    }

    /// Runs one event of the state machine and publishes what the lock-free paths read of it: the
    /// thread count and the sleepers. Mutex held; every change to the machine goes through here.
    @inline(__always)
    func decide<Action>(_ event: (inout Machine) -> Action) -> Action {
        let action = event(&machineStorage.pointee)
        let threads = machineStorage.pointee.threads
        if threads != threadCount.load(ordering: .relaxed) {
            threadCount.store(threads, ordering: .sequentiallyConsistent)
        }
        idleWorkers.publishSleepers(machineStorage.pointee.workers.sleeperCount)
        return action
    }

    /// The lock-free parts, read for an event. Mutex held. The intake's length is read before the
    /// spinners, as in ``enqueue(_:_:)``.
    func readIntake() -> Machine.IntakeReading {
        let entries = intake.count
        let queued = max(0, entries - deadEntries.load(ordering: .relaxed))
        return Machine.IntakeReading(entries: entries, queued: queued, spinners: idleWorkers.current.spinners)
    }

    /// `work`, with a task moved from pending to running: it is about to run for sure.
    func claimed(_ work: Work) -> Work {
        if case .task(let task) = work {
            let claimed = task.claim()
            assert(claimed, "a task is claimed once, before anyone else can see it")
        }
        return work
    }

    /// Whether the calling thread may block waiting for room in this pool's queue: not if it is
    /// one of the threads that make the room, a thread of this pool or one that holds this
    /// one-thread pool (its thread is blocked waiting for the caller).
    private var callerMayWaitForRoom: Bool {
        if isCurrentThreadMember { return false }
        return configuration.size != 1 || !ExecutionContexts.holds(SerialContext(.pool(self)))
    }

    /// Blocks until a task leaves the full queue or the pool shuts down. Mutex held.
    private func _blockingWaitForRoomInQueue() {
        guard configuration.size == 1 else {
            return ThreadActivity.current.blocked("full queue", on: self) { queueHasRoom.wait(mutex) }
        }
        // A wait for a one-thread pool takes part in the deadlock detector's cycles.
        ExecutionContexts.blocking(for: SerialContext(.pool(self)), kind: "full queue") { queueHasRoom.wait(mutex) }
    }

    /// Called by a pending task's ``ScheduledTask/cancel()``: it no longer waits for a thread.
    func queuedTaskWasCancelled(_ task: ScheduledTask) {
        mutex.lock()
        let intake = readIntake()
        guard case .leftIntake(let departed) = decide({ $0.queuedTaskCancelled(task, intake) }) else {
            return mutex.unlock()  // a run(_:) call that was waiting for room, never counted in the queue
        }
        deadEntries.wrappingAdd(1, ordering: .relaxed)
        carryOut(departed)
    }

    /// Runs a queued `task` on the calling thread, if no thread has taken it: for a waiter that
    /// holds this one-thread pool, which only it can run the task for.
    ///
    /// - Returns: `false` if the task was taken or cancelled already.
    func runInline(_ task: ScheduledTask) -> Bool {
        guard task.claim() else { return false }
        mutex.lock()
        let intake = readIntake()
        let departed = decide { $0.queuedTaskRanInline(intake) }
        // Its queue entry stays, to be skipped; it no longer counts as queued.
        deadEntries.wrappingAdd(1, ordering: .relaxed)
        carryOut(departed)
        task.runClaimed(countingInto: completedCount)
        return true
    }

    /// Carries out a task's departure from the queue and lets go of the mutex.
    private func carryOut(_ departed: Machine.Departed) {
        admit(departed.room)
        let terminated = departed.poolTerminated ? announceTermination() : .none
        mutex.unlock()
        terminated.resumeWaiters()
        help(departed.room)
    }
}

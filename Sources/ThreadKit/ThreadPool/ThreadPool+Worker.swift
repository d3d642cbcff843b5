import Synchronization

extension ThreadPool {
    /// One pool thread's mailbox: an idle worker sleeps on `wakeUp` until the state machine takes
    /// it off the idle list, with work handed over in `assignment` or to look in the intake.
    final class Worker: @unchecked Sendable {
        // Sendable: `assignment` is written under the pool's mutex while the worker sleeps on the
        // idle list, and taken by the worker under the mutex or after the post that ends that
        // sleep (the futex word's releasing store and acquiring load order the two: no other
        // write comes until it sleeps again); `unreportedSleep` is only the worker's own; the
        // rest are constants, atomics or the futex, which is shared by design.
        let number: Int
        /// The word the worker sleeps on, without the mutex; whoever takes it off the idle list
        /// posts it after letting go of the mutex (see ``ThreadPool/_blockingWaitForWork(_:_:until:)``).
        let wakeUp = Futex()
        /// Tasks this thread completed; only it writes, others read for ``ThreadPool/statistics``.
        let completed = Atomic<Int>(0)
        /// The thread's state as ``Diagnostics`` shows it: set when it spins, sleeps and wakes.
        let activity: ThreadActivity
        /// The ``ScheduledTask`` this thread runs now, as its address (0: none), so that a
        /// snapshot finds who holds a task waited for. Only this thread writes it (relaxed stores
        /// around a task with a handle); a snapshot reads it under the pool's mutex.
        let runningTask = Atomic<UInt>(0)
        /// Work a submitter handed over while the worker slept.
        var assignment: Work?
        /// How long the worker slept, when a post ended the sleep and it went on without the
        /// mutex: the state machine hears of it at the worker's next hold
        /// (``StateMachine/sleepEndedByPost(_:slept:)``).
        var unreportedSleep: Duration?

        /// Made on the worker's own thread, which it takes the activity of.
        init(number: Int) {
            self.number = number
            activity = ThreadActivity.current
            activity.running("task")
        }
    }

    /// The longest a worker that ran out of work watches for more before it sleeps.
    ///
    /// Waking a sleeping thread costs a system call for the submitter and several microseconds for
    /// the thread; a stream of short tasks would pay that per task. The spin is bounded, yields the
    /// core to any other runnable thread, and only one worker spins at a time, so an idle pool
    /// still settles into sleep at once. It shrinks to nothing while work keeps coming later than
    /// this (see ``SpinBudget``): sparse tasks do not pay a spin each.
    static let spinBeforeSleeping = Duration.microseconds(50)

    /// The body of every pool thread: run a task, take the next, until retired or shut down.
    ///
    /// No variable holds work that has run: `perform` gets a temporary that dies with the call, so
    /// an idle thread keeps nothing alive (a `while let work` binding would live on, in debug
    /// builds, through the wait for the next task).
    func runWorker(_ worker: Worker, _ id: WorkerID, firstWork: FirstWork) {
        var next = firstWork.take() ?? takeNextWork(for: worker, id)
        while next != nil {
            perform(next.take()!, countingInto: worker.completed, by: worker)
            next = takeNextWork(for: worker, id)
        }
    }

    /// Runs claimed work on the calling thread, and counts it into `completed`; on a worker's
    /// thread (`worker` given), a task with a handle is published in its `runningTask` while it
    /// runs (see ``ScheduledTask/holdingThread``).
    func perform(_ work: Work, countingInto completed: borrowing Atomic<Int>, by worker: Worker? = nil) {
        switch work {
        case .closure(let closure):
            closure()
            completed.wrappingAdd(1, ordering: .relaxed)
        case .task(let task):
            worker?.runningTask.store(UInt(bitPattern: ObjectIdentifier(task)), ordering: .relaxed)
            task.runClaimed(countingInto: completed)
            worker?.runningTask.store(0, ordering: .relaxed)
        case .job(let job):
            job.runSynchronously(on: asUnownedTaskExecutor())
            completed.wrappingAdd(1, ordering: .relaxed)
        }
    }

    /// The next claimed work for `worker`, waiting while idle; `nil` when the thread should exit.
    ///
    /// Work is popped from the intake without the mutex. Only a worker that found the intake
    /// empty takes the mutex: to spin (one worker at a time, ``StateMachine/spinBeforeSleeping(spinners:)``),
    /// then to sleep. Before it sleeps it is published on the idle list and looks in the intake
    /// once more; before it exits it is uncounted and looks once more (see ``enqueue(_:_:)``).
    ///
    /// A worker whose sleep a post ends goes on without the mutex: to the work handed to it, or
    /// else to a look in the intake (woken to look, or the pool shut down: either way a look is
    /// what it does first). The post alone says so — whoever posts decided under the mutex —
    /// and the state machine hears of the sleep at the worker's next hold, before anything else.
    private func takeNextWork(for worker: Worker, _ id: WorkerID) -> Work? {
        while true {
            if let work = takeQueuedWork() { return work }
            var spun = false
            mutex.lock()
            if let slept = worker.unreportedSleep.take() { decide { $0.sleepEndedByPost(id, slept: slept) } }
            if let budget = machine.spinBeforeSleeping(spinners: idleWorkers.current.spinners) {
                idleWorkers.addSpinner()
                mutex.unlock()
                worker.activity.spinning()
                if spinBrieflyForWork(for: budget) {
                    // No longer idle before it looks: a submitter that still counts it leaves its
                    // work to it, and it looks after this, so it finds that work or a sleeper is woken.
                    idleWorkers.removeSpinner()
                    worker.activity.running("task")
                    continue
                }
                // From spinning to sleeping under the mutex, so that a submitter holding it never
                // sees this thread as neither idle nor busy (and starts another thread instead).
                mutex.lock()
                idleWorkers.removeSpinner()
                spun = true
            }
            decide { $0.workerFallsAsleep(id) }
            let (found, look) = popQueuedWork()
            let idleSince = MonotonicInstant.now()
            let intake = readIntake()
            let (next, room) = decide { $0.lookedBeforeSleeping(id, look, intake, now: idleSince) }
            admit(room)
            switch next {
            case .stayAwake:
                // Work, or run() calls let in whose threads must be woken or started: not while
                // holding the mutex, so this thread does not sleep on it but looks again after.
                mutex.unlock()
                if spun { worker.activity.running("task") }
                help(room)
                if let found { return found }
                continue
            case .sleep(let retirement):
                worker.activity.sleeping()
                let end = _blockingWaitForWork(worker, id, until: retirement)
                worker.activity.running("task")
                let slept = idleSince.duration(to: .now())
                guard let end else {
                    // Posted, and the mutex not taken: the post was decided for this sleep.
                    worker.unreportedSleep = slept
                    if let work = worker.assignment.take() { return work }
                    continue
                }
                // The deadline came; a waker may have taken the worker off the idle list meanwhile.
                let postOnItsWay = end == .handedWork || end == .woken
                switch decide({ $0.sleepEnded(id, end, slept: slept) }) {
                case .runHandedWork:
                    let work = worker.assignment.take()
                    mutex.unlock()
                    awaitPostOnItsWay(worker)
                    return work
                case .lookAgain:
                    mutex.unlock()
                    if postOnItsWay { awaitPostOnItsWay(worker) }
                    continue
                case .leave(let exit):
                    return leave(worker, id, exit)
                }
            case .leave(let exit):
                return leave(worker, id, exit)
            }
        }
    }

    /// A worker leaves, uncounted already: it looks once more, as a sleeper does after it was
    /// published, since a submitter that still counted it (and so started no thread) may have
    /// queued work that only this look finds. Mutex held; released.
    ///
    /// It logs its exit only once that look has found nothing: a thread that logged "collected"
    /// never runs another task. It takes no more work, but the pool has not terminated until it
    /// has logged, so that ``awaitTermination(timeout:)`` and ``awaitTermination()`` cannot return
    /// before.
    private func leave(_ worker: Worker, _ id: WorkerID, _ exit: Machine.Exit) -> Work? {
        let (found, look) = popQueuedWork()
        let intake = readIntake()
        let (departure, room) = decide { $0.lookedBeforeLeaving(id, look, intake) }
        admit(room)
        if case .stay = departure {
            mutex.unlock()
            help(room)
            return found
        }
        completedCount.wrappingAdd(worker.completed.load(ordering: .relaxed), ordering: .relaxed)
        mutex.unlock()
        // The calls its look let in get their threads (a new one, in its place, if it was the last).
        help(room)
        switch exit {
        case .collected(let idle):
            Log.log(.threadPool, "\(name): collected \(name) Thread\(worker.number), idle for \(idle)")
        case .shutDown:
            Log.log(.threadPool, "\(name): Thread\(worker.number) exits, the pool is disposed")
        }
        mutex.withLock {
            let intake = readIntake()
            return decide({ $0.threadExited(intake) }) ? announceTermination() : .none
        }.resumeWaiters()
        return nil
    }

    /// The first queued work that was not cancelled, claimed; without the mutex. After taking or
    /// skipping, the state machine looks for room in a bounded queue.
    private func takeQueuedWork() -> Work? {
        let (work, look) = popQueuedWork()
        if look != .nothing, configuration.queueLimit != nil {
            mutex.lock()
            let intake = readIntake()
            let room = decide { $0.tasksLeftQueue(intake) }
            admit(room)
            mutex.unlock()
            help(room)
        }
        return work
    }

    /// Pops queued work until one is not cancelled, and claims it.
    ///
    /// - Returns: The work, and what the look found. Skipped entries matter too: a canceller's
    ///   own look for room reads the queue's length and its dead entries one after the other, and
    ///   this pop may fall between the two reads (it saw the entry still there, then no longer
    ///   dead), so the canceller can find the queue full that this pop has just emptied. The look
    ///   after the pop, under the mutex, sees both changes.
    private func popQueuedWork() -> (work: Work?, look: Machine.Look) {
        var look = Machine.Look.nothing
        while let work = intake.pop() {
            if case .task(let task) = work, !task.claim() {
                deadEntries.wrappingSubtract(1, ordering: .relaxed)  // cancelled or run while queued
                look = .onlyCancelled
                continue
            }
            return (work, .work)
        }
        return (nil, look)
    }

    /// Watches the intake, without the mutex, for a few microseconds.
    ///
    /// - Returns: Whether work appeared.
    private func spinBrieflyForWork(for budget: Duration) -> Bool {
        spinBriefly(for: budget) { !intake.isEmpty }
    }

    /// Waits for the post of a waker that took the worker off the idle list as its sleep's deadline
    /// came: the waker posts after letting go of the mutex (a moment later: it is on its way), and
    /// the post must not end a later sleep.
    private func awaitPostOnItsWay(_ worker: Worker) {
        worker.activity.sleeping()
        _ = worker.wakeUp.wait(until: .distantFuture)
        worker.activity.running("task")
    }

    /// Sleeps until a post ends the worker's sleep (work handed over, woken to look, the pool
    /// shut down) or `retirement` comes. Mutex held, `id` asleep on the idle list since this hold.
    ///
    /// The worker sleeps on its futex without the mutex, so a waker never runs into it: the
    /// waker changes the state machine under the mutex and posts the futex after letting go of
    /// it. The word is cleared under the mutex, in the hold that put the worker on the idle
    /// list, so every post decided for this sleep comes after the clearing, and the sleep ends
    /// at once or on the post. A post never outlives its sleep (a sleep whose deadline came as a
    /// waker took it waits for that post, in ``takeNextWork(for:_:)``; after a shutdown's post
    /// the worker never sleeps again), so a post always means this sleep: the worker reads
    /// nothing else to go on.
    ///
    /// - Returns: `nil` when posted, with the mutex not held; else how the state machine ended
    ///   the sleep (`timedOut` if it did not), with the mutex held.
    private func _blockingWaitForWork(_ worker: Worker, _ id: WorkerID, until retirement: MonotonicInstant) -> Machine.SleepEnd? {
        assert(machine.sleepEnd(of: id) == nil, "a worker sleeps in the hold that found it nothing to do")
        worker.wakeUp.reset()
        mutex.unlock()
        if worker.wakeUp.wait(until: retirement) { return nil }
        mutex.lock()
        return machine.sleepEnd(of: id) ?? .timedOut
    }
}

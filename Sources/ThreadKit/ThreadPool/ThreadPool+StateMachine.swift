extension ThreadPool {
    /// Every decision of the pool's slow path, as a pure value: where submitted work goes, which
    /// thread is woken or started for queued work, when a worker spins, sleeps or retires, what a
    /// failed thread start leaves behind, who gets room in a full queue, and what a shutdown does.
    ///
    /// Modelled on AsyncHTTPClient's `HTTPConnectionPool.StateMachine`: each event is a
    /// `mutating func` that returns what to do, and the threaded shell (``ThreadPool``) calls it
    /// with the pool's mutex held, then carries the action out — pushes onto the intake and
    /// signals under the mutex, wakes and thread starts after it, user code never under it. The
    /// machine reads no clock (times come in as arguments), starts no thread, takes no lock.
    ///
    /// The lock-free parts of the pool stay outside it: the intake (submitters push, workers pop
    /// without the mutex), the spinners (they come and go without it) and the count of cancelled
    /// entries. Each event that depends on them gets an ``IntakeReading`` the shell took, under
    /// the mutex, just before it. The shell publishes ``threads`` and the sleepers' count to the
    /// atomics its fast path reads after every event (see ``ThreadPool/decide(_:)``).
    ///
    /// Generic over the worker handle and the suspended task, so that tests drive it with plain values.
    struct StateMachine<Worker, Task: AnyObject> {
        /// The pool's life; it only moves down the list.
        enum Lifecycle: Equatable, Sendable {
            /// Accepting work.
            case running
            /// ``ThreadPool/dispose()`` was called: what is queued runs, then the threads exit.
            case draining
            /// ``ThreadPool/disposeNow()`` was called: the queue was handed back; threads exit
            /// after their task.
            case stopped
        }

        let configuration: Configuration
        private let collection: CollectionSchedule

        private(set) var lifecycle = Lifecycle.running
        /// Threads counted: started or starting, and not leaving. Published to the fast path.
        private(set) var threads = 0
        /// Threads that left and are logging it: uncounted, but the pool has not terminated.
        private(set) var exitingThreads = 0
        private(set) var workers = WorkerList<Worker>()
        /// ``ThreadPool/run(_:)`` calls waiting for room in a full queue, oldest first; not queued.
        private var waitingForRoom = RingBuffer<Task>()
        /// Threads blocked in ``ThreadPool/execute(_:)`` or ``ThreadPool/schedule(_:)`` on a full queue.
        private(set) var blockedSubmitters = 0
        /// How long the next worker to run out of work spins, learned from the last sleeps.
        private(set) var spinBudget = SpinBudget(ceiling: ThreadPool.spinBeforeSleeping)
        /// The most threads at once (``Statistics/peakThreads``): counted when a thread is about
        /// to start, and taken back to ``peakStarted`` if its start fails.
        private(set) var peakThreads = 0
        /// The most threads that had really started at once.
        private var peakStarted = 0
        /// Threads numbered so far: the next one is `threadsStarted + 1`.
        private(set) var threadsStarted = 0
        /// Threads that left the pool (collected when idle, or at shutdown).
        private(set) var threadsLeft = 0
        /// How long the next retry waits, after a thread start failed with work left unserved: it
        /// doubles with each failure and starts over once a thread starts.
        private var startRetryDelay = StateMachine.firstStartRetry

        /// The first wait before a retry to start a thread for stranded work; it doubles while the
        /// system keeps refusing, up to ``lastStartRetry``.
        static var firstStartRetry: Duration { .milliseconds(10) }
        static var lastStartRetry: Duration { .seconds(1) }

        init(_ configuration: Configuration, createdAt: MonotonicInstant) {
            self.configuration = configuration
            collection = CollectionSchedule(
                createdAt: createdAt, keepAlive: configuration.keepAlive, interval: configuration.collectionInterval)
        }

        // MARK: - Submitting

        /// Work is submitted with the mutex (the pool is still growing, or has a queue limit).
        mutating func submit(from submitter: Submitter, _ intake: IntakeReading) -> Placement {
            guard case .running = lifecycle else { return .refuse(.disposed(pool: configuration.name)) }
            if intake.entries < intake.spinners || threads < configuration.size || workers.sleeperCount > 0 {
                // A thread is free: no limit applies, as the work waits for nothing.
                return placeWithFreeThread(intake)
            }
            guard let limit = configuration.queueLimit, intake.queued >= limit else {
                return .enqueue(then: threadForNewEntry(intake))
            }
            switch (configuration.overflowPolicy, submitter) {
            case (_, .ignoringLimit):
                return .enqueue(then: threadForNewEntry(intake))
            case (.reject, _):
                return .refuse(.queueFull(pool: configuration.name, limit: limit))
            case (.runOnCaller, .thread), (.block, .thread(mayWait: false)):
                return .runOnCaller
            case (.block, .thread(mayWait: true)):
                blockedSubmitters += 1
                return .waitForRoom
            case (.block, .suspendedCall(let task)), (.runOnCaller, .suspendedCall(let task)):
                waitingForRoom.append(task)
                return .suspended
            }
        }

        /// A submitter that waited for room stopped waiting (room appeared, or the pool shut down).
        mutating func stoppedWaitingForRoom() {
            blockedSubmitters -= 1
        }

        /// Work was pushed without the mutex, and the pool may have to find it a thread: a worker
        /// sleeps, or a thread left since the submitter saw all `size`. `intake` counts the work.
        mutating func threadForPushedWork(_ intake: IntakeReading) -> Helper {
            threadForQueuedWork(entries: intake.entries, spinners: intake.spinners, mayStartThread: true)
        }

        // MARK: - Room in a bounded queue

        /// Tasks left the intake (a worker took one, or skipped cancelled ones): room may let in
        /// suspended calls and blocked submitters.
        mutating func tasksLeftQueue(_ intake: IntakeReading) -> Room {
            room(intake)
        }

        /// A pending task was cancelled by its caller.
        mutating func queuedTaskCancelled(_ task: Task, _ intake: IntakeReading) -> Cancellation {
            if !waitingForRoom.isEmpty, !waitingForRoom.removeAll(where: { $0 === task }).isEmpty {
                return .leftWaitingList
            }
            return .leftIntake(departed(intake))
        }

        /// A queued task was run by a waiter that holds this one-thread pool: its entry stays, to
        /// be skipped; the shell counts it as dead.
        mutating func queuedTaskRanInline(_ intake: IntakeReading) -> Departed {
            departed(intake)
        }

        // MARK: - Workers

        /// A new thread has started, before it logs or runs anything.
        mutating func threadStarted(_ worker: Worker) -> WorkerID {
            let id = workers.add(worker)
            peakStarted = max(peakStarted, workers.count)
            peakThreads = max(peakThreads, peakStarted)
            // The system starts threads again: a later failure retries soon.
            startRetryDelay = Self.firstStartRetry
            return id
        }

        /// The pool was made: the threads of ``Configuration/minimumThreads`` start now, numbered.
        mutating func startMinimumThreads() -> [Int] {
            (0..<configuration.minimumThreads).map { _ in countNewThread() }
        }

        /// A worker found the intake empty: how long it spins before it sleeps, if at all. Only
        /// one worker spins at a time, and none once the pool is disposed.
        func spinBeforeSleeping(spinners: Int) -> Duration? {
            guard case .running = lifecycle, spinners == 0, spinBudget.current > .zero else { return nil }
            return spinBudget.current
        }

        /// A worker goes on the idle list. The shell publishes it, then looks in the intake once
        /// more (``lookedBeforeSleeping(_:_:_:now:)``): a submitter that pushed before it was
        /// published cannot have woken it.
        mutating func workerFallsAsleep(_ id: WorkerID) {
            workers.fallAsleep(id)
        }

        /// The last look of a worker on the idle list, at `now`, found `look`.
        ///
        /// A worker that found work, or let suspended calls in, does not sleep: it runs the work,
        /// or looks again at once. While it decides, it is off the idle list, so that no call it
        /// lets in wakes it; one that only skipped cancelled entries counts, for the calls it
        /// lets in, as a spinner does (it looks again before anything else).
        mutating func lookedBeforeSleeping(
            _ id: WorkerID, _ look: Look, _ intake: IntakeReading, now: MonotonicInstant
        ) -> (BeforeSleep, Room) {
            guard look != .nothing else { return (sleepOrLeave(id, now: now), Room()) }
            workers.markBusy(id)
            var lookingAgain = intake
            if look == .onlyCancelled { lookingAgain.spinners += 1 }
            let room = room(lookingAgain)
            if look == .work || !room.admitted.isEmpty { return (.stayAwake, room) }
            // It was the newest sleeper (it fell asleep under this mutex hold): back in its place.
            workers.fallAsleep(id)
            return (sleepOrLeave(id, now: now), room)
        }

        /// Why a sleeping worker should stop waiting now, or `nil` while it sleeps on.
        func sleepEnd(of id: WorkerID) -> SleepEnd? {
            switch workers.rest(of: id) {
            case .handedWork: .handedWork
            case .wokenToLook: .woken
            case .asleep: lifecycle == .running ? nil : .poolShutDown
            case .busy: preconditionFailure("a worker that is not asleep does not wait")
            }
        }

        /// A worker's sleep ended after `slept`.
        mutating func sleepEnded(_ id: WorkerID, _ end: SleepEnd, slept: Duration) -> AfterSleep {
            spinBudget.slept(for: slept)
            switch end {
            case .handedWork:
                workers.markBusy(id)
                return .runHandedWork
            case .woken:
                workers.markBusy(id)
                return .lookAgain
            case .timedOut where threads <= configuration.minimumThreads:
                // One of the threads kept: it sleeps again, with no retirement while no more exist.
                workers.markBusy(id)
                return .lookAgain
            case .timedOut:
                return .leave(leave(id, .collected(idle: slept)))
            case .poolShutDown:
                return .leave(leave(id, .shutDown))
            }
        }

        /// A post ended a worker's sleep after `slept`, and the worker went on without the mutex:
        /// to the work handed to it, or to a look in the intake (woken to look, or the pool shut
        /// down, which leaves it on the idle list). It reports this at its next hold, before
        /// anything else; until then the machine keeps it as the post found it, which only the
        /// worker itself reads (``sleepEnd(of:)``, ``workerFallsAsleep(_:)``).
        mutating func sleepEndedByPost(_ id: WorkerID, slept: Duration) {
            let rest = workers.rest(of: id)
            precondition(
                rest == .handedWork || rest == .wokenToLook || (rest == .asleep && lifecycle != .running),
                "only a submitter that took the worker off the idle list, or a shutdown, posts it")
            spinBudget.slept(for: slept)
            workers.markBusy(id)
        }

        /// The last look of a leaving worker, uncounted already, found `look`.
        mutating func lookedBeforeLeaving(_ id: WorkerID, _ look: Look, _ intake: IntakeReading) -> (Departure, Room) {
            // A worker that stays counts again before calls are let in, so that the threads found
            // for them never make more than `size`; one that goes lets them have a thread in its place.
            if look == .work { threads += 1 }
            let room = look == .nothing ? Room() : room(intake)
            if look == .work { return (.stay, room) }
            workers.remove(id)
            exitingThreads += 1
            threadsLeft += 1
            return (.exit, room)
        }

        /// A thread that left has done its last piece of work (its log line): whether the pool
        /// has terminated with it.
        mutating func threadExited(_ intake: IntakeReading) -> Bool {
            exitingThreads -= 1
            return isTerminated(intake)
        }

        // MARK: - Starting threads

        /// The system refused to start thread `number`, which carried work or not.
        mutating func threadStartFailed(carryingWork: Bool, _ intake: IntakeReading) -> StartFailure {
            threads -= 1
            // The thread never existed: the peak goes back to what really started, and the
            // threads still starting.
            peakThreads = max(peakStarted, threads)
            // A pool disposed meanwhile takes no more work: the submitter hears of the failure.
            let canQueue = !carryingWork || lifecycle == .running
            if canQueue, threads > 0 {
                // Another start would fail too: a sleeper is woken, or a running thread takes it.
                if carryingWork { return .enqueueWork(then: threadForNewEntry(intake, mayStartThread: false)) }
                return .serveQueue(
                    threadForQueuedWork(entries: intake.entries, spinners: intake.spinners, mayStartThread: false))
            }
            let retryAfter = intake.queued > 0 ? nextStartRetry() : nil
            return .noThreadLeft(refusingWork: carryingWork, retryAfter: retryAfter, poolTerminated: isTerminated(intake))
        }

        /// The retry after a failed start is due: a thread for queued work that has none, unless
        /// one exists by now or the queue was handed back.
        mutating func startRetryDue(_ intake: IntakeReading) -> Helper {
            guard lifecycle != .stopped, threads == 0, intake.queued > 0 else { return .none }
            return .start(thread: countNewThread())
        }

        // MARK: - Shutting down

        /// ``ThreadPool/dispose()``: `nil` unless the pool was running.
        mutating func dispose(_ intake: IntakeReading) -> Shutdown? {
            guard case .running = lifecycle else { return nil }
            lifecycle = .draining
            var shutdown = beginShutdown(intake)
            // Queued work with no thread left to run it (the last start failed, and its retry has
            // not come yet): a thread starts for it now, so that the pool can end.
            if threads == 0, intake.queued > 0 { shutdown.helper = .start(thread: countNewThread()) }
            return shutdown
        }

        /// ``ThreadPool/disposeNow()``: `nil` if the pool was stopped already.
        mutating func disposeNow(_ intake: IntakeReading) -> Shutdown? {
            guard lifecycle != .stopped else { return nil }
            lifecycle = .stopped
            return beginShutdown(intake)
        }

        /// A task of ``Shutdown/waitingForRoom`` that could not be handed back, because its caller
        /// cancelled it a moment ago: it stays listed until its canceller takes it out.
        mutating func keepWaitingForRoom(_ task: Task) {
            waitingForRoom.append(task)
        }

        /// Disposed, with no thread left (none exiting either) and nothing queued (work left by a
        /// failed thread start still waits for the thread that serves it).
        func isTerminated(_ intake: IntakeReading) -> Bool {
            lifecycle != .running && threads == 0 && exitingThreads == 0 && intake.queued == 0
        }

        // MARK: - Internals

        /// Hands work to a sleeping worker or a new thread while nothing older waits and no worker
        /// spins, or else queues it with the thread that will take it.
        private mutating func placeWithFreeThread(_ intake: IntakeReading) -> Placement {
            if intake.entries == 0, intake.spinners == 0 {
                if let worker = workers.wakeMostRecent(as: .handedWork) { return .handOver(to: worker) }
                if threads < configuration.size { return .startThread(countNewThread()) }
            }
            return .enqueue(then: threadForNewEntry(intake))
        }

        /// The thread for an entry about to be pushed under the mutex, decided before the push:
        /// once pushed, a spinner may take it and leave the count, and a decision after the push
        /// would wake a sleeper for nothing. Spinners that outnumber the entries already waiting
        /// will take it (each looks again before it sleeps, under this mutex).
        private mutating func threadForNewEntry(_ intake: IntakeReading, mayStartThread: Bool = true) -> Helper {
            threadForQueuedWork(entries: intake.entries + 1, spinners: intake.spinners, mayStartThread: mayStartThread)
        }

        /// The thread that will take `entries` queued entries: the spinners if they are as many; a
        /// sleeper, woken; a new thread while fewer than `size` exist and `mayStartThread`; else
        /// none, when every thread is busy (each looks in the intake again when its task ends).
        private mutating func threadForQueuedWork(entries: Int, spinners: Int, mayStartThread: Bool) -> Helper {
            if entries <= spinners { return .none }
            if let worker = workers.wakeMostRecent(as: .wokenToLook) { return .wake(worker) }
            guard mayStartThread, threads < configuration.size else { return .none }
            switch lifecycle {
            case .running:
                return .start(thread: countNewThread())
            case .draining where threads == 0:
                // Work pushed just before the intake closed, after the last thread left: it still runs.
                return .start(thread: countNewThread())
            case .draining, .stopped:
                return .none
            }
        }

        /// Lets suspended calls into the queue while it has room, and says whether a blocked
        /// submitter may try again. Once shut down, the calls left waiting are their cancellers'
        /// to take out: the intake is closed.
        private mutating func room(_ intake: IntakeReading) -> Room {
            var room = Room()
            var intake = intake
            while case .running = lifecycle, !isFull(intake), let task = waitingForRoom.popFirst() {
                room.admitted.append(Admission(task: task, helper: threadForNewEntry(intake)))
                intake.entries += 1
                intake.queued += 1
            }
            room.signalsBlockedSubmitter = blockedSubmitters > 0 && !isFull(intake)
            return room
        }

        private func isFull(_ intake: IntakeReading) -> Bool {
            guard let limit = configuration.queueLimit else { return false }
            return intake.queued >= limit
        }

        /// A task left the intake's count, its entry left behind as dead.
        private mutating func departed(_ intake: IntakeReading) -> Departed {
            var intake = intake
            intake.queued = max(0, intake.queued - 1)
            // A worker that skipped this entry before it was counted dead saw one task too many.
            return Departed(room: room(intake), poolTerminated: isTerminated(intake))
        }

        /// A sleeper with nothing to do sleeps until its collector tick while the pool runs (with
        /// no end while no more than ``Configuration/minimumThreads`` exist), and leaves once it is
        /// disposed.
        private mutating func sleepOrLeave(_ id: WorkerID, now: MonotonicInstant) -> BeforeSleep {
            guard case .running = lifecycle else { return .leave(leave(id, .shutDown)) }
            if threads <= configuration.minimumThreads { return .sleep(until: .distantFuture) }
            return .sleep(until: collection.retirement(idleSince: now))
        }

        /// A worker leaves: off the idle list and uncounted, before its last look.
        private mutating func leave(_ id: WorkerID, _ exit: Exit) -> Exit {
            workers.markBusy(id)
            threads -= 1
            return exit
        }

        /// Counts a thread about to start, and returns its number. The peak counts it at once, so
        /// that the statistics never show more threads than their peak; a failed start takes it back.
        private mutating func countNewThread() -> Int {
            threads += 1
            threadsStarted += 1
            peakThreads = max(peakThreads, threads)
            return threadsStarted
        }

        /// Starts a shutdown: the sleepers are woken, the calls waiting for room taken out.
        private mutating func beginShutdown(_ intake: IntakeReading) -> Shutdown {
            Shutdown(
                sleepers: workers.sleepers, waitingForRoom: waitingForRoom.removeAll(),
                poolTerminated: isTerminated(intake))
        }

        /// The wait before the next retry to start a thread for stranded work.
        private mutating func nextStartRetry() -> Duration {
            let delay = startRetryDelay
            startRetryDelay = min(delay * 2, Self.lastStartRetry)
            return delay
        }
    }
}

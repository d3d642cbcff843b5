extension ThreadPool.StateMachine {
    // The events' inputs and actions. See ``ThreadPool/StateMachine`` for who calls what.

    /// The lock-free parts of the pool, as the shell read them under the mutex.
    struct IntakeReading: Equatable, Sendable {
        /// Entries in the intake, those of cancelled tasks included: what a spinner watches.
        var entries: Int
        /// Accepted tasks waiting for a thread: the entries less the cancelled ones.
        var queued: Int
        /// Workers spinning on the intake before they sleep.
        var spinners: Int
    }

    /// Which thread will take work in the intake: found under the mutex, woken or started after it.
    enum Helper {
        /// A running or spinning thread will.
        case none
        /// This sleeping worker, taken off the idle list, is woken to look in the intake.
        case wake(Worker)
        /// A new thread, counted already, starts with the intake.
        case start(thread: Int)
    }

    /// Who submits, and so how a full queue treats the submission.
    enum Submitter {
        /// ``ThreadPool/execute(_:)`` or ``ThreadPool/schedule(_:)``: under
        /// ``OverflowPolicy/block`` the calling thread waits for room, unless it may not
        /// (it is one of the threads the room waits for): then it runs the work itself.
        case thread(mayWait: Bool)
        /// ``ThreadPool/run(_:)``: under `.block` and `.runOnCaller` the task waits, with its
        /// caller suspended, in the list of calls waiting for room.
        case suspendedCall(Task)
        /// An executor job or a queue's worker: the limit does not apply.
        case ignoringLimit
    }

    /// Where submitted work goes.
    enum Placement {
        /// To this sleeping worker, taken off the idle list: the shell hands it the work and
        /// signals it after unlocking.
        case handOver(to: Worker)
        /// To a new thread, counted already, that starts with the work.
        case startThread(Int)
        /// Into the intake, pushed under the mutex; the helper is carried out after it.
        case enqueue(then: Helper)
        /// The calling thread runs it, at once.
        case runOnCaller
        /// The calling thread waits for room (counted as blocked), then reports
        /// ``stoppedWaitingForRoom()`` and submits again.
        case waitForRoom
        /// The suspended call now waits in the list of calls waiting for room.
        case suspended
        /// The submission throws.
        case refuse(ThreadPoolError)
    }

    /// A suspended call let into the queue, with the thread found for it.
    struct Admission {
        var task: Task
        var helper: Helper
    }

    /// What room appearing in a bounded queue does.
    struct Room {
        /// Suspended calls let in, oldest first: the shell pushes them, in order, under the
        /// mutex, and carries out their helpers after it.
        var admitted: [Admission] = []
        /// Whether the shell signals one submitter blocked on the full queue.
        var signalsBlockedSubmitter = false
    }

    /// What a look in the intake found.
    enum Look: Equatable, Sendable {
        /// Nothing at all.
        case nothing
        /// Only entries of cancelled tasks, skipped: the queue has more room.
        case onlyCancelled
        /// Work, claimed.
        case work
    }

    /// Why a worker leaves.
    enum Exit: Equatable, Sendable {
        /// Retired by the collector after being idle this long.
        case collected(idle: Duration)
        /// The pool was disposed.
        case shutDown
    }

    /// What a worker does after its last look before sleeping.
    enum BeforeSleep: Equatable, Sendable {
        /// It runs what it found, or looks again (it let calls in: it must not sleep on them).
        case stayAwake
        /// It sleeps until woken or until this instant, when the collector retires it.
        case sleep(until: MonotonicInstant)
        /// It leaves: no longer counted, it looks once more (``lookedBeforeLeaving(_:_:_:)``).
        case leave(Exit)
    }

    /// How a sleeping worker's wait ended.
    enum SleepEnd: Equatable, Sendable {
        /// A submitter handed it work.
        case handedWork
        /// A submitter took it off the idle list to look in the intake.
        case woken
        /// Its retirement came while it was still asleep.
        case timedOut
        /// The pool was disposed while it was asleep.
        case poolShutDown
    }

    /// What a worker does once its sleep ended.
    enum AfterSleep: Equatable, Sendable {
        /// It runs the work it was handed.
        case runHandedWork
        /// It looks in the intake again.
        case lookAgain
        /// It leaves: no longer counted, it looks once more (``lookedBeforeLeaving(_:_:_:)``).
        case leave(Exit)
    }

    /// What a leaving worker does after its last look.
    enum Departure: Equatable, Sendable {
        /// It found work: counted again, it runs it.
        case stay
        /// It exits; the pool waits for ``threadExited(_:)`` before it counts as terminated.
        case exit
    }

    /// What a failed thread start leaves behind.
    enum StartFailure {
        /// Other threads run: the work the thread was to start with goes into the intake, and
        /// the helper (a sleeper, never another start) finds it a thread.
        case enqueueWork(then: Helper)
        /// Other threads run and the thread carried no work: the helper serves what is queued.
        case serveQueue(Helper)
        /// No thread is left (or the pool was disposed): the work the thread carried, if any,
        /// goes back to its submitter as an error; queued work gets a retry after `retryAfter`.
        case noThreadLeft(refusingWork: Bool, retryAfter: Duration?, poolTerminated: Bool)
    }

    /// What a task leaving the queue by cancellation or inline run does.
    struct Departed {
        var room: Room
        /// Whether the pool has terminated with it (the shell broadcasts it).
        var poolTerminated: Bool
    }

    /// What a cancelled task was.
    enum Cancellation {
        /// A suspended call waiting for room, never counted in the queue: it is gone.
        case leftWaitingList
        /// An entry of the intake: the shell counts it as cancelled (a dead entry).
        case leftIntake(Departed)
    }

    /// What a shutdown does.
    struct Shutdown {
        /// Every sleeping worker, to be woken: they stay on the list until they see the shutdown.
        var sleepers: [Worker]
        /// The tasks that waited for room, oldest first, taken off the list: the shell hands
        /// each back, and returns those it cannot to ``keepWaitingForRoom(_:)`` (their callers
        /// cancelled them a moment ago and will take them out).
        var waitingForRoom: [Task]
        /// Whether the pool has terminated already (the shell broadcasts it).
        var poolTerminated: Bool
        /// For ``dispose()``: a thread for queued work that has none left.
        var helper = Helper.none
    }
}

extension ThreadPool.StateMachine.Helper: Equatable where Worker: Equatable {}
extension ThreadPool.StateMachine.Placement: Equatable where Worker: Equatable {}
extension ThreadPool.StateMachine.Admission: Equatable where Worker: Equatable, Task: Equatable {}
extension ThreadPool.StateMachine.Room: Equatable where Worker: Equatable, Task: Equatable {}
extension ThreadPool.StateMachine.StartFailure: Equatable where Worker: Equatable {}
extension ThreadPool.StateMachine.Departed: Equatable where Worker: Equatable, Task: Equatable {}
extension ThreadPool.StateMachine.Cancellation: Equatable where Worker: Equatable, Task: Equatable {}
extension ThreadPool.StateMachine.Shutdown: Equatable where Worker: Equatable, Task: Equatable {}

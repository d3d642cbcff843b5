import SeededRandom
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// The pool's decisions, event by event, in every lifecycle: a pure value driven with made-up
/// readings and instants, no threads, no clock. Workers are names; suspended calls are `Call`s.
@Suite("ThreadPool.StateMachine")
struct ThreadPoolStateMachineTests {
    typealias Machine = ThreadPool.StateMachine<String, Call>
    typealias Lifecycle = Machine.Lifecycle

    /// A suspended `run(_:)` call, equal only to itself.
    final class Call: Equatable, CustomStringConvertible {
        let description: String
        init(_ name: String) { description = name }
        static func == (lhs: Call, rhs: Call) -> Bool { lhs === rhs }
    }

    static let lifecycles: [Lifecycle] = [.running, .draining, .stopped]
    static let created = MonotonicInstant(nanoseconds: 1_000_000_000_000)

    static func configuration(
        size: Int = 2, queueLimit: Int? = nil, whenFull: ThreadPool.OverflowPolicy = .block
    ) -> ThreadPool.Configuration {
        ThreadPool.Configuration(
            name: "P", size: size, keepAlive: .seconds(10), collectionInterval: .seconds(15),
            queueLimit: queueLimit, overflowPolicy: whenFull)
    }

    /// A machine moved to `lifecycle` with nothing queued and no thread.
    static func machine(
        _ lifecycle: Lifecycle = .running, size: Int = 2, queueLimit: Int? = nil,
        whenFull: ThreadPool.OverflowPolicy = .block
    ) -> Machine {
        var machine = Machine(configuration(size: size, queueLimit: queueLimit, whenFull: whenFull), createdAt: created)
        switch lifecycle {
        case .running: break
        case .draining: _ = machine.dispose(.empty)
        case .stopped: _ = machine.disposeNow(.empty)
        }
        return machine
    }

    static func reading(entries: Int = 0, queued: Int? = nil, spinners: Int = 0) -> Machine.IntakeReading {
        Machine.IntakeReading(entries: entries, queued: queued ?? entries, spinners: spinners)
    }

    /// Starts a thread for `name` as a first submission does, and registers it.
    @discardableResult
    static func startWorker(_ machine: inout Machine, _ name: String) -> ThreadPool.WorkerID {
        let threads = machine.threads
        guard case .startThread = machine.submit(from: .thread(mayWait: true), .empty) else {
            Issue.record("expected a thread start for \(name)")
            return machine.threadStarted(name)
        }
        #expect(machine.threads == threads + 1)
        return machine.threadStarted(name)
    }

    /// Puts a started worker to sleep, its last look finding nothing.
    static func sleep(_ machine: inout Machine, _ id: ThreadPool.WorkerID, at instant: MonotonicInstant = created) {
        machine.workerFallsAsleep(id)
        let (next, room) = machine.lookedBeforeSleeping(id, .nothing, .empty, now: instant)
        guard case .sleep = next else { Issue.record("expected sleep, got \(next)"); return }
        #expect(room == Machine.Room())
    }

    /// A running pool of `size` with every thread started and busy.
    static func busyPool(size: Int = 2, queueLimit: Int? = nil, whenFull: ThreadPool.OverflowPolicy = .block) -> Machine {
        var machine = machine(size: size, queueLimit: queueLimit, whenFull: whenFull)
        for number in 1...size { startWorker(&machine, "w\(number)") }
        return machine
    }

    /// A running pool of `size` threads, started and busy, whose queue (limit 1) one task fills,
    /// with one `run(_:)` call waiting for room.
    static func fullPoolWithWaitingCall(size: Int = 1) -> (Machine, [ThreadPool.WorkerID], Call) {
        var machine = machine(size: size, queueLimit: 1)
        let ids = (1...size).map { startWorker(&machine, "w\($0)") }
        let call = Call("run")
        #expect(machine.submit(from: .suspendedCall(call), reading(entries: 1)) == .suspended)
        return (machine, ids, call)
    }

    // MARK: - Submitting

    @Test("the first submission starts thread 1 with the work, and the peak counts it at once")
    func firstSubmissionStartsAThread() {
        var machine = Self.machine()
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(1))
        #expect(machine.threads == 1)
        #expect(machine.peakThreads == 1)
        #expect(machine.workers.count == 0)  // not started yet
    }

    @Test("a submission goes to the most recently idle sleeper, which wakes with it")
    func submissionGoesToMostRecentSleeper() {
        var second = Self.machine()
        let a = Self.startWorker(&second, "a")
        let b = Self.startWorker(&second, "b")
        Self.sleep(&second, a)
        Self.sleep(&second, b)
        #expect(second.workers.sleepers == ["a", "b"])
        #expect(second.submit(from: .thread(mayWait: true), .empty) == .handOver(to: "b"))
        #expect(second.sleepEnd(of: b) == .handedWork)
        #expect(second.sleepEnd(of: a) == nil)
        #expect(second.workers.sleepers == ["a"])
        #expect(second.threads == 2)
    }

    @Test("a submission behind older work is queued and starts a thread while fewer than size exist")
    func submissionBehindOlderWorkStartsThread() {
        var machine = Self.machine()
        Self.startWorker(&machine, "w1")
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1)) == .enqueue(then: .start(thread: 2)))
        #expect(machine.threads == 2)
    }

    @Test("a submission behind older work wakes a sleeper for the queue instead of handing over past the line")
    func submissionBehindOlderWorkWakesSleeper() {
        var machine = Self.machine()
        let id = Self.startWorker(&machine, "w1")
        Self.sleep(&machine, id)
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1)) == .enqueue(then: .wake("w1")))
        #expect(machine.sleepEnd(of: id) == .woken)
    }

    @Test("a spinner that outnumbers the waiting entries takes the work: no wake, no start")
    func spinnerTakesWork() {
        var machine = Self.machine()
        Self.startWorker(&machine, "w1")
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(spinners: 1)) == .enqueue(then: .none))
        #expect(machine.threads == 1)
        // Once the entries reach the spinners, the next one needs a thread of its own.
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1, spinners: 1)) == .enqueue(then: .start(thread: 2)))
    }

    @Test("with every thread busy and room in the queue, work is queued for the next thread that finishes")
    func busyPoolQueues() {
        var machine = Self.busyPool(queueLimit: 2)
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1)) == .enqueue(then: .none))
        #expect(machine.threads == 2)
    }

    @Test(
        "a full queue: each policy and submitter gets its placement",
        arguments: [ThreadPool.OverflowPolicy.block, .reject, .runOnCaller])
    func fullQueue(policy: ThreadPool.OverflowPolicy) {
        let full = Self.reading(entries: 3, queued: 2)  // one cancelled entry does not count
        let call = Call("run")
        var machine = Self.busyPool(queueLimit: 2, whenFull: policy)
        let waiting = machine.submit(from: .thread(mayWait: true), full)
        let mayNotWait = machine.submit(from: .thread(mayWait: false), full)
        let suspended = machine.submit(from: .suspendedCall(call), full)
        let ignoring = machine.submit(from: .ignoringLimit, full)
        switch policy {
        case .block:
            #expect(waiting == .waitForRoom)
            #expect(machine.blockedSubmitters == 1)
            #expect(mayNotWait == .runOnCaller)
            #expect(suspended == .suspended)
        case .reject:
            #expect(waiting == .refuse(.queueFull(pool: "P", limit: 2)))
            #expect(mayNotWait == .refuse(.queueFull(pool: "P", limit: 2)))
            #expect(suspended == .refuse(.queueFull(pool: "P", limit: 2)))
            #expect(machine.blockedSubmitters == 0)
        case .runOnCaller:
            #expect(waiting == .runOnCaller)
            #expect(mayNotWait == .runOnCaller)
            #expect(suspended == .suspended)
        }
        #expect(ignoring == .enqueue(then: .none))
        // A suspended call is let in once a task leaves the queue.
        let room = machine.tasksLeftQueue(Self.reading(entries: 2, queued: 1))
        #expect(room.admitted == (policy == .reject ? [] : [Machine.Admission(task: call, helper: .none)]))
    }

    @Test("a full queue with a free thread: the work goes to the thread, the limit does not apply")
    func fullQueueWithFreeThread() {
        var machine = Self.machine(queueLimit: 1, whenFull: .reject)
        Self.startWorker(&machine, "w1")
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 5)) == .enqueue(then: .start(thread: 2)))
    }

    @Test("a blocked submitter that stops waiting is uncounted and submits again")
    func blockedSubmitterStopsWaiting() {
        var machine = Self.busyPool(queueLimit: 1)
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1)) == .waitForRoom)
        #expect(machine.blockedSubmitters == 1)
        machine.stoppedWaitingForRoom()
        #expect(machine.blockedSubmitters == 0)
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading()) == .enqueue(then: .none))
    }

    @Test("a disposed pool refuses every submitter", arguments: [Lifecycle.draining, .stopped])
    func disposedPoolRefuses(lifecycle: Lifecycle) {
        var machine = Self.machine(lifecycle, queueLimit: 1)
        for submitter in [Machine.Submitter.thread(mayWait: true), .thread(mayWait: false), .suspendedCall(Call("c")), .ignoringLimit] {
            #expect(machine.submit(from: submitter, .empty) == .refuse(.disposed(pool: "P")))
        }
        #expect(machine.threads == 0)
    }

    // MARK: - Work pushed without the mutex

    @Test("work pushed without the mutex: spinners, then a sleeper, then a new thread", arguments: lifecycles)
    func threadForPushedWork(lifecycle: Lifecycle) {
        var machine = Self.machine(size: 3)
        let id = Self.startWorker(&machine, "w1")
        Self.startWorker(&machine, "w2")
        Self.sleep(&machine, id)
        switch lifecycle {
        case .running: break
        case .draining: _ = machine.dispose(Self.reading(entries: 1))
        case .stopped: _ = machine.disposeNow(Self.reading(entries: 1))
        }
        #expect(machine.threadForPushedWork(Self.reading(entries: 1, spinners: 1)) == .none)
        #expect(machine.threadForPushedWork(Self.reading(entries: 2, spinners: 1)) == .wake("w1"))
        // No sleeper left: a third thread only while the pool runs; with threads left, a
        // draining pool needs none.
        let expected: Machine.Helper = lifecycle == .running ? .start(thread: 3) : .none
        #expect(machine.threadForPushedWork(Self.reading(entries: 2, spinners: 1)) == expected)
        #expect(machine.threadForPushedWork(Self.reading(entries: 3)) == .none)  // size reached or not running
    }

    @Test("work pushed just before dispose, after the last thread left, still gets a thread; not after disposeNow")
    func pushedWorkAfterLastThreadLeft() {
        var draining = Self.machine(.draining)
        #expect(draining.threadForPushedWork(Self.reading(entries: 1)) == .start(thread: 1))
        var stopped = Self.machine(.stopped)
        #expect(stopped.threadForPushedWork(Self.reading(entries: 1)) == .none)
    }

    // MARK: - Room in a bounded queue

    @Test("room lets suspended calls in, oldest first, while it lasts; a blocked submitter is signalled only if room is left")
    func roomLetsCallsIn() {
        var machine = Self.busyPool(queueLimit: 3)
        let (a, b, c) = (Call("a"), Call("b"), Call("c"))
        let full = Self.reading(entries: 3)
        for call in [a, b, c] { #expect(machine.submit(from: .suspendedCall(call), full) == .suspended) }
        #expect(machine.submit(from: .thread(mayWait: true), full) == .waitForRoom)
        let room = machine.tasksLeftQueue(Self.reading(entries: 1))
        #expect(room.admitted.map(\.task) == [a, b])
        #expect(room.signalsBlockedSubmitter == false)
        let more = machine.tasksLeftQueue(Self.reading(entries: 0))
        #expect(more.admitted.map(\.task) == [c])
        #expect(more.signalsBlockedSubmitter == true)
    }

    @Test("a call let in while the only thread sleeps wakes it; with no thread, starts one")
    func admittedCallGetsAThread() {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall()
        let id = ids[0]
        Self.sleep(&machine, id)
        let room = machine.tasksLeftQueue(.empty)
        #expect(room.admitted == [Machine.Admission(task: call, helper: .wake("w1"))])
    }

    @Test("once disposed, room lets no call in: the calls are handed back", arguments: [Lifecycle.draining, .stopped])
    func noRoomAfterShutdown(lifecycle: Lifecycle) {
        var (machine, _, _) = Self.fullPoolWithWaitingCall(size: 2)
        let shutdown = lifecycle == .draining ? machine.dispose(Self.reading(entries: 1)) : machine.disposeNow(Self.reading(entries: 1))
        #expect(shutdown?.waitingForRoom.count == 1)
        #expect(machine.tasksLeftQueue(.empty) == Machine.Room())
    }

    @Test("cancelling a queued task in a full queue lets a waiting call in and wakes the sleeping thread for it")
    func cancelInFullQueue() {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall()
        let id = ids[0]
        Self.sleep(&machine, id)
        let cancelled = machine.queuedTaskCancelled(Call("queued"), Self.reading(entries: 1))
        let room = Machine.Room(admitted: [Machine.Admission(task: call, helper: .wake("w1"))])
        #expect(cancelled == .leftIntake(Machine.Departed(room: room, poolTerminated: false)))
    }

    @Test("cancelling a call that waits for room takes it off the list; nothing else changes", arguments: lifecycles)
    func cancelWaitingCall(lifecycle: Lifecycle) {
        var (machine, _, call) = Self.fullPoolWithWaitingCall(size: 2)
        if lifecycle != .running {
            // A call its caller cancelled as the shutdown took it stays listed for its canceller.
            let shutdown = lifecycle == .draining ? machine.dispose(.empty) : machine.disposeNow(.empty)
            #expect(shutdown?.waitingForRoom == [call])
            machine.keepWaitingForRoom(call)
        }
        #expect(machine.queuedTaskCancelled(call, Self.reading(entries: 1)) == .leftWaitingList)
        // Gone: a second cancellation finds it in the intake's count instead.
        guard case .leftIntake = machine.queuedTaskCancelled(call, Self.reading(entries: 1)) else {
            Issue.record("a call cancelled twice")
            return
        }
    }

    @Test("a task leaving the queue ends a disposed pool that has nothing else", arguments: lifecycles)
    func departureEndsPool(lifecycle: Lifecycle) {
        var machine = Self.machine(lifecycle)
        let departed = machine.queuedTaskRanInline(Self.reading(entries: 1))
        #expect(departed == Machine.Departed(room: Machine.Room(), poolTerminated: lifecycle != .running))
        let cancelled = machine.queuedTaskCancelled(Call("t"), Self.reading(entries: 2))
        #expect(cancelled == .leftIntake(Machine.Departed(room: Machine.Room(), poolTerminated: false)))
    }

    // MARK: - Workers

    @Test("a started thread registers; the peak counts threads that really started")
    func threadStartedRegisters() {
        var machine = Self.machine(size: 3)
        Self.startWorker(&machine, "w1")
        Self.startWorker(&machine, "w2")
        #expect(Array(machine.workers.all).sorted() == ["w1", "w2"])
        #expect(machine.peakThreads == 2)
    }

    @Test("only one worker spins, and only while the pool runs", arguments: lifecycles)
    func spinDecision(lifecycle: Lifecycle) {
        let machine = Self.machine(lifecycle)
        let expected: Duration? = lifecycle == .running ? ThreadPool.spinBeforeSleeping : nil
        #expect(machine.spinBeforeSleeping(spinners: 0) == expected)
        #expect(machine.spinBeforeSleeping(spinners: 1) == nil)
    }

    @Test("sleeps longer than the spin shrink it to nothing; a short one restores it")
    func spinBudgetLearns() {
        var machine = Self.machine()
        let id = Self.startWorker(&machine, "w1")
        for _ in 0..<6 {
            Self.sleep(&machine, id)
            #expect(machine.sleepEnded(id, .woken, slept: .milliseconds(1)) == .lookAgain)
        }
        #expect(machine.spinBeforeSleeping(spinners: 0) == nil)
        Self.sleep(&machine, id)
        #expect(machine.sleepEnded(id, .woken, slept: .microseconds(10)) == .lookAgain)
        #expect(machine.spinBeforeSleeping(spinners: 0) == ThreadPool.spinBeforeSleeping)
    }

    @Test("the last look before sleeping: work or calls let in keep the worker awake; nothing lets it sleep until its collector tick", arguments: lifecycles)
    func lookBeforeSleeping(lifecycle: Lifecycle) {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall()
        let id = ids[0]
        switch lifecycle {
        case .running: break
        case .draining: _ = machine.dispose(.empty)
        case .stopped: _ = machine.disposeNow(.empty)
        }
        machine.workerFallsAsleep(id)
        #expect(machine.workers.sleeperCount == 1)
        let (skipped, room) = machine.lookedBeforeSleeping(id, .onlyCancelled, .empty, now: Self.created)
        if lifecycle == .running {
            // The skipped entry made room for the waiting call: the worker must not sleep on it,
            // and looks again for it at once (no other thread is needed).
            #expect(skipped == .stayAwake)
            #expect(room.admitted == [Machine.Admission(task: call, helper: .none)])
            #expect(machine.workers.sleeperCount == 0)
        } else {
            #expect(skipped == .leave(.shutDown))
            #expect(machine.threads == 0)
            #expect(machine.workers.sleeperCount == 0)
            return
        }
        machine.workerFallsAsleep(id)
        let (found, _) = machine.lookedBeforeSleeping(id, .work, Self.reading(entries: 1), now: Self.created)
        #expect(found == .stayAwake)
        #expect(machine.workers.sleeperCount == 0)
        machine.workerFallsAsleep(id)
        // Idle one second after the pool's creation: the first collector tick (15 s) retires it.
        let idleSince = Self.created.advanced(by: .seconds(1))
        let (nothing, _) = machine.lookedBeforeSleeping(id, .nothing, .empty, now: idleSince)
        #expect(nothing == .sleep(until: Self.created.advanced(by: .seconds(15))))
        #expect(machine.sleepEnd(of: id) == nil)
    }

    @Test("a worker that skipped cancelled entries before sleeping takes the call it let in itself: no thread starts for it")
    func skippingWorkerTakesAdmittedCall() {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall(size: 2)
        let (first, second) = (ids[0], ids[1])
        Self.sleep(&machine, second)
        _ = machine.sleepEnded(second, .timedOut, slept: .seconds(15))
        #expect(machine.lookedBeforeLeaving(second, .nothing, Self.reading(entries: 1)).0 == .exit)
        #expect(machine.threads == 1)
        machine.workerFallsAsleep(first)
        let (next, room) = machine.lookedBeforeSleeping(first, .onlyCancelled, .empty, now: Self.created)
        #expect(next == .stayAwake)
        #expect(room.admitted == [Machine.Admission(task: call, helper: .none)])
        #expect(machine.threads == 1)
        #expect(machine.workers.sleeperCount == 0)
    }

    @Test("a sleeper idle past a tick retires at the first tick at least keepAlive later")
    func retirementTick() {
        var machine = Self.machine()
        let id = Self.startWorker(&machine, "w1")
        machine.workerFallsAsleep(id)
        let (next, _) = machine.lookedBeforeSleeping(id, .nothing, .empty, now: Self.created.advanced(by: .seconds(20)))
        #expect(next == .sleep(until: Self.created.advanced(by: .seconds(30))))
    }

    @Test("a sleep a post ended, reported at the worker's next hold: busy again, the spin budget taught; a shutdown's post leaves it to leave")
    func sleepEndedByPost() {
        var machine = Self.machine(size: 3)
        let ids = (1...3).map { Self.startWorker(&machine, "w\($0)") }
        for id in ids { Self.sleep(&machine, id) }
        // Off the idle list when the post is decided; the workers run without the mutex meanwhile.
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .handOver(to: "w3"))
        #expect(machine.threadForPushedWork(Self.reading(entries: 1)) == .wake("w2"))
        #expect(machine.workers.sleepers == ["w1"])
        machine.sleepEndedByPost(ids[2], slept: .milliseconds(1))
        #expect(machine.workers.rest(of: ids[2]) == .busy)
        #expect(machine.spinBeforeSleeping(spinners: 0) == ThreadPool.spinBeforeSleeping / 2, "a long sleep halves the spin")
        machine.sleepEndedByPost(ids[1], slept: .microseconds(10))
        #expect(machine.workers.rest(of: ids[1]) == .busy)
        #expect(machine.spinBeforeSleeping(spinners: 0) == ThreadPool.spinBeforeSleeping, "a short sleep restores it")
        #expect(machine.workers.sleepers == ["w1"])
        #expect(machine.threads == 3)
        // Reported, a worker sleeps again as any busy one does.
        Self.sleep(&machine, ids[2])
        #expect(machine.workers.sleepers == ["w1", "w3"])
        // The shutdown posts the sleepers and leaves them listed: the report takes one off, and
        // its next sleep is its exit.
        #expect(machine.dispose(.empty)?.sleepers == ["w1", "w3"])
        machine.sleepEndedByPost(ids[0], slept: .seconds(1))
        #expect(machine.workers.sleepers == ["w3"])
        #expect(machine.workers.sleeperCount == 1)
        machine.workerFallsAsleep(ids[0])
        #expect(machine.lookedBeforeSleeping(ids[0], .nothing, .empty, now: Self.created).0 == .leave(.shutDown))
        #expect(machine.threads == 2)
        #expect(machine.workers.sleepers == ["w3"])
    }

    @Test("a post the machine did not decide (a sleeper still listed, the pool running) stops the process", .exitTestOnOwnThreads)
    func undecidedPostStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = ThreadPoolStateMachineTests.machine()
            let id = ThreadPoolStateMachineTests.startWorker(&machine, "w1")
            ThreadPoolStateMachineTests.sleep(&machine, id)
            machine.sleepEndedByPost(id, slept: .milliseconds(1))
        }
        #expect(stopped(result, saying: "only a submitter that took the worker off the idle list, or a shutdown, posts it"))
    }

    @Test("each way a sleep ends: handed work runs, woken looks again, a timeout retires, a shutdown exits")
    func sleepEnds() {
        var machine = Self.machine(size: 4)
        let ids = (1...4).map { Self.startWorker(&machine, "w\($0)") }
        for id in ids { Self.sleep(&machine, id) }
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .handOver(to: "w4"))
        #expect(machine.threadForPushedWork(Self.reading(entries: 1)) == .wake("w3"))
        #expect(machine.sleepEnd(of: ids[3]) == .handedWork)
        #expect(machine.sleepEnd(of: ids[2]) == .woken)
        #expect(machine.sleepEnd(of: ids[1]) == nil)
        #expect(machine.sleepEnded(ids[3], .handedWork, slept: .microseconds(5)) == .runHandedWork)
        #expect(machine.sleepEnded(ids[2], .woken, slept: .microseconds(5)) == .lookAgain)
        #expect(machine.sleepEnded(ids[1], .timedOut, slept: .seconds(15)) == .leave(.collected(idle: .seconds(15))))
        #expect(machine.threads == 3)
        #expect(machine.workers.sleepers == ["w1"])
        // Disposed: the last sleeper is told, stays listed until it sees it, then leaves.
        let shutdown = machine.dispose(.empty)
        #expect(shutdown?.sleepers == ["w1"])
        #expect(machine.sleepEnd(of: ids[0]) == .poolShutDown)
        #expect(machine.sleepEnded(ids[0], .poolShutDown, slept: .seconds(1)) == .leave(.shutDown))
        #expect(machine.threads == 2)
        #expect(machine.workers.sleeperCount == 0)
    }

    @Test("a leaving worker's last look: work keeps it counted; nothing lets it exit, and the pool ends only once it has", arguments: lifecycles)
    func lastLookBeforeLeaving(lifecycle: Lifecycle) {
        var machine = Self.machine()
        let id = Self.startWorker(&machine, "w1")
        Self.sleep(&machine, id)
        #expect(machine.sleepEnded(id, .timedOut, slept: .seconds(15)) == .leave(.collected(idle: .seconds(15))))
        switch lifecycle {
        case .running: break
        case .draining: _ = machine.dispose(.empty)
        case .stopped: _ = machine.disposeNow(.empty)
        }
        #expect(machine.threads == 0)
        let (stay, _) = machine.lookedBeforeLeaving(id, .work, .empty)
        #expect(stay == .stay)
        #expect(machine.threads == 1)

        // Again, now that the pool is in its lifecycle: a sleeper that times out, or one that
        // finds the pool disposed before it sleeps.
        machine.workerFallsAsleep(id)
        let (next, _) = machine.lookedBeforeSleeping(id, .nothing, .empty, now: Self.created)
        if case .sleep = next {
            #expect(machine.sleepEnded(id, .timedOut, slept: .seconds(15)) == .leave(.collected(idle: .seconds(15))))
        } else {
            #expect(next == .leave(.shutDown))
        }
        #expect(machine.threads == 0)
        let (exit, room) = machine.lookedBeforeLeaving(id, .nothing, .empty)
        #expect(exit == .exit)
        #expect(room == Machine.Room())
        #expect(machine.workers.count == 0)
        #expect(machine.exitingThreads == 1)
        #expect(machine.isTerminated(.empty) == false)
        #expect(machine.threadExited(.empty) == (lifecycle != .running))
    }

    @Test(
        "a call let in by the last thread's look as it retires gets a thread in its place, unless work pushed meanwhile started one",
        arguments: [false, true])
    func callLetInByRetiringThread(workPushedMeanwhile: Bool) {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall()
        Self.sleep(&machine, ids[0])
        _ = machine.sleepEnded(ids[0], .timedOut, slept: .seconds(15))
        if workPushedMeanwhile {
            // A submitter that saw the thread counted pushed without the mutex; it reads the lower count.
            #expect(machine.threadForPushedWork(Self.reading(entries: 1)) == .start(thread: 2))
        }
        // The last look skipped a cancelled entry, which lets the call in.
        let (exit, room) = machine.lookedBeforeLeaving(ids[0], .onlyCancelled, .empty)
        #expect(exit == .exit)
        let helper: Machine.Helper = workPushedMeanwhile ? .none : .start(thread: 2)
        #expect(room.admitted == [Machine.Admission(task: call, helper: helper)])
        #expect(machine.threads == 1)  // the pool's one thread, and never more
    }

    // MARK: - Starting threads

    @Test("a failed start with no other thread refuses its work; queued work gets retries, 10 ms doubling to 1 s")
    func startFailureWithNoThread() {
        var machine = Self.machine()
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(1))
        let failure = machine.threadStartFailed(carryingWork: true, .empty)
        #expect(failure == .noThreadLeft(refusingWork: true, retryAfter: nil, poolTerminated: false))
        #expect(machine.threads == 0)
        #expect(machine.peakThreads == 0)
        var delays: [Duration] = []
        for _ in 0..<9 {
            #expect(machine.startRetryDue(Self.reading(entries: 1)) == .start(thread: 2 + delays.count))
            let failure = machine.threadStartFailed(carryingWork: false, Self.reading(entries: 1))
            guard case .noThreadLeft(refusingWork: false, retryAfter: let retry?, poolTerminated: false) = failure else {
                Issue.record("expected a retry")
                return
            }
            delays.append(retry)
        }
        #expect(delays == [10, 20, 40, 80, 160, 320, 640, 1000, 1000].map { .milliseconds($0) })
    }

    @Test("a failed start while other threads run: its work is queued, for a sleeper or a running thread, never another start")
    func startFailureWithOtherThreads() {
        var machine = Self.machine(size: 3)
        let id = Self.startWorker(&machine, "w1")
        #expect(machine.submit(from: .thread(mayWait: true), Self.reading(entries: 1)) == .enqueue(then: .start(thread: 2)))
        #expect(machine.threadStartFailed(carryingWork: false, Self.reading(entries: 1)) == .serveQueue(.none))
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(3))
        #expect(machine.threadStartFailed(carryingWork: true, .empty) == .enqueueWork(then: .none))
        // A start decided while the other thread was busy fails after it fell asleep: it is woken.
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(4))
        Self.sleep(&machine, id)
        #expect(machine.threadStartFailed(carryingWork: true, .empty) == .enqueueWork(then: .wake("w1")))
        #expect(machine.threads == 1)
        #expect(machine.peakThreads == 1)
    }

    @Test("a failed start then a retry that succeeds: the thread serves the queue, and a later failure retries soon again")
    func startFailureThenRetry() {
        var machine = Self.machine()
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(1))
        let queued = Self.reading(entries: 2)
        let refused = Machine.StartFailure.noThreadLeft(refusingWork: true, retryAfter: .milliseconds(10), poolTerminated: false)
        #expect(machine.threadStartFailed(carryingWork: true, queued) == refused)
        #expect(machine.startRetryDue(queued) == .start(thread: 2))
        #expect(machine.threadStartFailed(carryingWork: false, queued) == .noThreadLeft(refusingWork: false, retryAfter: .milliseconds(20), poolTerminated: false))
        #expect(machine.startRetryDue(queued) == .start(thread: 3))
        let id = machine.threadStarted("w3")
        #expect(machine.peakThreads == 1)
        // A retry that comes once a thread exists starts nothing.
        #expect(machine.startRetryDue(queued) == .none)
        // The thread retires; the next start fails: its retry comes after 10 ms again.
        Self.sleep(&machine, id)
        _ = machine.sleepEnded(id, .timedOut, slept: .seconds(15))
        _ = machine.lookedBeforeLeaving(id, .nothing, .empty)
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(4))
        #expect(machine.threadStartFailed(carryingWork: true, queued) == refused)
    }

    @Test("a retry is due in every lifecycle: it starts a thread unless the queue was handed back", arguments: lifecycles)
    func startRetryInEachLifecycle(lifecycle: Lifecycle) {
        var machine = Self.machine(lifecycle)
        #expect(machine.startRetryDue(.empty) == .none)
        #expect(machine.startRetryDue(Self.reading(entries: 1)) == (lifecycle == .stopped ? .none : .start(thread: 1)))
    }

    @Test("a failed start carrying work after dispose refuses the work even while other threads run")
    func startFailureAfterDispose() {
        var machine = Self.machine()
        Self.startWorker(&machine, "w1")
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(2))
        _ = machine.dispose(.empty)
        #expect(machine.threadStartFailed(carryingWork: true, .empty) == .noThreadLeft(refusingWork: true, retryAfter: nil, poolTerminated: false))
    }

    @Test("the last failed start of a disposed pool with nothing queued ends it")
    func startFailureEndsDisposedPool() {
        var machine = Self.machine()
        #expect(machine.threadForPushedWork(Self.reading(entries: 1)) == .start(thread: 1))
        _ = machine.dispose(Self.reading(entries: 1))
        #expect(machine.threadStartFailed(carryingWork: false, .empty) == .noThreadLeft(refusingWork: false, retryAfter: nil, poolTerminated: true))
    }

    // MARK: - Shutting down

    @Test("dispose wakes the sleepers, oldest first, hands back the waiting calls, and moves to draining once")
    func dispose() {
        var (machine, ids, call) = Self.fullPoolWithWaitingCall(size: 2)
        for id in ids { Self.sleep(&machine, id) }
        let shutdown = machine.dispose(.empty)
        #expect(shutdown == Machine.Shutdown(sleepers: ["w1", "w2"], waitingForRoom: [call], poolTerminated: false))
        #expect(machine.lifecycle == .draining)
        #expect(machine.dispose(.empty) == nil)
    }

    @Test("dispose with queued work and no thread starts one, so that the pool can end")
    func disposeWithStrandedWork() {
        var machine = Self.machine()
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(1))
        _ = machine.threadStartFailed(carryingWork: true, Self.reading(entries: 1))
        let shutdown = machine.dispose(Self.reading(entries: 1))
        #expect(shutdown == Machine.Shutdown(sleepers: [], waitingForRoom: [], poolTerminated: false, helper: .start(thread: 2)))
        #expect(machine.threads == 1)
    }

    @Test("dispose of an idle pool with no thread ends it at once")
    func disposeIdlePool() {
        var machine = Self.machine()
        #expect(machine.dispose(.empty) == Machine.Shutdown(sleepers: [], waitingForRoom: [], poolTerminated: true))
        #expect(machine.isTerminated(.empty))
    }

    @Test("disposeNow stops a running or draining pool once", arguments: lifecycles)
    func disposeNow(lifecycle: Lifecycle) {
        var machine = Self.machine(lifecycle)
        let shutdown = machine.disposeNow(.empty)
        #expect(shutdown == (lifecycle == .stopped ? nil : Machine.Shutdown(sleepers: [], waitingForRoom: [], poolTerminated: true)))
        #expect(machine.lifecycle == .stopped)
        #expect(machine.dispose(.empty) == nil)
    }

    @Test("disposeNow with waiters: suspended calls come back, blocked submitters are refused when they try again")
    func disposeNowWithWaiters() {
        var machine = Self.busyPool(queueLimit: 1)
        let (a, b) = (Call("a"), Call("b"))
        let full = Self.reading(entries: 1)
        #expect(machine.submit(from: .suspendedCall(a), full) == .suspended)
        #expect(machine.submit(from: .thread(mayWait: true), full) == .waitForRoom)
        #expect(machine.submit(from: .suspendedCall(b), full) == .suspended)
        let shutdown = machine.disposeNow(full)
        #expect(shutdown?.waitingForRoom == [a, b])
        #expect(shutdown?.poolTerminated == false)
        machine.stoppedWaitingForRoom()
        #expect(machine.submit(from: .thread(mayWait: true), full) == .refuse(.disposed(pool: "P")))
        #expect(machine.blockedSubmitters == 0)
    }

    @Test("a pool has terminated once disposed with no thread, none exiting and nothing queued", arguments: lifecycles)
    func termination(lifecycle: Lifecycle) {
        let idle = Self.machine(lifecycle)
        #expect(idle.isTerminated(.empty) == (lifecycle != .running))
        #expect(idle.isTerminated(Self.reading(entries: 1, queued: 0)) == (lifecycle != .running))  // only cancelled entries
        #expect(idle.isTerminated(Self.reading(entries: 1)) == false)
        var busy = Self.machine()
        Self.startWorker(&busy, "w1")
        _ = lifecycle == .stopped ? busy.disposeNow(.empty) : busy.dispose(.empty)
        #expect(busy.isTerminated(.empty) == false)
    }
}

extension ThreadPool.StateMachine.IntakeReading {
    /// Nothing queued, nobody spinning.
    static var empty: Self { Self(entries: 0, queued: 0, spinners: 0) }
}

/// What a pool's refusals say, as the state machine hands them to the submitter.
@Suite("ThreadPoolError")
struct ThreadPoolErrorTests {
    @Test("each refusal names the pool and says why")
    func descriptions() {
        #expect("\(ThreadPoolError.disposed(pool: "Render"))" == "ThreadPool 'Render' is disposed and accepts no more work")
        #expect("\(ThreadPoolError.queueFull(pool: "Render", limit: 1_000))" == "ThreadPool 'Render' refused a task: its queue is full (limit 1000)")
        #expect(
            "\(ThreadPoolError.threadStartFailed(pool: "Render", errno: 11))"
                == "ThreadPool 'Render' refused a task: it has no thread and the system would not start one (errno 11)")
    }
}

/// The pool's list of workers: most-recent reuse, removal from anywhere, slots reused.
@Suite("ThreadPool.WorkerList")
struct ThreadPoolWorkerListTests {
    @Test("sleepers wake most recent first and leave from anywhere; a left worker's slot is reused")
    func order() {
        var list = ThreadPool.WorkerList<String>()
        let ids = ["a", "b", "c", "d"].map { list.add($0) }
        for id in ids { list.fallAsleep(id) }
        #expect(list.sleepers == ["a", "b", "c", "d"])
        list.markBusy(ids[1])
        #expect(list.sleepers == ["a", "c", "d"])
        #expect(list.wakeMostRecent(as: .wokenToLook) == "d")
        #expect(list.rest(of: ids[3]) == .wokenToLook)
        #expect(list.wakeMostRecent(as: .handedWork) == "c")
        list.markBusy(ids[0])
        #expect(list.sleeperCount == 0)
        #expect(list.wakeMostRecent(as: .wokenToLook) == nil)
        list.remove(ids[1])
        #expect(list.count == 3)
        let reused = list.add("e")
        #expect(reused == ids[1])
        #expect(Array(list.all).sorted() == ["a", "c", "d", "e"])
    }

    @Test("a thousand sleepers: random removals keep the rest in the order they fell asleep")
    func manySleepers() {
        var list = ThreadPool.WorkerList<Int>()
        let ids = (0..<1_000).map { list.add($0) }
        for id in ids { list.fallAsleep(id) }
        var model = Array(0..<1_000)
        var random = SplitMix64(seed: 20)
        for _ in 0..<500 {
            let index = Int(random.next() % UInt64(model.count))
            list.markBusy(ids[model[index]])
            model.remove(at: index)
        }
        #expect(list.sleepers == model)
        #expect(list.sleeperCount == 500)
    }
}

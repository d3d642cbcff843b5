import Testing
@testable import ThreadKit

/// The longest spin of the machines under test.
private let spinCeiling = Duration.microseconds(20)
private let refusal = DedicatedThreadError.disposed(name: "t")
private let startFailure = DedicatedThreadError.threadStartFailed(name: "t", errno: 11)

/// The words the specification below is written in: the items, a machine with its batch, and
/// the situations a thread can be in.
extension DedicatedThreadStateMachineTests {
    typealias Machine = DedicatedThreadStateMachine<Item>
    typealias State = Machine.State
    typealias Wake = Machine.Wake

    /// A queued item: a closure (which `disposeNow` drops) or a job (which it keeps).
    enum Item: Equatable, CustomStringConvertible {
        case closure(Int)
        case job(Int)

        var isClosure: Bool {
            if case .closure = self { true } else { false }
        }

        var description: String {
            switch self {
            case .closure(let id): "c\(id)"
            case .job(let id): "j\(id)"
            }
        }
    }

    /// The state, the queue and the batch at one moment, compared at once.
    struct Snapshot: Equatable {
        var state: State
        var queue: [Item]
        var batch: [Item]

        /// This one with `state`, and with `queue` and `batch` where given.
        func with(state: State, queue: [Item]? = nil, batch: [Item]? = nil) -> Snapshot {
            Snapshot(state: state, queue: queue ?? self.queue, batch: batch ?? self.batch)
        }

        /// This one after the thread's `step` left the machine in `state`: a new batch is the queue.
        func after(_ step: Machine.ThreadStep, state: State) -> Snapshot {
            step == .runBatch ? with(state: state, queue: [], batch: queue) : with(state: state)
        }
    }

    /// A report of the thread's, or of its start.
    enum Report: String, Codable, Sendable, NamedTestCase {
        case ranOut = "out of work"
        case spinEnded = "a spin's end"
        case handedOverRan = "a spin's end with a handed-over item run"
        case wokeUp = "a wakeup"
        case startFailure = "a failure to start"
    }

    /// A machine and the batch its thread is running, as the core keeps them.
    struct Fixture {
        var machine = Machine(name: "t", spinCeiling: spinCeiling)
        var batch = RingBuffer<Item>()

        var queue: [Item] { Self.items(machine.queue) }
        var batchItems: [Item] { Self.items(batch) }
        var snapshot: Snapshot { Snapshot(state: machine.state, queue: queue, batch: batchItems) }

        mutating func submit(_ item: Item) -> Wake {
            do {
                return try machine.submit(item)
            } catch {
                Issue.record("\(item) was refused: \(error)")
                return .none
            }
        }

        mutating func pause() { machine.pause(batch: &batch) }
        mutating func ranOut() -> Machine.ThreadStep { machine.threadRanOutOfWork(refilling: &batch) }
        mutating func spinEnded(ranHandedOver: Bool = false) -> Machine.ThreadStep {
            machine.spinEnded(refilling: &batch, ranHandedOver: ranHandedOver)
        }
        mutating func wokeUp(after slept: Duration = .milliseconds(1)) -> Machine.ThreadStep {
            machine.threadWokeUp(afterSleeping: slept, refilling: &batch)
        }

        /// Makes the thread's `report`; its answer, if it has one.
        mutating func report(_ report: Report) -> Machine.ThreadStep? {
            switch report {
            case .ranOut: return ranOut()
            case .spinEnded: return spinEnded()
            case .handedOverRan: return spinEnded(ranHandedOver: true)
            case .wokeUp: return wokeUp()
            case .startFailure:
                machine.threadFailedToStart(errno: 11)
                return nil
            }
        }

        /// The thread runs the rest of its batch.
        mutating func runBatch() { _ = batch.removeAll() }

        static func items(_ buffer: RingBuffer<Item>) -> [Item] {
            var copy = buffer
            return copy.removeAll()
        }
    }

    /// Every state the events lead to, each with the events that lead there from a new thread.
    /// A disposed thread that spins or sleeps has always been nudged or signalled: those two
    /// combinations never arise.
    enum Situation: String, CaseIterable, Codable, Sendable, NamedTestCase {
        case acceptingWorking = "taking work, working"
        case acceptingWorkingThroughBatch = "taking work, working through a batch, more queued"
        case acceptingSpinning = "taking work, spinning"
        case acceptingSpinningNudged = "taking work, spinning, nudged"
        case acceptingSleepingForWork = "taking work, sleeping for work"
        case acceptingSleepingForWorkSignalled = "taking work, sleeping for work, signalled"
        case acceptingSleepingSincePaused = "taking work, asleep since a pause"
        case acceptingSleepingSincePausedSignalled = "taking work, asleep since a pause, signalled"
        case pausedWorking = "paused, working, work queued"
        case pausedSpinning = "paused, spinning"
        case pausedSpinningWithWork = "paused, spinning, work queued"
        case pausedSpinningNudged = "paused, spinning, nudged"
        case pausedSleepingForWork = "paused, sleeping for work"
        case pausedSleepingForWorkSignalled = "paused, sleeping for work, signalled"
        case pausedSleeping = "paused, sleeping"
        case pausedSleepingWithWork = "paused, sleeping, work queued"
        case pausedSleepingSignalled = "paused, sleeping, signalled"
        case disposingWorking = "disposing, working"
        case disposingWorkingThroughBatch = "disposing, working through a batch, more queued"
        case disposingSpinningNudged = "disposing, spinning, nudged"
        case disposingSleepingForWorkSignalled = "disposing, sleeping for work, signalled"
        case disposingSleepingSignalled = "disposing, asleep since a pause, signalled, work queued"
        case exited = "exited"
        case failedToStart = "failed to start"

        /// The state the events lead to.
        var state: State {
            switch self {
            case .acceptingWorking, .acceptingWorkingThroughBatch: .alive(.accepting, .working)
            case .acceptingSpinning: .alive(.accepting, .spinning(nudged: false))
            case .acceptingSpinningNudged: .alive(.accepting, .spinning(nudged: true))
            case .acceptingSleepingForWork: .alive(.accepting, .sleeping(forWork: true, signalled: false))
            case .acceptingSleepingForWorkSignalled: .alive(.accepting, .sleeping(forWork: true, signalled: true))
            case .acceptingSleepingSincePaused: .alive(.accepting, .sleeping(forWork: false, signalled: false))
            case .acceptingSleepingSincePausedSignalled: .alive(.accepting, .sleeping(forWork: false, signalled: true))
            case .pausedWorking: .alive(.paused, .working)
            case .pausedSpinning, .pausedSpinningWithWork: .alive(.paused, .spinning(nudged: false))
            case .pausedSpinningNudged: .alive(.paused, .spinning(nudged: true))
            case .pausedSleepingForWork: .alive(.paused, .sleeping(forWork: true, signalled: false))
            case .pausedSleepingForWorkSignalled: .alive(.paused, .sleeping(forWork: true, signalled: true))
            case .pausedSleeping, .pausedSleepingWithWork: .alive(.paused, .sleeping(forWork: false, signalled: false))
            case .pausedSleepingSignalled: .alive(.paused, .sleeping(forWork: false, signalled: true))
            case .disposingWorking, .disposingWorkingThroughBatch: .alive(.disposing, .working)
            case .disposingSpinningNudged: .alive(.disposing, .spinning(nudged: true))
            case .disposingSleepingForWorkSignalled: .alive(.disposing, .sleeping(forWork: true, signalled: true))
            case .disposingSleepingSignalled: .alive(.disposing, .sleeping(forWork: false, signalled: true))
            case .exited: .exited
            case .failedToStart: .failedToStart(errno: 11)
            }
        }

        /// A new thread's machine, led here by events; each step's answer is checked on the way.
        func make() -> Fixture {
            var fixture = Fixture()
            steps(&fixture)
            return fixture
        }

        /// Applies `event` to this situation's machine: its answer, and the machine before and after.
        func apply<Answer>(_ event: (inout Fixture) -> Answer) -> (answer: Answer, before: Snapshot, after: Snapshot) {
            var fixture = make()
            let before = fixture.snapshot
            let answer = event(&fixture)
            return (answer, before, fixture.snapshot)
        }

        private func steps(_ f: inout Fixture) {
            let spin = Machine.ThreadStep.spin(spinCeiling)
            switch self {
            case .acceptingWorking:
                break
            case .acceptingWorkingThroughBatch:
                #expect(f.submit(.closure(1)) == .none && f.submit(.job(2)) == .none)
                #expect(f.ranOut() == .runBatch)
                #expect(f.submit(.closure(3)) == .none)
            case .acceptingSpinning:
                #expect(f.ranOut() == spin)
            case .acceptingSpinningNudged:
                #expect(f.ranOut() == spin)
                #expect(f.submit(.closure(1)) == .nudge)
            case .acceptingSleepingForWork:
                #expect(f.ranOut() == spin && f.spinEnded() == .sleep)
            case .acceptingSleepingForWorkSignalled:
                #expect(f.ranOut() == spin && f.spinEnded() == .sleep)
                #expect(f.submit(.closure(1)) == .signal)
            case .acceptingSleepingSincePaused:
                f.pause()
                #expect(f.ranOut() == .sleep)
                #expect(f.machine.resume() == .none)
            case .acceptingSleepingSincePausedSignalled:
                f.pause()
                #expect(f.ranOut() == .sleep)
                #expect(f.submit(.closure(1)) == .none)
                #expect(f.machine.resume() == .signal)
            case .pausedWorking:
                #expect(f.submit(.closure(1)) == .none)
                f.pause()
            case .pausedSpinning:
                #expect(f.ranOut() == spin)
                f.pause()
            case .pausedSpinningWithWork:
                #expect(f.ranOut() == spin)
                f.pause()
                #expect(f.submit(.closure(1)) == .none)
            case .pausedSpinningNudged:
                #expect(f.ranOut() == spin)
                #expect(f.submit(.closure(1)) == .nudge)
                f.pause()
            case .pausedSleepingForWork:
                #expect(f.ranOut() == spin && f.spinEnded() == .sleep)
                f.pause()
            case .pausedSleepingForWorkSignalled:
                #expect(f.ranOut() == spin && f.spinEnded() == .sleep)
                #expect(f.submit(.closure(1)) == .signal)
                f.pause()
            case .pausedSleeping:
                f.pause()
                #expect(f.ranOut() == .sleep)
            case .pausedSleepingWithWork:
                f.pause()
                #expect(f.ranOut() == .sleep)
                #expect(f.submit(.closure(1)) == .none)
            case .pausedSleepingSignalled:
                f.pause()
                #expect(f.ranOut() == .sleep)
                #expect(f.submit(.closure(1)) == .none)
                #expect(f.machine.resume() == .signal)
                f.pause()
            case .disposingWorking:
                #expect(f.machine.dispose() == .none)
            case .disposingWorkingThroughBatch:
                #expect(f.submit(.closure(1)) == .none && f.submit(.job(2)) == .none)
                #expect(f.ranOut() == .runBatch)
                #expect(f.submit(.closure(3)) == .none)
                #expect(f.machine.dispose() == .none)
            case .disposingSpinningNudged:
                #expect(f.ranOut() == spin)
                #expect(f.machine.dispose() == .nudge)
            case .disposingSleepingForWorkSignalled:
                #expect(f.ranOut() == spin && f.spinEnded() == .sleep)
                #expect(f.machine.dispose() == .signal)
            case .disposingSleepingSignalled:
                f.pause()
                #expect(f.ranOut() == .sleep)
                #expect(f.submit(.closure(1)) == .none)
                #expect(f.machine.dispose() == .signal)
            case .exited:
                #expect(f.machine.dispose() == .none)
                #expect(f.ranOut() == .exit)
            case .failedToStart:
                f.machine.threadFailedToStart(errno: 11)
            }
        }
    }
}

/// A dedicated thread's decisions, driven event by event: no threads, no clock, no sleeps.
///
/// Every event is tried in every state the events can lead to (``Situation``): each test switches
/// over all of them without a `default`, so a state added later fails to compile until every
/// event says what it does there. The thread's own reports in a state it cannot be in stop the
/// process; the exit tests at the end prove that for each report.
@Suite("DedicatedThreadStateMachine")
struct DedicatedThreadStateMachineTests {
    // MARK: - The states

    @Test("Each situation is the state its events lead to", arguments: Situation.allCases)
    func situations(_ situation: Situation) {
        #expect(situation.make().machine.state == situation.state)
    }

    @Test("A thread is paused exactly in the paused states, and gone exactly once exited or never started", arguments: Situation.allCases)
    func queries(_ situation: Situation) {
        let machine = situation.make().machine
        switch situation.state {
        case .alive(let lifecycle, _):
            #expect(machine.isPaused == (lifecycle == .paused))
            #expect(!machine.hasExited)
        case .exited, .failedToStart:
            #expect(!machine.isPaused)
            #expect(machine.hasExited)
        }
    }

    // MARK: - Submitters and controllers

    @Test("refusal: none while taking work or paused; a disposed thread's once disposing or exited; the start failure once it never started",
          arguments: Situation.allCases)
    func refusalOfASubmission(_ situation: Situation) {
        let expected: DedicatedThreadError? = switch situation.state {
        case .alive(.accepting, _), .alive(.paused, _): nil
        case .alive(.disposing, _), .exited: refusal
        case .failedToStart: startFailure
        }
        #expect(situation.make().machine.refusal == expected)
    }

    @Test("submit: queued while taking work or paused, with the one wakeup the thread needs; refused once disposed or never started",
          arguments: Situation.allCases)
    func submit(_ situation: Situation) {
        let run = situation.apply { fixture in
            Result { () throws(DedicatedThreadError) in try fixture.machine.submit(.closure(9)) }
        }
        func queued(_ wake: Wake, then state: State) -> (answer: Result<Wake, DedicatedThreadError>, after: Snapshot) {
            (.success(wake), run.before.with(state: state, queue: run.before.queue + [.closure(9)]))
        }
        let expected: (answer: Result<Wake, DedicatedThreadError>, after: Snapshot)
        switch situation {
        case .acceptingWorking, .acceptingWorkingThroughBatch, .acceptingSpinningNudged, .acceptingSleepingForWorkSignalled,
             .acceptingSleepingSincePausedSignalled:
            expected = queued(.none, then: situation.state)
        case .acceptingSpinning:
            expected = queued(.nudge, then: .alive(.accepting, .spinning(nudged: true)))
        case .acceptingSleepingForWork:
            expected = queued(.signal, then: .alive(.accepting, .sleeping(forWork: true, signalled: true)))
        case .acceptingSleepingSincePaused:
            expected = queued(.signal, then: .alive(.accepting, .sleeping(forWork: false, signalled: true)))
        case .pausedWorking, .pausedSpinning, .pausedSpinningWithWork, .pausedSpinningNudged, .pausedSleepingForWork,
             .pausedSleepingForWorkSignalled, .pausedSleeping, .pausedSleepingWithWork, .pausedSleepingSignalled:
            expected = queued(.none, then: situation.state)  // a paused thread starts nothing: no need to wake it
        case .disposingWorking, .disposingWorkingThroughBatch, .disposingSpinningNudged, .disposingSleepingForWorkSignalled,
             .disposingSleepingSignalled, .exited:
            expected = (.failure(refusal), run.before)
        case .failedToStart:
            expected = (.failure(startFailure), run.before)
        }
        #expect(run.answer == expected.answer)
        #expect(run.after == expected.after)
    }

    @Test("pause: a thread taking work pauses, and its batch goes back to the front of the queue; elsewhere nothing changes",
          arguments: Situation.allCases)
    func pause(_ situation: Situation) {
        let run = situation.apply { $0.pause() }
        switch situation.state {
        case .alive(.accepting, let activity):
            #expect(run.after == run.before.with(state: .alive(.paused, activity), queue: run.before.batch + run.before.queue, batch: []))
        case .alive(.paused, _), .alive(.disposing, _), .exited, .failedToStart:
            #expect(run.after == run.before)
        }
    }

    @Test("resume: a paused thread takes work again, and is woken if work is queued; elsewhere nothing changes",
          arguments: Situation.allCases)
    func resume(_ situation: Situation) {
        let run = situation.apply { $0.machine.resume() }
        let expected: (wake: Wake, state: State)
        switch situation {
        case .pausedWorking:
            expected = (.none, .alive(.accepting, .working))
        case .pausedSpinning:
            expected = (.none, .alive(.accepting, .spinning(nudged: false)))  // nothing to look at
        case .pausedSpinningWithWork:
            expected = (.nudge, .alive(.accepting, .spinning(nudged: true)))
        case .pausedSpinningNudged:
            expected = (.none, .alive(.accepting, .spinning(nudged: true)))
        case .pausedSleepingForWork:
            expected = (.none, .alive(.accepting, .sleeping(forWork: true, signalled: false)))
        case .pausedSleepingForWorkSignalled:
            expected = (.none, .alive(.accepting, .sleeping(forWork: true, signalled: true)))
        case .pausedSleeping:
            expected = (.none, .alive(.accepting, .sleeping(forWork: false, signalled: false)))
        case .pausedSleepingWithWork:
            expected = (.signal, .alive(.accepting, .sleeping(forWork: false, signalled: true)))
        case .pausedSleepingSignalled:
            expected = (.none, .alive(.accepting, .sleeping(forWork: false, signalled: true)))
        case .acceptingWorking, .acceptingWorkingThroughBatch, .acceptingSpinning, .acceptingSpinningNudged,
             .acceptingSleepingForWork, .acceptingSleepingForWorkSignalled, .acceptingSleepingSincePaused,
             .acceptingSleepingSincePausedSignalled, .disposingWorking, .disposingWorkingThroughBatch,
             .disposingSpinningNudged, .disposingSleepingForWorkSignalled, .disposingSleepingSignalled, .exited, .failedToStart:
            expected = (.none, situation.state)
        }
        #expect(run.answer == expected.wake)
        #expect(run.after == run.before.with(state: expected.state))
    }

    /// The wakeup a dispose gives a living thread: it must come to see that it is to exit.
    static func disposed(_ situation: Situation) -> (wake: Wake, state: State)? {
        switch situation.state {
        case .alive(.accepting, let activity), .alive(.paused, let activity):
            switch activity {
            case .working: (.none, .alive(.disposing, .working))
            case .spinning(nudged: false): (.nudge, .alive(.disposing, .spinning(nudged: true)))
            case .spinning(nudged: true): (.none, .alive(.disposing, .spinning(nudged: true)))
            case .sleeping(let forWork, signalled: false): (.signal, .alive(.disposing, .sleeping(forWork: forWork, signalled: true)))
            case .sleeping(let forWork, signalled: true): (.none, .alive(.disposing, .sleeping(forWork: forWork, signalled: true)))
            }
        case .alive(.disposing, _), .exited, .failedToStart:
            nil
        }
    }

    @Test("dispose: a living thread refuses work from now on and is woken to run its queue and exit; a second dispose does nothing",
          arguments: Situation.allCases)
    func dispose(_ situation: Situation) {
        let run = situation.apply { $0.machine.dispose() }
        let expected = Self.disposed(situation) ?? (.none, situation.state)
        #expect(run.answer == expected.wake)
        #expect(run.after == run.before.with(state: expected.state))
    }

    @Test("disposeNow: drops the closures of the batch, then of the queue, keeps the jobs, and wakes the thread as dispose does",
          arguments: Situation.allCases)
    func disposeNow(_ situation: Situation) {
        let run = situation.apply { fixture in fixture.machine.disposeNow(batch: &fixture.batch, dropping: \.isClosure) }
        let before = run.before
        // A thread disposed already was woken by that dispose.
        let expected = Self.disposed(situation) ?? (.none, situation.state)
        #expect(run.answer.wake == expected.wake)
        #expect(run.answer.dropped == (before.batch + before.queue).filter(\.isClosure))
        #expect(run.after == before.with(
            state: expected.state, queue: before.queue.filter { !$0.isClosure }, batch: before.batch.filter { !$0.isClosure }))
    }

    @Test("disposeNow while working through a batch: the batch's closures go first, its jobs stay to run, then the thread exits")
    func disposeNowThroughBatch() {
        var fixture = Situation.acceptingWorkingThroughBatch.make()
        #expect(fixture.submit(.job(4)) == .none)
        let dropping = fixture.machine.disposeNow(batch: &fixture.batch, dropping: \.isClosure)
        #expect(dropping.dropped == [.closure(1), .closure(3)])
        #expect(fixture.batchItems == [.job(2)])
        #expect(fixture.queue == [.job(4)])
        fixture.runBatch()
        #expect(fixture.ranOut() == .runBatch)
        #expect(fixture.batchItems == [.job(4)])
        fixture.runBatch()
        #expect(fixture.ranOut() == .exit)
        #expect(fixture.machine.state == .exited)
    }

    @Test("A pause while the spinning thread has an item handed over and not taken puts that item first in the queue, before what was queued after it")
    func pauseTakesBackTheHandedOverItem() {
        var fixture = Situation.acceptingSpinning.make()
        #expect(fixture.submit(.closure(2)) == .nudge)   // queued after the hand-over of j1
        var asked = 0
        fixture.machine.pause(batch: &fixture.batch) {
            asked += 1
            return .job(1)
        }
        #expect(asked == 1)
        #expect(fixture.queue == [.job(1), .closure(2)])
        #expect(fixture.spinEnded() == .sleep)
        #expect(fixture.machine.resume() == .signal)
        #expect(fixture.wokeUp() == .runBatch)
        #expect(fixture.batchItems == [.job(1), .closure(2)])
    }

    @Test("A pause that changes nothing (paused already, or disposed) asks for no handed-over item: the thread runs it",
          arguments: [Situation.pausedSpinning, .disposingSpinningNudged])
    func pauseThatChangesNothingLeavesTheHandOver(_ situation: Situation) {
        var fixture = situation.make()
        var asked = 0
        fixture.machine.pause(batch: &fixture.batch) {
            asked += 1
            return .job(1)
        }
        #expect(asked == 0)
        #expect(fixture.queue.isEmpty)
    }

    @Test("A thread that ran an item handed over during its spin spins again while nothing is queued, without the spin budget learning from it")
    func handedOverItemKeepsTheSpin() {
        var fixture = Fixture()
        for _ in 0..<3 {
            #expect(fixture.ranOut() == .spin(spinCeiling))
            #expect(fixture.spinEnded(ranHandedOver: true) == .spin(spinCeiling))
            #expect(fixture.submit(.closure(1)) == .nudge)
            #expect(fixture.spinEnded(ranHandedOver: true) == .runBatch)
            fixture.runBatch()
        }
        #expect(fixture.machine.spinBudget.current == spinCeiling)
    }

    // MARK: - The thread

    /// What the thread's report gets in a situation: the step, and the state after it; `nil`
    /// where the thread cannot make that report (see ``outOfTurn(_:in:)``). Out of work, the
    /// thread has run its batch; a wakeup comes after 1 ms.
    static func answer(to report: Report, in situation: Situation) -> (step: Machine.ThreadStep, state: State)? {
        let sleepsPaused = State.alive(.paused, .sleeping(forWork: false, signalled: false))
        let spinsAfterWakeup = State.alive(.accepting, .spinning(nudged: false))
        return switch (report, situation) {
        // Out of work: the queue is the next batch; disposed and drained, exit; paused, sleep; else spin first.
        case (.ranOut, .acceptingWorking): (.spin(spinCeiling), .alive(.accepting, .spinning(nudged: false)))
        case (.ranOut, .acceptingWorkingThroughBatch), (.ranOut, .disposingWorkingThroughBatch): (.runBatch, situation.state)
        case (.ranOut, .pausedWorking): (.sleep, sleepsPaused)
        case (.ranOut, .disposingWorking): (.exit, .exited)
        // A spin's end: as out of work, but never a second spin.
        case (.spinEnded, .acceptingSpinning): (.sleep, .alive(.accepting, .sleeping(forWork: true, signalled: false)))
        case (.spinEnded, .acceptingSpinningNudged): (.runBatch, .alive(.accepting, .working))
        case (.spinEnded, .pausedSpinning), (.spinEnded, .pausedSpinningWithWork), (.spinEnded, .pausedSpinningNudged): (.sleep, sleepsPaused)
        case (.spinEnded, .disposingSpinningNudged): (.exit, .exited)
        // A spin's end after running an item handed over: as out of work, a spin again included.
        case (.handedOverRan, .acceptingSpinning): (.spin(spinCeiling), .alive(.accepting, .spinning(nudged: false)))
        case (.handedOverRan, .acceptingSpinningNudged): (.runBatch, .alive(.accepting, .working))
        case (.handedOverRan, .pausedSpinning), (.handedOverRan, .pausedSpinningWithWork), (.handedOverRan, .pausedSpinningNudged):
            (.sleep, sleepsPaused)
        case (.handedOverRan, .disposingSpinningNudged): (.exit, .exited)
        // A wakeup, signalled or not: as out of work (the spin is halved by a 1 ms sleep for work).
        case (.wokeUp, .acceptingSleepingForWork): (.spin(spinCeiling / 2), spinsAfterWakeup)
        case (.wokeUp, .acceptingSleepingSincePaused): (.spin(spinCeiling), spinsAfterWakeup)
        case (.wokeUp, .acceptingSleepingForWorkSignalled), (.wokeUp, .acceptingSleepingSincePausedSignalled):
            (.runBatch, .alive(.accepting, .working))
        case (.wokeUp, .pausedSleepingForWork), (.wokeUp, .pausedSleepingForWorkSignalled), (.wokeUp, .pausedSleeping),
             (.wokeUp, .pausedSleepingWithWork), (.wokeUp, .pausedSleepingSignalled):
            (.sleep, sleepsPaused)
        case (.wokeUp, .disposingSleepingForWorkSignalled): (.exit, .exited)
        case (.wokeUp, .disposingSleepingSignalled): (.runBatch, .alive(.disposing, .working))
        default: nil
        }
    }

    static let threadReports = [Report.ranOut, .spinEnded, .handedOverRan, .wokeUp]

    @Test("The thread reports only what it can be doing: out of work while working, a spin's end while spinning, a wakeup while sleeping",
          arguments: threadReports)
    func reportsInTurn(_ report: Report) {
        for situation in Situation.allCases {
            let inTurn = switch report {
            case .ranOut: situation.state.isWorking
            case .spinEnded, .handedOverRan: situation.state.isSpinning
            case .wokeUp: situation.state.isSleeping
            case .startFailure: situation == .acceptingWorking
            }
            #expect((Self.answer(to: report, in: situation) != nil) == inTurn, "\(report.rawValue), \(situation.rawValue)")
        }
    }

    @Test("The thread's reports: the next batch, a spin, a sleep or the exit, in every state it can report in",
          arguments: threadReports.flatMap { report in
              Situation.allCases.filter { answer(to: report, in: $0) != nil }.map { (report, $0) }
          })
    func threadReport(_ report: Report, in situation: Situation) throws {
        var fixture = situation.make()
        if report == .ranOut { fixture.runBatch() }
        let before = fixture.snapshot
        let expected = try #require(Self.answer(to: report, in: situation))
        #expect(fixture.report(report) == expected.step)
        #expect(fixture.snapshot == before.after(expected.step, state: expected.state))
    }

    @Test("A sleep for work teaches the spin how soon work came; a sleep since a pause teaches it nothing",
          arguments: Situation.allCases.filter { $0.state.isSleeping })
    func sleepTeachesSpin(_ situation: Situation) {
        var fixture = situation.make()
        _ = fixture.wokeUp(after: .milliseconds(1))
        guard case .alive(_, .sleeping(let forWork, _)) = situation.state else { return }
        #expect(fixture.machine.spinBudget.current == (forWork ? spinCeiling / 2 : spinCeiling))
    }

    /// Work comes 1 ms after each spin, far later than the spin's 20 µs: each sleep halves the spin.
    static func comeLate(_ fixture: inout Fixture, spins: [Duration]) {
        for spin in spins {
            #expect(fixture.ranOut() == .spin(spin))
            #expect(fixture.spinEnded() == .sleep)
            #expect(fixture.submit(.closure(0)) == .signal)
            #expect(fixture.wokeUp(after: .milliseconds(1)) == .runBatch)
            fixture.runBatch()
        }
    }

    static let shrinkingSpins: [Duration] = [.microseconds(20), .microseconds(10), .microseconds(5), .nanoseconds(2_500)]

    @Test("Work that keeps coming later than the spin shrinks it, 20 → 10 → 5 → 2.5 µs, then to nothing: the thread sleeps at once")
    func spinShrinks() {
        var fixture = Fixture()
        Self.comeLate(&fixture, spins: Self.shrinkingSpins)
        #expect(fixture.machine.spinBudget.current == .zero)
        #expect(fixture.ranOut() == .sleep)
        #expect(fixture.machine.state == .alive(.accepting, .sleeping(forWork: true, signalled: false)))
    }

    @Test("A sleep that ends within the spin's ceiling brings the whole spin back: a spin would have caught that work")
    func spinRestored() {
        var fixture = Fixture()
        Self.comeLate(&fixture, spins: Self.shrinkingSpins)
        #expect(fixture.ranOut() == .sleep)
        #expect(fixture.submit(.closure(1)) == .signal)
        #expect(fixture.wokeUp(after: .microseconds(5)) == .runBatch)
        fixture.runBatch()
        #expect(fixture.ranOut() == .spin(spinCeiling))
    }

    @Test("A new thread that the system would not start refuses every submission from then on")
    func failedToStart() {
        var fixture = Fixture()
        fixture.machine.threadFailedToStart(errno: 11)
        #expect(fixture.machine.state == .failedToStart(errno: 11))
        #expect(fixture.machine.hasExited)
        #expect(throws: startFailure) { _ = try fixture.machine.submit(.job(1)) }
    }

    // MARK: - Reports out of turn

    @Test("The thread's reports in a state it cannot be in stop the process", .exitTestOnOwnThreads, arguments: [
        (Report.ranOut, Situation.acceptingSpinning), (.ranOut, .acceptingSleepingForWork), (.ranOut, .exited),
        (.ranOut, .failedToStart), (.ranOut, .acceptingWorkingThroughBatch), (.spinEnded, .acceptingWorking),
        (.spinEnded, .pausedSleeping), (.spinEnded, .exited), (.handedOverRan, .acceptingWorking),
        (.handedOverRan, .acceptingSleepingForWork), (.wokeUp, .disposingWorking), (.wokeUp, .pausedSpinning),
        (.wokeUp, .failedToStart), (.startFailure, .acceptingWorkingThroughBatch),
    ])
    func outOfTurn(_ report: Report, in situation: Situation) async {
        await #expect(processExitsWith: .failure) { [report, situation] in
            var fixture = situation.make()
            _ = fixture.report(report)  // out of work "with items left in the batch" where it has some
        }
    }
}

extension DedicatedThreadStateMachine.State {
    var isWorking: Bool { if case .alive(_, .working) = self { true } else { false } }
    var isSpinning: Bool { if case .alive(_, .spinning) = self { true } else { false } }
    var isSleeping: Bool { if case .alive(_, .sleeping) = self { true } else { false } }
}

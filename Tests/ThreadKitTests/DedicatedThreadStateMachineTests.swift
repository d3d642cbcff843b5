import Testing
@testable import ThreadKit

/// A dedicated thread's decisions, driven event by event: no threads, no clock, no sleeps.
///
/// Every event is tried in every state the events can lead to (``Situation``): each test switches
/// over all of them without a `default`, so a state added later fails to compile until every
/// event says what it does there. The thread's own reports in a state it cannot be in stop the
/// process; the exit tests at the end prove that for each report.
@Suite("DedicatedThreadStateMachine")
struct DedicatedThreadStateMachineTests {
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

    static let ceiling = Duration.microseconds(20)
    static let refusal = DedicatedThreadError.disposed(name: "t")
    static let startFailure = DedicatedThreadError.threadStartFailed(name: "t", errno: 11)

    /// A machine and the batch its thread is running, as the core keeps them.
    struct Fixture {
        var machine = Machine(name: "t", spinCeiling: DedicatedThreadStateMachineTests.ceiling)
        var batch = RingBuffer<Item>()

        var queue: [Item] { Self.items(machine.queue) }
        var batchItems: [Item] { Self.items(batch) }

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
        mutating func spinEnded() -> Machine.ThreadStep { machine.spinEnded(refilling: &batch) }
        mutating func wokeUp(after slept: Duration = .milliseconds(1)) -> Machine.ThreadStep {
            machine.threadWokeUp(afterSleeping: slept, refilling: &batch)
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
    enum Situation: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
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

        var testDescription: String { rawValue }

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

        private func steps(_ f: inout Fixture) {
            let spin = Machine.ThreadStep.spin(DedicatedThreadStateMachineTests.ceiling)
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

    @Test("submit: queued while taking work or paused, with the one wakeup the thread needs; refused once disposed or never started",
          arguments: Situation.allCases)
    func submit(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue, batch = fixture.batchItems
        /// The wakeup expected, and the activity after it; `nil`: refused.
        let expected: (wake: Wake, state: State)?
        switch situation {
        case .acceptingWorking, .acceptingWorkingThroughBatch, .acceptingSpinningNudged, .acceptingSleepingForWorkSignalled,
             .acceptingSleepingSincePausedSignalled:
            expected = (.none, situation.state)
        case .acceptingSpinning:
            expected = (.nudge, .alive(.accepting, .spinning(nudged: true)))
        case .acceptingSleepingForWork:
            expected = (.signal, .alive(.accepting, .sleeping(forWork: true, signalled: true)))
        case .acceptingSleepingSincePaused:
            expected = (.signal, .alive(.accepting, .sleeping(forWork: false, signalled: true)))
        case .pausedWorking, .pausedSpinning, .pausedSpinningWithWork, .pausedSpinningNudged, .pausedSleepingForWork,
             .pausedSleepingForWorkSignalled, .pausedSleeping, .pausedSleepingWithWork, .pausedSleepingSignalled:
            expected = (.none, situation.state)  // a paused thread starts nothing: no need to wake it
        case .disposingWorking, .disposingWorkingThroughBatch, .disposingSpinningNudged, .disposingSleepingForWorkSignalled,
             .disposingSleepingSignalled, .exited, .failedToStart:
            expected = nil
        }
        if let expected {
            #expect(fixture.submit(.closure(9)) == expected.wake)
            #expect(fixture.machine.state == expected.state)
            #expect(fixture.queue == queued + [.closure(9)])
        } else {
            let refusal = situation == .failedToStart ? Self.startFailure : Self.refusal
            #expect(throws: refusal) { _ = try fixture.machine.submit(.closure(9)) }
            #expect(fixture.machine.state == situation.state)
            #expect(fixture.queue == queued)
        }
        #expect(fixture.batchItems == batch)
    }

    @Test("pause: a thread taking work pauses, and its batch goes back to the front of the queue; elsewhere nothing changes",
          arguments: Situation.allCases)
    func pause(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue, batch = fixture.batchItems
        fixture.pause()
        switch situation.state {
        case .alive(.accepting, let activity):
            #expect(fixture.machine.state == .alive(.paused, activity))
            #expect(fixture.queue == batch + queued)
            #expect(fixture.batchItems.isEmpty)
        case .alive(.paused, _), .alive(.disposing, _), .exited, .failedToStart:
            #expect(fixture.machine.state == situation.state)
            #expect(fixture.queue == queued)
            #expect(fixture.batchItems == batch)
        }
    }

    @Test("resume: a paused thread takes work again, and is woken if work is queued; elsewhere nothing changes",
          arguments: Situation.allCases)
    func resume(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue
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
        #expect(fixture.machine.resume() == expected.wake)
        #expect(fixture.machine.state == expected.state)
        #expect(fixture.queue == queued)
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
        var fixture = situation.make()
        let queued = fixture.queue, batch = fixture.batchItems
        let expected = Self.disposed(situation) ?? (.none, situation.state)
        #expect(fixture.machine.dispose() == expected.wake)
        #expect(fixture.machine.state == expected.state)
        #expect(fixture.queue == queued)
        #expect(fixture.batchItems == batch)
    }

    @Test("disposeNow: drops the closures of the batch, then of the queue, keeps the jobs, and wakes the thread as dispose does",
          arguments: Situation.allCases)
    func disposeNow(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue, batch = fixture.batchItems
        let dropping = fixture.machine.disposeNow(batch: &fixture.batch, dropping: \.isClosure)
        switch situation.state {
        case .alive(.accepting, _), .alive(.paused, _):
            let expected = Self.disposed(situation)!
            #expect(dropping.wake == expected.wake)
            #expect(fixture.machine.state == expected.state)
        case .alive(.disposing, _):
            #expect(dropping.wake == .none)  // woken by the dispose already
            #expect(fixture.machine.state == situation.state)
        case .exited, .failedToStart:
            #expect(dropping.wake == .none)
            #expect(fixture.machine.state == situation.state)
        }
        #expect(dropping.dropped == (batch + queued).filter(\.isClosure))
        #expect(fixture.batchItems == batch.filter { !$0.isClosure })
        #expect(fixture.queue == queued.filter { !$0.isClosure })
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

    // MARK: - The thread

    @Test("The thread out of work: runs the queue as its next batch, exits once disposed and drained, sleeps while paused, else spins first",
          arguments: Situation.allCases.filter { $0.state.isWorking })
    func ranOut(_ situation: Situation) {
        var fixture = situation.make()
        fixture.runBatch()
        let queued = fixture.queue
        let expected: (step: Machine.ThreadStep, state: State, batch: [Item])
        switch situation {
        case .acceptingWorking:
            expected = (.spin(Self.ceiling), .alive(.accepting, .spinning(nudged: false)), [])
        case .acceptingWorkingThroughBatch, .disposingWorkingThroughBatch:
            expected = (.runBatch, situation.state, queued)
        case .pausedWorking:
            expected = (.sleep, .alive(.paused, .sleeping(forWork: false, signalled: false)), [])
        case .disposingWorking:
            expected = (.exit, .exited, [])
        case .acceptingSpinning, .acceptingSpinningNudged, .acceptingSleepingForWork, .acceptingSleepingForWorkSignalled,
             .acceptingSleepingSincePaused, .acceptingSleepingSincePausedSignalled, .pausedSpinning, .pausedSpinningWithWork,
             .pausedSpinningNudged, .pausedSleepingForWork, .pausedSleepingForWorkSignalled, .pausedSleeping,
             .pausedSleepingWithWork, .pausedSleepingSignalled, .disposingSpinningNudged, .disposingSleepingForWorkSignalled,
             .disposingSleepingSignalled, .exited, .failedToStart:
            Issue.record("the thread cannot run out of work \(situation.rawValue): see the exit tests")
            return
        }
        #expect(fixture.ranOut() == expected.step)
        #expect(fixture.machine.state == expected.state)
        #expect(fixture.batchItems == expected.batch)
        #expect(fixture.queue == (expected.step == .runBatch ? [] : queued))
    }

    @Test("A spin's end: runs the work that came, exits once disposed, and otherwise sleeps; it never spins twice in a row",
          arguments: Situation.allCases.filter { $0.state.isSpinning })
    func spinEnded(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue
        let expected: (step: Machine.ThreadStep, state: State)
        switch situation {
        case .acceptingSpinning:
            expected = (.sleep, .alive(.accepting, .sleeping(forWork: true, signalled: false)))
        case .acceptingSpinningNudged:
            expected = (.runBatch, .alive(.accepting, .working))
        case .pausedSpinning, .pausedSpinningWithWork, .pausedSpinningNudged:
            expected = (.sleep, .alive(.paused, .sleeping(forWork: false, signalled: false)))
        case .disposingSpinningNudged:
            expected = (.exit, .exited)
        case .acceptingWorking, .acceptingWorkingThroughBatch, .acceptingSleepingForWork, .acceptingSleepingForWorkSignalled,
             .acceptingSleepingSincePaused, .acceptingSleepingSincePausedSignalled, .pausedWorking, .pausedSleepingForWork,
             .pausedSleepingForWorkSignalled, .pausedSleeping, .pausedSleepingWithWork, .pausedSleepingSignalled,
             .disposingWorking, .disposingWorkingThroughBatch, .disposingSleepingForWorkSignalled, .disposingSleepingSignalled,
             .exited, .failedToStart:
            Issue.record("the thread cannot end a spin \(situation.rawValue): see the exit tests")
            return
        }
        #expect(fixture.spinEnded() == expected.step)
        #expect(fixture.machine.state == expected.state)
        #expect(fixture.batchItems == (expected.step == .runBatch ? queued : []))
    }

    @Test("Waking up: runs the work that came, exits once disposed, sleeps on while paused, else spins; a sleep for work teaches the spin",
          arguments: Situation.allCases.filter { $0.state.isSleeping })
    func wokeUp(_ situation: Situation) {
        var fixture = situation.make()
        let queued = fixture.queue
        // A sleep of 1 ms, far over the 20 µs ceiling, halves the spin if it was a sleep for work.
        let halved = Self.ceiling / 2
        let expected: (step: Machine.ThreadStep, state: State, spin: Duration)
        switch situation {
        case .acceptingSleepingForWork:
            expected = (.spin(halved), .alive(.accepting, .spinning(nudged: false)), halved)
        case .acceptingSleepingForWorkSignalled:
            expected = (.runBatch, .alive(.accepting, .working), halved)
        case .acceptingSleepingSincePaused:
            expected = (.spin(Self.ceiling), .alive(.accepting, .spinning(nudged: false)), Self.ceiling)
        case .acceptingSleepingSincePausedSignalled:
            expected = (.runBatch, .alive(.accepting, .working), Self.ceiling)
        case .pausedSleepingForWork, .pausedSleepingForWorkSignalled:
            expected = (.sleep, .alive(.paused, .sleeping(forWork: false, signalled: false)), halved)
        case .pausedSleeping, .pausedSleepingWithWork, .pausedSleepingSignalled:
            expected = (.sleep, .alive(.paused, .sleeping(forWork: false, signalled: false)), Self.ceiling)
        case .disposingSleepingForWorkSignalled:
            expected = (.exit, .exited, halved)
        case .disposingSleepingSignalled:
            expected = (.runBatch, .alive(.disposing, .working), Self.ceiling)
        case .acceptingWorking, .acceptingWorkingThroughBatch, .acceptingSpinning, .acceptingSpinningNudged,
             .pausedWorking, .pausedSpinning, .pausedSpinningWithWork, .pausedSpinningNudged, .disposingWorking,
             .disposingWorkingThroughBatch, .disposingSpinningNudged, .exited, .failedToStart:
            Issue.record("the thread cannot wake up \(situation.rawValue): see the exit tests")
            return
        }
        #expect(fixture.wokeUp() == expected.step)
        #expect(fixture.machine.state == expected.state)
        #expect(fixture.machine.spinBudget.current == expected.spin)
        #expect(fixture.batchItems == (expected.step == .runBatch ? queued : []))
        #expect(fixture.queue == (expected.step == .runBatch ? [] : queued))
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
        #expect(fixture.ranOut() == .spin(Self.ceiling))
    }

    @Test("A new thread that the system would not start refuses every submission from then on")
    func failedToStart() {
        var fixture = Fixture()
        fixture.machine.threadFailedToStart(errno: 11)
        #expect(fixture.machine.state == .failedToStart(errno: 11))
        #expect(fixture.machine.hasExited)
        #expect(throws: Self.startFailure) { _ = try fixture.machine.submit(.job(1)) }
    }

    // MARK: - Reports out of turn

    @Test("The thread's reports in a state it cannot be in stop the process", arguments: [
        OutOfTurn.ranOutWhileSpinning, .ranOutWhileSleeping, .ranOutAfterExit, .ranOutWithoutThread, .ranOutWithBatchLeft,
        .spinEndedWhileWorking, .spinEndedWhileSleeping, .spinEndedAfterExit, .wokeUpWhileWorking, .wokeUpWhileSpinning,
        .wokeUpWithoutThread, .startFailureAfterSubmit,
    ])
    func outOfTurn(_ report: OutOfTurn) async {
        await #expect(processExitsWith: .failure) { [report] in
            report.report()
        }
    }

    /// A report that the thread cannot make where it is.
    enum OutOfTurn: String, Codable, Sendable, CustomTestStringConvertible {
        case ranOutWhileSpinning = "out of work while spinning"
        case ranOutWhileSleeping = "out of work while sleeping"
        case ranOutAfterExit = "out of work after exiting"
        case ranOutWithoutThread = "out of work with no thread"
        case ranOutWithBatchLeft = "out of work with items left in the batch"
        case spinEndedWhileWorking = "a spin's end while working"
        case spinEndedWhileSleeping = "a spin's end while sleeping"
        case spinEndedAfterExit = "a spin's end after exiting"
        case wokeUpWhileWorking = "a wakeup while working"
        case wokeUpWhileSpinning = "a wakeup while spinning"
        case wokeUpWithoutThread = "a wakeup with no thread"
        case startFailureAfterSubmit = "a start failure after a submission"

        var testDescription: String { rawValue }

        /// Where the report comes.
        var situation: Situation {
            switch self {
            case .ranOutWhileSpinning: .acceptingSpinning
            case .ranOutWhileSleeping: .acceptingSleepingForWork
            case .ranOutAfterExit, .spinEndedAfterExit: .exited
            case .ranOutWithoutThread, .wokeUpWithoutThread: .failedToStart
            case .ranOutWithBatchLeft, .startFailureAfterSubmit: .acceptingWorkingThroughBatch
            case .spinEndedWhileWorking: .acceptingWorking
            case .spinEndedWhileSleeping: .pausedSleeping
            case .wokeUpWhileWorking: .disposingWorking
            case .wokeUpWhileSpinning: .pausedSpinning
            }
        }

        func report() {
            var fixture = situation.make()
            switch self {
            case .ranOutWhileSpinning, .ranOutWhileSleeping, .ranOutAfterExit, .ranOutWithoutThread, .ranOutWithBatchLeft:
                _ = fixture.ranOut()
            case .spinEndedWhileWorking, .spinEndedWhileSleeping, .spinEndedAfterExit:
                _ = fixture.spinEnded()
            case .wokeUpWhileWorking, .wokeUpWhileSpinning, .wokeUpWithoutThread:
                _ = fixture.wokeUp()
            case .startFailureAfterSubmit:
                fixture.machine.threadFailedToStart(errno: 11)
            }
        }
    }
}

extension DedicatedThreadStateMachine.State {
    var isWorking: Bool { if case .alive(_, .working) = self { true } else { false } }
    var isSpinning: Bool { if case .alive(_, .spinning) = self { true } else { false } }
    var isSleeping: Bool { if case .alive(_, .sleeping) = self { true } else { false } }
}

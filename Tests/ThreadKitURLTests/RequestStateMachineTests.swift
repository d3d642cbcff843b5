import Foundation
import Testing
@testable import ThreadKitURL
import SeededRandom

/// A request's life, driven with made-up times and plain values for the transfer and the timers:
/// no threads, sessions or clocks. Every event is tried in every state, each table checked to
/// cover them all.
@Suite struct RequestStateMachineTests {
    typealias Machine = RequestStateMachine<String, String>
    typealias Running = Machine.Running

    static func ms(_ value: Int) -> Duration { .milliseconds(value) }
    /// A short request: 500 ms to get a slot, then 300 ms for the whole request.
    static let short = RequestTimeouts(queue: ms(500), running: .total(ms(300)))
    /// A long request: 500 ms to get a slot, 300 ms to the headers, then 200 ms between chunks.
    static let long = RequestTimeouts(queue: ms(500), running: .headersThenIdle(headers: ms(300), idle: ms(200)))

    /// The states a request can be in, each reached by the events a dispatcher sends: submitted at
    /// 0, accepted by the slots, its queue timer armed, granted a slot at 10 ms, its transfer
    /// `"task"` made, its timeout armed.
    enum Stage: String, CaseIterable, Codable, Sendable {
        case unsubmitted, cancelledBeforeSubmission, admitting, queued, queuedWithTimer, starting, running, runningWithTimer
        case cancelling, cancellingAfterCallerGrace, finished
    }

    static func machine(_ stage: Stage, _ timeouts: RequestTimeouts = short) -> Machine {
        var machine = Machine(timeouts: timeouts)
        let steps: [(inout Machine) -> Void]
        let submit: (inout Machine) -> Void = { _ = $0.submit(now: .zero, dispatcherDisposed: false) }
        let accept: (inout Machine) -> Void = { _ = $0.slotsAnswered(.accepted) }
        let armQueueTimer: (inout Machine) -> Void = { _ = $0.queueTimerArmed("queue timer") }
        let grant: (inout Machine) -> Void = { _ = $0.slotGranted(now: ms(10)) }
        let makeTransfer: (inout Machine) -> Void = { _ = $0.transferCreated("task") }
        let armTimeout: (inout Machine) -> Void = { _ = $0.timeoutTimerArmed("timeout timer") }
        let cancel: (inout Machine) -> Void = { _ = $0.cancel() }
        switch stage {
        case .unsubmitted: steps = []
        case .cancelledBeforeSubmission: steps = [cancel]
        case .admitting: steps = [submit]
        case .queued: steps = [submit, accept]
        case .queuedWithTimer: steps = [submit, accept, armQueueTimer]
        case .starting: steps = [submit, accept, armQueueTimer, grant]
        case .running: steps = [submit, accept, armQueueTimer, grant, makeTransfer]
        case .runningWithTimer: steps = [submit, accept, armQueueTimer, grant, makeTransfer, armTimeout]
        case .cancelling: steps = [submit, accept, armQueueTimer, grant, makeTransfer, armTimeout, cancel]
        case .cancellingAfterCallerGrace:
            steps = [submit, accept, armQueueTimer, grant, makeTransfer, armTimeout, cancel, { _ = $0.callerGraceEnded() }]
        case .finished: steps = [submit, accept, armQueueTimer, grant, makeTransfer, armTimeout, { _ = $0.transferCompleted(error: nil) }]
        }
        for step in steps { step(&machine) }
        return machine
    }

    static let justStarted = Running(transfer: "task", lastActivity: ms(10))
    static let timed = Running(transfer: "task", timer: "timeout timer", lastActivity: ms(10))

    /// The state each stage is in.
    static func state(_ stage: Stage) -> Machine.State {
        switch stage {
        case .unsubmitted: .unsubmitted
        case .cancelledBeforeSubmission: .cancelledBeforeSubmission
        case .admitting: .admitting(queueDeadline: ms(500))
        case .queued: .queued(timer: nil)
        case .queuedWithTimer: .queued(timer: "queue timer")
        case .starting: .starting(since: ms(10))
        case .running: .running(justStarted)
        case .runningWithTimer: .running(timed)
        case .cancelling: .cancelling(.cancelled, completionDelivered: false)
        case .cancellingAfterCallerGrace: .cancelling(.cancelled, completionDelivered: true)
        case .finished: .finished
        }
    }

    /// Checks `event` in every stage against `table` (stage: the answer, and the state after it;
    /// a stage left out must be unchanged and answer `unchanged`). The stages in `stops` are those
    /// where the event stops the process: exit tests prove each.
    func check<Answer: Equatable>(_ event: (inout Machine) -> Answer, unchanged: Answer?,
                                  _ table: [Stage: (Answer, Machine.State)], stops: Set<Stage> = [],
                                  timeouts: RequestTimeouts = short, sourceLocation: SourceLocation = #_sourceLocation) {
        for stage in Stage.allCases where !stops.contains(stage) {
            var machine = Self.machine(stage, timeouts)
            let answer = event(&machine)
            if let (expected, after) = table[stage] {
                #expect(answer == expected, "in \(stage)", sourceLocation: sourceLocation)
                #expect(machine.state == after, "after \(stage)", sourceLocation: sourceLocation)
            } else {
                #expect(answer == unchanged, "in \(stage)", sourceLocation: sourceLocation)
                #expect(machine.state == Self.state(stage), "\(stage) changed", sourceLocation: sourceLocation)
            }
        }
    }

    // MARK: - The stages themselves

    @Test func eachStageIsTheStateItsEventsLeadTo() {
        for stage in Stage.allCases {
            #expect(Self.machine(stage).state == Self.state(stage), "\(stage)")
            #expect(Self.machine(stage).awaitsTransfer == (stage == .starting), "\(stage)")
        }
    }

    // MARK: - Every event in every state

    @Test func submittingHandsARequestToTheSlotsOrRefusesOneCancelledBeforeOrToADisposedDispatcher() {
        var fresh = Machine(timeouts: Self.short)
        #expect(fresh.submit(now: Self.ms(40), dispatcherDisposed: false) == .askSlots)
        #expect(fresh.state == .admitting(queueDeadline: Self.ms(540)))
        var refused = Machine(timeouts: Self.short)
        #expect(refused.submit(now: .zero, dispatcherDisposed: true) == .refuse(.disposed, countAsFailed: true))
        #expect(refused.state == .finished)
        var cancelled = Self.machine(.cancelledBeforeSubmission)
        #expect(cancelled.submit(now: .zero, dispatcherDisposed: false) == .refuse(.cancelled, countAsFailed: true))
        #expect(cancelled.state == .finished)
        var cancelledThenDisposed = Self.machine(.cancelledBeforeSubmission)
        #expect(cancelledThenDisposed.submit(now: .zero, dispatcherDisposed: true) == .refuse(.cancelled, countAsFailed: true))
    }

    @Test(.exitTestOnOwnThreads) func aSecondSubmissionStops() async {
        await #expect(processExitsWith: .failure) {
            var machine = RequestStateMachineTests.machine(.queued)
            _ = machine.submit(now: .zero, dispatcherDisposed: false)
        }
    }

    @Test func theSlotsAcceptanceArmsTheQueueTimeoutUnlessTheyGrantedASlotAtOnce() {
        check({ $0.slotsAnswered(.accepted) }, unchanged: nil, [
            .admitting: (.armQueueTimer(deadline: Self.ms(500)), .queued(timer: nil)),
            .starting: (.none, .starting(since: Self.ms(10))),
        ], stops: Stopping.accepted.stages)
        var grantedAtOnce = Self.machine(.admitting)
        #expect(grantedAtOnce.slotGranted(now: Self.ms(5)) == .startTransfer(cancelQueueTimer: nil))
        #expect(grantedAtOnce.slotsAnswered(.accepted) == .none)
        #expect(grantedAtOnce.state == .starting(since: Self.ms(5)))
    }

    @Test func theSlotsRejectionRefusesTheRequestTheyCountedAlready() {
        check({ $0.slotsAnswered(.rejected(limit: 2)) }, unchanged: nil, [
            .admitting: (.refuse(.longRequestLimit(2), countAsFailed: false), .finished),
        ], stops: Stopping.rejected.stages)
        #expect(RequestEnding.longRequestLimit(2).outcome == .failed)
    }

    /// An event that stops the process in the stages it cannot come in.
    enum Stopping: String, Codable, Sendable {
        case accepted, rejected, cancel, dispose

        /// The stages it stops in: the slots answer only a request being admitted (they accept one
        /// they granted a slot to at once, too), and no ending comes between the submission and
        /// their answer, which the dispatcher makes under one lock.
        var stages: Set<Stage> {
            switch self {
            case .accepted: Set(Stage.allCases).subtracting([.admitting, .starting])
            case .rejected: Set(Stage.allCases).subtracting([.admitting])
            case .cancel, .dispose: [.admitting]
            }
        }

        func send(to machine: inout Machine) {
            switch self {
            case .accepted: _ = machine.slotsAnswered(.accepted)
            case .rejected: _ = machine.slotsAnswered(.rejected(limit: 1))
            case .cancel: _ = machine.cancel()
            case .dispose: _ = machine.dispose()
            }
        }
    }

    static let stoppingEvents: [(Stopping, Stage)] = [Stopping.accepted, .rejected, .cancel, .dispose].flatMap { event in
        Stage.allCases.filter(event.stages.contains).map { (event, $0) }
    }

    @Test(.exitTestOnOwnThreads, arguments: stoppingEvents)
    func anEventThatCannotComeInAStageStops(_ event: Stopping, in stage: Stage) async {
        await #expect(processExitsWith: .failure) { [event, stage] in
            var machine = RequestStateMachineTests.machine(stage)
            event.send(to: &machine)
        }
    }

    @Test func aQueueTimerIsKeptOnlyWhileTheRequestWaits() {
        check({ $0.queueTimerArmed("new timer") }, unchanged: "new timer", [
            .queued: (nil, .queued(timer: "new timer")),
            .queuedWithTimer: ("queue timer", .queued(timer: "new timer")),
        ])
    }

    @Test func aGrantedSlotStartsTheTransferAndCancelsTheQueueTimer() {
        var atOnce = Self.machine(.admitting)
        #expect(atOnce.slotGranted(now: Self.ms(10)) == .startTransfer(cancelQueueTimer: nil))
        #expect(atOnce.state == .starting(since: Self.ms(10)))
        var plain = Self.machine(.queued)
        #expect(plain.slotGranted(now: Self.ms(10)) == .startTransfer(cancelQueueTimer: nil))
        #expect(plain.state == .starting(since: Self.ms(10)))
        var timed = Self.machine(.queuedWithTimer)
        #expect(timed.slotGranted(now: Self.ms(20)) == .startTransfer(cancelQueueTimer: "queue timer"))
        #expect(timed.state == .starting(since: Self.ms(20)))
    }

    @Test(.exitTestOnOwnThreads) func aSlotGrantedToARequestThatDoesNotWaitStops() async {
        await #expect(processExitsWith: .failure) {
            var machine = RequestStateMachineTests.machine(.running)
            _ = machine.slotGranted(now: .zero)
        }
    }

    @Test func aMadeTransferArmsTheTotalOrTheHeadersTimeoutFromTheSlot() {
        var short = Self.machine(.starting)
        #expect(short.transferCreated("task") == .init(deadline: Self.ms(310), phase: .total))
        #expect(short.state == .running(Self.justStarted))
        var long = Self.machine(.starting, Self.long)
        #expect(long.transferCreated("task") == .init(deadline: Self.ms(310), phase: .headers))
    }

    @Test(.exitTestOnOwnThreads) func aTransferMadeWhenNoneIsAwaitedStops() async {
        await #expect(processExitsWith: .failure) {
            var machine = RequestStateMachineTests.machine(.finished)
            _ = machine.transferCreated("task")
        }
    }

    @Test func aTimeoutTimerIsKeptOnlyWhileTheTransferRuns() {
        var replacing = Self.timed
        replacing.timer = "new timer"
        check({ $0.timeoutTimerArmed("new timer") }, unchanged: "new timer", [
            .running: (nil, .running(replacing)),
            .runningWithTimer: ("timeout timer", .running(replacing)),
        ])
    }

    /// The Retry-After readings a response can carry, and the pause each asks for.
    static let retryAfterPauses: [(RetryAfter.Reading?, Duration?)] = [
        (nil, nil), (.pause(.zero), nil), (.invalid("neither a number of seconds nor an HTTP date"), nil),
        (.pause(.milliseconds(1)), .milliseconds(1)), (.pause(.seconds(30)), .seconds(30)),
    ]

    @Test(arguments: retryAfterPauses)
    func anHTTPResponseIsAllowedOnlyWhileTheTransferRunsAndPausesTheEndpointForItsRetryAfter(retryAfter: RetryAfter.Reading?, pause: Duration?) {
        var heard = Self.justStarted
        heard.receivedHeaders = true
        heard.lastActivity = Self.ms(50)
        var heardTimed = heard
        heardTimed.timer = "timeout timer"
        check({ $0.responseReceived(isHTTP: true, retryAfter: retryAfter, now: Self.ms(50)) }, unchanged: .ignore, [
            .running: (.allow(idleTimeout: nil, pauseEndpointFor: pause), .running(heard)),
            .runningWithTimer: (.allow(idleTimeout: nil, pauseEndpointFor: pause), .running(heardTimed)),
        ])
    }

    @Test func aLongRequestsRetryAfterPauseComesWithItsIdleTimeout() {
        var long = Self.machine(.running, Self.long)
        #expect(long.responseReceived(isHTTP: true, retryAfter: .pause(.milliseconds(1)), now: Self.ms(50))
                == .allow(idleTimeout: .init(deadline: Self.ms(250), phase: .idle), pauseEndpointFor: .milliseconds(1)))
    }

    @Test func anAnswerThatIsNotHTTPCancelsTheTransfer() {
        check({ $0.responseReceived(isHTTP: false, retryAfter: nil, now: Self.ms(50)) }, unchanged: .ignore, [
            .running: (.reject(.cancelTransfer("task", .notHTTP, cancelTimer: nil)), .cancelling(.notHTTP, completionDelivered: false)),
            .runningWithTimer: (.reject(.cancelTransfer("task", .notHTTP, cancelTimer: "timeout timer")),
                                .cancelling(.notHTTP, completionDelivered: false)),
        ])
    }

    @Test func aChunkIsDeliveredOnlyWhileTheTransferRuns() {
        var active = Self.justStarted
        active.lastActivity = Self.ms(60)
        var activeTimed = Self.timed
        activeTimed.lastActivity = Self.ms(60)
        check({ $0.dataReceived(now: Self.ms(60)) }, unchanged: false, [
            .running: (true, .running(active)),
            .runningWithTimer: (true, .running(activeTimed)),
        ])
    }

    @Test func aCompletedTransferEndsARunningRequestOrLandsACancel() {
        check({ $0.transferCompleted(error: nil) }, unchanged: Machine.EndAction.none, [
            .running: (.end(.completed, cancelTimer: nil), .finished),
            .runningWithTimer: (.end(.completed, cancelTimer: "timeout timer"), .finished),
            .cancelling: (.releaseSlot(.cancelled, deliver: true), .finished),
            .cancellingAfterCallerGrace: (.releaseSlot(.cancelled, deliver: false), .finished),
        ])
    }

    @Test func aFailedTransferEndsARunningRequestWithItsError() {
        let lost = URLError(.networkConnectionLost)
        check({ $0.transferCompleted(error: lost) }, unchanged: Machine.EndAction.none, [
            .running: (.end(.failed(lost), cancelTimer: nil), .finished),
            .runningWithTimer: (.end(.failed(lost), cancelTimer: "timeout timer"), .finished),
            .cancelling: (.releaseSlot(.cancelled, deliver: true), .finished),
            .cancellingAfterCallerGrace: (.releaseSlot(.cancelled, deliver: false), .finished),
        ])
        #expect(RequestEnding.failed(lost).outcome == .failed)
    }

    /// What an ending the dispatcher decides (a cancel, a dispose) does in every state before the
    /// end: a waiting or starting request ends at once, a running one has its transfer cancelled.
    static func endsOnce(with ending: RequestEnding) -> [Stage: (Machine.EndAction, Machine.State)] {
        let cancelling = Machine.State.cancelling(ending, completionDelivered: false)
        return [
            .queued: (.end(ending, cancelTimer: nil), .finished),
            .queuedWithTimer: (.end(ending, cancelTimer: "queue timer"), .finished),
            .starting: (.end(ending, cancelTimer: nil), .finished),
            .running: (.cancelTransfer("task", ending, cancelTimer: nil), cancelling),
            .runningWithTimer: (.cancelTransfer("task", ending, cancelTimer: "timeout timer"), cancelling),
        ]
    }

    @Test func cancelEndsTheRequestOnceWhereverItIs() {
        var table = Self.endsOnce(with: .cancelled)
        table[.unsubmitted] = (.none, .cancelledBeforeSubmission)
        check({ $0.cancel() }, unchanged: Machine.EndAction.none, table, stops: Stopping.cancel.stages)
    }

    @Test func disposeEndsTheRequestOnceAndLeavesAnUnsubmittedOneToBeRefused() {
        check({ $0.dispose() }, unchanged: Machine.EndAction.none, Self.endsOnce(with: .disposed), stops: Stopping.dispose.stages)
    }

    @Test func theQueueTimeoutEndsOnlyAWaitingRequest() {
        let ending = RequestEnding.timedOut(.queued, after: Self.ms(500))
        check({ $0.queueTimerFired() }, unchanged: Machine.EndAction.none, [
            .queued: (.end(ending, cancelTimer: nil), .finished),
            .queuedWithTimer: (.end(ending, cancelTimer: nil), .finished),
        ])
        #expect(ending.outcome == .timedOut)
    }

    @Test func theTotalTimeoutCancelsOnlyARunningTransfer() {
        let ending = RequestEnding.timedOut(.total, after: Self.ms(300))
        let cancelling = Machine.State.cancelling(ending, completionDelivered: false)
        check({ $0.timeoutFired(.total, now: Self.ms(310)) }, unchanged: .ignore, [
            .running: (.expire(.cancelTransfer("task", ending, cancelTimer: nil)), cancelling),
            .runningWithTimer: (.expire(.cancelTransfer("task", ending, cancelTimer: "timeout timer")), cancelling),
        ])
    }

    @Test func theCallersGraceDeliversTheEndingOnceWhileTheCancelIsOnItsWay() {
        check({ $0.callerGraceEnded() }, unchanged: Machine.EndAction.none, [
            .cancelling: (.deliverCompletion(.cancelled), .cancelling(.cancelled, completionDelivered: true)),
        ])
    }

    @Test func theSlotsGraceGivesTheSlotBackWhenTheCancelNeverLands() {
        check({ $0.slotGraceEnded() }, unchanged: Machine.EndAction.none, [
            .cancelling: (.releaseSlot(.cancelled, deliver: true), .finished),
            .cancellingAfterCallerGrace: (.releaseSlot(.cancelled, deliver: false), .finished),
        ])
    }

    @Test func armedGracesLeaveTheCancelToLand() {
        check({ $0.gracesArmed(callerGrace: true, slotGrace: true) }, unchanged: Machine.EndAction.none, [:])
    }

    @Test(arguments: [(false, true), (true, false), (false, false)])
    func aGraceThatCannotBeArmedGivesTheSlotBackAtOnce(callerGrace: Bool, slotGrace: Bool) {
        check({ $0.gracesArmed(callerGrace: callerGrace, slotGrace: slotGrace) }, unchanged: Machine.EndAction.none, [
            .cancelling: (.releaseSlot(.cancelled, deliver: true), .finished),
            .cancellingAfterCallerGrace: (.releaseSlot(.cancelled, deliver: false), .finished),
        ])
    }

    // MARK: - Long requests: headers, then silence between chunks

    @Test func aLongRequestsHeadersArmTheIdleTimeout() {
        var machine = Self.machine(.runningWithTimer, Self.long)
        #expect(machine.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(50)) == .allow(idleTimeout: .init(deadline: Self.ms(250), phase: .idle), pauseEndpointFor: nil))
        #expect(machine.timeoutTimerArmed("idle timer") == "timeout timer")
    }

    @Test func aLongRequestWithoutHeadersEndsAtItsHeadersTimeout() {
        var machine = Self.machine(.runningWithTimer, Self.long)
        let ending = RequestEnding.timedOut(.headers, after: Self.ms(300))
        #expect(machine.timeoutFired(.headers, now: Self.ms(310)) == .expire(.cancelTransfer("task", ending, cancelTimer: "timeout timer")))
        #expect(machine.state == .cancelling(ending, completionDelivered: false))
    }

    @Test func aChunkPushesTheIdleDeadlineOnAndSilenceEndsTheRequest() {
        var machine = Self.machine(.runningWithTimer, Self.long)
        _ = machine.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(50))
        _ = machine.timeoutTimerArmed("idle timer")
        let delivered = machine.dataReceived(now: Self.ms(200))
        #expect(delivered)
        #expect(machine.timeoutFired(.idle, now: Self.ms(250)) == .rearm(.init(deadline: Self.ms(400), phase: .idle)))
        #expect(machine.timeoutTimerArmed("later idle timer") == "idle timer")
        let ending = RequestEnding.timedOut(.idle, after: Self.ms(200))
        #expect(machine.timeoutFired(.idle, now: Self.ms(400)) == .expire(.cancelTransfer("task", ending, cancelTimer: "later idle timer")))
    }

    @Test func aHeadersTimerThatRacesTheHeadersCountsAsTheIdleTimer() {
        var lateHeaders = Self.machine(.runningWithTimer, Self.long)
        _ = lateHeaders.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(300))
        #expect(lateHeaders.timeoutFired(.headers, now: Self.ms(310)) == .rearm(.init(deadline: Self.ms(500), phase: .idle)))
        var silentSince = Self.machine(.runningWithTimer, Self.long)
        _ = silentSince.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(50))
        let ending = RequestEnding.timedOut(.idle, after: Self.ms(200))
        #expect(silentSince.timeoutFired(.headers, now: Self.ms(310)) == .expire(.cancelTransfer("task", ending, cancelTimer: "timeout timer")))
    }

    // MARK: - Races

    @Test func aCancelRacingTheStartGivesTheSlotBackAndNoTransferIsMade() {
        var machine = Self.machine(.starting)
        #expect(machine.cancel() == .end(.cancelled, cancelTimer: nil))
        #expect(!machine.awaitsTransfer)
        #expect(machine.dispose() == .none)
    }

    @Test func aDisposeRacingTheStartGivesTheSlotBackAndNoTransferIsMade() {
        var machine = Self.machine(.starting)
        #expect(machine.dispose() == .end(.disposed, cancelTimer: nil))
        #expect(!machine.awaitsTransfer)
        #expect(machine.cancel() == .none)
    }

    @Test func aTimeoutAfterTheCompletionDoesNothingAndALateTimerIsCancelled() {
        var machine = Self.machine(.running)
        #expect(machine.transferCompleted(error: nil) == .end(.completed, cancelTimer: nil))
        #expect(machine.timeoutFired(.total, now: Self.ms(310)) == .ignore)
        #expect(machine.timeoutTimerArmed("late timer") == "late timer")
        #expect(machine.state == .finished)
    }

    @Test func aCompletionAfterACancelLandsItAndTheOwnerHearsTheCancelNotTheTransfersError() {
        var machine = Self.machine(.runningWithTimer)
        #expect(machine.cancel() == .cancelTransfer("task", .cancelled, cancelTimer: "timeout timer"))
        #expect(machine.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(20)) == .ignore)
        let delivered = machine.dataReceived(now: Self.ms(20))
        #expect(!delivered)
        #expect(machine.transferCompleted(error: URLError(.cancelled)) == .releaseSlot(.cancelled, deliver: true))
        #expect(machine.slotGraceEnded() == .none)
        #expect(machine.callerGraceEnded() == .none)
    }

    @Test func aRetryAfterResponseIsAllowedWhileAWaitingRequestKeepsItsQueueDeadline() {
        var answering = Self.machine(.running)
        var waiting = Self.machine(.queuedWithTimer)
        // The dispatcher pauses the endpoint before it delivers the 429: the waiting one stays queued.
        #expect(answering.responseReceived(isHTTP: true, retryAfter: nil, now: Self.ms(100)) == .allow(idleTimeout: nil, pauseEndpointFor: nil))
        #expect(answering.transferCompleted(error: nil) == .end(.completed, cancelTimer: nil))
        #expect(waiting.state == .queued(timer: "queue timer"))
        #expect(waiting.queueTimerFired() == .end(.timedOut(.queued, after: Self.ms(500)), cancelTimer: nil))
        // A pause that ends first: the wake-up grants the slot, and the queue timer is cancelled.
        var woken = Self.machine(.queuedWithTimer)
        #expect(woken.slotGranted(now: Self.ms(450)) == .startTransfer(cancelQueueTimer: "queue timer"))
        #expect(woken.queueTimerFired() == .none)
    }

    @Test func eventsDuringTheGracePeriodChangeNothingButTheOneDelivery() {
        var machine = Self.machine(.cancelling)
        #expect(machine.cancel() == .none)
        #expect(machine.dispose() == .none)
        #expect(machine.timeoutFired(.total, now: Self.ms(400)) == .ignore)
        #expect(machine.callerGraceEnded() == .deliverCompletion(.cancelled))
        #expect(machine.callerGraceEnded() == .none)
        #expect(machine.cancel() == .none)
        #expect(machine.transferCompleted(error: URLError(.cancelled)) == .releaseSlot(.cancelled, deliver: false))
        #expect(machine.slotGraceEnded() == .none)
        #expect(machine.state == .finished)
    }

    @Test func aSecondCancelDoesNothing() {
        var queued = Self.machine(.queued)
        #expect(queued.cancel() == .end(.cancelled, cancelTimer: nil))
        #expect(queued.cancel() == .none)
        var unsubmitted = Self.machine(.unsubmitted)
        #expect(unsubmitted.cancel() == .none)
        #expect(unsubmitted.cancel() == .none)
        #expect(unsubmitted.submit(now: .zero, dispatcherDisposed: false) == .refuse(.cancelled, countAsFailed: true))
        var running = Self.machine(.running)
        #expect(running.cancel() == .cancelTransfer("task", .cancelled, cancelTimer: nil))
        #expect(running.cancel() == .none)
    }

    // MARK: - Any order of events

    /// Whatever events come, in any order: the slot (or queue place) comes back at most once, and
    /// once it has, the owner has heard exactly one ending.
    @Test(arguments: 0..<200) func anyOrderOfEventsEndsARequestExactlyOnce(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var machine = Machine(timeouts: random.chance(0.5) ? Self.short : Self.long)
        var now = Duration.zero
        var releases = 0
        var deliveries = 0
        func count(_ action: Machine.EndAction) {
            switch action {
            case .none: break
            case .end: releases += 1; deliveries += 1
            case .cancelTransfer: break
            case .releaseSlot(_, let deliver): releases += 1; if deliver { deliveries += 1 }
            case .deliverCompletion: deliveries += 1
            }
        }
        /// A refusal: the request is forgotten, and its owner gets the ending thrown.
        func refused() { releases += 1; deliveries += 1 }
        /// The submission and the slots' answer, as the dispatcher makes them: in one step.
        func submit(dispatcherDisposed: Bool) {
            guard case .askSlots = machine.submit(now: now, dispatcherDisposed: dispatcherDisposed) else { return refused() }
            switch Int.random(in: 0..<10, using: &random) {
            case 0, 1:
                if case .refuse = machine.slotsAnswered(.rejected(limit: 1)) { refused() }
            case 2, 3, 4:
                _ = machine.slotGranted(now: now)
                _ = machine.slotsAnswered(.accepted)
            default:
                _ = machine.slotsAnswered(.accepted)
            }
        }
        for _ in 0..<30 {
            now += random.milliseconds(0...100)
            switch Int.random(in: 0..<14, using: &random) {
            case 0: if case .unsubmitted = machine.state { submit(dispatcherDisposed: random.chance(0.1)) }
                    else if case .cancelledBeforeSubmission = machine.state { submit(dispatcherDisposed: false) }
            case 1: if case .queued = machine.state { _ = machine.slotGranted(now: now) }
            case 2: if machine.awaitsTransfer { _ = machine.transferCreated("task") }
            case 3: count(machine.cancel())
            case 4: count(machine.dispose())
            case 5: count(machine.queueTimerFired())
            case 6: if case .expire(let action) = machine.timeoutFired(random.chance(0.5) ? .total : .headers, now: now) { count(action) }
            case 7: if case .reject(let action) = machine.responseReceived(
                isHTTP: random.chance(0.9), retryAfter: random.chance(0.5) ? .pause(random.milliseconds(0...100)) : nil, now: now) { count(action) }
            case 8: _ = machine.dataReceived(now: now)
            case 9: count(machine.transferCompleted(error: random.chance(0.5) ? nil : URLError(.cancelled)))
            case 10: count(machine.callerGraceEnded())
            case 11: count(machine.slotGraceEnded())
            case 12: count(machine.gracesArmed(callerGrace: random.chance(0.8), slotGrace: random.chance(0.8)))
            default: _ = machine.timeoutTimerArmed("timer")
            }
            #expect(releases <= 1 && deliveries <= 1, "seed \(seed)")
        }
        if case .finished = machine.state, releases == 1 { #expect(deliveries == 1, "seed \(seed)") }
    }
}

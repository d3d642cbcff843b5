/// How long one request may take, from the dispatcher's point of view.
struct RequestTimeouts: Equatable, Sendable {
    /// What limits a request once it holds its slot.
    enum Running: Equatable, Sendable {
        /// A short request: one deadline for the whole request, from the slot on.
        case total(Duration)
        /// A long request: a deadline for the response headers, from the slot on, then the
        /// longest silence between two chunks of the body.
        case headersThenIdle(headers: Duration, idle: Duration)
    }

    /// The longest wait for a slot.
    var queue: Duration
    /// The limits once it holds its slot.
    var running: Running
}

/// How a request ended, as its owner hears it.
enum RequestEnding: Sendable, Equatable, CustomStringConvertible {
    /// A whole response came, whatever its status.
    case completed
    /// The transfer failed (a `URLError`: a connection closed mid-response, a malformed response).
    case failed(any Error)
    /// The owner cancelled it.
    case cancelled
    /// The dispatcher was disposed.
    case disposed
    /// A ThreadKit timeout ended it, `after` this long in `phase`.
    case timedOut(URLDispatcherError.TimeoutPhase, after: Duration)
    /// The server's answer was not an HTTP response.
    case notHTTP
    /// Refused by its endpoint's slots: a long request that does not wait found `limit` long
    /// requests in flight or waiting.
    case longRequestLimit(Int)

    /// The count it lands in.
    var outcome: EndpointSlots<Int>.Outcome {
        switch self {
        case .completed: .completed
        case .timedOut: .timedOut
        case .failed, .cancelled, .disposed, .notHTTP, .longRequestLimit: .failed
        }
    }

    /// Its description; two transfer failures are equal when their descriptions are.
    var description: String {
        switch self {
        case .completed: "completed"
        case .failed(let error): "failed: \(error)"
        case .cancelled: "cancelled"
        case .disposed: "disposed"
        case .timedOut(let phase, let after): "timed out after \(after.readable) \(phase)"
        case .notHTTP: "not HTTP"
        case .longRequestLimit(let limit): "refused at the long-request limit of \(limit)"
        }
    }

    static func == (lhs: RequestEnding, rhs: RequestEnding) -> Bool { lhs.description == rhs.description }
}

/// The life of one ``URLDispatcher`` request: a pure state machine.
///
/// Events go in (submitted, the slots' answer, granted a slot, transfer made, response, chunk,
/// transfer complete, cancel, dispose, a timer fired, graces armed) and each returns what the
/// dispatcher must do: refuse the request, arm or cancel a timer, start or cancel the transfer,
/// pause the endpoint, give the slot back, tell the owner. It reads no clock, takes no lock and
/// touches no session: times are offsets the caller passes, the transfer and the timers are opaque
/// tokens (`URLSessionDataTask` and `TimerHandle` in the dispatcher, plain values in the tests).
/// The dispatcher keeps one per request under its lock and carries the actions out.
///
/// ```
/// unsubmitted ──cancel──▶ cancelledBeforeSubmission ──submit──▶ finished (refused: cancelled)
///      │ submit
///      ├──(dispatcher disposed)──▶ finished (refused: disposed)
///      ▼
///  admitting ──slots reject──▶ finished (refused: long-request limit)
///      │ │
///      │ └──slot granted at once┐
///      │ slots accept           │
///      ▼                        ▼
///   queued ──slot granted──▶ starting ──transfer made──▶ running ──complete──▶ finished
///      │                        │                          │
///      │ cancel, dispose,       │ cancel, dispose          │ cancel, dispose, timeout, not HTTP
///      │ queue timeout          ▼                          ▼
///      └──────────────────▶ finished                   cancelling ──transfer complete, slot grace,
///                                                                   graces not armed──▶ finished
/// ```
///
/// Every request ends exactly once: the first ending wins, and every later event is ignored. A
/// running transfer that must be cancelled ends in two steps (``State/cancelling(_:completionDelivered:)``):
/// over for its owner at once, its slot held until the session reports the cancelled transfer
/// complete, or the slot's grace is over; the owner hears the ending then, or when the caller's
/// grace is over if that comes first, once either way.
struct RequestStateMachine<Transfer: Sendable, Timer: Sendable>: Sendable {
    /// Where a request is in its life.
    enum State: Sendable {
        /// Made, not yet submitted.
        case unsubmitted
        /// Cancelled before it was submitted: it is refused when it is.
        case cancelledBeforeSubmission
        /// Submitted, and handed to its endpoint's slots, whose answer comes next (under the same
        /// lock: no other event comes in between, but the slot they may grant at once).
        case admitting(queueDeadline: Duration)
        /// Waiting for a slot; `timer` is its queue timeout, once armed.
        case queued(timer: Timer?)
        /// Granted a slot at `since`; its transfer is not made yet.
        case starting(since: Duration)
        /// Its transfer runs.
        case running(Running)
        /// Over for its owner; its transfer is being cancelled and still holds the slot.
        case cancelling(RequestEnding, completionDelivered: Bool)
        /// Over, its slot or place given back.
        case finished
    }

    /// A running transfer's books.
    struct Running: Sendable {
        var transfer: Transfer
        /// The armed timeout: to the headers, for the whole request, or the idle one.
        var timer: Timer?
        var receivedHeaders = false
        /// When the slot was granted, or the last headers or chunk came.
        var lastActivity: Duration
    }

    /// The answer to ``submit(now:dispatcherDisposed:)``.
    enum SubmitAction: Equatable, Sendable {
        /// Refuse it at once: the owner gets the ending thrown (or as its completion). With
        /// `countAsFailed`, count it failed with its endpoint's slots, which never knew it: every
        /// request lands in exactly one count.
        case refuse(RequestEnding, countAsFailed: Bool)
        /// Hand it to its endpoint's slots, and report their answer (``slotsAnswered(_:)``).
        case askSlots
    }

    /// What the endpoint's slots answered to a new request.
    enum Admission: Equatable, Sendable {
        /// They queued it, or granted it a slot at once (reported first, as ``slotGranted(now:)``).
        case accepted
        /// A long request that does not wait found `limit` long requests in flight or waiting;
        /// the slots counted it failed.
        case rejected(limit: Int)
    }

    /// The answer to ``slotsAnswered(_:)``.
    enum AdmissionAction: Equatable, Sendable {
        /// Nothing: it got its slot at once.
        case none
        /// It waits: arm its queue timeout for `deadline`.
        case armQueueTimer(deadline: Duration)
        /// Refuse it, as ``SubmitAction/refuse(_:countAsFailed:)`` says.
        case refuse(RequestEnding, countAsFailed: Bool)
    }

    /// The answer to ``slotGranted(now:)``.
    enum StartAction: Sendable {
        /// Make and resume its transfer; cancel its queue timeout.
        case startTransfer(cancelQueueTimer: Timer?)
    }

    /// A timeout to arm.
    struct TimeoutArm: Equatable, Sendable {
        var deadline: Duration
        var phase: URLDispatcherError.TimeoutPhase
    }

    /// What an ending event asks for.
    enum EndAction: Sendable {
        /// Nothing: it has ended already, or the event does not concern it now.
        case none
        /// It is over: its place in the queue or its slot goes back, `cancelTimer` is cancelled, and
        /// its owner hears `ending`.
        case end(RequestEnding, cancelTimer: Timer?)
        /// It is over for its owner, its slot is held: cancel `transfer` and `cancelTimer`, and arm
        /// the caller's and the slot's graces.
        case cancelTransfer(Transfer, RequestEnding, cancelTimer: Timer?)
        /// The cancel of its transfer landed, or the slot's grace is over: its slot goes back, and its
        /// owner hears `ending` unless `deliver` is false (the caller's grace told it already).
        case releaseSlot(RequestEnding, deliver: Bool)
        /// The caller's grace is over before the cancel landed: the owner hears `ending` now.
        case deliverCompletion(RequestEnding)
    }

    /// The answer to ``timeoutFired(_:now:)``.
    enum TimeoutAction: Sendable {
        /// It is not running any more: nothing to do.
        case ignore
        /// A long request heard from its server since: arm the idle timeout again for `deadline`.
        case rearm(TimeoutArm)
        /// It timed out: carry out `action` (a ``EndAction/cancelTransfer(_:_:cancelTimer:)``).
        case expire(EndAction)
    }

    /// The answer to ``responseReceived(isHTTP:retryAfter:now:)``.
    enum ResponseAction: Sendable {
        /// It is not running any more: drop the response, and let its transfer be (its cancel is on the way).
        case ignore
        /// Let the transfer go on and deliver the response; arm `idleTimeout` (a long request);
        /// pause the endpoint for `pauseEndpointFor` (its Retry-After), starting no request before.
        case allow(idleTimeout: TimeoutArm?, pauseEndpointFor: Duration?)
        /// Not an HTTP response: carry out `action` (its transfer is cancelled).
        case reject(EndAction)
    }

    let timeouts: RequestTimeouts
    private(set) var state = State.unsubmitted

    init(timeouts: RequestTimeouts) {
        self.timeouts = timeouts
    }

    /// Whether it holds a slot and waits for its transfer to be made: the one moment the dispatcher
    /// makes the transfer (under its lock, so that no transfer is made for a request that has ended).
    var awaitsTransfer: Bool {
        if case .starting = state { return true }
        return false
    }

    // MARK: - Submitting and starting

    /// It is submitted at `now`; `dispatcherDisposed` says whether its dispatcher refuses everything.
    /// A request cancelled before is refused with ``RequestEnding/cancelled``, whatever else holds.
    mutating func submit(now: Duration, dispatcherDisposed: Bool) -> SubmitAction {
        switch state {
        case .unsubmitted:
            if dispatcherDisposed {
                state = .finished
                return .refuse(.disposed, countAsFailed: true)
            }
            state = .admitting(queueDeadline: now + timeouts.queue)
            return .askSlots
        case .cancelledBeforeSubmission:
            state = .finished
            return .refuse(.cancelled, countAsFailed: true)
        case .admitting, .queued, .starting, .running, .cancelling, .finished:
            preconditionFailure("RequestStateMachine.submit: the request was submitted already (\(state))")
        }
    }

    /// Its endpoint's slots answered its submission: it waits for a slot (its queue timeout to
    /// arm), or has one already (they granted it at once), or is refused.
    mutating func slotsAnswered(_ admission: Admission) -> AdmissionAction {
        switch (state, admission) {
        case (.admitting(let queueDeadline), .accepted):
            state = .queued(timer: nil)
            return .armQueueTimer(deadline: queueDeadline)
        case (.admitting, .rejected(let limit)):
            state = .finished
            return .refuse(.longRequestLimit(limit), countAsFailed: false)
        case (.starting, .accepted):
            return .none
        case (.unsubmitted, _), (.cancelledBeforeSubmission, _), (.queued, _), (.starting, .rejected), (.running, _),
             (.cancelling, _), (.finished, _):
            preconditionFailure("RequestStateMachine.slotsAnswered: \(admission) for a request not being admitted (\(state))")
        }
    }

    /// Its queue timeout is armed: `timer` is kept, or handed back to be cancelled if the request
    /// no longer waits. Returns the timer to cancel, if any.
    mutating func queueTimerArmed(_ timer: Timer) -> Timer? {
        guard case .queued(let replaced) = state else { return timer }
        state = .queued(timer: timer)
        return replaced
    }

    /// The endpoint's slots granted it a slot at `now`: as they answer its submission, or later,
    /// while it waits. Only then: the slots know a request only between its submission and its ending.
    mutating func slotGranted(now: Duration) -> StartAction {
        let timer: Timer?
        switch state {
        case .admitting: timer = nil
        case .queued(let queueTimer): timer = queueTimer
        case .unsubmitted, .cancelledBeforeSubmission, .starting, .running, .cancelling, .finished:
            preconditionFailure("RequestStateMachine.slotGranted: granted a slot while not waiting for one (\(state))")
        }
        state = .starting(since: now)
        return .startTransfer(cancelQueueTimer: timer)
    }

    /// Its transfer is made (see ``awaitsTransfer``): returns the timeout to arm.
    mutating func transferCreated(_ transfer: Transfer) -> TimeoutArm {
        guard case .starting(let since) = state else {
            preconditionFailure("RequestStateMachine.transferCreated: no transfer is awaited (\(state))")
        }
        state = .running(Running(transfer: transfer, lastActivity: since))
        switch timeouts.running {
        case .total(let timeout): return TimeoutArm(deadline: since + timeout, phase: .total)
        case .headersThenIdle(let headers, _): return TimeoutArm(deadline: since + headers, phase: .headers)
        }
    }

    /// Its running timeout is armed: `timer` is kept (returning the one it replaces, to cancel), or
    /// handed back to be cancelled if the request no longer runs.
    mutating func timeoutTimerArmed(_ timer: Timer) -> Timer? {
        guard case .running(var running) = state else { return timer }
        let replaced = running.timer
        running.timer = timer
        state = .running(running)
        return replaced
    }

    // MARK: - Session events

    /// The response's headers came at `now`; `retryAfter` is what its Retry-After field asks of
    /// the endpoint (``RetryAfter/read(_:limits:now:)``: `nil` unless honoured for this status).
    mutating func responseReceived(isHTTP: Bool, retryAfter: RetryAfter.Reading?, now: Duration) -> ResponseAction {
        guard case .running(var running) = state else { return .ignore }
        guard isHTTP else { return .reject(endRunning(running, with: .notHTTP)) }
        running.receivedHeaders = true
        running.lastActivity = now
        state = .running(running)
        var pause: Duration?
        if case .pause(let duration)? = retryAfter, duration > .zero { pause = duration }
        guard case .headersThenIdle(_, let idle) = timeouts.running else { return .allow(idleTimeout: nil, pauseEndpointFor: pause) }
        return .allow(idleTimeout: TimeoutArm(deadline: now + idle, phase: .idle), pauseEndpointFor: pause)
    }

    /// A chunk of the body came at `now`: returns whether to deliver it (only while it runs).
    mutating func dataReceived(now: Duration) -> Bool {
        guard case .running(var running) = state else { return false }
        running.lastActivity = now
        state = .running(running)
        return true
    }

    /// The session reports its transfer complete, with `error` or after the whole response.
    mutating func transferCompleted(error: (any Error)?) -> EndAction {
        switch state {
        case .running(let running):
            state = .finished
            return .end(error.map { .failed($0) } ?? .completed, cancelTimer: running.timer)
        case .cancelling:
            return cancelLanded()
        case .unsubmitted, .cancelledBeforeSubmission, .admitting, .queued, .starting, .finished:
            return .none
        }
    }

    // MARK: - Endings decided here

    /// Its owner cancels it.
    mutating func cancel() -> EndAction {
        if case .unsubmitted = state {
            state = .cancelledBeforeSubmission
            return .none
        }
        return end(with: .cancelled)
    }

    /// Its dispatcher is disposed. One not yet submitted is refused when it is.
    mutating func dispose() -> EndAction {
        end(with: .disposed)
    }

    /// Its queue timeout fired.
    mutating func queueTimerFired() -> EndAction {
        guard case .queued = state else { return .none }
        state = .finished
        return .end(.timedOut(.queued, after: timeouts.queue), cancelTimer: nil)
    }

    /// A running timeout armed for `phase` fired at `now`. A long request past its headers has
    /// only the idle timeout, whichever timer fired (a headers timer can race with the headers).
    mutating func timeoutFired(_ phase: URLDispatcherError.TimeoutPhase, now: Duration) -> TimeoutAction {
        guard case .running(let running) = state else { return .ignore }
        switch timeouts.running {
        case .total(let timeout):
            return .expire(endRunning(running, with: .timedOut(phase, after: timeout)))
        case .headersThenIdle(let headers, let idle):
            guard running.receivedHeaders else {
                return .expire(endRunning(running, with: .timedOut(phase, after: headers)))
            }
            let due = running.lastActivity + idle
            if due > now { return .rearm(TimeoutArm(deadline: due, phase: .idle)) }
            return .expire(endRunning(running, with: .timedOut(.idle, after: idle)))
        }
    }

    /// The caller's grace after a cancel is over: the owner hears the ending, if it has not.
    mutating func callerGraceEnded() -> EndAction {
        guard case .cancelling(let ending, false) = state else { return .none }
        state = .cancelling(ending, completionDelivered: true)
        return .deliverCompletion(ending)
    }

    /// The slot's grace after a cancel is over: the slot goes back.
    mutating func slotGraceEnded() -> EndAction {
        guard case .cancelling = state else { return .none }
        return cancelLanded()
    }

    /// The graces after a cancel (``EndAction/cancelTransfer(_:_:cancelTimer:)``) were armed, or
    /// could not be (the timer thread refused them). One that is missing would never end the
    /// wait: the slot goes back at once, and the owner hears the ending if it has not.
    mutating func gracesArmed(callerGrace: Bool, slotGrace: Bool) -> EndAction {
        guard case .cancelling = state, !(callerGrace && slotGrace) else { return .none }
        return cancelLanded()
    }

    // MARK: - Helpers

    private mutating func end(with ending: RequestEnding) -> EndAction {
        switch state {
        case .unsubmitted, .cancelledBeforeSubmission, .cancelling, .finished:
            return .none
        case .admitting:
            preconditionFailure("RequestStateMachine: \(ending) between the submission and the slots' answer, which come under one lock")
        case .queued(let timer):
            state = .finished
            return .end(ending, cancelTimer: timer)
        case .starting:
            state = .finished
            return .end(ending, cancelTimer: nil)
        case .running(let running):
            return endRunning(running, with: ending)
        }
    }

    private mutating func endRunning(_ running: Running, with ending: RequestEnding) -> EndAction {
        state = .cancelling(ending, completionDelivered: false)
        return .cancelTransfer(running.transfer, ending, cancelTimer: running.timer)
    }

    private mutating func cancelLanded() -> EndAction {
        guard case .cancelling(let ending, let delivered) = state else { return .none }
        state = .finished
        return .releaseSlot(ending, deliver: !delivered)
    }
}

extension RequestStateMachine.EndAction: Equatable where Transfer: Equatable, Timer: Equatable {}
extension RequestStateMachine.StartAction: Equatable where Timer: Equatable {}
extension RequestStateMachine.TimeoutAction: Equatable where Transfer: Equatable, Timer: Equatable {}
extension RequestStateMachine.ResponseAction: Equatable where Transfer: Equatable, Timer: Equatable {}
extension RequestStateMachine.Running: Equatable where Transfer: Equatable, Timer: Equatable {}
extension RequestStateMachine.State: Equatable where Transfer: Equatable, Timer: Equatable {}

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

    /// The count it lands in.
    var outcome: EndpointSlots<Int>.Outcome {
        switch self {
        case .completed: .completed
        case .timedOut: .timedOut
        case .failed, .cancelled, .disposed, .notHTTP: .failed
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
        }
    }

    static func == (lhs: RequestEnding, rhs: RequestEnding) -> Bool { lhs.description == rhs.description }
}

/// The life of one ``URLDispatcher`` request: a pure state machine.
///
/// Events go in (submitted, granted a slot, transfer made, response, chunk, transfer complete,
/// cancel, dispose, a timer fired) and each returns what the dispatcher must do: start or cancel
/// the transfer, give the slot back, tell the owner, arm or cancel a timer. It reads no clock,
/// takes no lock and touches no session: times are offsets the caller passes, the transfer and the
/// timers are opaque tokens (`URLSessionDataTask` and `TimerHandle` in the dispatcher, plain values
/// in the tests). The dispatcher keeps one per request under its lock and carries the actions out.
///
/// ```
/// unsubmitted ──cancel──▶ cancelledBeforeSubmission ──submit──▶ finished (refused)
///      │ submit
///      ▼
///   queued ──slot granted──▶ starting ──transfer made──▶ running ──complete──▶ finished
///      │                        │                          │
///      └──cancel, dispose, ─────┴──▶ finished               └──cancel, dispose, timeout, not HTTP──▶ cancelling
///         queue timeout                                                                               │
///                                                            finished ◀──transfer complete, slot grace─┘
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
        /// When it got its slot.
        var startedAt: Duration
        var receivedHeaders = false
        /// When the slot was granted, or the last headers or chunk came.
        var lastActivity: Duration
    }

    /// The answer to ``submit(now:dispatcherDisposed:)``.
    enum SubmitAction: Equatable, Sendable {
        /// Refuse it at once: the owner gets the ending thrown (or as its completion).
        case refuse(RequestEnding)
        /// Queue it with the endpoint's slots; arm its queue timeout for `queueDeadline` if it waits.
        case enqueue(queueDeadline: Duration)
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

    /// The answer to ``responseReceived(isHTTP:now:)``.
    enum ResponseAction: Sendable {
        /// It is not running any more: drop the response, and let its transfer be (its cancel is on the way).
        case ignore
        /// Let the transfer go on and deliver the response; arm `idleTimeout` (a long request).
        case allow(idleTimeout: TimeoutArm?)
        /// Not an HTTP response: carry out `action` (its transfer is cancelled).
        case reject(EndAction)
    }

    let timeouts: RequestTimeouts
    private(set) var state = State.unsubmitted

    init(timeouts: RequestTimeouts) {
        self.timeouts = timeouts
    }

    /// Whether it waits for a slot.
    var isQueued: Bool {
        if case .queued = state { return true }
        return false
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
                return .refuse(.disposed)
            }
            state = .queued(timer: nil)
            return .enqueue(queueDeadline: now + timeouts.queue)
        case .cancelledBeforeSubmission:
            state = .finished
            return .refuse(.cancelled)
        case .queued, .starting, .running, .cancelling, .finished:
            preconditionFailure("RequestStateMachine.submit: the request was submitted already (\(state))")
        }
    }

    /// Its queue timeout is armed: `timer` is kept, or handed back to be cancelled if the request
    /// no longer waits. Returns the timer to cancel, if any.
    mutating func queueTimerArmed(_ timer: Timer) -> Timer? {
        guard case .queued(let replaced) = state else { return timer }
        state = .queued(timer: timer)
        return replaced
    }

    /// The endpoint's slots granted it a slot at `now`. Only a waiting request is ever granted one:
    /// the slots know a request only between its submission and its ending.
    mutating func slotGranted(now: Duration) -> StartAction {
        guard case .queued(let timer) = state else {
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
        state = .running(Running(transfer: transfer, startedAt: since, lastActivity: since))
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

    /// The response's headers came at `now`.
    mutating func responseReceived(isHTTP: Bool, now: Duration) -> ResponseAction {
        guard case .running(var running) = state else { return .ignore }
        guard isHTTP else { return .reject(endRunning(running, with: .notHTTP)) }
        running.receivedHeaders = true
        running.lastActivity = now
        state = .running(running)
        guard case .headersThenIdle(_, let idle) = timeouts.running else { return .allow(idleTimeout: nil) }
        return .allow(idleTimeout: TimeoutArm(deadline: now + idle, phase: .idle))
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
        case .unsubmitted, .cancelledBeforeSubmission, .queued, .starting, .finished:
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

    /// The slot's grace after a cancel is over (or its timers could not be armed): the slot goes back.
    mutating func slotGraceEnded() -> EndAction {
        guard case .cancelling = state else { return .none }
        return cancelLanded()
    }

    // MARK: - Helpers

    private mutating func end(with ending: RequestEnding) -> EndAction {
        switch state {
        case .unsubmitted, .cancelledBeforeSubmission, .cancelling, .finished:
            return .none
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

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// The engine behind ``URLDispatcher``: the threaded shell around two pure state machines.
///
/// Under one lock it keeps every endpoint's ``EndpointSlots`` (who may start, when to wake up)
/// and every request's ``RequestStateMachine`` (where the request is in its life). Each event — a
/// call of the caller's, a session event, a timer — is handed to the machine it concerns under
/// the lock; the machines' answers are settled on the books there (a slot given back, the next
/// requests granted theirs), and everything else (starting and cancelling transfers, arming and
/// cancelling timers, telling owners) is carried out after the lock, as ``Effects``. No user code
/// runs, and nothing of the user's is released, under the lock.
///
/// Its timer calls on ``TimerThread/shared`` only keep the books; what they owe a delegate, and
/// their log records, go to the session's delegate queue, where ordinary completions are
/// delivered: user code never runs on the shared timer thread.
final class URLDispatcherCore: Sendable {
    typealias Life = RequestStateMachine<URLSessionDataTask, TimerHandle>

    /// The books; `internal` for the extensions in other files (shared leases).
    let state = Locked(State())
    let defaultLimits: URLDispatcher.EndpointLimits
    /// Times inside the dispatcher are offsets from this instant.
    let origin = ContinuousClock.now
    private let session: URLSession
    /// The session's delegate queue (serial): its events, and what a timer call owes user code.
    private let delegateQueue: OperationQueue

    /// The session's own timeouts (request and resource), set on every request too: ThreadKit
    /// enforces its timeouts itself, so these only bound a transfer that runs longer than any
    /// ThreadKit timeout short of "never". They cannot be `.infinity`: FoundationNetworking arms
    /// its timer with `Int(timeoutInterval) * 1000` ms (which traps on infinity and overflows past
    /// about 9e15 s), on a Dispatch timer counted in nanoseconds (about 292 years at most). A
    /// hundred years is well inside both, so the real limit on a transfer is a century: one that
    /// runs longer is ended by the session, whatever ThreadKit timeout was given.
    static let sessionTimeout: TimeInterval = 100 * 365.25 * 24 * 3600
    /// Connections per host allowed to libcurl: `Int.max`, above every `maxRequests` ThreadKit
    /// accepts, so it never queues a request behind ours (libcurl keeps it as a `long` and only
    /// compares a host's connection count with it; FoundationNetworking's default would be 6).
    static let connectionsPerHost = Int.max

    /// The longest a cancelled transfer holds its caller's completion while the session carries the
    /// cancel out (it takes about a millisecond): a timeout still costs at most 50 ms more.
    ///
    /// FoundationNetworking cancels asynchronously, and traps ("a task that is not in the registry")
    /// if the transfer fails in between, say because the server closes the connection; waiting for
    /// the cancel to land before telling the caller keeps a caller that then shuts its server down
    /// out of that window.
    static let cancelGrace = Duration.milliseconds(25)

    /// The longest a cancelled transfer holds its slot while the session carries the cancel out: the
    /// slot comes back when the connection is closed, so the server never sees one request too many.
    static let slotGrace = Duration.seconds(1)

    init(limits: URLDispatcher.EndpointLimits, configuration: URLSessionConfiguration) {
        defaultLimits = limits
        let configuration = configuration.copy() as! URLSessionConfiguration
        configuration.timeoutIntervalForRequest = Self.sessionTimeout
        configuration.timeoutIntervalForResource = Self.sessionTimeout
        configuration.httpMaximumConnectionsPerHost = Self.connectionsPerHost
        // No cache, whatever the caller's configuration says: FoundationNetworking's cache lookup
        // races with a cancel and crashes the process (swift-corelibs-foundation issue 3296), and
        // `.ephemeral` still carries an in-memory cache.
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        let queue = OperationQueue()
        queue.name = "URLDispatcher delegate queue"
        queue.maxConcurrentOperationCount = 1
        delegateQueue = queue
        let relay = SessionRelay()
        session = URLSession(configuration: configuration, delegate: relay, delegateQueue: queue)
        relay.core.withLock { $0 = self }
    }

    /// Whether the session keeps no cache (for tests).
    var sessionKeepsNoCache: Bool {
        session.configuration.urlCache == nil && session.configuration.requestCachePolicy == .reloadIgnoringLocalCacheData
    }

    func now() -> Duration { origin.duration(to: .now) }

    /// A new request, known to the dispatcher from now on; it must then be submitted.
    func register(endpoint: URLDispatcher.Endpoint, kind: URLDispatcher.Kind, request: URLRequest,
                  timeouts: RequestTimeouts, syncWaiter: SyncWaiter? = nil) -> RequestRecord {
        state.withLock { state in
            state.nextID += 1
            let record = RequestRecord(id: state.nextID, endpoint: endpoint, kind: kind, request: request, syncWaiter: syncWaiter)
            state.requests[record.id] = Request(record: record, life: Life(timeouts: timeouts))
            return record
        }
    }

    // MARK: - Limits and statistics

    func setLimits(_ limits: URLDispatcher.EndpointLimits, for endpoint: URLDispatcher.Endpoint) {
        let now = now()
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            state.limits[endpoint] = limits
            guard state.endpoints[endpoint] != nil else { return effects }
            state.endpoints[endpoint]!.limits = limits
            let decision = state.endpoints[endpoint]!.slots.setLimits(maxRequests: limits.maxRequests, maxLongRequests: limits.maxLongRequests,
                                                                      rate: limits.rate, sharing: limits.sharing, now: now)
            state.grant(decision, at: endpoint, now: now, into: &effects)
            return effects
        }
        perform(effects, onTimer: false)
    }

    func isLongRequestAllowed(to endpoint: URLDispatcher.Endpoint) -> Bool {
        state.withLock { state in
            guard !state.disposed else { return false }
            if let entry = state.endpoints[endpoint] { return entry.slots.isLongRequestAllowed }
            return (state.limits[endpoint] ?? defaultLimits).maxLongRequests > 0
        }
    }

    func statistics(for endpoint: URLDispatcher.Endpoint) -> URLDispatcher.EndpointStatistics {
        let now = now()
        let (counts, pause) = state.withLock { state in
            (state.endpoints[endpoint]?.slots.counts ?? .init(), state.endpoints[endpoint]?.slots.pausedUntil)
        }
        var statistics = counts
        statistics.pausedUntil = pause.flatMap { $0 > now ? origin + $0 : nil }
        return statistics
    }

    // MARK: - Submitting

    /// Submits `record`, whose sink is attached. Returns the error that refuses it at once (the
    /// record is then forgotten, its sink untouched), or `nil` if it is queued or running.
    func submit(_ record: RequestRecord) -> (any Error)? {
        let now = now()
        let outcome = state.withLock { state -> Result<Effects, any Error> in
            state.addEndpoint(record.endpoint, defaultLimits: defaultLimits)
            switch state.requests[record.id]!.life.submit(now: now, dispatcherDisposed: state.disposed) {
            case .refuse(let ending, let countAsFailed):
                return .failure(state.refuse(record, ending, countAsFailed: countAsFailed))
            case .askSlots:
                var effects = Effects()
                let admission: Life.Admission
                switch state.endpoints[record.endpoint]!.slots.submit(record.id, kind: record.kind.slotKind, now: now) {
                case .rejected(let limit):
                    admission = .rejected(limit: limit)
                case .accepted(let decision):
                    admission = .accepted
                    state.grant(decision, at: record.endpoint, now: now, into: &effects)   // it may start at once
                }
                switch state.requests[record.id]!.life.slotsAnswered(admission) {
                case .none:
                    break
                case .armQueueTimer(let deadline):
                    effects.armQueueTimer = (record, deadline)
                case .refuse(let ending, let countAsFailed):
                    return .failure(state.refuse(record, ending, countAsFailed: countAsFailed))
                }
                return .success(effects)
            }
        }
        switch outcome {
        case .failure(let error):
            Log.log(.urlDispatcher, "refused a request to \(record.endpoint): \(error)")
            return error
        case .success(let effects):
            perform(effects, onTimer: false)
            return nil
        }
    }

    // MARK: - Carrying out

    /// Hands `event` to request `id`'s machine under the lock, settles its answer on the books,
    /// and carries the rest out after the lock. Nothing if the request is over and forgotten.
    private func handle(_ id: Int, onTimer: Bool, _ event: (inout Life) -> Life.EndAction) {
        let now = now()
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            guard state.requests[id] != nil else { return effects }
            state.settle(event(&state.requests[id]!.life), of: id, now: now, into: &effects)
            return effects
        }
        perform(effects, onTimer: onTimer)
    }

    /// Does what the lock left to do. `onTimer`: this is a timer call on ``TimerThread/shared``,
    /// whose completions for a delegate go to the delegate queue.
    func perform(_ effects: Effects, onTimer: Bool) {
        for timer in effects.cancelTimers { timer.cancel() }
        for (endpoint, at) in effects.wakes {
            _ = try? TimerThread.shared.schedule(at: origin + at) { [self] in wake(endpoint) }
        }
        for record in effects.start { startTransfer(record) }
        if let (record, deadline) = effects.armQueueTimer { armQueueTimer(record, at: deadline) }
        for (record, transfer) in effects.cancelTransfers { cancelTransfer(transfer, of: record, onTimer: onTimer) }
        for (record, ending) in effects.completions {
            deliver(.completion(Self.error(ending, of: record)), to: record, onTimer: onTimer)
        }
        performSharing(effects)
    }

    private func wake(_ endpoint: URLDispatcher.Endpoint) {
        let now = now()
        let effects = state.withLock { state -> Effects in
            var effects = Effects()
            guard let decision = state.endpoints[endpoint]?.slots.wake(now: now) else { return effects }
            state.grant(decision, at: endpoint, now: now, into: &effects)
            return effects
        }
        perform(effects, onTimer: true)
    }

    private func armQueueTimer(_ record: RequestRecord, at deadline: Duration) {
        guard let handle = try? TimerThread.shared.schedule(at: origin + deadline, { [self] in
            handle(record.id, onTimer: true) { $0.queueTimerFired() }
        }) else { return }
        let unneeded = state.withLock { state -> TimerHandle? in
            state.requests[record.id] == nil ? handle : state.requests[record.id]!.life.queueTimerArmed(handle)
        }
        unneeded?.cancel()
    }

    /// Creates and resumes the transfer of a request that got its slot, with its timeout armed first.
    ///
    /// The task is made and registered in one step, under the lock, and only for a request that
    /// awaits it: a request ended meanwhile (cancelled, timed out, disposed) gets no task at all, and
    /// a task, once made, is known to whoever ends the request, who cancels it. A task made and
    /// neither resumed nor cancelled would keep the session from ever finishing its invalidation.
    /// No task is made after ``dispose()``: it ends every request before it invalidates the session.
    private func startTransfer(_ record: RequestRecord) {
        var request = record.request
        request.timeoutInterval = Self.sessionTimeout
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.url = request.url.map(Self.lowercasingScheme)
        let made = state.withLock { state -> (URLSessionDataTask, Life.TimeoutArm)? in
            guard state.requests[record.id]?.life.awaitsTransfer == true else { return nil }
            let task = session.dataTask(with: request)
            let timeout = state.requests[record.id]!.life.transferCreated(task)
            state.requests[record.id]!.transferID = task.taskIdentifier
            state.transfers[task.taskIdentifier] = record.id
            return (task, timeout)
        }
        guard let (task, timeout) = made else { return }
        record.syncWaiter?.slotGranted()
        armTimeout(record, timeout)
        task.resume()
        logSoon("started \(record.request.httpMethod ?? "GET") \(record.request.url?.absoluteString ?? "?")")
    }

    /// `url` with its scheme in lower case: FoundationNetworking serves `http` and `https` only so.
    static func lowercasingScheme(_ url: URL) -> URL {
        guard let scheme = url.scheme, scheme != scheme.lowercased(),
              var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return url }
        components.scheme = scheme.lowercased()
        return components.url ?? url
    }

    private func armTimeout(_ record: RequestRecord, _ timeout: Life.TimeoutArm) {
        guard let handle = try? TimerThread.shared.schedule(at: origin + timeout.deadline, { [self] in
            timeoutFired(record, phase: timeout.phase)
        }) else { return }
        let unneeded = state.withLock { state -> TimerHandle? in
            state.requests[record.id] == nil ? handle : state.requests[record.id]!.life.timeoutTimerArmed(handle)
        }
        unneeded?.cancel()
    }

    private func timeoutFired(_ record: RequestRecord, phase: URLDispatcherError.TimeoutPhase) {
        let now = now()
        let (rearm, expired, effects) = state.withLock { state -> (Life.TimeoutArm?, RequestEnding?, Effects) in
            var effects = Effects()
            switch state.requests[record.id]?.life.timeoutFired(phase, now: now) ?? .ignore {
            case .ignore:
                return (nil, nil, effects)
            case .rearm(let timeout):
                return (timeout, nil, effects)
            case .expire(let action):
                state.settle(action, of: record.id, now: now, into: &effects)
                guard case .cancelTransfer(_, let ending, _) = action else { return (nil, nil, effects) }
                return (nil, ending, effects)
            }
        }
        if let rearm { armTimeout(record, rearm) }
        perform(effects, onTimer: true)
        if let expired { logSoon("request to \(record.endpoint) \(expired)") }
    }

    /// Cancels the transfer of a request that has ended for its owner, and arms the graces after
    /// which its owner hears the ending (``cancelGrace``) and its slot comes back (``slotGrace``),
    /// whichever comes first of them and the session's report that the cancel landed.
    private func cancelTransfer(_ transfer: URLSessionDataTask, of record: RequestRecord, onTimer: Bool) {
        transfer.cancel()
        let callerGrace = try? TimerThread.shared.schedule(after: Self.cancelGrace) { [self] in
            handle(record.id, onTimer: true) { $0.callerGraceEnded() }
        }
        let slotGrace = try? TimerThread.shared.schedule(after: Self.slotGrace) { [self] in
            handle(record.id, onTimer: true) { $0.slotGraceEnded() }
        }
        handle(record.id, onTimer: onTimer) { $0.gracesArmed(callerGrace: callerGrace != nil, slotGrace: slotGrace != nil) }
    }

    // MARK: - Ending

    /// Cancels `record`: out of the queue at once, or its transfer cancelled; the owner gets
    /// `CancellationError`. Before it was submitted, it is refused when it is.
    func cancel(_ record: RequestRecord) {
        handle(record.id, onTimer: false) { $0.cancel() }
    }

    func dispose() {
        let now = now()
        let effects = state.withLock { state -> Effects? in
            guard !state.disposed else { return nil }
            state.disposed = true
            // The queues empty first, all at once, so that no slot given back below starts a request.
            for endpoint in Array(state.endpoints.keys) { _ = state.endpoints[endpoint]!.slots.removeAllQueued() }
            var effects = Effects()
            for id in state.requests.keys.sorted() {
                state.settle(state.requests[id]!.life.dispose(), of: id, now: now, into: &effects)
            }
            return effects
        }
        guard let effects else { return }
        perform(effects, onTimer: false)
        // Every running transfer is cancelled above, by its own request, and no task is made from
        // now on (see startTransfer). `invalidateAndCancel()` would cancel once more every task
        // the session still lists, those whose completion is on its way included, and
        // FoundationNetworking traps when a cancel races a completion ("a task that is not in the
        // registry").
        session.finishTasksAndInvalidate()
        Log.log(.urlDispatcher, "disposed: \(effects.completions.count + effects.cancelTransfers.count) requests failed")
    }

    // MARK: - Session events (on the session's delegate queue)

    /// Headers came. `allow` lets the transfer go on: FoundationNetworking holds the body until it is
    /// called.
    ///
    /// It is called only for a request still running, and under the lock, so that it is queued on
    /// the task's work queue before any cancel of ours. It is never called for a request that has
    /// ended (its task is being cancelled): FoundationNetworking traps on a disposition that comes
    /// after a cancel ("not waiting for it"), and a `.cancel` disposition on top of a cancel completes
    /// the task twice ("not in the registry").
    func received(_ response: URLResponse, for task: URLSessionTask, allow: () -> Void) {
        let http = response as? HTTPURLResponse
        let now = now()
        let answer = state.withLock { state -> (RequestRecord, Life.TimeoutArm?, Duration?, RetryAfter.Reading?, Effects)? in
            guard let id = state.transfers[task.taskIdentifier], let record = state.requests[id]?.record else { return nil }
            let limits = state.endpoints[record.endpoint]?.limits ?? defaultLimits
            let reading = http.flatMap { RetryAfter.read($0, limits: limits, now: Date()) }
            var effects = Effects()
            switch state.requests[id]!.life.responseReceived(isHTTP: http != nil, retryAfter: reading, now: now) {
            case .ignore:
                return nil
            case .reject(let action):
                state.settle(action, of: id, now: now, into: &effects)
                return (record, nil, nil, nil, effects)
            case .allow(let idleTimeout, let pause):
                allow()
                if let pause {
                    let decision = state.endpoints[record.endpoint]!.slots.pause(until: now + pause, now: now)
                    state.grant(decision, at: record.endpoint, now: now, into: &effects)
                    if let coordinator = limits.coordination.endpoints { effects.sharedPause = (coordinator, record.endpoint, pause) }
                }
                return (record, idleTimeout, pause, reading, effects)
            }
        }
        guard let (record, idleTimeout, pause, reading, effects) = answer else { return }
        if let http, let pause {
            Log.log(.urlDispatcher, "\(record.endpoint) answered \(http.statusCode) with Retry-After: paused for \(pause.readable)")
        }
        if let http, case .invalid(let reason)? = reading {
            let value = http.value(forHTTPHeaderField: "Retry-After") ?? ""
            Log.log(.urlDispatcher, "\(record.endpoint) answered \(http.statusCode) with Retry-After \"\(value)\", \(reason): ignored")
        }
        perform(effects, onTimer: false)
        if let idleTimeout { armTimeout(record, idleTimeout) }
        if let http { record.mailbox.post(.response(http)) }
    }

    func received(_ data: Data, for task: URLSessionTask) {
        let now = now()
        let record = state.withLock { state -> RequestRecord? in
            guard let id = state.transfers[task.taskIdentifier], state.requests[id]?.life.dataReceived(now: now) == true else { return nil }
            return state.requests[id]?.record
        }
        record?.mailbox.post(.data(data))
    }

    func completed(_ task: URLSessionTask, error: (any Error)?) {
        guard let id = state.withLock({ $0.transfers[task.taskIdentifier] }) else { return }
        handle(id, onTimer: false) { $0.transferCompleted(error: error) }
    }

    // MARK: - Telling the owner

    /// What the owner of `record` hears for `ending`: `nil` after a whole response, else the error.
    static func error(_ ending: RequestEnding, of record: RequestRecord) -> (any Error)? {
        switch ending {
        case .completed: nil
        case .failed(let error): error
        case .cancelled: CancellationError()
        case .disposed: URLDispatcherError.disposed
        case .timedOut(let phase, let after): URLDispatcherError.timedOut(endpoint: record.endpoint, after: after, phase: phase)
        case .notHTTP: URLDispatcherError.notHTTP(endpoint: record.endpoint)
        case .longRequestLimit(let limit): URLDispatcherError.longRequestLimit(endpoint: record.endpoint, limit: limit)
        }
    }

    /// Delivers `event` to `record`'s owner: here, unless this is a timer call and the owner is
    /// user code (a delegate), which then hears it on the delegate queue, as ordinary events.
    private func deliver(_ event: RequestEvent, to record: RequestRecord, onTimer: Bool) {
        if onTimer, record.mailbox.callsUserCode {
            delegateQueue.addOperation { record.mailbox.post(event) }
        } else {
            record.mailbox.post(event)
        }
    }

    /// Logs `message` from the delegate queue: for records made where a log delegate must not run
    /// (the shared timer thread).
    func logSoon(_ message: @autoclosure () -> String) {
        guard Log.isEnabled(.urlDispatcher) else { return }
        let text = message()
        delegateQueue.addOperation { Log.log(.urlDispatcher, text) }
    }
}

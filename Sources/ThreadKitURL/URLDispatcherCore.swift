import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// The engine behind ``URLDispatcher``: one lock over every endpoint's ``EndpointSlots`` and the
/// requests; it carries the slots' decisions out (starting transfers, arming wake-ups and
/// timeouts) outside that lock, and never calls user code while holding it.
///
/// Its timer calls on ``TimerThread/shared`` only keep the books (end a request, cancel its
/// transfer, start the next); what they owe a delegate, and their log records, go to the
/// session's delegate queue, where ordinary completions are delivered: user code never runs on
/// the shared timer thread.
final class URLDispatcherCore: Sendable {
    private struct EndpointEntry: Sendable {
        var limits: URLDispatcher.EndpointLimits
        var slots: EndpointSlots<Int>

        init(limits: URLDispatcher.EndpointLimits) {
            self.limits = limits
            slots = EndpointSlots(maxRequests: limits.maxRequests, maxLongRequests: limits.maxLongRequests, rate: limits.rate)
        }
    }

    private struct State: Sendable {
        var disposed = false
        var nextID = 0
        var endpoints: [URLDispatcher.Endpoint: EndpointEntry] = [:]
        var limits: [URLDispatcher.Endpoint: URLDispatcher.EndpointLimits] = [:]
        var records: [Int: RequestRecord] = [:]
        /// The running requests by their session task's identifier.
        var tasks: [Int: RequestRecord] = [:]
        /// Ended requests whose task is being cancelled, still holding their slot, by task identifier.
        var cancelling: [Int: RequestRecord] = [:]
    }

    /// What to do, outside the lock, after a decision of the slots.
    private struct Effects {
        var start: [RequestRecord] = []
        var wake: (endpoint: URLDispatcher.Endpoint, at: Duration)?
        var cancelTimers: [TimerHandle] = []

        mutating func merge(_ other: Effects) {
            start += other.start
            if let wake = other.wake { self.wake = wake }
            cancelTimers += other.cancelTimers
        }
    }

    let defaultLimits: URLDispatcher.EndpointLimits
    /// Times inside the dispatcher are offsets from this instant.
    let origin = ContinuousClock.now
    private let state = Locked(State())
    private let session: URLSession
    /// The session's delegate queue (serial): its events, and what a timer call owes user code.
    private let delegateQueue: OperationQueue
    private let relay: SessionRelay

    /// The dispatcher's own session timeouts: far beyond any ThreadKit timeout, which it enforces itself.
    static let sessionTimeout: TimeInterval = 7 * 24 * 3600
    /// Connections per host allowed to libcurl: above every ThreadKit limit, so it never queues behind us.
    static let connectionsPerHost = 65_536

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
        relay = SessionRelay()
        session = URLSession(configuration: configuration, delegate: relay, delegateQueue: queue)
        relay.core.withLock { $0 = self }
    }

    /// Whether the session keeps no cache (for tests).
    var sessionKeepsNoCache: Bool {
        session.configuration.urlCache == nil && session.configuration.requestCachePolicy == .reloadIgnoringLocalCacheData
    }

    func now() -> Duration { origin.duration(to: .now) }

    func makeID() -> Int {
        state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
    }

    // MARK: - Limits and statistics

    func setLimits(_ limits: URLDispatcher.EndpointLimits, for endpoint: URLDispatcher.Endpoint) {
        let now = now()
        let effects = state.withLock { state -> Effects in
            state.limits[endpoint] = limits
            guard var entry = state.endpoints[endpoint] else { return Effects() }
            entry.limits = limits
            let decision = entry.slots.setLimits(maxRequests: limits.maxRequests, maxLongRequests: limits.maxLongRequests,
                                                 rate: limits.rate, now: now)
            state.endpoints[endpoint] = entry
            return Self.apply(decision, to: endpoint, in: &state, now: now)
        }
        perform(effects)
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
        return URLDispatcher.EndpointStatistics(
            running: counts.running, runningLong: counts.runningLong, queued: counts.queued,
            pausedUntil: pause.flatMap { $0 > now ? origin + $0 : nil },
            completed: counts.completed, failed: counts.failed, timedOut: counts.timedOut)
    }

    // MARK: - Submitting

    /// Submits `record`, whose sink is attached. Returns the error that refuses it at once (the
    /// record is then ended, its sink untouched), or `nil` if it is queued or running.
    func submit(_ record: RequestRecord) -> (any Error)? {
        let now = now()
        let outcome = state.withLock { state -> Result<Effects, any Error> in
            var entry = state.endpoints[record.endpoint] ?? EndpointEntry(limits: state.limits[record.endpoint] ?? defaultLimits)
            if record.cancelledEarly || state.disposed {
                record.phase = .ended
                entry.slots.countUnsubmittedFailure()
                state.endpoints[record.endpoint] = entry
                return .failure(record.cancelledEarly ? CancellationError() : URLDispatcherError.disposed)
            }
            let kind: EndpointSlots<Int>.Kind
            switch record.kind {
            case .short: kind = .short
            case .long(let policy): kind = .long(waits: policy == .wait)
            }
            let admission = entry.slots.submit(record.id, kind: kind, now: now)
            state.endpoints[record.endpoint] = entry
            switch admission {
            case .rejected(let limit):
                record.phase = .ended
                return .failure(URLDispatcherError.longRequestLimit(endpoint: record.endpoint, limit: limit))
            case .accepted(let decision):
                record.phase = .queued
                state.records[record.id] = record
                return .success(Self.apply(decision, to: record.endpoint, in: &state, now: now))
            }
        }
        switch outcome {
        case .failure(let error):
            Log.log(.urlDispatcher, "refused a request to \(record.endpoint): \(error)")
            return error
        case .success(let effects):
            perform(effects)
            armQueueTimeout(record, submittedAt: now)
            return nil
        }
    }

    private func armQueueTimeout(_ record: RequestRecord, submittedAt: Duration) {
        guard state.withLock({ _ in record.phase == .queued }) else { return }
        let deadline = origin + submittedAt + record.queueTimeout
        guard let handle = try? TimerThread.shared.schedule(at: deadline, { [self] in
            end(record, outcome: .timedOut,
                error: URLDispatcherError.timedOut(endpoint: record.endpoint, after: record.queueTimeout, phase: .queued),
                onlyIf: .queued, onTimer: true)
        }) else { return }
        let keep = state.withLock { _ -> Bool in
            guard record.phase == .queued else { return false }
            record.queueTimer = handle
            return true
        }
        if !keep { handle.cancel() }
    }

    // MARK: - Deciding and doing

    /// Marks the requests `decision` starts as running and collects what to do outside the lock.
    private static func apply(_ decision: EndpointSlots<Int>.Decision, to endpoint: URLDispatcher.Endpoint,
                              in state: inout State, now: Duration) -> Effects {
        var effects = Effects()
        for id in decision.start {
            guard let record = state.records[id] else { continue }
            record.phase = .running
            record.startedAt = now
            record.lastActivity = now
            if let timer = record.queueTimer {
                effects.cancelTimers.append(timer)
                record.queueTimer = nil
            }
            effects.start.append(record)
        }
        if let wake = decision.wakeAt { effects.wake = (endpoint, wake) }
        return effects
    }

    private func perform(_ effects: Effects) {
        for timer in effects.cancelTimers { timer.cancel() }
        if let (endpoint, at) = effects.wake {
            _ = try? TimerThread.shared.schedule(at: origin + at) { [self] in wake(endpoint) }
        }
        for record in effects.start { startTransfer(record) }
    }

    private func wake(_ endpoint: URLDispatcher.Endpoint) {
        let now = now()
        let effects = state.withLock { state -> Effects in
            guard var entry = state.endpoints[endpoint] else { return Effects() }
            let decision = entry.slots.wake(now: now)
            state.endpoints[endpoint] = entry
            return Self.apply(decision, to: endpoint, in: &state, now: now)
        }
        perform(effects)
    }

    /// Creates and resumes the transfer of a request that got its slot, with its timeout armed first.
    ///
    /// The task is made and registered in one step, under the lock, and only for a request still
    /// running: a request ended meanwhile (cancelled, timed out, disposed) gets no task at all, and
    /// a task, once made, is known to whoever ends the request, who cancels it. A task made and
    /// neither resumed nor cancelled would keep the session from ever finishing its invalidation.
    /// No task is made after ``dispose()``: it ends every running request before it invalidates
    /// the session, and no request starts after it.
    private func startTransfer(_ record: RequestRecord) {
        var request = record.request
        request.timeoutInterval = Self.sessionTimeout
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.url = request.url.map(Self.lowercasingScheme)
        let task = state.withLock { state -> URLSessionDataTask? in
            guard record.phase == .running else { return nil }
            let task = session.dataTask(with: request)
            record.task = task
            state.tasks[task.taskIdentifier] = record
            return task
        }
        guard let task else { return }
        let phase: URLDispatcherError.TimeoutPhase = record.isLong ? .headers : .total
        armTimeout(record, at: record.startedAt + record.timeout, phase: phase)
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

    /// Logs `message` from the delegate queue: for records made where a log delegate must not run
    /// (the shared timer thread).
    private func logSoon(_ message: @autoclosure () -> String) {
        guard Log.isEnabled(.urlDispatcher) else { return }
        let text = message()
        delegateQueue.addOperation { Log.log(.urlDispatcher, text) }
    }

    /// Delivers `event` to `record`'s owner: here, unless this is a timer call and the owner is
    /// user code (a delegate), which then hears it on the delegate queue, as ordinary events.
    private func deliver(_ event: RequestEvent, to record: RequestRecord, onTimer: Bool) {
        if onTimer, record.callsUserCode {
            delegateQueue.addOperation { record.post(event) }
        } else {
            record.post(event)
        }
    }

    private func armTimeout(_ record: RequestRecord, at deadline: Duration, phase: URLDispatcherError.TimeoutPhase) {
        guard let handle = try? TimerThread.shared.schedule(at: origin + deadline, { [self] in
            timeoutFired(record, phase: phase)
        }) else { return }
        let (keep, replaced) = state.withLock { _ -> (Bool, TimerHandle?) in
            guard record.phase == .running else { return (false, nil) }
            let replaced = record.timeoutTimer
            record.timeoutTimer = handle
            return (true, replaced)
        }
        if !keep { handle.cancel() }
        replaced?.cancel()
    }

    private func timeoutFired(_ record: RequestRecord, phase armedPhase: URLDispatcherError.TimeoutPhase) {
        enum Verdict { case ignore, rearm(Duration), expire(URLDispatcherError.TimeoutPhase) }
        let now = now()
        let verdict = state.withLock { _ -> Verdict in
            guard record.phase == .running else { return .ignore }
            // A long request past its headers has only the idle timeout, whichever timer fired
            // (a headers timer can race with the headers that replace it).
            guard record.isLong, record.gotHeaders else { return .expire(armedPhase) }
            let due = record.lastActivity + record.idleTimeout
            return due > now ? .rearm(due) : .expire(.idle)
        }
        switch verdict {
        case .ignore:
            return
        case .rearm(let due):
            armTimeout(record, at: due, phase: .idle)
        case .expire(let phase):
            let after = phase == .idle ? record.idleTimeout : record.timeout
            let ended = end(record, outcome: .timedOut,
                            error: URLDispatcherError.timedOut(endpoint: record.endpoint, after: after, phase: phase),
                            onlyIf: .running, onTimer: true)
            if ended { logSoon("timed out after \(after.readable) \(phase): \(record.endpoint)") }
        }
    }

    // MARK: - Ending

    /// Ends `record` once: frees its slot (or its place in the queue), cancels its timers and its
    /// transfer, starts who may start, then delivers the completion. Returns whether this call ended it.
    ///
    /// A running transfer that must be cancelled ends in two steps. At once the request is over for
    /// us: no event of it is delivered any more. Its slot comes back and its completion goes out once
    /// the session reports the cancelled task complete; the completion after ``cancelGrace`` at the
    /// latest, the slot after ``slotGrace``.
    /// FoundationNetworking cancels asynchronously, and traps ("a task that is not in the registry")
    /// if the transfer fails in between, say because the server closes the connection; waiting for
    /// the cancel to land before telling the caller keeps a caller that then shuts its server down
    /// out of that window, and means the server has seen its connection close before the slot is
    /// used again.
    ///
    /// - Parameters:
    ///   - cancelsTransfer: Whether an ending with an error cancels the session task; not when the
    ///     session itself reported the task complete.
    ///   - onTimer: Whether this is a timer call on ``TimerThread/shared``: a delegate then gets
    ///     its completion on the delegate queue. The grace timers' completions always go there.
    @discardableResult
    func end(_ record: RequestRecord, outcome: EndpointSlots<Int>.Outcome, error: (any Error)?,
             onlyIf required: RequestRecord.Phase? = nil, cancelsTransfer: Bool = true, onTimer: Bool = false) -> Bool {
        let now = now()
        let result = state.withLock { state -> (Effects, URLSessionDataTask?)? in
            guard record.phase == .queued || record.phase == .running else { return nil }
            if let required, record.phase != required { return nil }
            record.phase = .ended
            state.records[record.id] = nil
            let task = record.task
            if let task { state.tasks[task.taskIdentifier] = nil }
            record.task = nil
            var effects = Effects()
            effects.cancelTimers = [record.queueTimer, record.timeoutTimer].compactMap { $0 }
            record.queueTimer = nil
            record.timeoutTimer = nil
            if let task, error != nil, cancelsTransfer {
                record.ending = (outcome, error)
                state.cancelling[task.taskIdentifier] = record
                return (effects, task)
            }
            effects.merge(Self.release(record, outcome: outcome, in: &state, now: now))
            return (effects, nil)
        }
        guard let (effects, cancelling) = result else { return false }
        perform(effects)
        if let cancelling {
            cancelling.cancel()
            let identifier = cancelling.taskIdentifier
            let callerGrace = try? TimerThread.shared.schedule(after: Self.cancelGrace) { [self] in
                deliver(.completion(error), to: record, onTimer: true)
            }
            let slotGrace = try? TimerThread.shared.schedule(after: Self.slotGrace) { [self] in cancelLanded(identifier, onTimer: true) }
            if callerGrace == nil || slotGrace == nil { cancelLanded(identifier, onTimer: onTimer) }
        } else {
            deliver(.completion(error), to: record, onTimer: onTimer)
        }
        return true
    }

    /// The longest a cancelled transfer holds its caller's completion while the session carries the
    /// cancel out (it takes about a millisecond): a timeout still costs at most 50 ms more.
    static let cancelGrace = Duration.milliseconds(25)

    /// The longest a cancelled transfer holds its slot while the session carries the cancel out: the
    /// slot comes back when the connection is closed, so the server never sees one request too many.
    static let slotGrace = Duration.seconds(1)

    /// The cancel of the task `identifier` has landed (the session reported it complete) or its slot
    /// grace is over (`onTimer`): free the slot and deliver the completion (if the caller's grace has not).
    private func cancelLanded(_ identifier: Int, onTimer: Bool = false) {
        let now = now()
        let landed = state.withLock { state -> (RequestRecord, Effects)? in
            guard let record = state.cancelling.removeValue(forKey: identifier) else { return nil }
            let outcome = record.ending?.outcome ?? .failed
            return (record, Self.release(record, outcome: outcome, in: &state, now: now))
        }
        guard let (record, effects) = landed else { return }
        perform(effects)
        let error = state.withLock { _ in record.ending?.error }
        deliver(.completion(error), to: record, onTimer: onTimer)
    }

    /// Gives `record`'s slot (or queue place) back to its endpoint; returns who starts in its place.
    private static func release(_ record: RequestRecord, outcome: EndpointSlots<Int>.Outcome,
                                in state: inout State, now: Duration) -> Effects {
        guard var entry = state.endpoints[record.endpoint] else { return Effects() }
        let ending = entry.slots.end(record.id, outcome: outcome, now: now)
        state.endpoints[record.endpoint] = entry
        guard case .released(let decision)? = ending else { return Effects() }
        return apply(decision, to: record.endpoint, in: &state, now: now)
    }

    /// Cancels `record`: out of the queue at once, or its transfer cancelled; the owner gets
    /// `CancellationError`. Before it was submitted, it is refused when it is.
    func cancel(_ record: RequestRecord) {
        let early = state.withLock { _ -> Bool in
            guard record.phase == .new else { return false }
            record.cancelledEarly = true
            return true
        }
        if !early { end(record, outcome: .failed, error: CancellationError()) }
    }

    func dispose() {
        // Queued requests leave first, all at once, so that no running request's end can start one.
        let taken = state.withLock { state -> (queued: [RequestRecord], running: [RequestRecord], timers: [TimerHandle])? in
            guard !state.disposed else { return nil }
            state.disposed = true
            var queued: [RequestRecord] = []
            var timers: [TimerHandle] = []
            for endpoint in Array(state.endpoints.keys) {
                for id in state.endpoints[endpoint]!.slots.removeAllQueued() {
                    guard let record = state.records.removeValue(forKey: id) else { continue }
                    record.phase = .ended
                    timers += [record.queueTimer, record.timeoutTimer].compactMap { $0 }
                    record.queueTimer = nil
                    record.timeoutTimer = nil
                    queued.append(record)
                }
            }
            let running = state.records.values.sorted { $0.id < $1.id }
            return (queued, running, timers)
        }
        guard let taken else { return }
        for timer in taken.timers { timer.cancel() }
        for record in taken.queued { record.post(.completion(URLDispatcherError.disposed)) }
        for record in taken.running { end(record, outcome: .failed, error: URLDispatcherError.disposed) }
        // Every running transfer is cancelled above, by its own request, and no task is made from
        // now on (see startTransfer). `invalidateAndCancel()` would cancel once more every task
        // the session still lists, those whose completion is on its way included, and
        // FoundationNetworking traps when a cancel races a completion ("a task that is not in the
        // registry").
        session.finishTasksAndInvalidate()
        Log.log(.urlDispatcher, "disposed: \(taken.queued.count) queued and \(taken.running.count) running requests failed")
    }

    // MARK: - Session events (on the session's delegate queue)

    private func record(for task: URLSessionTask) -> RequestRecord? {
        state.withLock { $0.tasks[task.taskIdentifier] }
    }

    /// Headers came. `allow` lets the transfer go on: FoundationNetworking holds the body until it is
    /// called.
    ///
    /// It is called only for a request still running, and under the lock, so that it is queued on
    /// the task's work queue before any cancel of ours. It is never called for a request that has
    /// ended (its task is being cancelled): FoundationNetworking traps on a disposition that comes
    /// after a cancel ("not waiting for it"), and a `.cancel` disposition on top of a cancel completes
    /// the task twice ("not in the registry").
    func received(_ response: URLResponse, for task: URLSessionTask, allow: () -> Void) {
        guard let record = record(for: task) else { return }
        guard let http = response as? HTTPURLResponse else {
            end(record, outcome: .failed, error: URLDispatcherError.notHTTP(endpoint: record.endpoint))
            return
        }
        let now = now()
        let pause = retryAfterPause(http, endpoint: record.endpoint, now: now)
        let effects = state.withLock { state -> Effects? in
            guard record.phase == .running else { return nil }
            record.gotHeaders = true
            record.lastActivity = now
            allow()
            guard let pause, var entry = state.endpoints[record.endpoint] else { return Effects() }
            let decision = entry.slots.pause(until: now + pause, now: now)
            state.endpoints[record.endpoint] = entry
            return Self.apply(decision, to: record.endpoint, in: &state, now: now)
        }
        guard let effects else { return }
        if let pause {
            Log.log(.urlDispatcher, "\(record.endpoint) answered \(http.statusCode) with Retry-After: paused for \(pause.readable)")
        }
        perform(effects)
        if record.isLong { armTimeout(record, at: now + record.idleTimeout, phase: .idle) }
        record.post(.response(http))
    }

    func received(_ data: Data, for task: URLSessionTask) {
        guard let record = record(for: task) else { return }
        let now = now()
        let running = state.withLock { _ -> Bool in
            guard record.phase == .running else { return false }
            record.lastActivity = now
            return true
        }
        if running { record.post(.data(data)) }
    }

    func completed(_ task: URLSessionTask, error: (any Error)?) {
        guard let record = record(for: task) else {
            cancelLanded(task.taskIdentifier)
            return
        }
        end(record, outcome: error == nil ? .completed : .failed, error: error, cancelsTransfer: false)
    }

    /// How long a 429 or 503 with `Retry-After` pauses the endpoint, if it does (see ``RetryAfter``);
    /// a value that is not a Retry-After is ignored and logged.
    private func retryAfterPause(_ response: HTTPURLResponse, endpoint: URLDispatcher.Endpoint, now: Duration) -> Duration? {
        guard response.statusCode == 429 || response.statusCode == 503,
              let value = response.value(forHTTPHeaderField: "Retry-After") else { return nil }
        let limits = state.withLock { $0.endpoints[endpoint]?.limits ?? defaultLimits }
        guard limits.honorRetryAfter else { return nil }
        switch RetryAfter.read(value, now: Date(), limit: limits.maxRetryAfter) {
        case .pause(let pause):
            return pause > .zero ? pause : nil
        case .invalid(let reason):
            Log.log(.urlDispatcher, "\(endpoint) answered \(response.statusCode) with Retry-After \"\(value)\", \(reason): ignored")
            return nil
        }
    }
}

/// The session's delegate: hands every event to the dispatcher's core.
///
/// The session keeps it (and through it the core) until the session is invalidated by `dispose()`.
final class SessionRelay: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // Sendable: its only state, `core`, is a Locked.
    let core = Locked<URLDispatcherCore?>(nil)

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        // Never `.cancel`: see URLDispatcherCore.received(_:for:allow:).
        core.withLock { $0 }?.received(response, for: dataTask) { completionHandler(.allow) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        core.withLock { $0 }?.received(data, for: dataTask)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        core.withLock { $0 }?.completed(task, error: error)
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        // The core goes out of the lock first, and is released after it.
        let released = core.withLock { core -> URLDispatcherCore? in
            defer { core = nil }
            return core
        }
        _ = released
    }
}

@_spi(ThreadKitURL) import ThreadKit

/// A coordinated ``ThrottledQueue``'s start coordinator on Redis: every start decision is one run
/// of ``SharedThrottleScript`` (ThreadKit's `SharedThrottle` model, on Redis's clock), through the
/// queue's ``RedisClient``; what `Coordination.redis(_:key:whenUnavailable:)` carries.
///
/// - ``reserve(_:)`` blocks for one round trip, at most the client's command timeout plus a
///   margin of 250 ms; on `NOSCRIPT`, two (`EVALSHA`, then `EVAL`, each with its own deadline),
///   so twice that: the queue calls it on its worker or on a blocked `sync` caller's thread,
///   never on a cooperative thread, and never under its lock.
/// - ``finished(token:)`` and ``pause(for:)`` send their script run and return at once: they are
///   called where blocking is not allowed. One the client refuses (its breaker is open: not sent)
///   is sent again on ``TimerThread/shared`` when the breaker may let it through (a pause with what
///   is left of it), until the lease would have expired or the pause ended; only then is it
///   logged and given up (a lease runs to its expiry, a pause holds in this process only).
///
/// **Ends reach Redis.** Each reservation proposes its lease's token, a random number
/// (the tokens: see `SharedThrottle`'s discussion), so this process knows the token
/// of a lease its reserve may have taken even when the reply is lost. An end is numbered per lease
/// (``HeldLeases``), which makes it idempotent: one whose reply is lost (timed out, or the
/// connection lost after it was sent) is sent again, as one refused is, until Redis acknowledges
/// it or the lease would have expired. A reserve whose outcome is unknown (timed out or lost after
/// it was sent, or an error reply: ``CoordinatorAnswer/unavailable(consumed:retryIn:)`` with
/// `consumed`) is followed by the end of the token it proposed, sent the same way until the
/// lease it may have made would have expired: that lease is handed back at once, not after its
/// TTL. A nested reserve counts a start under the lease it is nested in before it is sent: the
/// lease's last end here is numbered to cover it, so the lease ends with the holder's last task
/// whether Redis ran that reserve or not, and even when that end goes while the reserve is in flight (and its proposed token's end covers
/// the case where the lease had gone and the reserve made a new one). What is left: an end reaching
/// Redis before the reserve it hands back (a reserve still unread on a dropped connection) finds no
/// lease; that lease lasts its TTL.
///
/// **Served in turn.** Each queue is one asker of the key's `.serial` line (its
/// `CoordinatedRequest.asker`, so queues sharing a `Coordination` value take turns too): a
/// declined reserve keeps its place, and while another process holds the lease it is told to ask
/// again within `SharedThrottle.waiterPoll` (20 ms) if it is first in line (further back, up to
/// five times that), so the processes with a backlog take the lease in turn.
///
/// **Long `.serial` tasks.** While this process holds a lease (from its reservation until the
/// last start under it is handed back with ``finished(token:)``), ``TimerThread/shared`` renews it
/// every third of the lease TTL, without waiting, so that another process cannot start while a
/// task longer than the lease runs. A process that dies stops renewing, and its lease expires (up
/// to the horizon plus the TTL after the reserve, for a start reserved ahead); a task that never
/// ends holds the lease for as long as its process lives.
///
/// Every failure is an answer, never a trap (see ``answer(to:)``): Redis that cannot decide now is
/// ``CoordinatorAnswer/unavailable(consumed:retryIn:)``, consumed when the command may have run;
/// a reply or an error the script does not give is logged to `Log.Source.redis` and treated alike.
final class RedisStartCoordinator: StartCoordinator {
    let client: RedisClient
    let keys: RedisLimitKeys
    /// How far ahead a start is reserved, in microseconds; a start further out is declined, to ask
    /// again when it falls inside.
    let horizon: Int64
    /// How long a `.serial` lease lasts after its start, in microseconds.
    let leaseTTL: Int64
    /// Also told every answer ``reserve(_:)`` gives, with the reserved start on Redis's clock (in
    /// microseconds) when there is one: for tests, which check the shared rules on that clock.
    let observe: (@Sendable (CoordinatorAnswer, _ reservedAt: Int64?) -> Void)?
    /// How often a held lease is renewed: a third of the lease TTL.
    let renewEvery: Duration

    /// The leases held and the timers that renew them, by token.
    struct Held {
        var leases = HeldLeases()
        var renewals: [UInt64: TimerHandle] = [:]
    }

    private let held = Locked(Held())
    /// The leases this process holds, as numbered so far: for tests.
    var heldLeases: HeldLeases { held.withLock { $0.leases } }

    /// The default horizon: one second.
    static let defaultHorizon = Duration.seconds(1)
    /// The default lease: 10 s, renewed every third of it while held, so a task may run longer;
    /// what a process that died while holding it costs the others after its last renewal (after
    /// the reserve, plus up to the horizon, for a start reserved ahead).
    static let defaultLeaseTTL = Duration.seconds(10)
    /// When to ask again after a failure that is not the breaker's refusal: the next ask finds the
    /// breaker open (it opened on that failure) and is answered at once, with its exact back-off.
    static let retryAfterFailure = Duration.milliseconds(10)
    /// The longest wait between two sends of a follow-up (an end, a renewal, a pause) that did not
    /// run for a reason the breaker does not see (a server `BUSY` or `LOADING`): the default
    /// breaker's longest back-off, 2 s.
    static let maxRetryAfterFailure = Duration.seconds(2)

    /// When a follow-up that did not run is sent again, the breaker not open: ``retryAfterFailure``
    /// after the first try, then twice the wait before each time, up to ``maxRetryAfterFailure``, so
    /// a server that says it is busy is not asked every 10 ms.
    static func followUpRetry(after previous: Duration?) -> Duration {
        guard let previous else { return retryAfterFailure }
        return min(previous * 2, maxRetryAfterFailure)
    }
    /// When to ask again after an answer that asking again soon would only repeat (a script error,
    /// a reply the script does not give): not a busy loop of errors in the log.
    static let retryAfterError = Duration.seconds(1)

    /// A coordinator for the limit `keys` on `client`.
    ///
    /// - Parameters:
    ///   - horizon: How far ahead a start is reserved; more than zero.
    ///   - leaseTTL: How long a `.serial` lease lasts after its start; more than zero.
    ///   - observe: Told every answer of ``reserve(_:)`` (see ``observe``).
    init(client: RedisClient, keys: RedisLimitKeys, horizon: Duration = defaultHorizon, leaseTTL: Duration = defaultLeaseTTL,
         observe: (@Sendable (CoordinatorAnswer, _ reservedAt: Int64?) -> Void)? = nil) {
        precondition(horizon > .zero, "RedisStartCoordinator: horizon must be more than zero, got \(horizon)")
        precondition(leaseTTL > .zero, "RedisStartCoordinator: leaseTTL must be more than zero, got \(leaseTTL)")
        self.client = client
        self.keys = keys
        self.horizon = horizon.microsecondsRoundedUp.clampedToMicrosecondLimit
        self.leaseTTL = leaseTTL.microsecondsRoundedUp.clampedToMicrosecondLimit
        self.observe = observe
        self.renewEvery = leaseTTL / 3
    }

    deinit {
        for renewal in held.withLock({ $0.renewals.values }) { renewal.cancel() }
    }

    func reserve(_ request: CoordinatedRequest) -> CoordinatorAnswer {
        let token = SharedThrottleCall.randomID()
        // A nested reserve counts on its lease before it is sent: the lease's last end covers it
        // even if that end goes while this reserve is in flight.
        let counted = request.holding != nil && held.withLock { $0.leases.asking(holding: request.holding) }
        let (answer, reservedAt) = decide(request, token: token)
        var reservedToken: UInt64?
        if case .reserved(_, let lease?) = answer { reservedToken = lease }
        if counted || reservedToken != nil {
            let holding = counted ? request.holding : nil
            let outcome = held.withLock { $0.leases.answered(holding: holding, reserved: reservedToken) }
            switch (outcome, reservedToken) {
            case (.renew, let lease?): renew(lease)
            case (.endAgain(let number), let lease?): sendEnd(number, of: lease)
            default: break
            }
        }
        if case .unavailable(consumed: true, _) = answer, request.monitor == .serial {
            // Redis may have run it: a lease it made is handed back now (a start it counted under
            // the lease it was nested in is covered by that lease's last end).
            let call = SharedThrottleCall(.finished(token: token, number: 1))
            Self.send("the end of lease \(token), reserved with no answer", on: client, keys,
                      retryingFor: .microseconds(horizon.addingClamped(leaseTTL)), untilAcknowledged: true) { _ in call }
        }
        observe?(answer, reservedAt)
        return answer
    }

    private func decide(_ request: CoordinatedRequest, token: UInt64) -> (CoordinatorAnswer, reservedAt: Int64?) {
        let call = SharedThrottleCall(.reserve(
            gap: max(0, request.gap.microsecondsRoundedUp), monitor: request.monitor, limit: request.rules.limit,
            horizon: horizon, leaseTTL: leaseTTL, holding: request.holding, token: token, asker: request.asker))
        do {
            let reply = try call.runSync(on: client, keys: keys)
            guard case .decision(let decision) = reply else {
                return (failed("the shared throttle script answered \(reply) to a reserve", consumed: true), nil)
            }
            if case .reserved(let at, _, _) = decision { return (answer(to: decision, asked: request), at) }
            return (answer(to: decision, asked: request), nil)
        } catch let error as RedisError {
            return (answer(to: error), nil)
        } catch {
            return (failed("\(error)", consumed: true), nil)
        }
    }

    func finished(token: UInt64) {
        let (end, stopped) = held.withLock { held -> ((number: Int64, last: Bool)?, TimerHandle?) in
            let end = held.leases.ended(token)
            guard end?.last == true else { return (end, nil) }
            return (end, held.renewals.removeValue(forKey: token))
        }
        stopped?.cancel()
        guard let end else {
            Log.log(.redis, "\(keys): lease \(token) handed back, but this queue does not hold it")
            return
        }
        sendEnd(end.number, of: token)
    }

    /// Sends end `number` of lease `token`, until acknowledged, or until the lease would have expired anyway.
    private func sendEnd(_ number: Int64, of token: UInt64) {
        let call = SharedThrottleCall(.finished(token: token, number: number))
        Self.send("end \(number) of lease \(token)", on: client, keys, retryingFor: .microseconds(leaseTTL),
                  untilAcknowledged: true) { _ in call }
    }

    /// Starts renewing the lease `token`, new to this process, every third of its TTL.
    private func renew(_ token: UInt64) {
        let call = SharedThrottleCall(.renew(token: token, leaseTTL: leaseTTL))
        let renewal: TimerHandle
        do {
            renewal = try TimerThread.shared.schedule(every: renewEvery, spacing: .fixedDelay) { [weak self] in
                // Not sent again once sent: the next renewal comes a third of the TTL later.
                guard let self else { return }
                Self.send("the renewal of lease \(token)", on: client, keys) { _ in call }
            }
        } catch {
            Log.log(.redis, "\(keys): lease \(token) cannot be renewed (\(error)); it lasts its TTL")
            return
        }
        // Handed back meanwhile (by another thread): no renewal.
        let kept = held.withLock { held -> Bool in
            guard let lease = held.leases.leases[token], lease.lastSent == nil else { return false }
            held.renewals[token] = renewal
            return true
        }
        if !kept { renewal.cancel() }
    }

    func pause(for duration: Duration) {
        // Until the pause would have ended (at most 10 minutes of attempts). Sent again, it asks for
        // what is left of it: the pause still ends `duration` after it was asked for.
        Self.send("a pause of \(duration)", on: client, keys, retryingFor: min(duration, .seconds(600))) { elapsed in
            SharedThrottleCall(.pause(duration: (duration - elapsed).microsecondsRoundedUp))
        }
    }

    /// The queue's answer for the script's decision on `request`.
    func answer(to decision: SharedThrottle.Decision, asked request: CoordinatedRequest) -> CoordinatorAnswer {
        CoordinatorAnswer(decision) { stored in
            "\(keys) is used with \(Self.describe(stored)); this queue has \(Self.describe(request.rules))"
        }
    }

    /// The queue's answer when the script could not run: Redis cannot decide now.
    ///
    /// - The breaker is open (``RedisError/unavailable(retryIn:lastFailure:)``): not sent, ask
    ///   again when its back-off has passed.
    /// - Refused, or lost before it was sent: not consumed; asked again soon, when the breaker (open
    ///   since this failure) answers at once.
    /// - Timed out or lost after it was sent: the script may have recorded the start, so it is
    ///   consumed (the local fallback counts it).
    /// - An error reply saying the server cannot serve now (`LOADING`, `BUSY`, `MASTERDOWN`,
    ///   `READONLY`): not run, not consumed.
    /// - Any other error reply (the script's own, `OOM`, `NOPERM`…): logged; the script may have
    ///   written part of its state, so it is consumed; asked again after ``retryAfterError``.
    func answer(to error: RedisError) -> CoordinatorAnswer {
        switch error {
        case .unavailable(let retryIn, _):
            return .unavailable(consumed: false, retryIn: retryIn)
        case .connectionRefused:
            return .unavailable(consumed: false, retryIn: Self.retryAfterFailure)
        case .timedOut(_, let sent), .connectionLost(_, let sent):
            return .unavailable(consumed: sent, retryIn: Self.retryAfterFailure)
        case .server where error.isUnavailable:
            return .unavailable(consumed: false, retryIn: Self.retryAfterFailure)
        case .server(let message):
            return failed("the shared throttle script failed: \(message)", consumed: true)
        }
    }

    private func failed(_ reason: String, consumed: Bool) -> CoordinatorAnswer {
        Log.log(.redis, "\(keys): \(reason); the queue applies its fallback")
        return .unavailable(consumed: consumed, retryIn: Self.retryAfterError)
    }

    /// Sends `call(elapsed)` without waiting, `elapsed` the time since the first try, and sends it
    /// again on ``TimerThread/shared`` while `retryingFor` from the first try has not passed (after
    /// that it would change nothing), so that a lease handed back or a pause asked for while Redis is
    /// briefly out of reach still reaches the other processes:
    /// - one the client refuses at once (its breaker is open), or one Redis answers it cannot run
    ///   now (`LOADING`, `BUSY`…), did not run: sent again when the breaker may let it through, or,
    ///   the breaker not open, after a wait that doubles each time (``followUpRetry(after:)``);
    /// - one whose reply is lost (timed out, or the connection lost after it was sent) may have run:
    ///   sent again only when `untilAcknowledged` (an end, which is idempotent);
    /// - any other error reply would come again: logged, not sent again.
    private static func send(
        _ what: String, on client: RedisClient, _ keys: RedisLimitKeys,
        retryingFor window: Duration = .zero, untilAcknowledged: Bool = false, firstTry: ContinuousClock.Instant = .now,
        followUp: UInt64? = nil, lastRetry: Duration? = nil, _ call: @escaping @Sendable (_ elapsed: Duration) -> SharedThrottleCall
    ) {
        // Held from the first try until acknowledged or given up: `RedisClient.flush` waits for it.
        let followUp = followUp ?? client.beginFollowUp()
        let arguments = call(firstTry.duration(to: .now)).arguments
        client.evaluate(SharedThrottleScript.script, keys: SharedThrottleScript.keys(keys), arguments: arguments) { result in
            let failure: RedisError
            switch result {
            case .success(.error(let message)): failure = .server(message)
            case .success: return client.endFollowUp(followUp)
            case .failure(let error): failure = error
            }
            let notRun = if case .server = failure { failure.isUnavailable } else { !failure.mayHaveRun }
            guard notRun || untilAcknowledged && failure.isUnavailable else {
                client.endFollowUp(followUp)
                if case .server = failure { Log.log(.redis, "\(keys): \(what) failed (\(failure))") }
                return
            }
            // The breaker's own back-off when it is open; else one that doubles (a server busy or loading).
            let retryIn = if case .unavailable(let retryIn, _) = failure { max(retryIn, .milliseconds(1)) } else { followUpRetry(after: lastRetry) }
            let scheduled = ContinuousClock.now + retryIn < firstTry + window && (try? TimerThread.shared.schedule(after: retryIn) {
                send(what, on: client, keys, retryingFor: window, untilAcknowledged: untilAcknowledged, firstTry: firstTry,
                     followUp: followUp, lastRetry: retryIn, call)
            }) != nil
            if !scheduled {
                client.endFollowUp(followUp)
                Log.log(.redis, "\(keys): \(what) did not reach Redis (\(failure)); the other processes do not hear of it")
            }
        }
    }

    private static func describe(_ rules: SharedThrottle.Rules) -> String {
        let monitor = rules.monitor == .serial ? ".serial" : ".concurrent"
        guard let limit = rules.limit else { return "\(monitor) and no limit" }
        return "\(monitor) and at most \(limit.count) starts per \(Duration.microseconds(limit.window))"
    }
}

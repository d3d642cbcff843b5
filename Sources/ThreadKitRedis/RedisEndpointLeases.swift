import Foundation
@_spi(ThreadKitURL) import ThreadKit

/// The leases of `URLDispatcher` endpoints shared on Redis: ThreadKit's ``EndpointCoordinator``,
/// run by ``EndpointLeaseScript``. What `Coordination.redis(_:key:whenUnavailable:)` carries for
/// endpoint limits.
///
/// - Each endpoint has its own leases, under the key `<key>|<endpoint>` (so one `EndpointLimits`
///   used for several endpoints never merges their leases); a `{`, `}` or `%` in either part is
///   escaped (`%7B`, `%7D`, `%25`), since a brace would break the hash tag.
/// - A token is proposed here, unique across the fleet (the process id, a random number drawn once
///   per instance, a counter), so that an acquire whose answer is lost can still be given back.
/// - Every call returns at once: an acquire answers through its callback, on the connection's
///   thread, or at once when the client's breaker refuses.
/// - A full endpoint is asked again when its earliest lease expires, or after ``pollInterval`` if
///   that is sooner: a release in another process is seen at the next ask, at most that late (one
///   in this process, at once, by the dispatcher).
/// - **Turns.** The instance is one asker in the script's line (its name: ``tokenPrefix``): while
///   it waits, a lease freed by a process with a backlog goes to the askers that waited longer
///   first (see ``EndpointLeaseScript``), so processes that all have a backlog take turns. The cost:
///   a lease freed while others wait stays free until the next of them asks, a ``pollInterval`` at
///   most; and an asker that stopped asking holds free leases back from newer askers for ten poll
///   intervals: a process that died, but also a live one whose waiting requests timed out or were
///   cancelled, or whose own `rate` (or local pause) holds its next start back for longer than a
///   poll. An asker that asks through a shared pause keeps its place.
/// - **Releases are never lost.** A release is sent with its reply awaited; one that fails (the
///   breaker refuses it, it times out, its connection drops, Redis answers an error) is kept, up
///   to ``maxPendingReleases``, and sent again: by a timer whose delay doubles with each failed
///   round, from ``pollInterval`` up to a third of ``leaseTTL`` (or after the client's back-off,
///   if that is longer, up to the same third), and, for one that got no answer at all, as soon as
///   Redis answers one of this instance's commands without an error (a release Redis answered
///   with an error waits for the timer: an error answered again at once would make a storm of
///   commands). It is kept until Redis answers it (`0` or `1`: releasing is idempotent) or until
///   ``leaseTTL`` after the release, when the lease has expired anyway (it was renewed at most a
///   third of that before).
/// - **An acquire whose outcome is unknown** (sent, then timed out or its connection dropped) is
///   given back the same way, but its ``leaseTTL`` counts from the first answer Redis gives after
///   (an error included: a server that answers runs what it buffered): Redis may run that acquire
///   late. If Redis never answers again, it is dropped, and logged, ``leaseTTL`` plus
///   ``maxUnknownWait`` after the release: nothing keeps this instance, its client or a timer
///   alive for good. An acquire answered with an error reply granted nothing (the script checks
///   everything before it writes, and Redis refuses a script it does not run as a whole): no
///   release follows it.
/// - The first release dropped beyond ``maxPendingReleases`` is logged, once until Redis answers
///   again. `RedisClient.flush` waits for every release begun before it.
package final class RedisEndpointLeases: EndpointCoordinator {
    package let client: RedisClient
    /// The user's key: the part every endpoint's keys share.
    package let key: String
    package let leaseTTL: Duration
    /// The longest a full endpoint waits before it asks again.
    package let pollInterval: Duration
    /// The most releases kept for sending again.
    let maxPendingReleases: Int
    /// How long past its ``leaseTTL`` the release of an acquire whose outcome is unknown is kept
    /// while Redis does not answer at all.
    let maxUnknownWait: Duration

    /// A release not yet answered by Redis.
    struct PendingRelease: Sendable {
        var lease: EndpointLease
        /// The client's follow-up it holds until it ends: what `RedisClient.flush` waits for.
        var followUp: UInt64
        /// When the lease has expired whatever happens: the release is not sent again after.
        var expiry: ContinuousClock.Instant
        /// Whether ``expiry`` is a bound only: the lease of an acquire whose outcome is unknown.
        /// Redis may run that acquire late (a server that was frozen runs what it buffered when it
        /// goes on), so its lease's time starts only when Redis answers again, which sets
        /// ``expiry`` to ``leaseTTL`` after then; until then ``expiry`` is ``leaseTTL`` plus
        /// ``maxUnknownWait`` after the release.
        var isExpiryUnknown = false
        /// Whether Redis answered its latest send with an error: it is sent again by the timer only.
        var wasRefused = false
    }

    private struct State: Sendable {
        var counter: UInt64 = 0
        var pendingReleases: [PendingRelease] = []
        /// Whether a release was dropped (``maxPendingReleases`` were kept) since Redis last answered.
        var isDropping = false
        /// Whether a timer is armed to send the pending releases again.
        var isRetryArmed = false
        /// The delay of the next retry timer: ``pollInterval``, doubled by each failed round up to
        /// a third of ``leaseTTL``; back to ``pollInterval`` when Redis answers a release.
        var retryDelay: Duration
    }

    private let state: Locked<State>
    /// The first part of every token: the process id and a 64-bit random number drawn once (every
    /// replica may be pid 1 in its container). Also this instance's name in the script's line.
    let tokenPrefix: String

    /// Leases of the endpoints that share `key`, on `client`.
    ///
    /// - Parameters:
    ///   - client: The Redis client.
    ///   - key: The limit's name, shared by every process that enforces it; not empty.
    ///   - leaseTTL: How long a lease lives without renewal; at least 3 ms (the dispatcher renews
    ///     every third of it).
    ///   - pollInterval: The longest a full endpoint waits before asking again; more than zero.
    ///   - maxPendingReleases: The most releases kept for sending again; at least 1.
    ///   - maxUnknownWait: How long past its `leaseTTL` the release of an acquire whose outcome is
    ///     unknown is kept while Redis does not answer at all; not negative.
    package init(client: RedisClient, key: String, leaseTTL: Duration = .seconds(10), pollInterval: Duration = .milliseconds(20),
                 maxPendingReleases: Int = 1024, maxUnknownWait: Duration = .seconds(600)) {
        precondition(!key.isEmpty, "RedisEndpointLeases: key must not be empty, got \"\"")
        precondition(leaseTTL >= .milliseconds(3), "RedisEndpointLeases: leaseTTL must be at least 3 ms, got \(leaseTTL)")
        precondition(pollInterval > .zero, "RedisEndpointLeases: pollInterval must be more than zero, got \(pollInterval)")
        precondition(maxPendingReleases >= 1, "RedisEndpointLeases: maxPendingReleases must be at least 1, got \(maxPendingReleases)")
        precondition(maxUnknownWait >= .zero, "RedisEndpointLeases: maxUnknownWait must not be negative, got \(maxUnknownWait)")
        self.client = client
        self.key = key
        self.leaseTTL = leaseTTL
        self.pollInterval = pollInterval
        self.maxPendingReleases = maxPendingReleases
        self.maxUnknownWait = maxUnknownWait
        state = Locked(State(retryDelay: pollInterval))
        tokenPrefix = "\(ProcessInfo.processInfo.processIdentifier).\(String(UInt64.random(in: .min ... .max), radix: 36))"
    }

    /// The keys of `endpoint`'s leases: `<key>|<endpoint>`, escaped.
    package func keys(for endpoint: String) -> RedisLimitKeys {
        RedisLimitKeys(Self.escaped(key) + "|" + Self.escaped(endpoint))
    }

    /// `text` with `%`, `{` and `}` written as `%25`, `%7B` and `%7D`: it can sit in a hash tag.
    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "{", with: "%7B").replacingOccurrences(of: "}", with: "%7D")
    }

    private var ttlMicroseconds: Int64 { leaseTTL.microsecondsRoundedUp }

    // MARK: - EndpointCoordinator

    package func acquire(_ request: EndpointLeaseRequest, answer: @escaping @Sendable (EndpointLeaseAnswer) -> Void) {
        let token = state.withLock { state -> String in
            state.counter += 1
            return "\(tokenPrefix).\(state.counter)"
        }
        let lease = EndpointLease(endpoint: request.endpoint, token: token)
        let call = EndpointLeaseCall(request.adopt ? .adopt(token: token, ttl: ttlMicroseconds)
            : .acquire(limit: request.limit, token: token, ttl: ttlMicroseconds, asker: tokenPrefix, poll: pollInterval.microsecondsRoundedUp))
        run(call, for: request.endpoint) { [self] result in
            switch result {
            case .success(.granted):
                answer(.granted(lease))
            case .success(.full(let retryIn)):
                answer(.full(retryIn: min(.microseconds(retryIn), pollInterval)))
            case .success(.paused(let remaining)):
                answer(.paused(remaining: .microseconds(remaining)))
            case .success(let other):
                answer(.unavailable(retryIn: pollInterval))
                Log.log(.redis, "endpoint leases: \(other) does not answer an acquire")
            case .failure(let failure):
                if failure.mayHaveRun {
                    // Answered with a reply that cannot be decoded: the script ran, its lease's
                    // time has begun. Not answered: Redis may still run it, whenever it goes on.
                    let now = ContinuousClock.now
                    send(PendingRelease(lease: lease, followUp: client.beginFollowUp(),
                                        expiry: now + leaseTTL + (failure.isAnswered ? .zero : maxUnknownWait),
                                        isExpiryUnknown: !failure.isAnswered))
                }
                answer(.unavailable(retryIn: failure.retryIn ?? pollInterval))
            }
        }
    }

    package func release(_ lease: EndpointLease) {
        send(PendingRelease(lease: lease, followUp: client.beginFollowUp(), expiry: .now + leaseTTL))
    }

    package func renew(_ lease: EndpointLease) {
        run(EndpointLeaseCall(.renew(token: lease.token, ttl: ttlMicroseconds)), for: lease.endpoint) { result in
            if case .success(.renewed(nil)) = result {
                Log.log(.redis, "endpoint leases: the lease \(lease.token) of \(lease.endpoint) expired before it was renewed; its request runs on")
            }
        }
    }

    package func pause(endpoint: String, for duration: Duration) {
        let call = EndpointLeaseCall(.pause(duration: duration.microsecondsRoundedUp))
        run(call, for: endpoint) { result in
            if case .failure(let failure) = result {
                Log.log(.redis, "endpoint leases: the pause of \(endpoint) for \(duration) may not be shared: \(failure)")
            }
        }
    }

    /// How many releases wait to be sent again (for tests).
    var pendingReleaseCount: Int { state.withLock { $0.pendingReleases.count } }

    // MARK: - Sending

    /// Why a call failed: the client's error (whether the call may have run, and when to ask
    /// again), or Redis's answer that is not one (an error reply, a reply the call cannot decode).
    struct Failure: Error, CustomStringConvertible {
        var mayHaveRun: Bool
        var retryIn: Duration?
        /// Whether Redis answered (with an error, or a reply that could not be decoded).
        var isAnswered = false
        var description: String
    }

    /// Runs `call` on `endpoint`'s keys; `then` gets the decoded reply, once, on the connection's
    /// thread or at once.
    private func run(_ call: EndpointLeaseCall, for endpoint: String, then: @escaping @Sendable (Result<EndpointLeaseCall.Reply, Failure>) -> Void) {
        client.evaluate(EndpointLeaseScript.script, keys: EndpointLeaseScript.keys(keys(for: endpoint)), arguments: call.arguments) { [self] result in
            if case .success(let value) = result { redisAnswered(isError: value.isErrorReply) }
            switch result {
            case .success(.error(let message)):
                // The script granted nothing: it checks everything before its first write, and
                // after a grant's ZADD come only writes that cannot fail (DEL, HSET on the key just
                // deleted, PEXPIRE); Redis refuses a script it does not run (MISCONF, OOM, BUSY…).
                then(.failure(Failure(mayHaveRun: false, retryIn: nil, isAnswered: true, description: message)))
            case .success(let value):
                do {
                    then(.success(try call.decode(value)))
                } catch {
                    then(.failure(Failure(mayHaveRun: true, retryIn: nil, isAnswered: true, description: "\(error)")))
                }
            case .failure(let error):
                var retryIn: Duration?
                if case .unavailable(let after, _) = error { retryIn = after }
                then(.failure(Failure(mayHaveRun: error.mayHaveRun, retryIn: retryIn, description: error.description)))
            }
        }
    }

    /// Redis answered a command (with an error if `isError`): it runs, so the leases of the
    /// acquires whose outcome was unknown expire ``leaseTTL`` from now at the latest. Without an
    /// error, the releases that got no answer go again now.
    private func redisAnswered(isError: Bool) {
        let expiry = ContinuousClock.now + leaseTTL
        let unanswered = state.withLock { state -> [PendingRelease] in
            for index in state.pendingReleases.indices where state.pendingReleases[index].isExpiryUnknown {
                state.pendingReleases[index].expiry = min(state.pendingReleases[index].expiry, expiry)
                state.pendingReleases[index].isExpiryUnknown = false
            }
            guard !isError else { return [] }
            state.isDropping = false
            let unanswered = state.pendingReleases.filter { !$0.wasRefused }
            state.pendingReleases.removeAll { !$0.wasRefused }
            return unanswered
        }
        for release in unanswered { send(release) }
    }

    /// Sends `release`; ends its follow-up when Redis answers it, else keeps it to send again.
    private func send(_ release: PendingRelease) {
        run(EndpointLeaseCall(.release(token: release.lease.token)), for: release.lease.endpoint) { [self] result in
            switch result {
            case .success:
                state.withLock { $0.retryDelay = pollInterval }
                client.endFollowUp(release.followUp)
            case .failure(let failure):
                var kept = release
                kept.wasRefused = failure.isAnswered
                if failure.isAnswered, kept.isExpiryUnknown {   // Redis runs: its acquire ran, or never will
                    kept.expiry = min(kept.expiry, .now + leaseTTL)
                    kept.isExpiryUnknown = false
                }
                keep(kept, retryIn: failure.retryIn, after: failure)
            }
        }
    }

    /// Keeps `release`, which failed, to send it again (arming a retry, if none is armed, after the
    /// current back-off, or the client's `retryIn` if longer, at most a third of ``leaseTTL``, and
    /// doubling the back-off); ends it when its lease has expired anyway, or when too many are kept
    /// (logging the first one dropped until Redis answers again).
    private func keep(_ release: PendingRelease, retryIn: Duration?, after failure: Failure) {
        enum Outcome { case kept(retryAfter: Duration?), expired, dropped(isFirst: Bool) }
        let now = ContinuousClock.now
        let longest = max(pollInterval, leaseTTL / 3)
        let outcome = state.withLock { state -> Outcome in
            guard now < release.expiry else { return .expired }
            guard state.pendingReleases.count < maxPendingReleases else {
                defer { state.isDropping = true }
                return .dropped(isFirst: !state.isDropping)
            }
            state.pendingReleases.append(release)
            guard !state.isRetryArmed else { return .kept(retryAfter: nil) }
            state.isRetryArmed = true
            let delay = min(max(retryIn ?? .zero, state.retryDelay), longest)
            state.retryDelay = min(state.retryDelay * 2, longest)
            return .kept(retryAfter: delay)
        }
        switch outcome {
        case .kept(let retryAfter):
            if let retryAfter { armRetry(after: max(retryAfter, .milliseconds(1))) }
        case .expired:
            client.endFollowUp(release.followUp)
            guard release.isExpiryUnknown else { return }
            client.core.log("endpoint leases: the release of \(release.lease.token) (an acquire whose outcome is unknown) is dropped: "
                + "Redis has not answered for \(leaseTTL + maxUnknownWait) (\(failure))")
        case .dropped(let isFirst):
            client.endFollowUp(release.followUp)
            guard isFirst else { return }
            client.core.log("endpoint leases: \(maxPendingReleases) releases wait for Redis (\(failure)); more are dropped, "
                + "their leases end at their TTL (\(leaseTTL) after their last renewal); logged once until Redis answers")
        }
    }

    /// Sends the pending releases again `delay` from now.
    private func armRetry(after delay: Duration) {
        let armed = try? TimerThread.shared.schedule(after: delay) { [self] in
            state.withLock { $0.isRetryArmed = false }
            flushPendingReleases()
        }
        // No timer (the process is ending): Redis's next answer sends those it did not answer.
        if armed == nil { state.withLock { $0.isRetryArmed = false } }
    }

    /// Sends again the releases that failed before.
    private func flushPendingReleases() {
        let pending = state.withLock { state -> [PendingRelease] in
            defer { state.pendingReleases.removeAll() }
            return state.pendingReleases
        }
        for release in pending { send(release) }
    }
}

extension RESPValue {
    /// Whether this is an error reply.
    fileprivate var isErrorReply: Bool {
        if case .error = self { return true }
        return false
    }
}

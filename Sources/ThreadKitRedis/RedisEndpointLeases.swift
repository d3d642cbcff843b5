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
///   most; and an asker that stopped asking (its requests timed out, its process died) holds free
///   leases back from newer askers for ten poll intervals.
/// - **Releases are never lost.** A release is sent with its reply awaited; one that fails (the
///   breaker refuses it, it times out, its connection drops, Redis answers an error) is kept, up
///   to ``maxPendingReleases``, and sent again: after the client's back-off (or ``pollInterval``),
///   before this instance's next command, and whenever one of its commands is answered; until
///   Redis answers it (`0` or `1`: releasing is idempotent) or until ``leaseTTL`` after the
///   release, when the lease has expired anyway (it was renewed at most a third of that before).
///   The lease of an acquire whose outcome is unknown is given back the same way, but its
///   ``leaseTTL`` counts from the first answer Redis gives after: Redis may run that acquire late.
///   The first release dropped beyond ``maxPendingReleases`` is logged, once until Redis answers
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

    /// A release not yet answered by Redis.
    struct PendingRelease: Sendable {
        var lease: EndpointLease
        /// The client's follow-up it holds until it ends: what `RedisClient.flush` waits for.
        var followUp: UInt64
        /// When the lease has expired whatever happens: the release is not sent again after.
        /// `nil` for the lease of an acquire whose outcome is unknown: Redis may run that acquire
        /// late (a server that was frozen runs what it buffered when it goes on), so its lease's
        /// time starts only when Redis answers again, which sets this to ``leaseTTL`` after then.
        var expiry: ContinuousClock.Instant?
    }

    private struct State: Sendable {
        var counter: UInt64 = 0
        var pendingReleases: [PendingRelease] = []
        /// Whether a release was dropped (``maxPendingReleases`` were kept) since Redis last answered.
        var isDropping = false
        /// Whether a timer is armed to send the pending releases again.
        var isRetryArmed = false
    }

    private let state = Locked(State())
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
    package init(client: RedisClient, key: String, leaseTTL: Duration = .seconds(10), pollInterval: Duration = .milliseconds(20),
                 maxPendingReleases: Int = 1024) {
        precondition(!key.isEmpty, "RedisEndpointLeases: key must not be empty, got \"\"")
        precondition(leaseTTL >= .milliseconds(3), "RedisEndpointLeases: leaseTTL must be at least 3 ms, got \(leaseTTL)")
        precondition(pollInterval > .zero, "RedisEndpointLeases: pollInterval must be more than zero, got \(pollInterval)")
        precondition(maxPendingReleases >= 1, "RedisEndpointLeases: maxPendingReleases must be at least 1, got \(maxPendingReleases)")
        self.client = client
        self.key = key
        self.leaseTTL = leaseTTL
        self.pollInterval = pollInterval
        self.maxPendingReleases = maxPendingReleases
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
        flushPendingReleases()
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
                    flushPendingReleases()
                    send(PendingRelease(lease: lease, followUp: client.beginFollowUp(), expiry: nil))
                }
                answer(.unavailable(retryIn: failure.retryIn ?? pollInterval))
            }
        }
    }

    package func release(_ lease: EndpointLease) {
        flushPendingReleases()
        send(PendingRelease(lease: lease, followUp: client.beginFollowUp(), expiry: .now + leaseTTL))
    }

    package func renew(_ lease: EndpointLease) {
        flushPendingReleases()
        run(EndpointLeaseCall(.renew(token: lease.token, ttl: ttlMicroseconds)), for: lease.endpoint) { result in
            if case .success(.renewed(nil)) = result {
                Log.log(.redis, "endpoint leases: the lease \(lease.token) of \(lease.endpoint) expired before it was renewed; its request runs on")
            }
        }
    }

    package func pause(endpoint: String, for duration: Duration) {
        flushPendingReleases()
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

    /// Why a call failed: the client's error (whether the call may have run, and when to ask again).
    struct Failure: Error, CustomStringConvertible {
        var mayHaveRun: Bool
        var retryIn: Duration?
        var description: String
    }

    /// Runs `call` on `endpoint`'s keys; `then` gets the decoded reply, once, on the connection's
    /// thread or at once.
    private func run(_ call: EndpointLeaseCall, for endpoint: String, then: @escaping @Sendable (Result<EndpointLeaseCall.Reply, Failure>) -> Void) {
        client.evaluate(EndpointLeaseScript.script, keys: EndpointLeaseScript.keys(keys(for: endpoint)), arguments: call.arguments) { [self] result in
            // Redis answers (not with an error, which would answer the releases sent again the
            // same way, each answer sending the others): the releases that failed before go now.
            if case .success(let value) = result, !value.isErrorReply {
                let expiry = ContinuousClock.now + leaseTTL
                state.withLock { state in
                    state.isDropping = false
                    for index in state.pendingReleases.indices where state.pendingReleases[index].expiry == nil {
                        state.pendingReleases[index].expiry = expiry
                    }
                }
                flushPendingReleases()
            }
            switch result {
            case .success(.error(let message)):
                then(.failure(Failure(mayHaveRun: true, retryIn: nil, description: message)))
            case .success(let value):
                do {
                    then(.success(try call.decode(value)))
                } catch {
                    then(.failure(Failure(mayHaveRun: true, retryIn: nil, description: "\(error)")))
                }
            case .failure(let error):
                var retryIn: Duration?
                if case .unavailable(let after, _) = error { retryIn = after }
                then(.failure(Failure(mayHaveRun: error.mayHaveRun, retryIn: retryIn, description: error.description)))
            }
        }
    }

    /// Sends `release`; ends its follow-up when Redis answers it, else keeps it to send again.
    private func send(_ release: PendingRelease) {
        run(EndpointLeaseCall(.release(token: release.lease.token)), for: release.lease.endpoint) { [self] result in
            switch result {
            case .success: client.endFollowUp(release.followUp)
            case .failure(let failure): keep(release, retryIn: failure.retryIn, after: failure)
            }
        }
    }

    /// Keeps `release`, which failed, to send it again (arming a retry `retryIn` from now, or
    /// ``pollInterval``, if none is armed); ends it when its lease has expired anyway, or when too
    /// many are kept (logging the first one dropped until Redis answers again).
    private func keep(_ release: PendingRelease, retryIn: Duration?, after failure: Failure) {
        enum Outcome { case kept(armsRetry: Bool), expired, dropped(isFirst: Bool) }
        let now = ContinuousClock.now
        let outcome = state.withLock { state -> Outcome in
            guard release.expiry.map({ now < $0 }) ?? true else { return .expired }
            guard state.pendingReleases.count < maxPendingReleases else {
                defer { state.isDropping = true }
                return .dropped(isFirst: !state.isDropping)
            }
            state.pendingReleases.append(release)
            defer { state.isRetryArmed = true }
            return .kept(armsRetry: !state.isRetryArmed)
        }
        switch outcome {
        case .kept(let armsRetry):
            if armsRetry { armRetry(after: max(retryIn ?? pollInterval, .milliseconds(1))) }
        case .expired:
            client.endFollowUp(release.followUp)
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
        // No timer (the process is ending): the next command or answer sends them.
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

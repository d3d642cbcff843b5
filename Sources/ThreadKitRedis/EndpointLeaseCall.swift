import ThreadKit

/// One run of ``EndpointLeaseScript``: an operation with its arguments in microseconds, encoded as
/// the script's `ARGV`, and the script's reply, decoded.
///
/// Microsecond values are clamped to ±(2⁵³−1) before they are sent (the script clamps again what it
/// computes); a reply that is not one the script gives is a ``BadReply``, never a trap.
struct EndpointLeaseCall: Sendable, Equatable {
    /// The largest microsecond value the script keeps: 2⁵³−1 (about 285 years), "never".
    static let maxMicroseconds = LimitScript.maxMicroseconds

    /// What the script is asked to do.
    enum Operation: Sendable, Equatable {
        /// Take a lease named `token` for `ttl` if fewer than `limit` are held, no pause is in force,
        /// and fewer older askers than free leases stand in line; else stand in line as `asker`,
        /// which asks again within `poll`.
        case acquire(limit: Int, token: String, ttl: Int64, asker: String, poll: Int64)
        /// Take a lease named `token` for `ttl` whatever the limit, the line or a pause: for a
        /// request that already runs.
        case adopt(token: String, ttl: Int64)
        /// Give the lease `token` back.
        case release(token: String)
        /// Move the lease `token`'s expiry to `ttl` from now, if it is still held.
        case renew(token: String, ttl: Int64)
        /// No lease for `duration` from now; a later pause in force stays.
        case pause(duration: Int64)
    }

    /// The script's answer.
    enum Reply: Sendable, Equatable {
        /// The lease is held until `expiry` (on the script's clock).
        case granted(expiry: Int64)
        /// No lease for this asker now: every lease is taken (the earliest expires `retryIn` from
        /// now, at least 1 ms), or older askers in line are to take the free ones (`retryIn` is
        /// the poll interval).
        case full(retryIn: Int64)
        /// A pause is in force for `remaining` from now.
        case paused(remaining: Int64)
        /// Whether the token held a lease that is now given back.
        case released(Bool)
        /// The renewed lease's new expiry, `nil` when it was gone.
        case renewed(expiry: Int64?)
        /// The pause in force after the call, `nil` for none.
        case pausedUntil(Int64?)
    }

    /// A reply the script never gives.
    typealias BadReply = LimitScript.BadReply

    var operation: Operation
    /// The script's clock for this call, in microseconds: for tests with made-up times only. `nil`
    /// (production) makes the script read Redis's `TIME`.
    var now: Int64?

    /// A call of `operation`; `now` only for tests.
    init(_ operation: Operation, now: Int64? = nil) {
        switch operation {
        case .acquire(let limit, let token, let ttl, let asker, let poll):
            precondition(limit >= 1, "EndpointLeaseCall: limit must be at least 1, got \(limit)")
            precondition(ttl > 0, "EndpointLeaseCall: ttl must be more than zero, got \(ttl)")
            precondition(poll > 0, "EndpointLeaseCall: poll must be more than zero, got \(poll)")
            precondition(!asker.isEmpty, "EndpointLeaseCall: asker must not be empty, got \"\"")
            Self.check(token: token)
        case .adopt(let token, let ttl):
            precondition(ttl > 0, "EndpointLeaseCall: ttl must be more than zero, got \(ttl)")
            Self.check(token: token)
        case .release(let token):
            Self.check(token: token)
        case .renew(let token, let ttl):
            precondition(ttl > 0, "EndpointLeaseCall: ttl must be more than zero, got \(ttl)")
            Self.check(token: token)
        case .pause:
            break
        }
        if let now { precondition(now >= 0, "EndpointLeaseCall: now must not be negative, got \(now)") }
        self.operation = operation
        self.now = now
    }

    private static func check(token: String) {
        precondition(!token.isEmpty, "EndpointLeaseCall: token must not be empty, got \"\"")
    }

    /// `ARGV`: the operation, `now` (empty: `TIME`), then the operation's arguments.
    var arguments: [String] {
        let clamped = LimitScript.clamped
        switch operation {
        case .acquire(let limit, let token, let ttl, let asker, let poll):
            return LimitScript.arguments("acquire", now: now) + [String(limit), token, clamped(ttl), asker, clamped(poll)]
        case .adopt(let token, let ttl):
            return LimitScript.arguments("adopt", now: now) + [token, clamped(ttl)]
        case .release(let token):
            return LimitScript.arguments("release", now: now) + [token]
        case .renew(let token, let ttl):
            return LimitScript.arguments("renew", now: now) + [token, clamped(ttl)]
        case .pause(let duration):
            return LimitScript.arguments("pause", now: now) + [clamped(duration)]
        }
    }

    /// Runs the call on `client`, for the leases `keys`.
    ///
    /// - Throws: ``RedisError`` when Redis does not answer or answers with an error; ``BadReply``.
    func run(on client: RedisClient, keys: RedisLimitKeys) async throws -> Reply {
        try decode(await client.evaluate(EndpointLeaseScript.script, keys: EndpointLeaseScript.keys(keys), arguments: arguments))
    }

    /// The script's reply to this call.
    ///
    /// - Throws: ``BadReply`` for a reply the script does not give to this operation.
    func decode(_ reply: RESPValue) throws(BadReply) -> Reply {
        switch operation {
        case .acquire, .adopt:
            guard let parts = reply.array, parts.count == 2, let kind = parts[0].string, let value = parts[1].integer else {
                throw Self.bad("{kind, number}", reply)
            }
            switch kind {
            case "granted": return .granted(expiry: value)
            case "full" where value > 0: return .full(retryIn: value)
            case "paused" where value > 0: return .paused(remaining: value)
            default: throw Self.bad("granted, full or paused", reply)
            }
        case .release:
            guard let count = reply.integer, count == 0 || count == 1 else { throw Self.bad("0 or 1", reply) }
            return .released(count == 1)
        case .renew:
            guard let expiry = reply.integer, expiry >= 0 else { throw Self.bad("an expiry or 0", reply) }
            return .renewed(expiry: expiry == 0 ? nil : expiry)
        case .pause:
            guard let until = reply.integer, until >= 0 else { throw Self.bad("a time or 0", reply) }
            return .pausedUntil(until == 0 ? nil : until)
        }
    }

    private static func bad(_ expected: String, _ reply: RESPValue) -> BadReply {
        BadReply("endpoint lease", expected: expected, got: reply)
    }
}

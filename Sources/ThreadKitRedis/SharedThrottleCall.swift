import ThreadKit

/// One run of ``SharedThrottleScript``: an operation of ThreadKit's `SharedThrottle` model with its
/// arguments in microseconds, encoded as the script's `ARGV`, and the script's reply, decoded into
/// the model's own answer.
///
/// Every microsecond value is clamped to ±(2⁵³−1), the integers a Lua number holds exactly, before it
/// is sent (the script clamps again what it computes); a reply that is not one the script gives is a
/// ``BadReply``, never a trap.
struct SharedThrottleCall: Sendable, Equatable {
    /// The largest microsecond value the script keeps: 2⁵³−1 (about 285 years), "never".
    static let maxMicroseconds = LimitScript.maxMicroseconds

    /// At most `count` starts in any sliding window of `window` microseconds.
    typealias Limit = SharedThrottle.Limit

    /// What the script is asked to do: each case is the model's function of the same name, with the
    /// same arguments but `now`, which the call carries (or Redis's `TIME` gives).
    enum Operation: Sendable, Equatable {
        /// Decide the next start: `SharedThrottle.request(_:)`. `token` is the one a new `.serial`
        /// lease takes, `asker` the caller's place in the `.serial` line (both in 1...2⁵³−1).
        case reserve(
            gap: Int64, monitor: ThrottledQueue.Monitor, limit: Limit?, horizon: Int64, leaseTTL: Int64, holding: UInt64?,
            token: UInt64, asker: UInt64)
        /// The end numbered `number` of a `.serial` start holding `token` (it ended, or was given up
        /// unused; a number seen before changes nothing): `SharedThrottle.finished(token:number:now:)`.
        case finished(token: UInt64, number: Int64)
        /// The `.serial` start holding `token` still runs: its lease lasts at least `leaseTTL` from
        /// now: `SharedThrottle.renew(token:leaseTTL:now:)`.
        case renew(token: UInt64, leaseTTL: Int64)
        /// No start for `duration` from now; a later pause in force stays: `SharedThrottle.pause(for:now:)`.
        case pause(duration: Int64)
    }

    /// The script's answer: the model's.
    enum Reply: Sendable, Equatable {
        /// The answer to ``Operation/reserve(gap:monitor:limit:horizon:leaseTTL:holding:token:asker:)``.
        case decision(SharedThrottle.Decision)
        /// Whether the token holds the lease (an expired lease's does not).
        case finished(Bool)
        /// Whether the token holds the lease, renewed.
        case renewed(Bool)
        /// The pause in force after the call, `nil` for none.
        case paused(until: Int64?)
    }

    /// A reply the script never gives.
    typealias BadReply = LimitScript.BadReply

    /// A lease token or an asker id: a random number in 1...2⁵³−1 (see `SharedThrottle`'s
    /// discussion of tokens for why a collision is negligible).
    static func randomID() -> UInt64 {
        UInt64.random(in: 1...UInt64(maxMicroseconds))
    }

    var operation: Operation
    /// The script's clock for this call, in microseconds: for tests with made-up times only. `nil`
    /// (production) makes the script read Redis's `TIME`.
    var now: Int64?

    /// A call of `operation`; `now` only for tests.
    init(_ operation: Operation, now: Int64? = nil) {
        switch operation {
        case .reserve(let gap, _, let limit, let horizon, let leaseTTL, let holding, let token, let asker):
            Self.check(gap: gap, limit: limit)
            precondition(horizon > 0, "SharedThrottleCall: horizon must be more than zero, got \(horizon)")
            precondition(leaseTTL > 0, "SharedThrottleCall: leaseTTL must be more than zero, got \(leaseTTL)")
            if let holding { Self.check(token: holding) }
            Self.check(token: token)
            precondition(SharedThrottle.isID(asker), "SharedThrottleCall: an asker is in 1...2^53-1, got \(asker)")
        case .finished(let token, let number):
            Self.check(token: token)
            precondition(number >= 1, "SharedThrottleCall: an end number is at least 1, got \(number)")
        case .renew(let token, let leaseTTL):
            Self.check(token: token)
            precondition(leaseTTL > 0, "SharedThrottleCall: leaseTTL must be more than zero, got \(leaseTTL)")
        case .pause:
            break
        }
        if let now { precondition(now >= 0, "SharedThrottleCall: now must not be negative, got \(now)") }
        self.operation = operation
        self.now = now
    }

    /// `ARGV`: the operation, `now` (empty: `TIME`), then the operation's arguments.
    var arguments: [String] {
        let clamped = LimitScript.clamped
        switch operation {
        case .reserve(let gap, let monitor, let limit, let horizon, let leaseTTL, let holding, let token, let asker):
            return LimitScript.arguments("reserve", now: now) + Self.rulesArguments(gap, monitor, limit)
                + [clamped(horizon), clamped(leaseTTL), holding.map { String($0) } ?? "", String(token), String(asker)]
        case .finished(let token, let number):
            return LimitScript.arguments("finished", now: now) + [String(token), clamped(number)]
        case .renew(let token, let leaseTTL):
            return LimitScript.arguments("renew", now: now) + [String(token), clamped(leaseTTL)]
        case .pause(let duration):
            return LimitScript.arguments("pause", now: now) + [clamped(duration)]
        }
    }

    /// Runs the call on `client`, for the limit `keys`.
    ///
    /// - Throws: ``RedisError`` when Redis does not answer or answers with an error; ``BadReply``.
    func run(on client: RedisClient, keys: RedisLimitKeys) async throws -> Reply {
        try decode(await client.evaluate(SharedThrottleScript.script, keys: SharedThrottleScript.keys(keys), arguments: arguments))
    }

    /// Runs the call on `client` as ``run(on:keys:)`` does, blocking the calling thread.
    @available(*, noasync, message: "it blocks the thread; use 'try await run(on:keys:)' in async code")
    func runSync(on client: RedisClient, keys: RedisLimitKeys) throws -> Reply {
        try decode(client.evaluateSync(SharedThrottleScript.script, keys: SharedThrottleScript.keys(keys), arguments: arguments))
    }

    /// Sends the call on `client` without waiting for its reply (see `RedisClient.evaluateAndForget`).
    ///
    /// - Parameter followUp: The client's follow-up the call is part of (`RedisClient.flush` waits for it).
    /// - Throws: ``RedisError`` when the client refuses it at once.
    func runAndForget(on client: RedisClient, keys: RedisLimitKeys, followUp: UInt64) throws(RedisError) {
        try client.evaluateAndForget(
            SharedThrottleScript.script, keys: SharedThrottleScript.keys(keys), arguments: arguments, followUp: followUp)
    }

    /// The script's reply to this call.
    ///
    /// - Throws: ``BadReply`` for a reply the script does not give to this operation.
    func decode(_ reply: RESPValue) throws(BadReply) -> Reply {
        switch operation {
        case .reserve:
            return .decision(try Self.decodeDecision(reply))
        case .finished:
            return .finished(try Self.decodeFlag(reply))
        case .renew:
            return .renewed(try Self.decodeFlag(reply))
        case .pause:
            guard let until = reply.integer, until >= 0 else { throw Self.bad("a time", reply) }
            return .paused(until: until == 0 ? nil : until)
        }
    }

    private static func decodeFlag(_ reply: RESPValue) throws(BadReply) -> Bool {
        guard let flag = reply.integer, flag == 0 || flag == 1 else { throw bad("0 or 1", reply) }
        return flag == 1
    }

    private static func decodeDecision(_ reply: RESPValue) throws(BadReply) -> SharedThrottle.Decision {
        let elements = reply.array ?? []
        let numbers = elements.dropFirst().map(\.integer)
        switch (elements.first?.string, numbers.count) {
        case ("reserved", 2), ("reserved", 3):
            guard let at = numbers[0], let wait = numbers[1], wait >= 0 else { break }
            guard numbers.count == 3 else { return .reserved(at: at, wait: wait, token: nil) }
            guard let token = numbers[2], token > 0, token <= maxMicroseconds else { break }
            return .reserved(at: at, wait: wait, token: UInt64(token))
        case ("declined", 1):
            guard let retryIn = numbers[0], retryIn > 0 else { break }
            return .declined(retryIn: retryIn)
        case ("mismatch", 3):
            let monitor: ThrottledQueue.Monitor
            switch elements[1].string {
            case "concurrent": monitor = .concurrent
            case "serial": monitor = .serial
            default: throw bad("a monitor", reply)
            }
            guard let count = elements[2].integer, let window = elements[3].integer, count >= 0, count <= Int32.max else { break }
            let limit = count == 0 ? nil : Limit(count: Int(count), window: window)
            return .mismatch(stored: SharedThrottle.Rules(monitor: monitor, limit: limit))
        default:
            break
        }
        throw bad("a decision", reply)
    }

    private static func bad(_ expected: String, _ reply: RESPValue) -> BadReply {
        BadReply("shared throttle", expected: expected, got: reply)
    }

    private static func rulesArguments(_ gap: Int64, _ monitor: ThrottledQueue.Monitor, _ limit: Limit?) -> [String] {
        [LimitScript.clamped(gap), monitor == .serial ? "serial" : "concurrent", String(limit?.count ?? 0),
         LimitScript.clamped(limit?.window ?? 0)]
    }

    private static func check(gap: Int64, limit: Limit?) {
        precondition(gap >= 0, "SharedThrottleCall: gap must not be negative, got \(gap)")
        if let limit {
            precondition(limit.count >= 1, "SharedThrottleCall: limit.count must be at least 1, got \(limit.count)")
            precondition(limit.window > 0, "SharedThrottleCall: limit.window must be more than zero, got \(limit.window)")
        }
    }

    private static func check(token: UInt64) {
        precondition(SharedThrottle.isID(token), "SharedThrottleCall: a token is in 1...2^53-1, got \(token)")
    }
}

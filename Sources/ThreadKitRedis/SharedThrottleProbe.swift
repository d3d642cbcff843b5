/// One start decision of the shared throttle script, as a coordinator asks for it but with no queue
/// around it: for the package's tools, which measure the decision itself (the benchmark's
/// `redis.decision` and hot-key rows), and to name the log whose appends a fleet run watches.
package struct SharedThrottleProbe: Sendable {
    /// The script's answer to a reserve.
    package enum Decision: Sendable, Equatable {
        /// A start recorded at `at` (Redis's clock, microseconds), `wait` after the script's now; a
        /// `.serial` start holds `token` until ``SharedThrottleProbe/finished(token:)``.
        case reserved(at: Int64, wait: Int64, token: UInt64?)
        /// Nothing recorded: ask again `retryIn` microseconds later.
        case declined(retryIn: Int64)
    }

    /// A reply that is not a decision: another limit is stored under the key, or a reply the
    /// script never gives.
    package struct Refused: Error, CustomStringConvertible {
        package let description: String
    }

    package let client: RedisClient
    package let keys: RedisLimitKeys
    /// The probe's place in the `.serial` line: one asker, as a queue's coordinator is.
    package let asker = SharedThrottleCall.randomID()

    /// Decisions for the limit `key` on `client`.
    package init(client: RedisClient, key: String) {
        self.client = client
        keys = RedisLimitKeys(key)
    }

    /// The list the script appends each recorded start to (its `RPUSH`es are the reservations a
    /// `MONITOR` connection sees).
    package var logKey: String { SharedThrottleScript.keys(keys)[1] }

    /// Asks the script for a start, blocking the calling thread for the round trip. All durations in
    /// microseconds; `limit` is at most `count` starts in any window of `window`.
    ///
    /// - Throws: ``RedisError`` when Redis does not answer or answers with an error; ``Refused``.
    @available(*, noasync, message: "it blocks the thread; the tools call it from threads of their own")
    package func reserve(
        gap: Int64, serial: Bool, limit: (count: Int, window: Int64)?, horizon: Int64 = 1_000_000, leaseTTL: Int64 = 250_000
    ) throws -> Decision {
        let rules = limit.map { SharedThrottleCall.Limit(count: $0.count, window: $0.window) }
        let call = SharedThrottleCall(.reserve(
            gap: gap, monitor: serial ? .serial : .concurrent, limit: rules, horizon: horizon, leaseTTL: leaseTTL, holding: nil,
            token: SharedThrottleCall.randomID(), asker: asker))
        switch try call.runSync(on: client, keys: keys) {
        case .decision(.reserved(let at, let wait, let token)): return .reserved(at: at, wait: wait, token: token)
        case .decision(.declined(let retryIn)): return .declined(retryIn: retryIn)
        case let other: throw Refused(description: "the shared throttle script refused the start: \(other)")
        }
    }

    /// Gives back the `.serial` lease `token` holds (its one start: end number 1), blocking for the
    /// round trip; whether it held it.
    @available(*, noasync, message: "it blocks the thread; the tools call it from threads of their own")
    package func finished(token: UInt64) throws -> Bool {
        try SharedThrottleCall(.finished(token: token, number: 1)).runSync(on: client, keys: keys) == .finished(true)
    }
}

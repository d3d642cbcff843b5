import ThreadKit

extension Coordination {
    /// Starts decided on Redis together with every queue, in any process, created with the same
    /// `key`: one limit shared by a fleet.
    ///
    /// ```swift
    /// let client = RedisClient(.unixSocket(path: socketPath))
    /// let api = ThrottledQueue(
    ///     label: "api", interval: .milliseconds(200), limit: .rate(5, per: .seconds(1)),
    ///     coordination: .redis(client, key: "api.example.com"))
    /// ```
    ///
    /// Each start is decided by one Lua script on Redis's clock (`TIME`, in microseconds), in one
    /// round trip: the gap after the last start of any process (for `.serial`, after its end,
    /// with a lease that lets one task of the fleet run at a time), at most `count` starts in any
    /// window, and the pause. The script answers with a reservation ("start in 12.4 ms"), which the
    /// queue waits out on its own monotonic clock, so waiting needs no polling; a start more than
    /// a second ahead is declined and asked again nearer its time. `ThrottledQueue.pause(for:)`
    /// on any queue of the key pauses all of them, and a pause is never shortened. Every key the
    /// limit keeps has a TTL. The guarantee holds on the reservations, on Redis's clock: see
    /// `Coordination`. A `.serial` lease lasts 10 s after its start and is renewed every third of
    /// that while its process holds it, so a task may run longer. A process that dies holding it
    /// keeps the others waiting until it expires: up to the horizon (1 s, for a start reserved
    /// ahead) plus 10 s. So does a lease whose holder never learns it (a reserve that timed out
    /// after Redis ran it) or whose end was lost after it was sent: no process holds it, and it
    /// lasts its 10 s.
    ///
    /// Given to a `URLDispatcher`'s `EndpointLimits(…, coordination:)`, the same value shares each
    /// endpoint's `maxRequests` across the fleet instead: a request runs while it holds one of the
    /// endpoint's leases, kept in a sorted set with expiries under `{key|endpoint}` (one set per
    /// endpoint, so one limits value used for several endpoints keeps them apart), renewed while a
    /// long request runs and given back once when it ends, to the coordination that granted it even
    /// if `setLimits` changed the endpoint's since (a release that fails is sent again until Redis
    /// answers it, or until the lease has expired anyway); processes that all wait take turns, in
    /// the order of their first ask; the requests a fallback started get leases first once Redis
    /// answers again, whatever the limit; a 429 or 503 with `Retry-After` pauses the endpoint in
    /// every process.
    ///
    /// Every queue of a key must be made with the same monitor and limit (their intervals may
    /// differ): one with others is told so when it asks, logs it and applies `whenUnavailable`,
    /// rather than weaken the shared rules. While Redis does not answer (down, stopped, its
    /// client's circuit breaker open), each start applies `whenUnavailable`; a command that timed
    /// out after it was sent counts as a start. The change both ways is logged through `Log`.
    ///
    /// DESIGN.md sketches `Coordination` as an enum with a `redis` case; it is a struct with this
    /// static function instead, because ThreadKit, which defines it, cannot name ``RedisClient``:
    /// this module adds the constructor, and a call reads the same, `.redis(client, key: …)`.
    ///
    /// - Parameters:
    ///   - client: The client of the Redis server (or the master of a replicated setup) that every
    ///     process of the fleet uses. Its command timeout bounds each start decision, plus a
    ///     margin of 250 ms; twice that when the server answers `NOSCRIPT` (`EVALSHA`, then `EVAL`,
    ///     each with its own deadline). Configure
    ///     the server with `maxmemory-policy noeviction`: an evicted limit would let starts through.
    ///   - key: The limit's name, shared by every process that enforces it (`"api.example.com"`):
    ///     not empty, without `{` or `}` (its keys sit under the hash tag `{key}`, so that a Redis
    ///     Cluster keeps them on one node).
    ///   - whenUnavailable: What each start does while Redis cannot decide it; by default the local
    ///     throttle at half the rate, in each process.
    /// - Returns: The coordination to pass to `ThrottledQueue(label:interval:monitor:mutability:limit:pool:coordination:)`.
    public static func redis(
        _ client: RedisClient, key: String, whenUnavailable: Fallback = .localFallback(share: 0.5)
    ) -> Coordination {
        let name = "Coordination.redis(_:key:whenUnavailable:)"
        precondition(!key.isEmpty, "\(name): key must not be empty, got \"\"")
        precondition(
            !key.contains("{") && !key.contains("}"),
            "\(name): key must not contain '{' or '}' (the limit's keys sit under the hash tag {key}), got \"\(key)\"")
        whenUnavailable.validate(name)
        return Coordination(
            coordinator: RedisStartCoordinator(client: client, keys: RedisLimitKeys(key)),
            endpoints: RedisEndpointLeases(client: client, key: key), whenUnavailable: whenUnavailable)
    }
}

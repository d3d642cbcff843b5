/// The Lua script that shares a `URLDispatcher` endpoint's concurrency across a fleet: a sorted set
/// of leases with expiries, and a pause, on Redis's clock, one atomic step per run.
///
/// **Keys** (``keys(_:)``), both under one hash tag, so that a Redis Cluster keeps them on one node:
/// - `threadkit:{<key>}:leases`, a sorted set: each lease's token, scored by its expiry;
/// - `threadkit:{<key>}:leases:state`, a hash: `lastNow` (the clock's high-water mark) and
///   `pausedUntil`.
///
/// Every run first drops the expired leases, then sets both keys' TTL to the time the state stops
/// mattering (the latest expiry, the pause, whichever is later) plus one minute of grace, so an
/// endpoint nobody uses leaves nothing behind.
///
/// **Arguments.** `ARGV[1]` is the operation; `ARGV[2]` is `now` in microseconds, or empty, and
/// production calls leave it empty: the script then reads Redis's `TIME`. An explicit `now` is for
/// tests, which drive the rules with made-up times. Either way `now = max(now, lastNow)`: a clock
/// that steps back does not bring expired leases back. Then, by operation (``EndpointLeaseCall``
/// encodes them):
/// - `acquire limit token ttl` → `{"granted", expiry}` when fewer than `limit` leases are held and no
///   pause is in force (a token already held is renewed and granted again: a retried acquire takes
///   one lease, not two), `{"paused", remaining}`, or `{"full", retryIn}` (until the earliest expiry,
///   at least 1 ms);
/// - `release token` → `1` when the token held a lease, else `0` (releasing twice does nothing);
/// - `renew token ttl` → the new expiry, or `0` when the lease is gone (expired, released): a lease
///   that expired is not taken back, since its place may have been given to another request;
/// - `pause duration` → the pause in force afterwards (`0`: none); a pause is never shortened.
///
/// **Numbers.** As in the shared throttle's script: every microsecond value is clamped to
/// ±(2⁵³−1), the integers a Lua number (a double, and a sorted set's score) holds exactly, and goes
/// into keys and arguments through `string.format('%d', x)`. Bad arguments are an error reply
/// (`ERR threadkit endpoint leases: …`), checked before anything is written.
enum EndpointLeaseScript {
    /// The script, by its SHA-1 (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`).
    static let script = RedisScript(source)

    /// The keys of the leases `keys`, in the order the script takes them.
    static func keys(_ keys: RedisLimitKeys) -> [String] {
        [keys.key("leases"), keys.key("leases:state")]
    }

    /// The Lua source.
    static let source = LimitScript.prelude(named: "endpoint leases") + #"""
        local leaseKey, stateKey = KEYS[1], KEYS[2]

        local function token(index)
          local t = ARGV[index]
          if t == nil or t == '' then fail('a token must not be empty') end
          return t
        end

        local now = readNow()
        local operation, args = ARGV[1], nil
        if operation == 'acquire' then args = {integer(3, 'limit', 1), token(4), integer(5, 'lease TTL', 1)}
        elseif operation == 'release' then args = {token(3)}
        elseif operation == 'renew' then args = {token(3), integer(4, 'lease TTL', 1)}
        elseif operation == 'pause' then args = {integer(3, 'duration', -MAX)}
        else fail('unknown operation "' .. tostring(operation) .. '"') end

        local stored = redis.call('HMGET', stateKey, 'lastNow', 'pausedUntil')
        local lastNow, pausedUntil = tonumber(stored[1]), tonumber(stored[2])
        if lastNow and lastNow > now then now = lastNow end
        if pausedUntil and pausedUntil <= now then pausedUntil = nil end
        redis.call('ZREMRANGEBYSCORE', leaseKey, '-inf', fmt(now))

        local function acquire(limit, t, ttl)
          local expiry = clamp(now + ttl)
          if pausedUntil then return {'paused', pausedUntil - now} end
          if redis.call('ZSCORE', leaseKey, t) or redis.call('ZCARD', leaseKey) < limit then
            redis.call('ZADD', leaseKey, fmt(expiry), t)
            return {'granted', expiry}
          end
          local earliest = redis.call('ZRANGE', leaseKey, '0', '0', 'WITHSCORES')
          return {'full', math.max(tonumber(earliest[2]) - now, MIN_RETRY)}
        end

        local function release(t)
          return redis.call('ZREM', leaseKey, t)
        end

        local function renew(t, ttl)
          if not redis.call('ZSCORE', leaseKey, t) then return 0 end
          local expiry = clamp(now + ttl)
          redis.call('ZADD', leaseKey, fmt(expiry), t)
          return expiry
        end

        local function pause(duration)
          local untilTime = clamp(now + duration)
          if untilTime > now then pausedUntil = math.max(pausedUntil or untilTime, untilTime) end
          return pausedUntil or 0
        end

        local operations = {acquire = acquire, release = release, renew = renew, pause = pause}
        local reply = operations[operation](unpack(args))

        local latest = now
        local newest = redis.call('ZRANGE', leaseKey, '-1', '-1', 'WITHSCORES')
        if newest[2] and tonumber(newest[2]) > latest then latest = tonumber(newest[2]) end
        if pausedUntil and pausedUntil > latest then latest = pausedUntil end
        local milliseconds = fmt(math.ceil((latest - now + GRACE) / 1000))
        redis.call('DEL', stateKey)
        if pausedUntil then
          redis.call('HSET', stateKey, 'lastNow', fmt(now), 'pausedUntil', fmt(pausedUntil))
        else
          redis.call('HSET', stateKey, 'lastNow', fmt(now))
        end
        redis.call('PEXPIRE', stateKey, milliseconds)
        if newest[2] then redis.call('PEXPIRE', leaseKey, milliseconds) end
        return reply
        """#
}

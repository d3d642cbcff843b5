/// The Lua script that shares a `URLDispatcher` endpoint's concurrency across a fleet: a sorted set
/// of leases with expiries, a line of the processes that wait, and a pause, on Redis's clock, one
/// atomic step per run.
///
/// **Keys** (``keys(_:)``), all under one hash tag, so that a Redis Cluster keeps them on one node:
/// - `threadkit:{<key>}:leases`, a sorted set: each lease's token, scored by its expiry;
/// - `threadkit:{<key>}:leases:state`, a hash: `lastNow` (the clock's high-water mark),
///   `pausedUntil`, and `waiting` (how many askers stand in line; absent for none);
/// - `threadkit:{<key>}:leases:line`, a sorted set: each asker in line (one per
///   `RedisEndpointLeases` instance), scored by its first ask;
/// - `threadkit:{<key>}:leases:alive`, a sorted set: each asker in line, scored by the time it
///   counts as gone unless it asks again: its last ask plus ten of its poll intervals.
///
/// Every run first drops the expired leases, then sets the keys' TTL to the time the state stops
/// mattering (the latest expiry, the pause, the line's last liveness, whichever is later) plus one
/// minute of grace, so an endpoint nobody uses leaves nothing behind.
///
/// **The line** makes the processes that want a lease take turns: without it, a process with a
/// backlog, which asks again the moment one of its own requests ends, would take every lease freed
/// while the others ask every poll interval. An acquire that finds the endpoint full, or that finds
/// free leases but as many older askers in line as there are free leases, is declined and puts its
/// asker in line (keeping its first ask, refreshing its liveness); a grant takes it out. An asker
/// that has not asked for ten poll intervals (it asks at least once per interval while it waits:
/// ten allow for a loaded machine's delays, and a dead process keeps the others out of a free
/// lease ten intervals at most) leaves the line at the next acquire. While nobody is in line (the
/// state's `waiting` is absent), an acquire touches no line key.
///
/// **Arguments.** `ARGV[1]` is the operation; `ARGV[2]` is `now` in microseconds, or empty, and
/// production calls leave it empty: the script then reads Redis's `TIME`. An explicit `now` is for
/// tests, which drive the rules with made-up times. Either way `now = max(now, lastNow)`: a clock
/// that steps back does not bring expired leases back. Then, by operation (``EndpointLeaseCall``
/// encodes them):
/// - `acquire limit token ttl asker poll` → `{"granted", expiry}` when no pause is in force and
///   fewer than `limit` leases are held, with fewer older askers in line than free leases (a token
///   already held is renewed and granted again: a retried acquire takes one lease, not two);
///   `{"paused", remaining}`; or `{"full", retryIn}`: until the earliest expiry (at least 1 ms)
///   when every lease is held, else `poll` (older askers are to take the free ones first);
/// - `adopt token ttl` → `{"granted", expiry}` always, whatever the limit, the line or a pause: a
///   request that already runs (started while Redis could not be asked) is counted from now on;
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

    /// How many poll intervals an asker stays in line without asking again.
    static let livenessPolls = 10

    /// The keys of the leases `keys`, in the order the script takes them.
    static func keys(_ keys: RedisLimitKeys) -> [String] {
        [keys.key("leases"), keys.key("leases:state"), keys.key("leases:line"), keys.key("leases:alive")]
    }

    /// The Lua source.
    static let source = LimitScript.prelude(named: "endpoint leases") + #"""
        local leaseKey, stateKey, lineKey, aliveKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
        local LIVENESS_POLLS = \#(livenessPolls)

        local function token(index, name)
          local t = ARGV[index]
          if t == nil or t == '' then fail((name or 'a token') .. ' must not be empty') end
          return t
        end

        local now = readNow()
        local operation, args = ARGV[1], nil
        if operation == 'acquire' then
          args = {integer(3, 'limit', 1), token(4), integer(5, 'lease TTL', 1), token(6, 'an asker'), integer(7, 'poll', 1)}
        elseif operation == 'adopt' then args = {token(3), integer(4, 'lease TTL', 1)}
        elseif operation == 'release' then args = {token(3)}
        elseif operation == 'renew' then args = {token(3), integer(4, 'lease TTL', 1)}
        elseif operation == 'pause' then args = {integer(3, 'duration', -MAX)}
        else fail('unknown operation "' .. tostring(operation) .. '"') end

        local stored = redis.call('HMGET', stateKey, 'lastNow', 'pausedUntil', 'waiting')
        local lastNow, pausedUntil, waiting = tonumber(stored[1]), tonumber(stored[2]), tonumber(stored[3]) or 0
        if lastNow and lastNow > now then now = lastNow end
        if pausedUntil and pausedUntil <= now then pausedUntil = nil end
        redis.call('ZREMRANGEBYSCORE', leaseKey, '-inf', fmt(now))

        local function grant(t, ttl)
          local expiry = clamp(now + ttl)
          redis.call('ZADD', leaseKey, fmt(expiry), t)
          return {'granted', expiry}
        end

        -- How many askers in line are older than `asker` (all of them if it is not in line), once
        -- the gone ones have left.
        local function ahead(asker)
          if waiting == 0 then return 0 end
          local gone = redis.call('ZRANGEBYSCORE', aliveKey, '-inf', fmt(now))
          if #gone > 0 then
            redis.call('ZREM', lineKey, unpack(gone))
            redis.call('ZREM', aliveKey, unpack(gone))
          end
          waiting = redis.call('ZCARD', lineKey)
          return redis.call('ZRANK', lineKey, asker) or waiting
        end

        local function leaveLine(asker)
          if waiting == 0 then return end
          redis.call('ZREM', lineKey, asker)
          redis.call('ZREM', aliveKey, asker)
          waiting = redis.call('ZCARD', lineKey)
        end

        local function acquire(limit, t, ttl, asker, poll)
          if pausedUntil then
            -- Asking through a shared pause, an asker in line is alive: it keeps its place.
            if waiting > 0 and redis.call('ZSCORE', lineKey, asker) then
              redis.call('ZADD', aliveKey, fmt(clamp(now + LIVENESS_POLLS * poll)), asker)
            end
            return {'paused', pausedUntil - now}
          end
          if redis.call('ZSCORE', leaseKey, t) then
            leaveLine(asker)
            return grant(t, ttl)
          end
          local free = limit - redis.call('ZCARD', leaseKey)
          if free > ahead(asker) then
            leaveLine(asker)
            return grant(t, ttl)
          end
          redis.call('ZADD', lineKey, 'NX', fmt(now), asker)
          redis.call('ZADD', aliveKey, fmt(clamp(now + LIVENESS_POLLS * poll)), asker)
          waiting = redis.call('ZCARD', lineKey)
          if free > 0 then return {'full', poll} end
          local earliest = redis.call('ZRANGE', leaseKey, '0', '0', 'WITHSCORES')
          return {'full', max(tonumber(earliest[2]) - now, MIN_RETRY)}
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
          if untilTime > now then pausedUntil = max(pausedUntil or untilTime, untilTime) end
          return pausedUntil or 0
        end

        local operations = {acquire = acquire, adopt = grant, release = release, renew = renew, pause = pause}
        local reply = operations[operation](unpack(args))

        local latest = now
        local newest = redis.call('ZRANGE', leaseKey, '-1', '-1', 'WITHSCORES')
        if newest[2] and tonumber(newest[2]) > latest then latest = tonumber(newest[2]) end
        if pausedUntil and pausedUntil > latest then latest = pausedUntil end
        local lastAlive = nil
        if waiting > 0 then
          lastAlive = redis.call('ZRANGE', aliveKey, '-1', '-1', 'WITHSCORES')
          if lastAlive[2] and tonumber(lastAlive[2]) > latest then latest = tonumber(lastAlive[2]) end
        end
        local milliseconds = fmt(math.ceil((latest - now + GRACE) / 1000))
        redis.call('DEL', stateKey)
        local fields = {'lastNow', fmt(now)}
        if pausedUntil then fields[#fields + 1], fields[#fields + 2] = 'pausedUntil', fmt(pausedUntil) end
        if waiting > 0 then fields[#fields + 1], fields[#fields + 2] = 'waiting', fmt(waiting) end
        redis.call('HSET', stateKey, unpack(fields))
        redis.call('PEXPIRE', stateKey, milliseconds)
        if newest[2] then redis.call('PEXPIRE', leaseKey, milliseconds) end
        if lastAlive then
          redis.call('PEXPIRE', lineKey, milliseconds)
          redis.call('PEXPIRE', aliveKey, milliseconds)
        end
        return reply
        """#
}

/// The Lua script that takes a shared throttle's start decisions on Redis: ThreadKit's
/// `SharedThrottle` model, rule by rule, one atomic step per run, on Redis's clock. The
/// differential tests run both on the same seeded calls and compare every answer and every stored
/// field.
///
/// **Keys** (``keys(_:)``), all under the limit's hash tag, so that a Redis Cluster keeps them on
/// one node:
/// - `threadkit:{<key>}:throttle`, a hash: `lastNow` (the clock's high-water mark), `lastStart`,
///   `lastGap`, `lastEnd`, the `.serial` lease (`token`, `expiry`, `running`), `pausedUntil`, and
///   the rules every process must share (`monitor`, `count`, `window`; a count of 0 for no limit);
/// - `threadkit:{<key>}:throttle:log`, a list of the latest starts, oldest first, trimmed to exactly
///   `count` entries. A list rather than a sorted set: starts are recorded in time order (each at or
///   after the one before), several may share one microsecond (a sorted set would merge equal
///   members), appending and trimming cost O(1) per start, and the oldest of the window is
///   `LINDEX -count`;
/// - `threadkit:{<key>}:throttle:token`, the last lease token handed out. It outlives the state
///   (its TTL is a day at least, set at each new token), and when it is missing (a new limit, a
///   restarted server) the next token is the clock's `now + 1`: a token is never handed out again
///   while a process may still hold it, unaware that its lease expired.
///
/// Every run drops, as the model does, what no longer holds: an expired lease (its start taken to
/// have ended at the expiry), a passed pause, and the whole state (rules and log too) once it
/// decides nothing any more (the model's `expiry`). It then sets the state's and the log's TTL to
/// that expiry plus one minute of grace, so a limit that nobody uses leaves nothing behind.
///
/// **Arguments.** `ARGV[1]` is the operation; `ARGV[2]` is `now` in microseconds, or empty, and
/// production calls leave it empty: the script then reads Redis's `TIME`. An explicit `now` is for
/// tests, which drive the rules with made-up times. Either way `now = max(now, lastNow)`: a clock
/// that steps back does not move decisions back (the mark lives with the state: a server restarted
/// without persistence, or a failover to a replica that lacks the last writes, starts afresh, and a
/// clock stepping forward is believed). Then, by operation (``SharedThrottleCall`` encodes
/// them), each the model's function of the same name and arguments:
/// - `reserve gap monitor count window horizon leaseTTL holding` → `{"reserved", at, wait[, token]}`,
///   `{"declined", retryIn}` or `{"mismatch", monitor, count, window}` (the stored rules differ);
/// - `finished token` → `1` when the token held the lease, else `0` (an expired lease's token: `0`);
/// - `renew token leaseTTL` → `1` when the token holds the lease, which then lasts at least
///   `leaseTTL` from now, else `0`;
/// - `pause duration` → the pause in force afterwards (`0`: none); a pause is never shortened;
/// - `consume gap monitor count window` → `1` when the start was recorded, `0` for other rules.
///
/// **Numbers.** Lua's numbers are doubles, exact up to 2⁵³: every microsecond value is clamped to
/// ±(2⁵³−1), so a gap or pause of `.seconds(Int64.max)` comes back as that "never", not wrapped;
/// numbers go into keys and arguments through `string.format('%d', x)` (never `tostring`, which
/// keeps 14 digits). A declined request is asked again no sooner than 1 ms later. Bad arguments are
/// an error reply (`ERR threadkit shared throttle: …`), sent before anything is written: a bug in the
/// caller, unlike the errors that mean Redis cannot decide now (`LOADING`, `BUSY`, `MASTERDOWN`,
/// `READONLY`, `OOM` under `maxmemory-policy noeviction`, which a limit's keys need: an evicted
/// state would let starts through).
enum SharedThrottleScript {
    /// The script, by its SHA-1 (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`).
    static let script = RedisScript(source)

    /// The keys of the limit `keys`, in the order the script takes them.
    static func keys(_ keys: RedisLimitKeys) -> [String] {
        [keys.key("throttle"), keys.key("throttle:log"), keys.key("throttle:token")]
    }

    /// The Lua source.
    static let source = #"""
        local MAX = 9007199254740991
        local MIN_RETRY = 1000
        local GRACE = 60000000
        local TOKEN_LIFE = 86400000
        local stateKey, logKey, tokenKey = KEYS[1], KEYS[2], KEYS[3]
        local fields = {'lastNow', 'lastStart', 'lastGap', 'lastEnd', 'token', 'expiry', 'running',
          'pausedUntil', 'monitor', 'count', 'window'}

        local function fail(message)
          error({err = 'ERR threadkit shared throttle: ' .. message})
        end
        local function clamp(x)
          if x > MAX then return MAX elseif x < -MAX then return -MAX end
          return x
        end
        local function fmt(x) return string.format('%d', x) end
        local function integer(index, name, least)
          local x = tonumber(ARGV[index])
          if x == nil or x ~= x or x ~= math.floor(x) then
            fail(name .. ' must be an integer, got "' .. tostring(ARGV[index]) .. '"')
          end
          x = clamp(x)
          if x < least then fail(name .. ' must be at least ' .. fmt(least) .. ', got ' .. fmt(x)) end
          return x
        end
        local function rulesArguments()
          local gap, monitor = integer(3, 'gap', 0), ARGV[4]
          if monitor ~= 'concurrent' and monitor ~= 'serial' then
            fail('monitor must be concurrent or serial, got "' .. tostring(monitor) .. '"')
          end
          return gap, monitor, integer(5, 'count', 0), integer(6, 'window', 0)
        end

        -- Every argument is checked before anything is read or written.
        local function rulesArgumentsTable()
          local a = {}
          a.gap, a.monitor, a.count, a.window = rulesArguments()
          return a
        end
        local parsers = {
          reserve = function()
            local a = rulesArgumentsTable()
            a.horizon, a.leaseTTL = integer(7, 'horizon', 1), integer(8, 'lease TTL', 1)
            if ARGV[9] ~= nil and ARGV[9] ~= '' then a.holding = integer(9, 'holding token', 1) end
            return a
          end,
          finished = function() return {token = integer(3, 'token', 1)} end,
          renew = function() return {token = integer(3, 'token', 1), leaseTTL = integer(4, 'lease TTL', 1)} end,
          pause = function() return {duration = integer(3, 'duration', -MAX)} end,
          consume = rulesArgumentsTable,
        }
        local parse = parsers[ARGV[1]]
        if parse == nil then fail('unknown operation "' .. tostring(ARGV[1]) .. '"') end
        local a = parse()

        local now
        if ARGV[2] == nil or ARGV[2] == '' then
          local time = redis.call('TIME')
          now = tonumber(time[1]) * 1000000 + tonumber(time[2])
        else
          now = integer(2, 'now', 0)
        end

        local s = {}
        local stored = redis.call('HMGET', stateKey, unpack(fields))
        for i, name in ipairs(fields) do
          local value = stored[i]
          if value then
            if name == 'monitor' then s[name] = value else s[name] = tonumber(value) end
          end
        end
        if s.lastNow and s.lastNow > now then now = s.lastNow end
        s.lastNow = now
        s.lastGap = s.lastGap or 0

        -- When the state stops deciding anything: the model's expiry.
        local function expiry()
          if not s.lastStart then return s.pausedUntil end
          local from = s.lastStart
          if s.monitor == 'serial' then from = s.expiry or s.lastEnd or s.lastStart end
          local latest = clamp(from + s.lastGap)
          if s.pausedUntil and s.pausedUntil > latest then latest = s.pausedUntil end
          if s.token and s.expiry > latest then latest = s.expiry end
          if s.count and s.count > 0 then
            local newest = redis.call('LINDEX', logKey, '-1')
            if newest then latest = math.max(latest, clamp(tonumber(newest) + s.window)) end
          end
          return latest
        end

        local dropAt = expiry()
        if dropAt and dropAt <= now then
          -- Nothing binds any more: the state goes, its rules and log with it (the token key stays).
          s = {lastNow = now, lastGap = 0}
          redis.call('DEL', logKey)
        else
          -- An expired lease: its start is taken to have ended at the expiry.
          if s.token and s.expiry <= now then
            s.lastEnd = s.expiry
            s.token, s.expiry, s.running = nil, nil, nil
          end
          if s.pausedUntil and s.pausedUntil <= now then s.pausedUntil = nil end
        end

        local function sameRules(monitor, count, window)
          return s.monitor == nil or (s.monitor == monitor and s.count == count and s.window == window)
        end
        local function record(at, gap, monitor, count, window)
          s.monitor, s.count, s.window = monitor, count, window
          s.lastStart, s.lastGap, s.lastEnd = at, gap, nil
          if count > 0 then
            redis.call('RPUSH', logKey, fmt(at))
            redis.call('LTRIM', logKey, fmt(-count), '-1')
          end
        end

        local newToken = false
        local function reserve()
          local gap, monitor, count, window = a.gap, a.monitor, a.count, a.window
          local horizon, leaseTTL, holding = a.horizon, a.leaseTTL, a.holding
          if not sameRules(monitor, count, window) then return {'mismatch', s.monitor, s.count, s.window} end
          local at = math.max(now, s.pausedUntil or now)
          if monitor == 'serial' and s.token and s.token ~= holding then
            return {'declined', math.max(math.min(s.expiry - now, horizon), MIN_RETRY)}
          end
          if s.lastStart then
            local from = s.lastStart
            if monitor == 'serial' then from = s.lastEnd or s.lastStart end
            at = math.max(at, clamp(from + s.lastGap))
          end
          if count > 0 and redis.call('LLEN', logKey) >= count then
            at = math.max(at, clamp(tonumber(redis.call('LINDEX', logKey, fmt(-count))) + window))
          end
          local wait = at - now
          if wait > horizon then return {'declined', math.max(wait - horizon, MIN_RETRY)} end
          record(at, gap, monitor, count, window)
          if monitor ~= 'serial' then return {'reserved', at, wait} end
          local leaseExpiry = clamp(at + leaseTTL)
          if s.token then
            s.running = s.running + 1
            s.expiry = math.max(s.expiry, leaseExpiry)
          else
            local last = tonumber(redis.call('GET', tokenKey) or '0')
            if last == 0 then last = math.max(0, now) end
            s.token, s.expiry, s.running = last + 1, leaseExpiry, 1
            newToken = true
          end
          return {'reserved', at, wait, s.token}
        end

        local function finished()
          local token = a.token
          if s.token ~= token then return 0 end
          s.lastEnd = math.max(now, s.lastStart or now)
          s.running = s.running - 1
          if s.running <= 0 then s.token, s.expiry, s.running = nil, nil, nil end
          return 1
        end

        local function renew()
          if s.token ~= a.token then return 0 end
          s.expiry = math.max(s.expiry, clamp(now + a.leaseTTL))
          return 1
        end

        local function pause()
          local untilTime = clamp(now + a.duration)
          if untilTime > now then s.pausedUntil = math.max(s.pausedUntil or untilTime, untilTime) end
          return s.pausedUntil or 0
        end

        local function consume()
          local gap, monitor, count, window = a.gap, a.monitor, a.count, a.window
          if not sameRules(monitor, count, window) then return 0 end
          record(math.max(now, s.lastStart or now), gap, monitor, count, window)
          s.lastEnd = s.lastStart
          return 1
        end

        local function save()
          local latest = expiry() or now
          if latest < now then latest = now end
          local milliseconds = math.ceil((latest - now + GRACE) / 1000)
          local values = {}
          for _, name in ipairs(fields) do
            local value = s[name]
            if value ~= nil then
              values[#values + 1] = name
              if type(value) == 'string' then values[#values + 1] = value else values[#values + 1] = fmt(value) end
            end
          end
          redis.call('DEL', stateKey)
          redis.call('HSET', stateKey, unpack(values))
          redis.call('PEXPIRE', stateKey, fmt(milliseconds))
          if redis.call('EXISTS', logKey) == 1 then redis.call('PEXPIRE', logKey, fmt(milliseconds)) end
          if newToken then
            redis.call('SET', tokenKey, fmt(s.token), 'PX', fmt(math.max(milliseconds, TOKEN_LIFE)))
          end
        end

        local operations = {reserve = reserve, finished = finished, renew = renew, pause = pause, consume = consume}
        local reply = operations[ARGV[1]]()
        save()
        return reply
        """#
}

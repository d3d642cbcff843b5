/// The Lua script that takes a shared throttle's start decisions on Redis: ThreadKit's
/// `SharedThrottle` model, rule by rule, one atomic step per run, on Redis's clock. The
/// differential tests run both on the same seeded calls and compare every answer and every stored
/// field.
///
/// **Keys** (``keys(_:)``), all under the limit's hash tag, so that a Redis Cluster keeps them on
/// one node:
/// - `threadkit:{<key>}:throttle`, a string of thirteen little-endian doubles (``stateFields``, in
///   that order; Lua's `struct`, `<ddddddddddddd`): `lastNow` (the clock's high-water mark),
///   `lastStart`, `lastGap`, `lastEnd`, the `.serial` lease (`token`, `expiry`, `running`),
///   `pausedUntil`, the rules every process must share (`monitor`: 0 `.concurrent`, 1 `.serial`;
///   `count`, a count of 0 for no limit; `window`), then what the script keeps of the log's key:
///   `logged`, how many starts it holds, and `logUntil`, when its TTL ends (on the clock as read,
///   before the high-water mark: the wall clock Redis expires keys by). Every value is a whole
///   number of 0 or more; -1 stands for none. One `GET` reads it and one
///   `SET … PX` writes it with its TTL: the cheapest state Redis keeps (a hash costs a command per
///   read, write, deletion and TTL, and its fields go through text);
/// - `threadkit:{<key>}:throttle:log`, a list of the latest starts, oldest first, trimmed to exactly
///   `count` entries. A list rather than a sorted set: starts are recorded in time order (each at or
///   after the one before), several may share one microsecond (a sorted set would merge equal
///   members), and appending and trimming cost O(1) per start. Once it holds `count` starts (the
///   state's `logged` says so, with no `LLEN`), a reserve takes the oldest out (`LPOP`) to bound
///   the start, and puts it back (`LPUSH`) only if it declines; each recorded start is one `RPUSH`
///   of its time (what a fleet's `MONITOR` check reads). Its newest entry is always `lastStart`;
/// - `threadkit:{<key>}:throttle:token`, the last lease token handed out. It outlives the state
///   (its TTL is a day at least, set at each new token), and when it is missing (a new limit, a
///   restarted server) the next token is the clock's `now + 1`: a token is never handed out again
///   while a process may still hold it, unaware that its lease expired.
///
/// Every run drops, as the model does, what no longer holds: an expired lease (its start taken to
/// have ended at the expiry), a passed pause, and the whole state (rules and log too) once it
/// decides nothing any more (the model's `expiry`). It then sets the state's TTL to that expiry
/// plus one minute of grace, so a limit that nobody uses leaves nothing behind. The log's TTL is
/// set the same way when the log is made, and again whenever less than half the grace would be
/// left: the log outlives the state's expiry by half a minute to a minute, and a busy limit pays
/// for one `PEXPIRE` every half minute or so rather than one per start.
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

    /// The state's fields, in the order the state key holds them (see the discussion).
    static let stateFields = [
        "lastNow", "lastStart", "lastGap", "lastEnd", "token", "expiry", "running", "pausedUntil", "monitor", "count", "window",
        "logged", "logUntil",
    ]

    /// The keys of the limit `keys`, in the order the script takes them.
    static func keys(_ keys: RedisLimitKeys) -> [String] {
        let state = keys.key("throttle")
        return [state, state + ":log", state + ":token"]
    }

    /// The Lua source.
    static let source = LimitScript.prelude(named: "shared throttle") + #"""
        local TOKEN_LIFE = 86400000
        local LAYOUT = '<ddddddddddddd'
        local stateKey, logKey, tokenKey = KEYS[1], KEYS[2], KEYS[3]
        local op = ARGV[1]

        -- Every argument is checked before anything is read or written.
        local gap, monitor, count, window, horizon, leaseTTL, holding, token, duration
        if op == 'reserve' or op == 'consume' then
          gap, monitor = integer(3, 'gap', 0), ARGV[4]
          if monitor ~= 'concurrent' and monitor ~= 'serial' then
            fail('monitor must be concurrent or serial, got "' .. tostring(monitor) .. '"')
          end
          count, window = integer(5, 'count', 0), integer(6, 'window', 0)
          if op == 'reserve' then
            horizon, leaseTTL = integer(7, 'horizon', 1), integer(8, 'lease TTL', 1)
            if ARGV[9] ~= nil and ARGV[9] ~= '' then holding = integer(9, 'holding token', 1) end
          end
        elseif op == 'finished' then
          token = integer(3, 'token', 1)
        elseif op == 'renew' then
          token, leaseTTL = integer(3, 'token', 1), integer(4, 'lease TTL', 1)
        elseif op == 'pause' then
          duration = integer(3, 'duration', -MAX)
        else
          fail('unknown operation "' .. tostring(op) .. '"')
        end

        local now = readNow()
        -- The clock as read, before the high-water mark: the one keys' TTLs run on.
        local clock = now

        -- The state, nil for what it does not hold (-1 stored).
        local lastNow, lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, running, pausedUntil
        local rulesMonitor, rulesCount, rulesWindow, logged, logUntil = nil, nil, nil, 0, -1
        local stored = redis.call('GET', stateKey)
        if stored then
          local monitorCode
          lastNow, lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, running, pausedUntil, monitorCode, rulesCount, rulesWindow,
            logged, logUntil = struct.unpack(LAYOUT, stored)
          if lastStart < 0 then lastStart = nil end
          if lastEnd < 0 then lastEnd = nil end
          if leaseToken < 0 then leaseToken, leaseExpiry, running = nil, nil, nil end
          if pausedUntil < 0 then pausedUntil = nil end
          if monitorCode == 1 then rulesMonitor = 'serial' elseif monitorCode == 0 then rulesMonitor = 'concurrent' else
            rulesCount, rulesWindow = nil, nil
          end
          if lastNow > now then now = lastNow end
        end
        lastNow = now
        lastGap = lastGap or 0

        -- When the state stops deciding anything: the model's expiry. The newest logged start is the last
        -- start (record writes both).
        local function expiry()
          if not lastStart then return pausedUntil end
          local from = lastStart
          if rulesMonitor == 'serial' then from = leaseExpiry or lastEnd or lastStart end
          local latest = clamp(from + lastGap)
          if pausedUntil and pausedUntil > latest then latest = pausedUntil end
          if leaseToken and leaseExpiry > latest then latest = leaseExpiry end
          if rulesCount > 0 then
            local windowEnd = clamp(lastStart + rulesWindow)
            if windowEnd > latest then latest = windowEnd end
          end
          return latest
        end

        local dropAt = expiry()
        if dropAt and dropAt <= now then
          -- Nothing binds any more: the state goes, its rules and log with it (the token key stays).
          lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, running, pausedUntil = nil, 0, nil, nil, nil, nil, nil
          rulesMonitor, rulesCount, rulesWindow, logged, logUntil = nil, nil, nil, 0, -1
          redis.call('DEL', logKey)
        else
          -- An expired lease: its start is taken to have ended at the expiry.
          if leaseToken and leaseExpiry <= now then
            lastEnd = leaseExpiry
            leaseToken, leaseExpiry, running = nil, nil, nil
          end
          if pausedUntil and pausedUntil <= now then pausedUntil = nil end
        end

        local function sameRules()
          return rulesMonitor == nil or (rulesMonitor == monitor and rulesCount == count and rulesWindow == window)
        end
        -- Records a start at `at` under the request's rules; the log keeps the count latest.
        local function record(at)
          rulesMonitor, rulesCount, rulesWindow = monitor, count, window
          lastStart, lastGap, lastEnd = at, gap, nil
          if count > 0 then
            logged = redis.call('RPUSH', logKey, format('%d', at))
            -- A new log has no TTL yet.
            if logged == 1 then logUntil = -1 end
            if logged > count then
              redis.call('LTRIM', logKey, format('%d', -count), '-1')
              logged = count
            end
          end
        end

        local reply, newToken = nil, false
        if op == 'reserve' then
          if not sameRules() then
            reply = {'mismatch', rulesMonitor, rulesCount, rulesWindow}
          elseif monitor == 'serial' and leaseToken and leaseToken ~= holding then
            reply = {'declined', max(min(leaseExpiry - now, horizon), MIN_RETRY)}
          else
            local at = now
            if pausedUntil and pausedUntil > at then at = pausedUntil end
            if lastStart then
              local from = lastStart
              if monitor == 'serial' then from = lastEnd or lastStart end
              from = clamp(from + lastGap)
              if from > at then at = from end
            end
            -- A full log (count starts): its oldest bounds this start, and leaves the log if it is recorded.
            local oldest
            if count > 0 and logged >= count then
              oldest = redis.call('LPOP', logKey)
              if oldest then
                local bound = clamp(tonumber(oldest) + window)
                if bound > at then at = bound end
              end
            end
            local wait = at - now
            if wait > horizon then
              -- A log emptied by the LPOP was deleted: the one made again has no TTL yet.
              if oldest and redis.call('LPUSH', logKey, oldest) == 1 then logUntil = -1 end
              reply = {'declined', max(wait - horizon, MIN_RETRY)}
            else
              if oldest then logged = logged - 1 end
              record(at)
              reply = {'reserved', at, wait}
              if monitor == 'serial' then
                local leaseEnd = clamp(at + leaseTTL)
                if leaseToken then
                  running = running + 1
                  leaseExpiry = max(leaseExpiry, leaseEnd)
                else
                  local last = tonumber(redis.call('GET', tokenKey) or '0')
                  if last == 0 then last = max(0, now) end
                  leaseToken, leaseExpiry, running = last + 1, leaseEnd, 1
                  newToken = true
                end
                reply[4] = leaseToken
              end
            end
          end
        elseif op == 'consume' then
          reply = 0
          if sameRules() then
            record(max(now, lastStart or now))
            lastEnd = lastStart
            reply = 1
          end
        elseif op == 'finished' then
          reply = 0
          if leaseToken == token then
            lastEnd = max(now, lastStart or now)
            running = running - 1
            if running <= 0 then leaseToken, leaseExpiry, running = nil, nil, nil end
            reply = 1
          end
        elseif op == 'renew' then
          reply = 0
          if leaseToken == token then
            leaseExpiry = max(leaseExpiry, clamp(now + leaseTTL))
            reply = 1
          end
        else
          local untilTime = clamp(now + duration)
          if untilTime > now then pausedUntil = max(pausedUntil or untilTime, untilTime) end
          reply = pausedUntil or 0
        end

        -- The state lives until its expiry plus the grace; so does the log when its TTL is set, which is
        -- when less than half the grace would be left (every half minute or so under steady use).
        local latest = expiry() or now
        if latest < now then latest = now end
        local milliseconds = math.ceil((latest - now + GRACE) / 1000)
        local logRefresh = logged > 0 and logUntil - clock < latest - now + GRACE / 2
        if logRefresh then logUntil = clock + milliseconds * 1000 end
        local monitorCode = -1
        if rulesMonitor == 'serial' then monitorCode = 1 elseif rulesMonitor then monitorCode = 0 end
        redis.call('SET', stateKey, struct.pack(LAYOUT, lastNow, lastStart or -1, lastGap, lastEnd or -1, leaseToken or -1,
          leaseExpiry or -1, running or -1, pausedUntil or -1, monitorCode, rulesCount or -1, rulesWindow or -1, logged, logUntil),
          'PX', format('%d', milliseconds))
        if logRefresh then redis.call('PEXPIRE', logKey, format('%d', milliseconds)) end
        if newToken then
          redis.call('SET', tokenKey, format('%d', leaseToken), 'PX', format('%d', max(milliseconds, TOKEN_LIFE)))
        end
        return reply
        """#
}

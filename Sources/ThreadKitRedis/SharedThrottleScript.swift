import ThreadKit

/// The Lua script that takes a shared throttle's start decisions on Redis: ThreadKit's
/// `SharedThrottle` model, rule by rule, one atomic step per run, on Redis's clock. The
/// differential tests run both on the same seeded calls and compare every answer and every stored
/// field.
///
/// **Keys** (``keys(_:)``), both under the limit's hash tag, so that a Redis Cluster keeps them on
/// one node:
/// - `threadkit:{<key>}:throttle`, a string of little-endian doubles (Lua's `struct`): first the
///   fifteen ``stateFields``, in that order (`<ddddddddddddddd`): `lastNow` (the clock's high-water
///   mark), `lastStart`, `lastGap`, `lastEnd`, the `.serial` lease (`token`, `expiry`, `reserves`,
///   `ends`), `pausedUntil`, the rules every process must share (`monitor`: 0 `.concurrent`, 1
///   `.serial`; `count`, a count of 0 for no limit; `window`), then what the script keeps of the
///   log's key: `logged`, how many starts it holds, and `logUntil`, when its TTL ends (on the clock
///   as read, before the high-water mark: the wall clock Redis expires keys by), and last
///   `waiting`, how many `.serial` waiters follow, three doubles each (`<ddd`: the asker, when it
///   first asked, when it leaves the line unless it asks again), oldest first. Every value is a
///   whole number of 0 or more; -1 stands for none. One `GET` reads it and one `SET … PX` writes it
///   with its TTL: the cheapest state Redis keeps (a hash costs a command per read, write,
///   deletion and TTL, and its fields go through text). The line lives in the same string rather
///   than a key of its own: reading and writing it costs no command at all, the state's TTL covers
///   it, and while nobody waits it is the one number `waiting = 0`. It holds one entry per asker
///   that asked within its retry (at most the horizon) and the grace (200 ms), and at most
///   `SharedThrottle.maxWaiters` (64) entries;
/// - `threadkit:{<key>}:throttle:log`, a list of the latest starts, oldest first, trimmed to exactly
///   `count` entries. A list rather than a sorted set: starts are recorded in time order (each at or
///   after the one before), several may share one microsecond (a sorted set would merge equal
///   members), and appending and trimming cost O(1) per start. Once it holds `count` starts (the
///   state's `logged` says so, with no `LLEN`), a reserve takes the oldest out (`LPOP`) to bound
///   the start, and puts it back (`LPUSH`) only if it declines; each recorded start is one `RPUSH`
///   of its time (what a fleet's `MONITOR` check reads). Its newest entry is always `lastStart`.
///
/// Lease tokens are the callers': each reserve proposes one (drawn at random), which a new lease
/// takes; no key counts them.
///
/// Every run drops, as the model does, what no longer holds: an expired lease (its start taken to
/// have ended at the expiry), a passed pause, a waiter past its life, and the whole state (rules,
/// line and log too) once it decides nothing any more (the model's `expiry`). It then sets the
/// state's TTL to that expiry plus one minute of grace, so a limit that nobody uses leaves nothing
/// behind. The log's TTL is set the same way when the log is made, and again whenever less than
/// half the grace would be left: the log outlives the state's expiry by half a minute to a minute,
/// and a busy limit pays for one `PEXPIRE` every half minute or so rather than one per start.
///
/// **Arguments.** `ARGV[1]` is the operation; `ARGV[2]` is `now` in microseconds, or empty, and
/// production calls leave it empty: the script then reads Redis's `TIME`. An explicit `now` is for
/// tests, which drive the rules with made-up times. Either way `now = max(now, lastNow)`: a clock
/// that steps back does not move decisions back (the mark lives with the state: a server restarted
/// without persistence, or a failover to a replica that lacks the last writes, starts afresh, and a
/// clock stepping forward is believed). Then, by operation (``SharedThrottleCall`` encodes
/// them), each the model's function of the same name and arguments:
/// - `reserve gap monitor count window horizon leaseTTL holding token asker` →
///   `{"reserved", at, wait[, token]}`, `{"declined", retryIn}` or `{"mismatch", monitor, count,
///   window}` (the stored rules differ); `token` is the one a new lease takes, `asker` the
///   caller's place in the `.serial` line;
/// - `finished token number` → `1` when the token holds the lease (the end counted, or seen
///   before), else `0` (an expired lease's token: `0`);
/// - `renew token leaseTTL` → `1` when the token holds the lease, which then lasts at least
///   `leaseTTL` from now, else `0`;
/// - `pause duration` → the pause in force afterwards (`0`: none); a pause is never shortened.
///
/// **Numbers.** Lua's numbers are doubles, exact up to 2⁵³: every microsecond value is clamped to
/// ±(2⁵³−1), so a gap or pause of `.seconds(Int64.max)` comes back as that "never", not wrapped;
/// tokens and askers are in 1...2⁵³−1; numbers go into keys and arguments through
/// `string.format('%d', x)` (never `tostring`, which keeps 14 digits). A declined request is asked
/// again no sooner than 1 ms later. Bad arguments are an error reply (`ERR threadkit shared
/// throttle: …`), sent before anything is written: a bug in the caller, unlike the errors that mean
/// Redis cannot decide now (`LOADING`, `BUSY`, `MASTERDOWN`, `READONLY`, `OOM` under
/// `maxmemory-policy noeviction`, which a limit's keys need: an evicted state would let starts
/// through).
enum SharedThrottleScript {
    /// The script, by its SHA-1 (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`).
    static let script = RedisScript(source)

    /// The state's fixed fields, in the order the state key holds them (see the discussion); the
    /// waiters follow, three numbers each.
    static let stateFields = [
        "lastNow", "lastStart", "lastGap", "lastEnd", "token", "expiry", "reserves", "ends", "pausedUntil", "monitor", "count",
        "window", "logged", "logUntil", "waiting",
    ]

    /// The keys of the limit `keys`, in the order the script takes them: the state, the log.
    static func keys(_ keys: RedisLimitKeys) -> [String] {
        let state = keys.key("throttle")
        return [state, state + ":log"]
    }

    static let source = LimitScript.prelude(named: "shared throttle") + #"""
        local WAITER_POLL, WAITER_GRACE = \#(SharedThrottle.waiterPoll), \#(SharedThrottle.waiterGrace)
        local MAX_WAITER_POLL, MAX_WAITERS = \#(SharedThrottle.maxWaiterPoll), \#(SharedThrottle.maxWaiters)
        local LAYOUT, WAITER = '<ddddddddddddddd', '<ddd'
        local stateKey, logKey = KEYS[1], KEYS[2]
        local op = ARGV[1]

        -- Every argument is checked before anything is read or written.
        local gap, monitor, count, window, horizon, leaseTTL, holding, token, asker, number, duration
        if op == 'reserve' then
          gap, monitor = integer(3, 'gap', 0), ARGV[4]
          if monitor ~= 'concurrent' and monitor ~= 'serial' then
            fail('monitor must be concurrent or serial, got "' .. tostring(monitor) .. '"')
          end
          count, window = integer(5, 'count', 0), integer(6, 'window', 0)
          horizon, leaseTTL = integer(7, 'horizon', 1), integer(8, 'lease TTL', 1)
          if ARGV[9] ~= nil and ARGV[9] ~= '' then holding = integer(9, 'holding token', 1) end
          token, asker = integer(10, 'token', 1), integer(11, 'asker', 1)
        elseif op == 'finished' then
          token, number = integer(3, 'token', 1), integer(4, 'end number', 1)
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

        -- The state, nil for what it does not hold (-1 stored); the waiters, {asker, since, liveUntil} each, oldest first.
        local lastNow, lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, reserves, ends, pausedUntil
        local rulesMonitor, rulesCount, rulesWindow, logged, logUntil = nil, nil, nil, 0, -1
        local waiters = {}
        local stored = redis.call('GET', stateKey)
        if stored then
          local monitorCode, waiting, at
          lastNow, lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, reserves, ends, pausedUntil, monitorCode, rulesCount,
            rulesWindow, logged, logUntil, waiting, at = struct.unpack(LAYOUT, stored)
          for i = 1, waiting do
            local waiter, since, liveUntil
            waiter, since, liveUntil, at = struct.unpack(WAITER, stored, at)
            waiters[i] = {waiter, since, liveUntil}
          end
          if lastStart < 0 then lastStart = nil end
          if lastEnd < 0 then lastEnd = nil end
          if leaseToken < 0 then leaseToken, leaseExpiry, reserves, ends = nil, nil, nil, nil end
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
          local latest
          for _, waiter in ipairs(waiters) do
            if latest == nil or waiter[3] > latest then latest = waiter[3] end
          end
          if pausedUntil and (latest == nil or pausedUntil > latest) then latest = pausedUntil end
          if not lastStart then return latest end
          local from = lastStart
          if rulesMonitor == 'serial' then from = leaseExpiry or lastEnd or lastStart end
          local gapEnd = clamp(from + lastGap)
          if latest == nil or gapEnd > latest then latest = gapEnd end
          if leaseToken and leaseExpiry > latest then latest = leaseExpiry end
          if rulesCount > 0 then
            local windowEnd = clamp(lastStart + rulesWindow)
            if windowEnd > latest then latest = windowEnd end
          end
          return latest
        end

        local dropAt = expiry()
        if dropAt and dropAt <= now then
          -- Nothing binds any more: the state goes, its rules, line and log with it.
          lastStart, lastGap, lastEnd, leaseToken, leaseExpiry, reserves, ends, pausedUntil = nil, 0, nil, nil, nil, nil, nil, nil
          rulesMonitor, rulesCount, rulesWindow, logged, logUntil, waiters = nil, nil, nil, 0, -1, {}
          redis.call('DEL', logKey)
        else
          -- An expired lease: its start is taken to have ended at the expiry.
          if leaseToken and leaseExpiry <= now then
            lastEnd = leaseExpiry
            leaseToken, leaseExpiry, reserves, ends = nil, nil, nil, nil
          end
          if pausedUntil and pausedUntil <= now then pausedUntil = nil end
          -- Waiters that stopped asking leave the line.
          if #waiters > 0 then
            local live = {}
            for _, waiter in ipairs(waiters) do
              if waiter[3] > now then live[#live + 1] = waiter end
            end
            waiters = live
          end
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

        -- Declines a `.serial` request: its asker joins the line (unless it is full), or keeps its place,
        -- live until the retry (within the horizon) plus the grace; further back, it asks less often.
        local function enqueue(retryIn)
          local place = nil
          for index, waiter in ipairs(waiters) do
            if waiter[1] == asker then place = index break end
          end
          local rank = (place or (#waiters + 1)) - 1
          retryIn = max(min(retryIn, horizon), MIN_RETRY)
          if rank > 0 then retryIn = max(retryIn, min(WAITER_POLL * (1 + rank), MAX_WAITER_POLL)) end
          local liveUntil = clamp(clamp(now + min(retryIn, horizon)) + WAITER_GRACE)
          if place then
            waiters[place][3] = liveUntil
          elseif #waiters < MAX_WAITERS then
            waiters[#waiters + 1] = {asker, now, liveUntil}
          end
          return {'declined', retryIn}
        end

        local reply
        if op == 'reserve' then
          local nested = monitor == 'serial' and leaseToken ~= nil and leaseToken == holding
          local inLine = monitor == 'serial' and not nested
          if not sameRules() then
            reply = {'mismatch', rulesMonitor, rulesCount, rulesWindow}
          elseif inLine and leaseToken then
            reply = enqueue(min(leaseExpiry - now, horizon, WAITER_POLL))
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
            local behind = inLine and waiters[1] and waiters[1][1] ~= asker
            if behind or wait > horizon then
              -- A log emptied by the LPOP was deleted: the one made again has no TTL yet.
              if oldest and redis.call('LPUSH', logKey, oldest) == 1 then logUntil = -1 end
              if behind then
                reply = enqueue(max(WAITER_POLL, wait - horizon))
              elseif inLine then
                reply = enqueue(wait - horizon)
              else
                reply = {'declined', max(wait - horizon, MIN_RETRY)}
              end
            else
              if oldest then logged = logged - 1 end
              record(at)
              reply = {'reserved', at, wait}
              if monitor == 'serial' then
                local leaseEnd = clamp(at + leaseTTL)
                if nested then
                  reserves = reserves + 1
                  leaseExpiry = max(leaseExpiry, leaseEnd)
                else
                  -- The oldest waiter, or nobody waits: out of the line. The lease takes the proposed token.
                  if waiters[1] and waiters[1][1] == asker then table.remove(waiters, 1) end
                  leaseToken, leaseExpiry, reserves, ends = token, leaseEnd, 1, 0
                end
                reply[4] = leaseToken
              end
            end
          end
        elseif op == 'finished' then
          reply = 0
          if leaseToken == token then
            reply = 1
            -- An end number seen before (sent again, or overtaken) changes nothing.
            if number > ends then
              ends = number
              lastEnd = max(now, lastStart or now)
              if ends >= reserves then leaseToken, leaseExpiry, reserves, ends = nil, nil, nil, nil end
            end
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
        local packed = struct.pack(LAYOUT, lastNow, lastStart or -1, lastGap, lastEnd or -1, leaseToken or -1, leaseExpiry or -1,
          reserves or -1, ends or -1, pausedUntil or -1, monitorCode, rulesCount or -1, rulesWindow or -1, logged, logUntil, #waiters)
        if #waiters > 0 then
          local parts = {packed}
          for i, waiter in ipairs(waiters) do parts[i + 1] = struct.pack(WAITER, waiter[1], waiter[2], waiter[3]) end
          packed = table.concat(parts)
        end
        redis.call('SET', stateKey, packed, 'PX', format('%d', milliseconds))
        if logRefresh then redis.call('PEXPIRE', logKey, format('%d', milliseconds)) end
        return reply
        """#
}

import ThreadKit

/// What ``SharedThrottleScript`` and ``EndpointLeaseScript`` share: the Lua prelude that reads their
/// numbers and their clock, and, on this side, how their calls encode numbers and report a reply
/// they do not give.
///
/// **The prelude** defines, for the script after it:
/// - `MAX` (2⁵³−1, the largest integer a Lua number, a double, holds exactly), `MIN_RETRY` (1 ms:
///   a declined request is asked again no sooner) and `GRACE` (one minute: how long a key outlives
///   the time its state stops mattering), all in microseconds;
/// - `fail(message)`, an error reply `ERR threadkit <name>: <message>`;
/// - `clamp(x)`, `x` clamped to ±`MAX`, and `fmt(x)`, `x` as a whole decimal number (never
///   `tostring`, which keeps 14 digits);
/// - `integer(index, name, least)`, `ARGV[index]` as a whole number of at least `least`, clamped to
///   ±`MAX`, or a `fail` naming the argument and what came;
/// - `readNow()`, the call's clock in microseconds: `ARGV[2]` when given (tests with made-up
///   times), else Redis's `TIME`.
enum LimitScript {
    /// The prelude for the script called `name` in its error replies.
    static func prelude(named name: String) -> String {
        #"""
        local MAX = 9007199254740991
        local MIN_RETRY = 1000
        local GRACE = 60000000
        local tonumber, floor, format, max, min = tonumber, math.floor, string.format, math.max, math.min

        local function fail(message)
          error({err = 'ERR threadkit \#(name): ' .. message})
        end
        local function clamp(x)
          if x > MAX then return MAX elseif x < -MAX then return -MAX end
          return x
        end
        local function fmt(x) return format('%d', x) end
        local function integer(index, name, least)
          local x = tonumber(ARGV[index])
          if x and x % 1 == 0 and x >= least then
            if x > MAX then return MAX end
            return x
          end
          if x == nil or x ~= x or x ~= floor(x) then
            fail(name .. ' must be an integer, got "' .. tostring(ARGV[index]) .. '"')
          end
          x = clamp(x)
          if x < least then fail(name .. ' must be at least ' .. fmt(least) .. ', got ' .. fmt(x)) end
          return x
        end
        local function readNow()
          if ARGV[2] == nil or ARGV[2] == '' then
            local time = redis.call('TIME')
            return tonumber(time[1]) * 1000000 + tonumber(time[2])
          end
          return integer(2, 'now', 0)
        end

        """#
    }

    /// The largest microsecond value the scripts keep: 2⁵³−1 (about 285 years), "never".
    static let maxMicroseconds = SharedThrottle.microsecondLimit

    /// A reply a limit script never gives: a bug or another script under the same name, never a trap.
    struct BadReply: Error, Equatable, CustomStringConvertible {
        /// Which script, what was expected, and what came.
        let description: String

        /// `script` answered `reply` where `expected` was due.
        init(_ script: String, expected: String, got reply: RESPValue) {
            description = "the \(script) script answered \(reply), not \(expected)"
        }
    }

    /// The head of every call's `ARGV`: the operation, then `now` (empty: the script reads `TIME`).
    static func arguments(_ operation: String, now: Int64?) -> [String] {
        [operation, now.map(clamped) ?? ""]
    }

    /// `value` clamped to ±``maxMicroseconds``, in decimal.
    static func clamped(_ value: Int64) -> String {
        String(value.clampedToMicrosecondLimit)
    }
}

// What every member of a fleet does, and the test-only script its tasks record themselves with.
import Foundation
import ThreadKitRedis

/// What every member of a fleet does: `tasks` tasks on one shared limit, then exit. Passed to each
/// member process as JSON, with the member's number set.
package struct FleetPlan: Codable, Sendable {
    /// The server's Unix socket.
    package var socketPath: String
    /// The shared limit's key (one per run: a fresh state).
    package var key: String
    package var members: Int
    package var tasks: Int
    /// The gap between starts in microseconds: from the previous start, or from its end with `serial`.
    package var gap: Int64
    package var serial: Bool
    /// At most `count` starts in any window of `window` microseconds; `nil`: no such limit.
    package var count: Int?
    package var window: Int64?
    /// How long each task holds its process, in microseconds, between its two readings.
    package var taskLength: Int64
    /// This member's number (set for each member as it is started).
    package var member = 0

    package init(
        socketPath: String = "", key: String, members: Int = 8, tasks: Int, gap: Int64, serial: Bool = false,
        count: Int? = nil, window: Int64? = nil, taskLength: Int64 = 0
    ) {
        precondition(members >= 1, "FleetPlan: members must be at least 1, got \(members)")
        precondition(tasks >= 1, "FleetPlan: tasks must be at least 1, got \(tasks)")
        precondition(gap >= 0, "FleetPlan: gap must not be negative, got \(gap)")
        precondition(
            (count == nil) == (window == nil),
            "FleetPlan: count and window go together, got \(String(describing: count)) and \(String(describing: window))")
        (self.socketPath, self.key, self.members, self.tasks, self.gap, self.serial) = (socketPath, key, members, tasks, gap, serial)
        (self.count, self.window, self.taskLength) = (count, window, taskLength)
    }

    /// The limit as a pair, for ``SharedThrottleProbe``.
    package var limit: (count: Int, window: Int64)? {
        guard let count, let window else { return nil }
        return (count, window)
    }

    /// Where the members count themselves ready, wait for the parent's go, and record their runs.
    package var readyKey: String { "fleet:\(key):ready" }
    package var goKey: String { "fleet:\(key):go" }
    package var runsKey: String { "fleet:\(key):runs" }

    /// The plan as one line of JSON.
    package func encoded() throws -> String {
        String(decoding: try JSONEncoder().encode(self), as: UTF8.self)
    }

    /// The plan in `json`.
    package static func decoded(_ json: String) throws -> FleetPlan {
        try JSONDecoder().decode(FleetPlan.self, from: Data(json.utf8))
    }
}

/// The test-only script a task runs as its first and its last action: reads Redis's clock and
/// appends `<what> <time>` to the runs list in one atomic step, so that the time and the record are
/// one instant of the server.
let fleetRecordScript = RedisScript("""
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. string.format('%d', now))
    return now
    """)

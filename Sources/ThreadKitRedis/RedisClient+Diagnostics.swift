@_spi(ThreadKitURL) import ThreadKit

/// What a ``RedisClient`` counts for the diagnostics, under its lock where it holds it anyway:
/// `commands` handed to the connection's thread; `refused` at once (the breaker open, or the client
/// released); failed at their deadline (`timedOut`), with their lost connection (`lost`), or for want
/// of one (`connectFailed`); and the `connections` made, the first included.
struct RedisCounts: Sendable, Equatable {
    var commands = 0, refused = 0, timedOut = 0, lost = 0, connectFailed = 0, connections = 0
}

/// One reading of a client's books, taken under its lock: its counts, the commands still waiting
/// for their replies (those past their deadline not counted), whether the breaker refuses commands
/// (open, or letting one probe through), whether a connection is up, and the threads that run now
/// (the connection's, a host lookup's).
struct RedisReading {
    var counts: RedisCounts
    var pending: Int, breakerOpen: Bool, connected: Bool
    var threads: [ThreadActivity]
}

extension RedisClient: DiagnosticsReporting {
    /// The client's entry: its address and timeout, its commands' counts, and its threads (the
    /// connection's, sleeping in `poll` or running on replies; a host lookup's while one runs).
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let reading = core.diagnostics()
        let counts = reading.counts
        var metrics = [
            Snapshot.Metric("commands_total", .counter, Double(counts.commands), help: "Commands handed to the connection."),
            Snapshot.Metric("commands_pending", .gauge, Double(reading.pending), help: "Commands waiting for their replies."),
            Snapshot.Metric("reconnects_total", .counter, Double(max(0, counts.connections - 1)),
                            help: "Connections made after the first."),
            Snapshot.Metric("connected", .gauge, reading.connected ? 1 : 0, help: "1 while a connection is up, else 0."),
            Snapshot.Metric("breaker_open", .gauge, reading.breakerOpen ? 1 : 0,
                            help: "1 while the circuit breaker refuses commands (open or probing), else 0."),
        ]
        let errors = [("timeout", counts.timedOut), ("connection_lost", counts.lost), ("connect_failed", counts.connectFailed),
                      ("refused", counts.refused)]
        for (reason, count) in errors {
            metrics.append(Snapshot.Metric("command_errors_total", .counter, Double(count),
                                           help: "Commands that failed, by reason.", labels: [Snapshot.Field("reason", reason)]))
        }
        return Snapshot.Component(
            kind: "RedisClient", name: address.description,
            configuration: [Snapshot.Field("address", address.description),
                            Snapshot.Field("commandTimeout", DiagnosticsClock.text(commandTimeout))],
            metrics: metrics, threads: reading.threads.map(clock.thread), pendingCount: reading.pending)
    }
}

extension RedisClientCore: DiagnosticsWaitTarget {
    /// `a reply of RedisClient "unix:/tmp/redis.sock"`.
    var waitDescription: String { "a reply of RedisClient \"\(address)\"" }
}

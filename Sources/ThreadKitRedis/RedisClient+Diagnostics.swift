@_spi(ThreadKitURL) import ThreadKit

/// What a ``RedisClient`` counts for the diagnostics, under its lock where it holds it anyway.
struct RedisCounts: Sendable, Equatable {
    /// Commands handed to the connection's thread.
    var commands = 0
    /// Commands refused at once: the breaker open, or the client released.
    var refused = 0
    /// Commands failed at their deadline.
    var timedOut = 0
    /// Commands failed because their connection was lost.
    var lost = 0
    /// Commands failed because no connection could be made.
    var connectFailed = 0
    /// Connections made, the first included.
    var connections = 0
}

/// One reading of a client's books, taken under its lock.
struct RedisReading {
    var counts: RedisCounts
    /// Commands still waiting for their replies (those past their deadline not counted).
    var pending: Int
    /// Whether the breaker refuses commands (open, or letting one probe through).
    var breakerOpen: Bool
    var connected: Bool
    /// The connection's thread and the host lookup's, those that run now.
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

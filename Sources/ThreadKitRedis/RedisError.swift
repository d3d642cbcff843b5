/// Why a ``RedisClient`` command failed.
///
/// Whether a failed command may have taken effect matters to a rate limit (a start the server
/// recorded but whose answer was lost still counts), so every failure after the command left says so:
/// `sent` is `true` once its bytes started to go out on the connection, and then the server may
/// have run it (erring safe: a command cut off in the middle of its bytes is never run, but counts
/// as sent unless the write itself failed).
public enum RedisError: Error, Hashable, CustomStringConvertible {
    /// The server answered with an error reply (`-ERR …`, `-NOSCRIPT …`, `-WRONGTYPE …`): its message.
    case server(String)
    /// No reply came within the command timeout. If the command was sent, its reply is discarded
    /// when it comes; the connection and the other commands on it go on.
    case timedOut(after: Duration, sent: Bool)
    /// The client could not connect: nothing listens at the address, or the address is wrong.
    case connectionRefused(address: String, reason: String)
    /// The connection ended with the command in flight: the server closed it, it was reset, it sent
    /// bytes that are not RESP2, or it was dropped after too many replies were overdue.
    case connectionLost(String, sent: Bool)
    /// The client's circuit breaker is open after failures (the last described in `lastFailure`):
    /// nothing goes until its jittered exponential back-off has passed, then one probe command; the
    /// command was not sent.
    case unavailable(retryIn: Duration, lastFailure: String)

    /// Whether the server may have run the command: `true` for an error reply (it ran and failed), and for a timeout or a
    /// lost connection after all of its bytes were written.
    public var mayHaveRun: Bool {
        switch self {
        case .server: true
        case .timedOut(_, let sent), .connectionLost(_, let sent): sent
        case .connectionRefused, .unavailable: false
        }
    }

    /// The error-reply prefixes of a server that cannot serve now, whatever the command: still
    /// loading its data, busy with a long script, a replica cut off from its master, a read-only
    /// replica. A `READONLY` reply, even to a command that already timed out, also counts as a
    /// failure in the client's circuit breaker and ends the connection: the client connects again
    /// once the breaker's back-off allows, to reach the new master after a failover.
    public static let unavailablePrefixes = ["LOADING", "BUSY", "MASTERDOWN", "READONLY"]

    /// Whether Redis cannot serve now, rather than the command being wrong: every failure to connect
    /// or to get an answer, and the error replies of ``unavailablePrefixes``. `false` for other error
    /// replies (`ERR`, `WRONGTYPE`, a script's own error): asking again would fail again.
    public var isUnavailable: Bool {
        switch self {
        case .server(let message):
            Self.unavailablePrefixes.contains { message.hasPrefix($0 + " ") || message == $0 }
        case .timedOut, .connectionRefused, .connectionLost, .unavailable:
            true
        }
    }

    /// A sentence saying what happened.
    public var description: String {
        switch self {
        case .server(let message):
            "Redis answered with an error: \(message)"
        case .timedOut(let after, let sent):
            "Redis did not answer within \(after) (the command was \(sent ? "sent" : "not sent"))"
        case .connectionRefused(let address, let reason):
            "could not connect to Redis at \(address): \(reason)"
        case .connectionLost(let reason, let sent):
            "the connection to Redis was lost (the command was \(sent ? "sent" : "not sent")): \(reason)"
        case .unavailable(let retryIn, let lastFailure):
            "Redis is unavailable; the next attempt is in \(retryIn) (last failure: \(lastFailure))"
        }
    }
}

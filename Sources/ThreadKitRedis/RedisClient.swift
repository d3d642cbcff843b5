import ThreadKit

/// A Redis client: RESP2 over one connection (a Unix socket or TCP), pipelined, with a timeout per
/// command and reconnects after a jittered exponential back-off.
///
/// ```swift
/// let client = RedisClient(.unixSocket(path: socketPath))
/// _ = try await client.send("SET", "greeting", "hello")
/// let greeting = try await client.send("GET", "greeting")
/// print(greeting.string ?? "(missing)")  // hello
/// ```
///
/// **Pipelining.** Any number of threads and tasks may send at once. Commands are written one after
/// another on the one connection without waiting for earlier replies; the server answers them in
/// order, and each reply goes to the command it answers. One reader thread per connection
/// ("Redis reader …") frames the replies; it blocks in `read` while nothing comes, so an idle client
/// uses no CPU.
///
/// **Timeouts.** A command with no reply ``commandTimeout`` after it was called fails with
/// ``RedisError/timedOut(after:sent:)``, which says whether it was sent (then the server may have
/// run it). The connection is then dropped, since a later reply could no longer be matched to its
/// command, and every other command in flight on it fails with
/// ``RedisError/connectionLost(_:sent:)``. The timeouts are calls on ThreadKit's shared
/// `TimerThread`, which only fail the commands: no code of yours runs there.
///
/// **Reconnecting.** The client connects when the first command comes, and again after a
/// connection was lost, refused or dropped, no sooner than a back-off allows: after the n-th failure
/// in a row, a delay drawn between half and all of `min(2 s, 20 ms · 2ⁿ⁻¹)`; the first reply ends
/// the run of failures. A command that comes while the client waits fails at once with
/// ``RedisError/unavailable(retryIn:lastFailure:)``. Connects, losses and timeouts are logged to
/// `Log.Source.redis`.
///
/// **Errors.** A server's error reply (`-ERR …`) is thrown as ``RedisError/server(_:)``; everything
/// else that can go wrong is a ``RedisError`` too.
///
/// **Where the work happens.** The caller's thread connects (bounded by the timeout) and writes its
/// command, one caller at a time, so that commands reach the socket in the order they are matched
/// with replies; then ``send(_:)-(String...)`` suspends and ``sendSync(_:)-(String...)`` blocks until the reply,
/// the timeout or the loss. Neither ends early when its task is cancelled: the command is on its way,
/// and the timeout bounds the wait.
public final class RedisClient: Sendable {
    /// Where the server listens.
    public enum Address: Sendable, Hashable, CustomStringConvertible {
        /// A Unix domain socket (`unixsocket` in redis.conf): the fastest way to a server on the same machine.
        case unixSocket(path: String)
        /// TCP: a host name or address, and a port.
        case tcp(host: String, port: Int)

        /// `unix:<path>` or `<host>:<port>`.
        public var description: String {
            switch self {
            case .unixSocket(let path): "unix:\(path)"
            case .tcp(let host, let port): "\(host):\(port)"
            }
        }
    }

    /// The server's address.
    public var address: Address { core.address }
    /// How long a command may wait for its reply, counted from the call.
    public var commandTimeout: Duration { core.commandTimeout }

    let core: RedisClientCore

    /// A client of the server at `address`. It connects when the first command comes.
    ///
    /// - Parameters:
    ///   - address: Where the server listens. A TCP port must be in 1...65535.
    ///   - commandTimeout: How long each command may wait for its reply; more than zero.
    public convenience init(_ address: Address, commandTimeout: Duration = .milliseconds(100)) {
        self.init(address, commandTimeout: commandTimeout, backoff: ReconnectBackoff(), observeLog: nil)
    }

    /// A client with its own back-off, whose log lines also go to `observeLog` (for tests: `Log`'s
    /// delegate is process-wide).
    init(_ address: Address, commandTimeout: Duration, backoff: ReconnectBackoff, observeLog: (@Sendable (String) -> Void)?) {
        if case .tcp(_, let port) = address {
            precondition((1...65535).contains(port), "RedisClient: the port must be in 1...65535, got \(port)")
        }
        precondition(commandTimeout > .zero, "RedisClient: commandTimeout must be more than zero, got \(commandTimeout)")
        core = RedisClientCore(address: address, commandTimeout: commandTimeout, backoff: backoff, observeLog: observeLog)
    }

    deinit {
        core.close()
    }

    /// Sends the command `arguments` (`"SET", "key", "value"`) and returns the server's reply.
    ///
    /// - Parameter arguments: The command's name and its arguments; at least one.
    /// - Returns: The reply; never ``RESPValue/error(_:)``, which is thrown.
    /// - Throws: ``RedisError``: the server's error reply, a timeout, a refused or lost connection,
    ///   or a back-off in progress.
    public func send(_ arguments: String...) async throws(RedisError) -> RESPValue {
        try await send(arguments)
    }

    /// Sends the command `arguments` and returns the server's reply; see ``send(_:)-(String...)``.
    public func send(_ arguments: [String]) async throws(RedisError) -> RESPValue {
        try await reply(to: arguments) { slot in await slot.result() }
    }

    /// Sends the command `arguments` and blocks the calling thread until the reply comes; the
    /// blocking twin of ``send(_:)-(String...)``, for threads of your own.
    ///
    /// - Parameter arguments: The command's name and its arguments; at least one.
    /// - Returns: The reply; never ``RESPValue/error(_:)``, which is thrown.
    /// - Throws: ``RedisError``, as ``send(_:)-(String...)``.
    @available(*, noasync, message: "it blocks the thread; use 'try await send(_:)' in async code")
    public func sendSync(_ arguments: String...) throws(RedisError) -> RESPValue {
        try sendSync(arguments)
    }

    /// Sends the command `arguments` and blocks until the reply comes; see ``sendSync(_:)-(String...)``.
    @available(*, noasync, message: "it blocks the thread; use 'try await send(_:)' in async code")
    public func sendSync(_ arguments: [String]) throws(RedisError) -> RESPValue {
        let slot = submit(arguments)
        return try Self.unwrap(slot.blockingWaitForResult())
    }

    /// Runs `script` with `EVALSHA`, and with `EVAL` when the server answers `NOSCRIPT` (its script
    /// cache was emptied by a restart, a failover or `SCRIPT FLUSH`); `EVAL` caches it again.
    ///
    /// - Parameters:
    ///   - script: The script.
    ///   - keys: Its keys, `KEYS[1]`…; for a Redis Cluster, all under one hash tag (``RedisLimitKeys``).
    ///   - arguments: Its other arguments, `ARGV[1]`….
    /// - Returns: The script's reply.
    /// - Throws: ``RedisError``, as ``send(_:)-(String...)``; a script's error as ``RedisError/server(_:)``.
    public func evaluate(_ script: RedisScript, keys: [String] = [], arguments: [String] = []) async throws(RedisError) -> RESPValue {
        do {
            return try await send(Self.evaluation("EVALSHA", script.sha1, keys, arguments))
        } catch .server(let message) where message.hasPrefix("NOSCRIPT") {
            core.log("\(script) is not in the server's cache (NOSCRIPT); sending its source with EVAL")
            return try await send(Self.evaluation("EVAL", script.source, keys, arguments))
        }
    }

    /// Runs `script` as ``evaluate(_:keys:arguments:)`` does, blocking the calling thread: its
    /// blocking twin, for threads of your own.
    ///
    /// - Parameters:
    ///   - script: The script.
    ///   - keys: Its keys, `KEYS[1]`….
    ///   - arguments: Its other arguments, `ARGV[1]`….
    /// - Returns: The script's reply.
    /// - Throws: ``RedisError``, as ``evaluate(_:keys:arguments:)``.
    @available(*, noasync, message: "it blocks the thread; use 'try await evaluate(_:keys:arguments:)' in async code")
    public func evaluateSync(_ script: RedisScript, keys: [String] = [], arguments: [String] = []) throws(RedisError) -> RESPValue {
        do {
            return try sendSync(Self.evaluation("EVALSHA", script.sha1, keys, arguments))
        } catch .server(let message) where message.hasPrefix("NOSCRIPT") {
            core.log("\(script) is not in the server's cache (NOSCRIPT); sending its source with EVAL")
            return try sendSync(Self.evaluation("EVAL", script.source, keys, arguments))
        }
    }

    private static func evaluation(_ command: String, _ script: String, _ keys: [String], _ arguments: [String]) -> [String] {
        [command, script, String(keys.count)] + keys + arguments
    }

    private func reply(to arguments: [String], _ wait: (ReplySlot) async -> Result<RESPValue, RedisError>) async throws(RedisError) -> RESPValue {
        try Self.unwrap(await wait(submit(arguments)))
    }

    private func submit(_ arguments: [String]) -> ReplySlot {
        precondition(!arguments.isEmpty, "RedisClient: a command needs at least its name, got no arguments")
        let slot = ReplySlot()
        core.submit(RESPValue.command(arguments).encoded, to: slot)
        return slot
    }

    private static func unwrap(_ result: Result<RESPValue, RedisError>) throws(RedisError) -> RESPValue {
        switch result {
        case .success(.error(let message)): throw .server(message)
        case .success(let value): return value
        case .failure(let error): throw error
        }
    }
}

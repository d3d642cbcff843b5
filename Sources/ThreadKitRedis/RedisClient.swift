import Foundation
@_spi(ThreadKitURL) import ThreadKit

/// A Redis client: RESP2 over one connection (a Unix socket or TCP), pipelined, with a timeout per
/// command, and a circuit breaker that backs off (jittered, exponential) after failures.
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
/// order, and each reply goes to the command it answers.
///
/// **Where the work happens.** One thread per connection ("Redis connection …") resolves the host
/// (a name on a short-lived thread of its own, waited for no longer than the connect; one lookup
/// at a time per client, and an answer that came too late for its connect serves the next one,
/// for up to 30 s or until a failure), connects, writes the queued commands and reads the replies; it blocks in `poll` while there is
/// nothing to do, so an idle client uses no CPU. A caller only appends its encoded command under a
/// short lock: ``send(_:)-(String...)`` then suspends, ``sendSync(_:)-(String...)`` blocks its
/// thread, and ``sendAndForget(_:)-(String...)`` returns at once. No caller waits for the network.
///
/// **Timeouts.** A command with no reply ``commandTimeout`` after it was called fails with
/// ``RedisError/timedOut(after:sent:)``, which says whether it was sent (then the server may have
/// run it); that holds while the client resolves the host name and connects too. Its reply, when it comes, is discarded, and the connection stays up; it is dropped only
/// when more than 64 replies are overdue at once, or when nothing at all has been read for
/// `max(1 s, 10 × commandTimeout)` while replies are due. Neither wait ends early when its task is
/// cancelled: the command may be on its way, and the timeout bounds the wait.
///
/// **Reconnecting.** The client connects when the first command comes. A connection that was
/// answering and is lost (an idle timeout, a restart) is made again by the next command, at once.
/// Failures (a refused or timed-out connect, a command timeout, a connection lost before it ever
/// answered) open a circuit breaker: after the n-th opening in a row, commands fail at once with
/// ``RedisError/unavailable(retryIn:lastFailure:)`` for a delay drawn between half and all of
/// `min(2 s, 20 ms · 2ⁿ⁻¹)`; then one command goes as a probe, and its reply closes the breaker.
/// Connects, losses, timeouts and recoveries are logged to `Log.Source.redis`.
///
/// **Before a process exits.** Commands sent without waiting (a lease handed back, a pause) are
/// written by the connection's thread a moment later; ``flush(timeout:)`` returns once they and
/// every other command handed to the client before it have been written and answered.
///
/// **Errors.** A server's error reply (`-ERR …`) is thrown as ``RedisError/server(_:)``; everything
/// else that can go wrong is a ``RedisError`` too. ``RedisError/isUnavailable`` tells a server that
/// cannot serve now (down, loading, busy, a read-only replica) from a command's own error.
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
    /// The forget-style commands still owed a reply, and the resends queued by the client's users.
    let followUps = Locked(FollowUps())

    /// A client of the server at `address`. It connects when the first command comes.
    ///
    /// - Parameters:
    ///   - address: Where the server listens. A TCP port must be in 1...65535.
    ///   - commandTimeout: How long each command may wait for its reply; more than zero.
    public convenience init(_ address: Address, commandTimeout: Duration = .milliseconds(100)) {
        self.init(address, commandTimeout: commandTimeout, breaker: Self.defaultBreaker, observeLog: nil)
    }

    /// One failure opens the breaker; its back-off doubles from 20 ms up to 2 s.
    static let defaultBreaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(20), maxBackoff: .seconds(2))

    /// A client with its own breaker and limits on overdue replies, whose log lines also go to
    /// `observeLog` (for tests: `Log`'s delegate is process-wide).
    ///
    /// - Parameters:
    ///   - maxAbandoned: How many timed-out commands may wait for their replies before the connection is dropped.
    ///   - connectionTimeout: How long nothing may be read while replies are due before the
    ///     connection is dropped; `nil` for `max(1 s, 10 × commandTimeout)`.
    ///   - lookup: How a host name is resolved (tests give a slow one), one lookup at a time.
    init(_ address: Address, commandTimeout: Duration, breaker: CircuitBreaker, maxAbandoned: Int = 64,
         connectionTimeout: Duration? = nil, lookup: @escaping HostLookup.Lookup = HostLookup.system,
         observeLog: (@Sendable (String) -> Void)?) {
        if case .tcp(_, let port) = address {
            precondition((1...65535).contains(port), "RedisClient: the port must be in 1...65535, got \(port)")
        }
        precondition(commandTimeout > .zero, "RedisClient: commandTimeout must be more than zero, got \(commandTimeout)")
        let pipeline = ReplyPipeline<ReplySlot?>(maxAbandoned: maxAbandoned, connectionTimeout: connectionTimeout ?? max(.seconds(1), commandTimeout * 10))
        core = RedisClientCore(
            address: address, commandTimeout: commandTimeout, breaker: Self.breaker(breaker, commandTimeout: commandTimeout),
            pipeline: pipeline, lookup: lookup, observeLog: observeLog)
        DiagnosticsRegistry.add(self)
    }

    /// `breaker`, waiting for a probe's outcome at least one command timeout and the wait margin:
    /// the connection's thread reports it by then at the latest. A shorter wait would count a
    /// probe still on its way as failed and let the next command probe too.
    static func breaker(_ breaker: CircuitBreaker, commandTimeout: Duration) -> CircuitBreaker {
        CircuitBreaker(
            failureThreshold: breaker.failureThreshold, baseBackoff: breaker.baseBackoff, maxBackoff: breaker.maxBackoff,
            probeTimeout: max(breaker.probeTimeout, commandTimeout + waitMargin))
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(self))
        core.shutDown()
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
        try await reply(to: Self.encode(arguments)) { slot in await slot.result() }
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
        try wait(for: Self.encode(arguments))
    }

    /// How long past its deadline a blocked caller waits for the connection's thread to fail its command.
    static let waitMargin = Duration.milliseconds(250)

    /// Sends the command `arguments` and returns at once, without waiting for the reply, which is
    /// discarded (an error reply too); for calls that must not wait, such as giving back a lease.
    ///
    /// - Parameter arguments: The command's name and its arguments; at least one.
    /// - Throws: ``RedisError/unavailable(retryIn:lastFailure:)`` when the breaker refuses the command
    ///   now, or ``RedisError/connectionLost(_:sent:)`` once the client is released: it was not sent.
    ///   A later failure (a timeout, a lost connection) is not reported.
    public func sendAndForget(_ arguments: String...) throws(RedisError) {
        try sendAndForget(arguments)
    }

    /// Sends the command `arguments` without waiting for its reply; see ``sendAndForget(_:)-(String...)``.
    public func sendAndForget(_ arguments: [String]) throws(RedisError) {
        if let refused = core.submit(Self.encode(arguments), to: nil) { throw refused }
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
            return try await reply(to: Self.evaluation("EVALSHA", script.sha1, keys, arguments)) { slot in await slot.result() }
        } catch .server(let message) where message.hasPrefix("NOSCRIPT") {
            core.log("\(script) is not in the server's cache (NOSCRIPT); sending its source with EVAL")
            return try await reply(to: Self.evaluation("EVAL", script.source, keys, arguments)) { slot in await slot.result() }
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
            return try wait(for: Self.evaluation("EVALSHA", script.sha1, keys, arguments))
        } catch .server(let message) where message.hasPrefix("NOSCRIPT") {
            core.log("\(script) is not in the server's cache (NOSCRIPT); sending its source with EVAL")
            return try wait(for: Self.evaluation("EVAL", script.source, keys, arguments))
        }
    }

    /// Runs `script` as ``evaluate(_:keys:arguments:)`` does, without waiting for its reply, which
    /// is discarded; returns at once. If the server answers `NOSCRIPT`, the client sends the source
    /// with `EVAL`, also without waiting.
    ///
    /// - Parameters:
    ///   - script: The script.
    ///   - keys: Its keys, `KEYS[1]`….
    ///   - arguments: Its other arguments, `ARGV[1]`….
    /// - Throws: ``RedisError``, as ``sendAndForget(_:)-(String...)``: only a refusal at once.
    public func evaluateAndForget(_ script: RedisScript, keys: [String] = [], arguments: [String] = []) throws(RedisError) {
        let followUp = beginFollowUp()
        defer { endFollowUp(followUp) }
        try evaluateAndForget(script, keys: keys, arguments: arguments, followUp: followUp)
    }

    /// Runs `script` without waiting, as part of the follow-up `followUp` (see ``beginFollowUp()``):
    /// which the command holds until its reply, or its `EVAL` fallback's, is in.
    func evaluateAndForget(_ script: RedisScript, keys: [String], arguments: [String], followUp: UInt64) throws(RedisError) {
        followUps.withLock { $0.hold(followUp) }
        let refused = submitEvaluation(script, keys, arguments) { [followUps] _ in followUps.withLock { $0.release(followUp) } }
        if let refused { throw refused }
    }

    /// Runs `script` as ``evaluate(_:keys:arguments:)`` does, without blocking or suspending: `then`
    /// gets the reply (an error reply as ``RESPValue/error(_:)``) or the failure, once, on the
    /// connection's thread, or at once on the caller's when the client refuses the command.
    func evaluate(_ script: RedisScript, keys: [String], arguments: [String],
                  then: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void) {
        submitEvaluation(script, keys, arguments, then: then)
    }

    /// Sends `script` by its SHA-1 and, if the server answers `NOSCRIPT`, by its source with `EVAL`
    /// (encoded only then: a script's source is kilobytes); `then` gets the last reply or failure,
    /// once. Returns the client's refusal at once, which `then` gets too.
    @discardableResult
    private func submitEvaluation(
        _ script: RedisScript, _ keys: [String], _ arguments: [String],
        then: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void
    ) -> RedisError? {
        let slot = ReplySlot { [core] result in
            guard case .success(.error(let message)) = result, message.hasPrefix("NOSCRIPT") else { return then(result) }
            core.log("\(script) was not in the server's cache (NOSCRIPT); sent its source with EVAL")
            core.submit(Self.evaluation("EVAL", script.source, keys, arguments), to: ReplySlot(then: then))
        }
        return core.submit(Self.evaluation("EVALSHA", script.sha1, keys, arguments), to: slot)
    }

    /// Begins a follow-up that ``flush(timeout:)`` waits for until ``endFollowUp(_:)``: for a
    /// command its caller keeps to send again (the breaker refused it), and for the commands that
    /// carry it out (``evaluateAndForget(_:keys:arguments:followUp:)``).
    func beginFollowUp() -> UInt64 {
        followUps.withLock { $0.begin() }
    }

    /// The caller of ``beginFollowUp()`` lets its follow-up go: sent, or given up.
    func endFollowUp(_ followUp: UInt64) {
        followUps.withLock { $0.release(followUp) }
    }

    /// Returns once every command handed to this client before the call has been written and
    /// answered: those sent without waiting too (``sendAndForget(_:)-(String...)``,
    /// ``evaluateAndForget(_:keys:arguments:)`` and its `EVAL` fallback), and the lease hand-backs
    /// and pauses that a queue coordinated on Redis keeps to send again while the breaker is open.
    /// What a process calls before it exits, so that a `.serial` lease it handed back reaches Redis
    /// and the other processes do not wait out the lease's TTL.
    ///
    /// ```swift
    /// try await client.flush()
    /// exit(0)
    /// ```
    ///
    /// Redis answers the commands of a connection in the order it received them, so a `PING`
    /// answered after them proves they were answered: the flush sends one, and another while a
    /// follow-up begun before the call (a fallback, a resend) is still to come. While the breaker
    /// is open it waits the back-off out, within `timeout`. A task's cancellation does not end it
    /// early. A command that failed before the flush (its connection lost) is never answered, and
    /// the flush does not report it: it says that nothing handed over before it is still on its way.
    ///
    /// - Parameter timeout: How long the flush may take; more than zero. One `PING` may take up to
    ///   ``commandTimeout`` of it.
    /// - Throws: ``RedisError/timedOut(after:sent:)`` when a follow-up is not done within `timeout`;
    ///   the `PING`'s own failure (a timeout, a lost connection, the breaker's refusal with a
    ///   back-off longer than what is left).
    public func flush(timeout: Duration = .seconds(1)) async throws(RedisError) {
        let (mark, deadline) = startFlush(timeout)
        while true {
            let settled = !followUps.withLock { $0.isOpen(through: mark) }
            let ping = await submit(Self.encode(["PING"])).result()
            guard let pause = try flushRound(ping, settled: settled, deadline: deadline, timeout: timeout) else { return }
            await withCheckedContinuation { (resumed: CheckedContinuation<Void, Never>) in
                if (try? TimerThread.shared.schedule(after: pause) { resumed.resume() }) == nil { resumed.resume() }
            }
        }
    }

    /// Blocks the calling thread until every command handed to this client before the call has
    /// been written and answered; the blocking twin of ``flush(timeout:)``, for threads of your own.
    ///
    /// - Parameter timeout: How long the flush may take; more than zero.
    /// - Throws: ``RedisError``, as ``flush(timeout:)``.
    @available(*, noasync, message: "it blocks the thread; use 'try await flush(timeout:)' in async code")
    public func flushSync(timeout: Duration = .seconds(1)) throws(RedisError) {
        let (mark, deadline) = startFlush(timeout)
        while true {
            let settled = !followUps.withLock { $0.isOpen(through: mark) }
            let slot = submit(Self.encode(["PING"]))
            let ping = ThreadActivity.current.blocked("flush", on: core) {
                slot.blockingWaitForResult(until: .now + commandTimeout + Self.waitMargin, timeout: .timedOut(after: commandTimeout, sent: true))
            }
            guard let pause = try flushRound(ping, settled: settled, deadline: deadline, timeout: timeout) else { return }
            usleep(UInt32(clamping: pause.microsecondsRoundedUp))
        }
    }

    private func startFlush(_ timeout: Duration) -> (mark: UInt64, deadline: ContinuousClock.Instant) {
        precondition(timeout > .zero, "RedisClient.flush: timeout must be more than zero, got \(timeout)")
        return (followUps.withLock { $0.mark }, .now + timeout)
    }

    /// What one round of a flush leaves to do: `nil` when done (its `PING` answered, and no
    /// follow-up open before it was sent), else how long to wait before the next round.
    private func flushRound(
        _ ping: Result<RESPValue, RedisError>, settled: Bool, deadline: ContinuousClock.Instant, timeout: Duration
    ) throws(RedisError) -> Duration? {
        switch ping {
        case .failure(.unavailable(let retryIn, _)) where ContinuousClock.now + retryIn < deadline:
            return retryIn
        case .failure(let error):
            throw error
        case .success(.error(let message)):
            throw .server(message)
        case .success:
            if settled { return nil }
            guard ContinuousClock.now < deadline else { throw .timedOut(after: timeout, sent: true) }
            return .milliseconds(1)
        }
    }

    /// `command script numkeys keys… arguments…`, encoded.
    private static func evaluation(_ command: String, _ script: String, _ keys: [String], _ arguments: [String]) -> [UInt8] {
        encode([command, script, String(keys.count)], keys, arguments)
    }

    private func reply(to command: [UInt8], _ wait: (ReplySlot) async -> Result<RESPValue, RedisError>) async throws(RedisError) -> RESPValue {
        try Self.unwrap(await wait(submit(command)))
    }

    /// Sends the encoded `command` and blocks until its reply comes, or its deadline and a margin pass.
    private func wait(for command: [UInt8]) throws(RedisError) -> RESPValue {
        let deadline = ContinuousClock.now + commandTimeout
        let slot = submit(command)
        // The connection's thread fails the command at its deadline, saying whether it was sent;
        // the wait's own bound, a moment later, holds even if that thread cannot run.
        let result = ThreadActivity.current.blocked("reply", on: core) {
            slot.blockingWaitForResult(until: deadline + Self.waitMargin, timeout: .timedOut(after: commandTimeout, sent: true))
        }
        return try Self.unwrap(result)
    }

    private func submit(_ command: [UInt8]) -> ReplySlot {
        let slot = ReplySlot()
        core.submit(command, to: slot)
        return slot
    }

    /// The command made of `parts`' strings, in order, as the server takes it: an array of bulk
    /// strings, each the string's UTF-8 bytes (what `RESPValue.command(_:).encoded` gives), written
    /// straight into one buffer of the right size.
    static func encode(_ parts: [String]...) -> [UInt8] {
        var count = 0
        var size = 16
        for part in parts {
            count += part.count
            for argument in part { size += argument.utf8.count + 16 }
        }
        precondition(count > 0, "RedisClient: a command needs at least its name, got no arguments")
        var bytes: [UInt8] = []
        bytes.reserveCapacity(size)
        appendHeader(UInt8(ascii: "*"), count, to: &bytes)
        for part in parts {
            for argument in part {
                appendHeader(UInt8(ascii: "$"), argument.utf8.count, to: &bytes)
                bytes.append(contentsOf: argument.utf8)
                bytes.append(13)
                bytes.append(10)
            }
        }
        return bytes
    }

    /// `type`, `count` in decimal, CR LF.
    private static func appendHeader(_ type: UInt8, _ count: Int, to bytes: inout [UInt8]) {
        bytes.append(type)
        var divisor = 1
        while divisor <= count / 10 { divisor *= 10 }
        var rest = count
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
        bytes.append(13)
        bytes.append(10)
    }

    private static func unwrap(_ result: Result<RESPValue, RedisError>) throws(RedisError) -> RESPValue {
        switch result {
        case .success(.error(let message)): throw .server(message)
        case .success(let value): return value
        case .failure(let error): throw error
        }
    }
}

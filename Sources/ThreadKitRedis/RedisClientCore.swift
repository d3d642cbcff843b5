import Foundation
@_spi(ThreadKitURL) import ThreadKit

/// What a ``RedisClient`` shares with its reader thread and its timeout calls: the connection, the
/// commands in flight on it, and the back-off.
///
/// Decisions are made by two pure values kept under one lock: ``ReplyPipeline`` (which command a
/// reply, a timeout or a lost connection concerns) and ``ReconnectBackoff`` (whether to connect now).
/// This shell carries them out: it connects, writes, starts the reader thread, shuts the socket and
/// completes reply slots, always after letting the lock go.
///
/// A command's life: the caller takes the write lock (one writer at a time, so commands are written
/// in the order they were enqueued), connects if there is no connection and the back-off allows it,
/// enqueues the command, arms its timeout on ``TimerThread/shared`` and writes it; then it waits on
/// its slot. The reader thread completes slots in order as replies come; the timeout call, if it
/// comes first, fails the command and drops the connection (see ``timeOut(_:)``).
final class RedisClientCore: Sendable {
    let address: RedisClient.Address
    let commandTimeout: Duration

    private struct State {
        var pipeline = ReplyPipeline<ReplySlot>()
        /// The open connection and its generation in ``pipeline``.
        var connection: (socket: RedisConnection, generation: UInt64)?
        var backoff: ReconnectBackoff
        var random = SystemRandomNumberGenerator()
        /// The client was released: no new connection.
        var isClosed = false
    }

    private let state: Locked<State>
    /// Held by the one caller that connects, enqueues and writes at a time. It guards no value (a
    /// `Locked<Void>` would hand the closure an `inout` of zero bytes, which the thread sanitizer
    /// places past the end of its object and reports as a race), only the order of the writes.
    private let writeLock = NSLock()
    /// Where back-off offsets count from.
    private let origin = ContinuousClock.now
    /// Also receives every log line (tests watch reconnects through it; `Log`'s delegate is process-wide).
    private let observeLog: (@Sendable (String) -> Void)?

    init(address: RedisClient.Address, commandTimeout: Duration, backoff: ReconnectBackoff, observeLog: (@Sendable (String) -> Void)?) {
        self.address = address
        self.commandTimeout = commandTimeout
        self.state = Locked(State(backoff: backoff))
        self.observeLog = observeLog
    }

    /// Sends `command` (the encoded bytes) and arranges for `slot` to receive its result.
    ///
    /// Blocks while another caller writes or connects, and while this one connects or writes; both
    /// are bounded by the command's deadline, since its timeout shuts the socket down.
    func submit(_ command: [UInt8], to slot: ReplySlot) {
        let deadline = ContinuousClock.now + commandTimeout
        var after = Aftermath()
        writeLock.withLock {
            let connection: RedisConnection, generation: UInt64
            switch connectionOrConnect(deadline: deadline, &after) {
            case .success(let open): (connection, generation) = open
            case .failure(let error): return after.fail(slot, error)
            }
            guard ContinuousClock.now < deadline else {
                return after.fail(slot, .timedOut(after: commandTimeout, sent: false))
            }
            guard let id = state.withLock({ $0.pipeline.enqueue(slot, on: generation) }) else {
                return after.fail(slot, .connectionLost("the connection closed before the command was written", sent: false))
            }
            do {
                let handle = try TimerThread.shared.schedule(at: deadline) { [self] in timeOut(id) }
                slot.attach(handle)
            } catch {
                let withdrawn = state.withLock { $0.pipeline.withdraw(id) }
                if let withdrawn { after.fail(withdrawn.waiter, .connectionLost("its timeout could not be armed: \(error)", sent: false)) }
                return
            }
            // The timeout may have fired already (a past deadline is due at once): then it is not written.
            guard state.withLock({ $0.pipeline.markSent(id) }) else { return }
            if let failure = connection.writeAll(command) {
                lose(generation, reason: failure, unsent: id, &after)
            }
        }
        after.carryOut(self)
    }

    /// What a change of state under a lock leaves to do once the lock is let go: commands to fail
    /// (which resumes or wakes their callers) and lines to log (which may run a `Log` delegate).
    private struct Aftermath {
        var failures: [(ReplySlot, RedisError)] = []
        var lines: [String] = []

        mutating func fail(_ slot: ReplySlot, _ error: RedisError) { failures.append((slot, error)) }
        mutating func log(_ line: String) { lines.append(line) }

        /// Never call it holding a lock.
        func carryOut(_ core: RedisClientCore) {
            for (slot, error) in failures { slot.complete(.failure(error)) }
            for line in lines { core.log(line) }
        }
    }

    /// The open connection, or a new one if the back-off allows it.
    private func connectionOrConnect(deadline: ContinuousClock.Instant, _ after: inout Aftermath) -> Result<(RedisConnection, UInt64), RedisError> {
        let now = ContinuousClock.now - origin
        enum Next { case open(RedisConnection, UInt64), wait(Duration, String), closed, connect }
        let next = state.withLock { state -> Next in
            if state.isClosed { return .closed }
            if let (socket, generation) = state.connection { return .open(socket, generation) }
            if let wait = state.backoff.wait(at: now) { return .wait(wait, state.backoff.lastFailure ?? "") }
            return .connect
        }
        switch next {
        case .open(let socket, let generation): return .success((socket, generation))
        case .wait(let wait, let failure): return .failure(.unavailable(retryIn: wait, lastFailure: failure))
        case .closed: return .failure(.connectionLost("the client was released", sent: false))
        case .connect: break
        }
        let socket: RedisConnection
        do {
            socket = try RedisConnection.open(address, deadline: deadline, timeout: commandTimeout)
        } catch {
            let delay = state.withLock { state in
                state.backoff.failed(at: ContinuousClock.now - origin, reason: error.description, using: &state.random)
            }
            after.log("could not connect to \(address): \(error); next attempt in \(delay)")
            return .failure(error)
        }
        let generation = state.withLock { state in
            let generation = state.pipeline.connected()
            state.connection = (socket, generation)
            return generation
        }
        do {
            try ModuleThreads.start(name: "Redis reader \(address)", kernelName: "Redis reader") { [self] in
                readReplies(from: socket, generation: generation)
            }
        } catch {
            lose(generation, reason: "no reader thread could be started: \(error)", unsent: nil, &after)
            return .failure(.connectionLost("no reader thread could be started: \(error)", sent: false))
        }
        after.log("connected to \(address)")
        return .success((socket, generation))
    }

    /// The reader thread's loop: frames replies and completes the oldest command with each, until
    /// the connection ends.
    private func readReplies(from socket: RedisConnection, generation: UInt64) {
        var parser = RESPParser()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let reason: String
        reading: while true {
            let count: Int
            switch socket.read(into: &buffer) {
            case .success(let read): count = read
            case .failure(.connectionLost(let why, _)):
                reason = why
                break reading
            case .failure(let error):
                reason = error.description
                break reading
            }
            parser.append(buffer[0..<count])
            do {
                while let value = try parser.next() {
                    let outcome = state.withLock { state in
                        state.backoff.succeeded()
                        return state.pipeline.reply(on: generation)
                    }
                    switch outcome {
                    case .answers(let entry): entry.waiter.complete(.success(value))
                    case .stale: return
                    case .unexpected:
                        reason = "a reply came with no command waiting for it: \(value)"
                        break reading
                    }
                }
            } catch {
                reason = error.description
                break
            }
        }
        var after = Aftermath()
        lose(generation, reason: reason, unsent: nil, &after)
        after.carryOut(self)
    }

    /// Connection `generation` ended: fails every command in flight on it (`unsent`, whose bytes
    /// did not all go out, as not sent), shuts it down and starts the back-off. The failures and
    /// the log line are left in `after`, to carry out once every lock is let go.
    private func lose(_ generation: UInt64, reason: String, unsent: UInt64?, _ after: inout Aftermath) {
        let now = ContinuousClock.now - origin
        let (entries, socket, wasClosed) = state.withLock { state in
            let entries = state.pipeline.lost(generation)
            guard let current = state.connection, current.generation == generation else {
                return (entries, RedisConnection?.none, state.isClosed)
            }
            state.connection = nil
            if !state.isClosed { state.backoff.failed(at: now, reason: reason, using: &state.random) }
            return (entries, current.socket, state.isClosed)
        }
        socket?.shutDown()
        for entry in entries {
            after.fail(entry.waiter, .connectionLost(reason, sent: entry.sent && entry.id != unsent))
        }
        if socket != nil, !wasClosed { after.log("lost the connection to \(address): \(reason); \(entries.count) commands in flight failed") }
    }

    /// Command `id`'s timeout call, on the shared timer thread: if it is still in flight, it fails,
    /// and so does every other command on its connection, which is shut down (a later reply could
    /// no longer be matched to its command).
    private func timeOut(_ id: UInt64) {
        let now = ContinuousClock.now - origin
        let timeout = commandTimeout
        let outcome = state.withLock { state -> (ReplyPipeline<ReplySlot>.Entry, [ReplyPipeline<ReplySlot>.Entry], RedisConnection?)? in
            guard let (command, others) = state.pipeline.timedOut(id) else { return nil }
            let socket = state.connection?.socket
            state.connection = nil
            state.backoff.failed(at: now, reason: "a command timed out after \(timeout)", using: &state.random)
            return (command, others, socket)
        }
        guard let (command, others, socket) = outcome else { return }
        socket?.shutDown()
        command.waiter.complete(.failure(.timedOut(after: timeout, sent: command.sent)))
        for entry in others {
            entry.waiter.complete(.failure(.connectionLost("another command timed out after \(timeout) and the connection was dropped", sent: entry.sent)))
        }
        log("a command timed out after \(timeout) (\(command.sent ? "sent" : "not sent")); dropped the connection to \(address) with \(others.count) more commands in flight")
    }

    /// The client was released: ends the connection; no command is in flight, since each caller
    /// keeps the client alive until its result is in.
    func close() {
        let socket = state.withLock { state in
            state.isClosed = true
            return state.connection?.socket
        }
        socket?.shutDown()
    }

    func log(_ message: @autoclosure () -> String) {
        if let observeLog {
            let text = message()
            observeLog(text)
            Log.log(.redis, text)
        } else {
            Log.log(.redis, message())
        }
    }
}

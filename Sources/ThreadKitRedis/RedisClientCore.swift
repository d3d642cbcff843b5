import Foundation
@_spi(ThreadKitURL) import ThreadKit

/// What a ``RedisClient`` shares with its connection's thread: the commands in flight, the state of
/// the connection, and the circuit breaker that decides when to connect and whether a command goes.
///
/// Decisions are made by two pure values kept under one lock: ``ReplyPipeline`` (which command a
/// reply, a deadline or a lost connection concerns) and ThreadKit's `CircuitBreaker` (whether a
/// command may go, or must wait out a back-off). This shell carries them out.
///
/// A caller never touches the network: it asks the breaker, appends its encoded command to the
/// pipeline under the lock, wakes the connection's thread (or starts one when there is none) and
/// waits on its slot. The connection's thread ("Redis connection …") does all the rest: it resolves
/// the host (one lookup at a time, on a thread of its own, see ``HostLookup``) and connects, both bounded by the first
/// command's deadline, writes the commands' bytes as
/// the socket takes them, reads and frames the replies, and fails each command at its deadline: its
/// `poll` wakes at the earliest deadline in flight, one rolling timer per connection. When the
/// connection ends, the thread fails what was in flight and exits; the next command starts another.
///
/// The breaker counts failures: a refused or timed-out connect, a command timeout, and a lost
/// connection that never answered (or lost while probing). Losing a connection that was answering
/// (an idle timeout of the server or of a proxy) is no failure: the next command reconnects at once.
final class RedisClientCore: Sendable {
    let address: RedisClient.Address
    let commandTimeout: Duration

    private enum Phase {
        /// No connection and no thread.
        case idle
        /// The connection's thread is connecting.
        case connecting
        /// Connected; `answered` once a reply came on it.
        case connected(answered: Bool)
    }

    private struct State {
        var pipeline: ReplyPipeline<ReplySlot?>
        var phase = Phase.idle
        var breaker: CircuitBreaker
        /// What failed last, for ``RedisError/unavailable(retryIn:lastFailure:)``.
        var lastFailure: String?
        var random = SystemRandomNumberGenerator()
        /// A byte is in the wake pipe that the connection's thread has not yet seen.
        var wakePending = false
        /// The client was released: no new command, no new connection.
        var isClosed = false
        /// What the diagnostics count, where the lock is held anyway.
        var counts = RedisCounts()
        /// The connection's thread, while there is one.
        var ioThread: ThreadActivity?

        mutating func fail(at now: Duration, timedOut: Bool, reason: String) -> Duration? {
            lastFailure = reason
            breaker.failed(now: now, timedOut: timedOut, jitter: Double.random(in: 0..<1, using: &random))
            if case .open(let until, _) = breaker.state { return until - now }
            return nil
        }
    }

    private let state: Locked<State>
    /// Where the breaker's and the pipeline's instants count from.
    private let origin = ContinuousClock.now
    /// Written by callers (one byte, non-blocking) to wake the connection's thread from `poll`.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    /// Also receives every log line (tests watch reconnects through it; `Log`'s delegate is process-wide).
    private let observeLog: (@Sendable (String) -> Void)?

    /// How the connection's thread resolves a TCP address's host name (bounded by the connect's
    /// deadline): one lookup at a time, its addresses kept until a failure the breaker counts.
    private let resolver: HostLookup.Resolver?

    init(address: RedisClient.Address, commandTimeout: Duration, breaker: CircuitBreaker, pipeline: ReplyPipeline<ReplySlot?>,
         lookup: @escaping HostLookup.Lookup = HostLookup.system, observeLog: (@Sendable (String) -> Void)?) {
        self.address = address
        if case .tcp(let host, let port) = address {
            self.resolver = HostLookup.Resolver(host: host, port: port, lookup: lookup)
        } else {
            self.resolver = nil
        }
        self.commandTimeout = commandTimeout
        self.state = Locked(State(pipeline: pipeline, breaker: breaker))
        self.observeLog = observeLog
        var ends: [Int32] = [-1, -1]
        let made = pipe(&ends)
        for end in ends where made == 0 {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        precondition(made == 0, "RedisClient: no pipe to wake its connection's thread: \(RedisConnection.describe(errno))")
        (wakeRead, wakeWrite) = (ends[0], ends[1])
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    private var now: Duration { ContinuousClock.now - origin }

    /// Queues `command` (the encoded bytes) for the connection's thread; `slot`, if any, receives
    /// the result. Never blocks on the network.
    ///
    /// - Returns: Why the command was refused at once (not sent), else `nil`; a refused command's
    ///   slot is completed with it too.
    @discardableResult
    func submit(_ command: [UInt8], to slot: ReplySlot?) -> RedisError? {
        let now = now
        enum Next { case refuse(RedisError), start, wake, none }
        let next = state.withLock { state -> Next in
            if state.isClosed {
                state.counts.refused += 1
                return .refuse(.connectionLost("the client was released", sent: false))
            }
            if case .refused(let retryIn) = state.breaker.permit(now: now) {
                state.counts.refused += 1
                return .refuse(.unavailable(retryIn: retryIn, lastFailure: state.lastFailure ?? "a probe command is under way"))
            }
            state.counts.commands += 1
            _ = state.pipeline.enqueue(slot, bytes: command, deadline: now + commandTimeout)
            switch state.phase {
            case .idle:
                state.phase = .connecting
                return .start
            case .connecting:
                return .none
            case .connected:
                if state.wakePending { return .none }
                state.wakePending = true
                return .wake
            }
        }
        switch next {
        case .refuse(let error):
            slot?.complete(.failure(error))
            return error
        case .start:
            do {
                try ModuleThreads.start(name: "Redis connection \(address)", kernelName: "Redis conn") { [self] in run() }
            } catch {
                end("no thread could be started for the connection: \(error)", countsAsFailure: true)
            }
        case .wake:
            wake()
        case .none:
            break
        }
        return nil
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// The connection's thread: connects, then serves the connection until it ends.
    private func run() {
        let activity = ThreadActivity.current
        activity.running("connecting")
        let deadline = state.withLock { state in
            state.ioThread = activity
            return state.pipeline.nextDeadline
        } ?? now + commandTimeout
        let socket: RedisConnection
        do {
            socket = try RedisConnection.open(address, deadline: origin + deadline, timeout: commandTimeout, resolver: resolver)
        } catch {
            end(error.description, connectError: error, countsAsFailure: true)
            return
        }
        state.withLock { state in
            state.phase = .connected(answered: false)
            state.counts.connections += 1
        }
        log("connected to \(address)")
        serve(socket, activity)
    }

    /// What a change of state under a lock leaves to do once the lock is let go: commands to fail
    /// (which resumes or wakes their callers) and lines to log (which may run a `Log` delegate).
    private struct Aftermath {
        var failures: [(ReplySlot?, RedisError)] = []
        var lines: [String] = []

        mutating func fail(_ slot: ReplySlot?, _ error: RedisError) { failures.append((slot, error)) }
        mutating func log(_ line: String) { lines.append(line) }

        /// Never call it holding a lock. The lines go first: a caller that resumes finds them logged.
        func carryOut(_ core: RedisClientCore) {
            for line in lines { core.log(line) }
            for (slot, error) in failures { slot?.complete(.failure(error)) }
        }
    }

    /// The loop of a connected thread: fails the commands past their deadline, writes what is
    /// queued, waits in `poll` for bytes, room to write, a wake-up or the next deadline, and reads.
    private func serve(_ socket: RedisConnection, _ activity: ThreadActivity) {
        var parser = RESPParser()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var outgoing: [UInt8] = []
        var written = 0
        let timeout = commandTimeout
        while true {
            let now = now
            var after = Aftermath()
            enum Step { case closed, drop(String), wait(Duration?) }
            let step = state.withLock { state -> Step in
                state.wakePending = false
                if state.isClosed { return .closed }
                let expired = state.pipeline.expire(at: now)
                for entry in expired { after.fail(entry.waiter, .timedOut(after: timeout, sent: entry.sent)) }
                state.counts.timedOut += expired.count
                if !expired.isEmpty {
                    let sent = expired.filter(\.sent).count
                    let retry = state.fail(at: now, timedOut: true, reason: "a command timed out after \(timeout)")
                    after.log("\(expired.count) commands timed out after \(timeout) (\(sent) sent, their replies to be discarded)"
                              + (retry.map { "; next attempt in \($0)" } ?? ""))
                }
                if let reason = state.pipeline.dropReason(at: now) { return .drop(reason) }
                outgoing += state.pipeline.takeUnsent(at: now)
                return .wait(state.pipeline.nextDeadline)
            }
            after.carryOut(self)
            let wait: Duration?
            var sleepUntil: ContinuousClock.Instant?
            switch step {
            case .closed: return end("the client was released", countsAsFailure: false)
            case .drop(let reason): return end("dropped the connection: \(reason)", countsAsFailure: true, timedOut: true)
            case .wait(let deadline): (wait, sleepUntil) = (deadline.map { $0 - self.now }, deadline.map { origin + $0 })
            }
            if written < outgoing.count {
                switch socket.write(outgoing[written...]) {
                case .done(let count): written += count
                case .wouldBlock: break
                case .ended(let reason): return end(reason, countsAsFailure: false)
                }
                if written == outgoing.count { (outgoing, written) = ([], 0) }
            }
            let events = Int16(POLLIN) | (written < outgoing.count ? Int16(POLLOUT) : 0)
            var fds = [pollfd(fd: socket.descriptor, events: events, revents: 0), pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            activity.sleeping(until: sleepUntil)
            let polled = poll(&fds, 2, RedisConnection.pollMilliseconds(wait))
            activity.running("replies")
            if polled < 0 {
                if errno == EINTR { continue }
                return end("poll failed: \(RedisConnection.describe(errno))", countsAsFailure: true)
            }
            if fds[1].revents != 0 {
                var drain = [UInt8](repeating: 0, count: 64)
                while read(wakeRead, &drain, drain.count) > 0 {}
            }
            guard fds[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { continue }
            reading: while true {
                switch socket.read(into: &buffer) {
                case .done(let count): parser.append(buffer[0..<count])
                case .wouldBlock: break reading
                case .ended(let reason): return end(reason, countsAsFailure: false)
                }
                do {
                    while let value = try parser.next() {
                        let delivery = deliver(value)
                        if let reason = delivery.endsConnection {
                            // The breaker counts the failure before the command's caller resumes:
                            // its next command then meets the back-off, not this ending connection.
                            end(reason, countsAsFailure: true)
                            delivery.waiter?.complete(.success(value))
                            return
                        }
                    }
                } catch {
                    return end(error.description, countsAsFailure: true)
                }
            }
        }
    }

    /// Hands a reply to its command, or says why the connection must end: a reply nobody asked
    /// for, or a read-only replica's READONLY. Both are failures the breaker counts, so that its
    /// back-off spaces the connections made again to a replica (which would answer each write with
    /// READONLY again) instead of one per command. A READONLY is one whether its command still
    /// waits or timed out (the reply is discarded): either way it is no success, which would close
    /// the breaker and reset its back-off. Its command's `waiter`, if it still waits, is left to
    /// the caller, to complete once the connection has ended.
    private func deliver(_ value: RESPValue) -> (endsConnection: String?, waiter: ReplySlot?) {
        let now = now
        var readOnly: String?
        if case .error(let message) = value, message.hasPrefix("READONLY") { readOnly = message }
        let (outcome, recovered) = state.withLock { state in
            let outcome = state.pipeline.reply(at: now)
            if case .unexpected = outcome { return (outcome, false) }
            state.phase = .connected(answered: true)
            if readOnly != nil { return (outcome, false) }
            state.lastFailure = nil
            return (outcome, state.breaker.succeeded())
        }
        if recovered { log("\(address) answers again") }
        switch outcome {
        case .answers(let entry):
            guard let readOnly else {
                entry.waiter?.complete(.success(value))
                return (nil, nil)
            }
            return ("the server is a read-only replica (\(readOnly)); connecting again", entry.waiter)
        case .discarded:
            return (readOnly.map { "the server is a read-only replica (\($0)); connecting again" }, nil)
        case .unexpected:
            return ("a reply came with no command waiting for it: \(value)", nil)
        }
    }

    /// The connection (or the attempt to connect) ended: fails every live command in flight, counts
    /// a failure in the breaker when it should, and leaves the next command to start a connection.
    ///
    /// - Parameters:
    ///   - connectError: The error of a failed connect, which every waiting command gets.
    ///   - countsAsFailure: Whether the end is a failure even of a connection that was answering.
    ///   - timedOut: Whether the failure is a timeout (the breaker opens at once).
    private func end(_ reason: String, connectError: RedisError? = nil, countsAsFailure: Bool, timedOut: Bool = false) {
        let now = now
        var after = Aftermath()
        let failed = state.withLock { state -> Bool in
            let entries = state.pipeline.takeAll()
            state.ioThread = nil
            if connectError != nil { state.counts.connectFailed += entries.count } else { state.counts.lost += entries.count }
            var answered = false
            if case .connected(let wasAnswered) = state.phase { answered = wasAnswered }
            state.phase = .idle
            var probing = false
            if case .halfOpen = state.breaker.state { probing = true }
            var retry: Duration?
            let counted = !state.isClosed && (countsAsFailure || !answered || probing)
            if counted {
                let isTimeout = timedOut || { if case .timedOut = connectError { true } else { false } }()
                retry = state.fail(at: now, timedOut: isTimeout, reason: reason)
            }
            for entry in entries {
                after.fail(entry.waiter, connectError ?? .connectionLost(reason, sent: entry.sent))
            }
            guard !state.isClosed else { return false }
            let next = retry.map { "; next attempt in \($0)" } ?? "; the next command connects again"
            if connectError != nil {
                after.log("could not connect to \(address): \(reason)\(next)")
            } else {
                after.log("lost the connection to \(address): \(reason); \(entries.count) commands in flight failed\(next)")
            }
            return counted
        }
        // The addresses may be what failed (a moved server, a replica after a failover): the next
        // connect looks the name up again.
        if failed { resolver?.forget() }
        after.carryOut(self)
    }

    /// What the diagnostics read: one brief hold of the lock, then of the host lookup's own.
    func diagnostics() -> RedisReading {
        var reading = state.withLock { state in
            var open = false
            if case .closed = state.breaker.state {} else { open = true }
            var connected = false
            if case .connected = state.phase { connected = true }
            return RedisReading(counts: state.counts, pending: state.pipeline.count - state.pipeline.abandonedCount,
                                breakerOpen: open, connected: connected, threads: [state.ioThread].compactMap { $0 })
        }
        if let lookup = resolver?.lookupThread { reading.threads.append(lookup) }
        return reading
    }

    /// The connection's thread, which a blocked caller waits for (see ``DiagnosticsWaitTarget``).
    var holdingThread: ThreadActivity? { state.withLock { $0.ioThread } }

    /// The client was released: the connection's thread fails what is in flight and ends the connection.
    func shutDown() {
        state.withLock { $0.isClosed = true }
        wake()
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

import Foundation
import Testing
@testable import ThreadKitRedis
import ThreadKit
import ThreadKitTestSupport

/// Log lines a client wrote, watched without `Log`'s process-wide delegate.
final class LogLines: Sendable {
    private let lines = LockedValue<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.value }
    func count(containing text: String) -> Int { all.filter { $0.contains(text) }.count }
}

/// A client with a generous timeout (the machine may be loaded) whose log lines `lines` records.
func makeClient(_ address: RedisClient.Address, timeout: Duration = .seconds(5), lines: LogLines = LogLines(),
                breaker: CircuitBreaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(20), maxBackoff: .milliseconds(200)),
                connectionTimeout: Duration? = nil) -> RedisClient {
    RedisClient(address, commandTimeout: timeout, breaker: breaker, connectionTimeout: connectionTimeout, observeLog: { lines.append($0) })
}

/// A breaker whose back-off (30 s at least) outlasts any test: a command refused by it shows that
/// the client backed off; one that goes shows that it did not.
let longBackoff = CircuitBreaker(failureThreshold: 1, baseBackoff: .seconds(60), maxBackoff: .seconds(60))

/// Sends PING until it is answered (a breaker's back-off may refuse the first tries), for at most 10 s.
func pingUntilAnswered(_ client: RedisClient) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        if (try? await client.send("PING")) == .simpleString("PONG") { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return false
}

@Suite("Redis tests need redis-server")
struct RedisAvailabilityTests {
    @Test("redis-server is on PATH when THREADKIT_REQUIRE_REDIS=1 (else the Redis tests say they were skipped)")
    func serverPresentWhenRequired() {
        if !RedisAvailability.isAvailable {
            if RedisAvailability.isRequired {
                Issue.record("THREADKIT_REQUIRE_REDIS=1 but \(RedisAvailability.skipMessage)")
            } else {
                print("note: \(RedisAvailability.skipMessage)")
            }
        }
    }
}

@Suite("RedisClient against a real redis-server", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisClientTests {
    @Test("PING, SET and GET, async and blocking; a missing key is the null bulk string")
    func pingSetGet() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            #expect(try await client.send("PING") == .simpleString("PONG"))
            #expect(try await client.send("SET", "greeting", "hello") == .simpleString("OK"))
            #expect(try await client.send(["GET", "greeting"]).string == "hello")
            #expect(try await client.send("GET", "missing") == .bulkString(nil))
            let blocking = try await onNewThread(limit: .seconds(10)) { () -> Result<RESPValue, RedisError> in
                Result { () throws(RedisError) -> RESPValue in try client.sendSync("GET", "greeting") }
            }
            #expect(try blocking.get().string == "hello")
            #expect(client.address == server.address && client.commandTimeout == .seconds(5))
        }
    }

    @Test("the example of the documentation runs")
    func documentationExample() async throws {
        try await withRedisServer { server in
            let socketPath = server.socketPath
            // snippet: Sources/ThreadKitRedis/ThreadKitRedis.docc/ThreadKitRedis.md#1
            let client = RedisClient(.unixSocket(path: socketPath), commandTimeout: .seconds(1))   // default: 100 ms
            _ = try await client.send("SET", "greeting", "hello")
            let greeting = try await client.send("GET", "greeting")
            print(greeting.string ?? "(missing)")  // hello
            // end snippet
            #expect(greeting.string == "hello")
        }
    }

    @Test("1,000 pipelined commands from 8 threads and 1,000 from concurrent tasks each get their own reply")
    func pipelining() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines)
            let mismatches = Counter()
            let failures = Counter()
            await onThreads(8) { thread in
                for index in 0..<125 {
                    let tag = "t\(thread)-\(index)"
                    do {
                        if try client.sendSync("ECHO", tag).string != tag { mismatches.increment() }
                        _ = try client.sendSync("INCR", "counter")
                    } catch {
                        failures.increment()
                    }
                }
            }
            #expect(mismatches.value == 0 && failures.value == 0)
            let replies = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<1_000 {
                    group.addTask {
                        let tag = "task-\(index)"
                        let echoed = try await client.send("ECHO", tag)
                        _ = try await client.send("INCR", "counter")
                        return echoed.string == tag
                    }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(replies.count == 1_000 && replies.allSatisfy { $0 })
            #expect(try await client.send("GET", "counter").string == "2000")
            // One connection carried it all.
            #expect(await eventually { lines.count(containing: "connected to") == 1 })
        }
    }

    @Test("an error reply is thrown with the server's message, and the connection goes on")
    func errorReply() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            await #expect {
                _ = try await client.send("NOSUCHCOMMAND", "x")
            } throws: { error in
                guard case .server(let message) = error as? RedisError else { return false }
                return message.hasPrefix("ERR unknown command")
            }
            _ = try await client.send("SET", "text", "x")
            do {
                _ = try await client.send("INCR", "text")
                Issue.record("INCR of a string must fail")
            } catch let error as RedisError {
                #expect(error == .server("ERR value is not an integer or out of range"))
                #expect(error.description == "Redis answered with an error: ERR value is not an integer or out of range")
                #expect(error.mayHaveRun)
            }
            #expect(try await client.send("PING") == .simpleString("PONG"))
        }
    }

    @Test("with the server stopped, commands time out saying they were sent; after SIGCONT their late replies are discarded and the same connection answers the next command")
    func timeoutWhileStopped() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, timeout: .milliseconds(300), lines: lines, connectionTimeout: .seconds(60))
            // The connection is made with a generous timeout first (a loaded machine may be slow to connect).
            let warm = makeClient(server.address)
            #expect(try await warm.send("PING") == .simpleString("PONG"))
            #expect(await pingUntilAnswered(client))
            server.pause()
            defer { server.resume() }
            let errors = await withTaskGroup(of: RedisError?.self) { group in
                for index in 0..<5 {
                    group.addTask {
                        do {
                            _ = try await client.send("ECHO", "late-\(index)")
                            return nil
                        } catch {
                            return error as? RedisError
                        }
                    }
                }
                return await group.reduce(into: [RedisError?]()) { $0.append($1) }
            }
            // Each one timed out after it was sent, or (coming after the first timeout) was refused
            // by the breaker, which a timeout opens.
            let timedOut = errors.filter { $0 == .timedOut(after: .milliseconds(300), sent: true) }
            let refused = errors.filter { if case .unavailable = $0 { true } else { false } }
            #expect(timedOut.count >= 1 && timedOut.count + refused.count == 5, "\(errors)")
            #expect(RedisError.timedOut(after: .milliseconds(300), sent: true).description == "Redis did not answer within 0.3 seconds (the command was sent)")
            // Logged after the commands were failed, outside the client's locks.
            #expect(await eventually { lines.count(containing: "timed out after 0.3 seconds") >= 1 })

            server.resume()
            // The late ECHO replies come first on the connection: each must be discarded, never given to this command.
            var answered: RESPValue?
            let deadline = ContinuousClock.now + .seconds(10)
            while answered == nil, ContinuousClock.now < deadline {
                answered = try? await client.send("ECHO", "fresh")
                if answered == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(answered?.string == "fresh")
            #expect(lines.count(containing: "connected to") == 1, "\(lines.all)")
            #expect(lines.count(containing: "lost the connection") == 0, "\(lines.all)")
        }
    }

    @Test("a connection that answered and is then closed by the server is made again by the next command at once, without a back-off")
    func reconnectAtOnceAfterLoss() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines, breaker: longBackoff)
            #expect(try await client.send("CLIENT", "SETNAME", "victim") == .simpleString("OK"))
            let killer = makeClient(server.address)
            #expect(try await killer.send("CLIENT", "KILL", "SKIPME", "yes") == .integer(1))
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "lost the connection") == 1 })
            // With a 60 s back-off, any back-off would refuse this command.
            #expect(try await client.send("PING") == .simpleString("PONG"))
            #expect(await eventually { lines.count(containing: "connected to") == 2 })
            #expect(lines.count(containing: "next attempt in") == 0, "\(lines.all)")
        }
    }

    @Test("after the server is killed, commands fail, the client backs off, and it reconnects once the server is back on the same path")
    func reconnectAfterRestart() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines)
            #expect(try await client.send("SET", "k", "before") == .simpleString("OK"))
            await server.killed()
            var seen: [RedisError] = []
            func sawRefusalAndBackoff() -> Bool {
                seen.contains { if case .connectionRefused = $0 { true } else { false } }
                    && seen.contains { if case .unavailable = $0 { true } else { false } }
                    && lines.count(containing: "next attempt in") >= 1
            }
            // Until the client has been refused and has backed off (bounded: a loaded machine may be slow).
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline && !sawRefusalAndBackoff() {
                do {
                    _ = try await client.send("PING")
                    Issue.record("a killed server cannot answer")
                } catch let error as RedisError {
                    seen.append(error)
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(seen.contains { if case .connectionRefused(_, let reason) = $0 { reason == "Connection refused" || reason == "No such file or directory" } else { false } }, "\(seen.prefix(5))")
            #expect(seen.contains { if case .unavailable(let retryIn, _) = $0 { retryIn > .zero } else { false } })
            #expect(seen.allSatisfy { $0.isUnavailable })
            #expect(await eventually { lines.count(containing: "could not connect") >= 1 })

            try await server.startedAgain()
            #expect(await pingUntilAnswered(client))
            // A new server, empty: the key written before is gone.
            #expect(try await client.send("GET", "k") == .bulkString(nil))
            #expect(await eventually { lines.count(containing: "connected to") == 2 }, "\(lines.all)")
            #expect(await eventually { lines.count(containing: "answers again") == 1 }, "\(lines.all)")
        }
    }

    @Test("sendAndForget returns at once even while the server is stopped and the socket takes no more bytes; the commands run once it goes on")
    func sendAndForgetNeverBlocks() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address, timeout: .seconds(60))
            #expect(try await client.send("PING") == .simpleString("PONG"))
            server.pause()
            defer { server.resume() }
            // 16 MB: far more than the socket buffers hold, so a caller writing them itself would
            // block until the server read them, for as long as it is stopped.
            let big = String(repeating: "x", count: 4 << 20)
            let returned = try await onNewThread(limit: .seconds(10)) { () -> Bool in
                for index in 0..<4 {
                    guard (try? client.sendAndForget("SET", "big\(index)", big)) != nil else { return false }
                }
                try? client.sendAndForget("INCR", "forgotten")
                return true
            }
            #expect(returned)
            server.resume()
            let counted = try await client.send("GET", "forgotten")
            #expect(counted.string == "1")
            #expect(try await client.send("STRLEN", "big3") == .integer(4 << 20))
        }
    }

    @Test("a read-only replica's READONLY is an unavailable server and a breaker failure: the back-off refuses the next command instead of connecting again at once")
    func readOnlyCountsAsFailure() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines, breaker: longBackoff)
            #expect(try await client.send("PING") == .simpleString("PONG"))
            // A replica of a master that does not exist: it refuses writes with READONLY.
            let admin = makeClient(server.address)
            #expect(try await admin.send("REPLICAOF", "127.0.0.1", "1") == .simpleString("OK"))
            do {
                _ = try await client.send("SET", "k", "v")
                Issue.record("a replica refuses writes")
            } catch let error as RedisError {
                guard case .server(let message) = error else { Issue.record("expected READONLY, got \(error)"); return }
                #expect(message.hasPrefix("READONLY"))
                #expect(error.isUnavailable)
            }
            // With a 30-60 s back-off, a reconnect at once would reach the replica again.
            do {
                _ = try await client.send("SET", "k", "v")
                Issue.record("the client connected again at once after READONLY")
            } catch let error as RedisError {
                guard case .unavailable(_, let lastFailure) = error else { Issue.record("expected the back-off, got \(error)"); return }
                #expect(lastFailure.contains("read-only replica"), "\(lastFailure)")
            }
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "read-only replica") == 1 })
            #expect(lines.count(containing: "connected to") == 1, "\(lines.all)")
            #expect(lines.count(containing: "next attempt in") == 1, "\(lines.all)")
        }
    }

    @Test("READONLY in reply to a write that already timed out is a breaker failure too: the breaker stays open and refuses the next command, and the connection ends")
    func lateReadOnlyCountsAsFailure() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, timeout: .seconds(1), lines: lines, breaker: longBackoff, connectionTimeout: .seconds(60))
            let admin = makeClient(server.address)
            #expect(try await admin.send("REPLICAOF", "127.0.0.1", "1") == .simpleString("OK"))
            #expect(try await client.send("PING") == .simpleString("PONG"))
            // Stopped, the server answers the write late: the client has given it up (a timeout,
            // which opens the breaker for 30-60 s), and discards the READONLY when it comes.
            server.pause()
            do {
                _ = try await client.send("SET", "k", "v")
                Issue.record("a stopped server answered")
            } catch let error as RedisError {
                #expect(error == .timedOut(after: .seconds(1), sent: true))
            }
            server.resume()
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "read-only replica") == 1 }, "\(lines.all)")
            // A late READONLY that closed the breaker would let this write go, to be refused by the replica again.
            do {
                _ = try await client.send("SET", "k", "v")
                Issue.record("the late READONLY closed the breaker")
            } catch let error as RedisError {
                guard case .unavailable(_, let lastFailure) = error else { Issue.record("expected the back-off, got \(error)"); return }
                #expect(lastFailure.contains("read-only replica"), "\(lastFailure)")
            }
            #expect(lines.count(containing: "lost the connection") == 1, "\(lines.all)")
            #expect(lines.count(containing: "connected to") == 1, "\(lines.all)")
        }
    }

    @Test("after READONLY the client connects again once its back-off allows, and writes once the server is a master again")
    func readOnlyReconnects() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines)
            #expect(try await client.send("PING") == .simpleString("PONG"))
            let admin = makeClient(server.address)
            #expect(try await admin.send("REPLICAOF", "127.0.0.1", "1") == .simpleString("OK"))
            await #expect(throws: RedisError.self) { try await client.send("SET", "k", "v") }
            #expect(try await admin.send("REPLICAOF", "NO", "ONE") == .simpleString("OK"))
            // Refused by the back-off (20-200 ms) until it has passed: bounded.
            var written: RESPValue?
            let deadline = ContinuousClock.now + .seconds(10)
            while written == nil, ContinuousClock.now < deadline {
                written = try? await client.send("SET", "k", "v")
                if written == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(written == .simpleString("OK"))
            #expect(await eventually { lines.count(containing: "connected to") == 2 }, "\(lines.all)")
        }
    }

    @Test("over TCP on 127.0.0.1: commands, pipelining, and a command timeout of Int64.max seconds that does not overflow")
    func tcp() async throws {
        try await withRedisServer(tcp: true) { server in
            guard case .tcp(let host, let port) = server.address else { Issue.record("a TCP server"); return }
            #expect(host == "127.0.0.1")
            let client = makeClient(.tcp(host: "localhost", port: port))
            #expect(try await client.send("SET", "over", "tcp") == .simpleString("OK"))
            let replies = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<200 {
                    group.addTask { try await client.send("ECHO", "e\(index)").string == "e\(index)" }
                }
                return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
            }
            #expect(replies == 200)
            let forever = makeClient(server.address, timeout: .seconds(Int64.max))
            #expect(try await forever.send("GET", "over").string == "tcp")
            let blocking = try await onNewThread(limit: .seconds(10)) { () -> Result<RESPValue, RedisError> in
                Result { () throws(RedisError) -> RESPValue in try forever.sendSync("GET", "over") }
            }
            #expect(try blocking.get().string == "tcp")
        }
    }

    @Test("a script runs by EVALSHA, falls back to EVAL on NOSCRIPT, and again after SCRIPT FLUSH")
    func scriptFallback() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines)
            let script = RedisScript("return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}")
            let key = RedisLimitKeys("api.example.com").key("calls")
            let expected = { (count: Int64) in RESPValue.array([.bulkString(Array(key.utf8)), .bulkString(Array("x".utf8)), .integer(count)]) }
            #expect(try await client.evaluate(script, keys: [key], arguments: ["x"]) == expected(1))
            #expect(lines.count(containing: "NOSCRIPT") == 1)
            #expect(try await client.evaluate(script, keys: [key], arguments: ["x"]) == expected(2))
            #expect(lines.count(containing: "NOSCRIPT") == 1)
            #expect(try await client.send("SCRIPT", "FLUSH") == .simpleString("OK"))
            let blocking = try await onNewThread(limit: .seconds(10)) { () -> Result<RESPValue, RedisError> in
                Result { () throws(RedisError) -> RESPValue in try client.evaluateSync(script, keys: [key], arguments: ["x"]) }
            }
            #expect(try blocking.get() == expected(3))
            #expect(lines.count(containing: "NOSCRIPT") == 2)
            // A script's own error is a server error, not a fallback.
            await #expect(throws: RedisError.self) {
                _ = try await client.evaluate(RedisScript("return redis.call('NOSUCH')"))
            }
        }
    }

    @Test("the SHA-1 of a script is the one the server's SCRIPT LOAD answers")
    func sha1MatchesServer() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            let sources = [
                "return 1", "", "return 'é — ü'",
                String(repeating: "-- a long comment that spans many SHA-1 blocks\n", count: 40) + "return redis.call('TIME')",
            ]
            for source in sources {
                let script = RedisScript(source)
                let loaded = try await client.send("SCRIPT", "LOAD", source)
                #expect(loaded.string == script.sha1, "\(source.prefix(20))")
            }
        }
    }
}

@Suite("RedisClient with nothing listening")
struct RedisClientRefusedTests {
    @Test("a Unix socket with no server is a refused connection, then the breaker's back-off refuses at once")
    func refusedUnixSocket() async throws {
        let path = NSTemporaryDirectory() + "threadkit-no-redis-\(getpid()).sock"
        let client = makeClient(.unixSocket(path: path), breaker: longBackoff)
        do {
            _ = try await client.send("PING")
            Issue.record("nothing listens")
        } catch {
            #expect(error == .connectionRefused(address: "unix:\(path)", reason: "No such file or directory"))
            #expect(error.description == "could not connect to Redis at unix:\(path): No such file or directory")
            #expect(!error.mayHaveRun)
        }
        do {
            _ = try await client.send("PING")
            Issue.record("nothing listens")
        } catch {
            guard case .unavailable(let retryIn, let lastFailure) = error else { Issue.record("expected a back-off, got \(error)"); return }
            // What is left of the 30-60 s back-off (less, if a loaded machine ran this call late).
            #expect(retryIn > .zero && retryIn <= .seconds(60))
            #expect(lastFailure.contains("No such file or directory"))
        }
    }

    @Test("a TCP port with nothing listening on 127.0.0.1 is a refused connection")
    func refusedTCP() async throws {
        // A port that was free a moment ago: bound, read, closed.
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        close(descriptor)
        let client = makeClient(.tcp(host: "127.0.0.1", port: port))
        await #expect(throws: RedisError.connectionRefused(address: "127.0.0.1:\(port)", reason: "Connection refused")) {
            _ = try await client.send("PING")
        }
    }
}

extension RedisClientTests {
    @Test("a reply's bulk string of up to 8 MiB is read; a longer one fails its command with an error naming the limit")
    func bulkLengthLimit() async throws {
        try await withRedisServer { server async throws in
            let client = makeClient(server.address)
            let limit = RESPParser.defaultMaxBulkLength
            #expect(limit == 8 << 20)
            #expect(try await client.send("SET", "fits", String(repeating: "x", count: limit)) == .simpleString("OK"))
            #expect(try await client.send("GET", "fits").string?.utf8.count == limit)
            #expect(try await client.send("SET", "longer", String(repeating: "x", count: limit + 1)) == .simpleString("OK"))
            let error = await #expect(throws: RedisError.self) { _ = try await client.send("GET", "longer") }
            #expect(error?.description.contains("a bulk string's length must be -1 or 0 to \(limit), got \(limit + 1)") == true,
                    "\(String(describing: error))")
            // The connection that could not frame it is dropped; the next command gets a new one.
            #expect(await pingUntilAnswered(client))
        }
    }
}

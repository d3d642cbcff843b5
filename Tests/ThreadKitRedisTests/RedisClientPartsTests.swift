import Foundation
import SeededRandom
import Testing
@testable import ThreadKitRedis
import ThreadKitTestSupport
import ThreadKit

@Suite("RedisClient's parts: a blocked wait's own bound, poll's timeout, what counts as unavailable")
struct RedisClientPartsTests {
    @Test("the breaker waits for a probe's outcome at least one command timeout and the wait margin: with a 1 s timeout, a command 300 ms after the probe is refused, not a second probe")
    func probeOutlivesTheCommandTimeout() {
        let breaker = RedisClient.breaker(RedisClient.defaultBreaker, commandTimeout: .seconds(1))
        #expect(breaker.probeTimeout == .seconds(1) + RedisClient.waitMargin)
        var state = breaker
        _ = state.failed(now: .zero, timedOut: true, jitter: 0)
        guard case .open(let until, _) = state.state else { Issue.record("\(state.state)"); return }
        #expect(state.permit(now: until) == .probe)
        guard case .refused = state.permit(now: until + .milliseconds(300)) else {
            Issue.record("a second probe while the first may still be answered")
            return
        }
        // A short timeout keeps the breaker's own (longer) wait.
        #expect(RedisClient.breaker(RedisClient.defaultBreaker, commandTimeout: .milliseconds(1)).probeTimeout
            == max(RedisClient.defaultBreaker.probeTimeout, .milliseconds(1) + RedisClient.waitMargin))
    }

    @Test("a completed reply slot holds nothing of its follow-up: what the follow-up captured is released when it has run, not when the pipeline drops the slot under the client's lock")
    func completedSlotReleasesItsFollowUp() {
        final class Captured: Sendable {}
        weak var released: Captured?
        let ran = Counter()
        let slot: ReplySlot = {
            let captured = Captured()
            released = captured
            let slot = ReplySlot { _ in withExtendedLifetime(captured) { _ = ran.increment() } }
            slot.complete(.success(.simpleString("OK")))
            return slot
        }()
        #expect(ran.value == 1)
        #expect(released == nil, "the completed slot still holds its follow-up's captures")
        withExtendedLifetime(slot) {}
    }

    @Test("a blocked wait that nobody completes ends at its own deadline with the given error, and a later completion changes nothing")
    func blockedWaitEndsAtDeadline() async throws {
        let slot = ReplySlot()
        let result = try await onNewThread(limit: .seconds(10)) {
            slot.blockingWaitForResult(until: ContinuousClock.now + .milliseconds(300), timeout: .timedOut(after: .milliseconds(300), sent: true))
        }
        #expect(result == .failure(.timedOut(after: .milliseconds(300), sent: true)))
        slot.complete(.success(.simpleString("late")))
        #expect(slot.blockingWaitForResult(until: ContinuousClock.now, timeout: .connectionLost("unused", sent: false)) == result)
    }

    @Test("a blocked wait ends with the result as soon as it is completed, long before a far deadline")
    func blockedWaitEndsWithResult() async throws {
        let slot = ReplySlot()
        let waiting = Counter()
        async let result = onNewThread(limit: .seconds(10)) { () -> Result<RESPValue, RedisError> in
            waiting.increment()
            return slot.blockingWaitForResult(until: ContinuousClock.now + .seconds(3_600), timeout: .timedOut(after: .seconds(3_600), sent: true))
        }
        // The thread's start may wait for a cooperative thread on a loaded machine: a generous bound.
        #expect(await eventually(timeout: .seconds(60)) { waiting.value == 1 })
        slot.complete(.success(.integer(7)))
        #expect(try await result == .success(.integer(7)))
    }

    @Test("a command is encoded straight into bytes exactly as RESPValue.command encodes it: every length's digits, empty and multi-byte arguments, parts joined in order")
    func commandEncoding() {
        #expect(RedisClient.encode(["PING"]) == Array("*1\r\n$4\r\nPING\r\n".utf8))
        var random = SplitMix64(seed: 0xE4C0_DE24)
        for _ in 0..<300 {
            let parts = (0..<Int(random.next() % 4)).map { _ in
                (0..<Int(random.next() % 13)).map { _ -> String in
                    let length = [0, 1, 9, 10, 11, 99, 100, 101, 999, 1_000, 12_345][Int(random.next() % 11)]
                    return String((0..<length).map { _ in ["a", "é", "\r", "\n", "0", "€", " "][Int(random.next() % 7)] as Character })
                }
            }
            let all = parts.flatMap { $0 }
            guard !all.isEmpty else { continue }
            // Compared apart from the expectation, so that a failure names the arguments' lengths, not megabytes.
            let lengths = parts.map { $0.map(\.utf8.count) }
            if !parts[0].isEmpty {
                let same = RedisClient.encode(parts[0]) == RESPValue.command(parts[0]).encoded
                #expect(same, "one part of arguments of \(lengths[0]) bytes")
            }
            let same = RedisClient.encode(parts[0], parts[1...].flatMap { $0 }) == RESPValue.command(all).encoded
            #expect(same, "parts of arguments of \(lengths) bytes")
        }
    }

    @Test("poll's timeout is whole milliseconds rounded up, zero for a past deadline, -1 for none, and saturates instead of overflowing")
    func pollMilliseconds() {
        #expect(RedisConnection.pollMilliseconds(nil) == -1)
        #expect(RedisConnection.pollMilliseconds(.zero) == 0)
        #expect(RedisConnection.pollMilliseconds(.milliseconds(-5)) == 0)
        #expect(RedisConnection.pollMilliseconds(.nanoseconds(1)) == 1)
        #expect(RedisConnection.pollMilliseconds(.milliseconds(100)) == 100)
        #expect(RedisConnection.pollMilliseconds(.microseconds(100_001)) == 101)
        #expect(RedisConnection.pollMilliseconds(.seconds(2_147_483)) == Int32.max)
        #expect(RedisConnection.pollMilliseconds(.seconds(Int64.max)) == Int32.max)
        #expect(RedisConnection.pollMilliseconds(.seconds(2_147_482)) == 2_147_482_000)
    }

    @Test("LOADING, BUSY, MASTERDOWN, READONLY and every failure to get an answer are 'unavailable'; a command's own error is not")
    func unavailableClassification() {
        let unavailable: [RedisError] = [
            .server("LOADING Redis is loading the dataset in memory"),
            .server("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
            .server("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
            .server("READONLY You can't write against a read only replica."),
            .timedOut(after: .milliseconds(100), sent: true),
            .connectionRefused(address: "unix:/x", reason: "Connection refused"),
            .connectionLost("the server closed the connection", sent: false),
            .unavailable(retryIn: .milliseconds(10), lastFailure: "refused"),
        ]
        let ownErrors: [RedisError] = [
            .server("ERR unknown command 'NOSUCH'"),
            .server("WRONGTYPE Operation against a key holding the wrong kind of value"),
            .server("BUSYKEY Target key name already exists."),
            .server("NOSCRIPT No matching script. Please use EVAL."),
            .server("ERR user_script:1: Script attempted to access nonexistent global variable 'x'"),
        ]
        #expect(unavailable.allSatisfy { $0.isUnavailable })
        #expect(!ownErrors.contains { $0.isUnavailable })
    }
}

@Suite("RedisClient drops a connection that stopped answering", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisClientStalledTests {
    @Test("with the server stopped, the connection is dropped once nothing was read for the connection timeout, and made again after SIGCONT")
    func stalledConnectionDropped() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let lines = LogLines()
            let client = makeClient(server.address, timeout: .milliseconds(300), lines: lines, connectionTimeout: .milliseconds(600))
            let warm = makeClient(server.address)
            #expect(try await warm.send("PING") == .simpleString("PONG"))
            #expect(await pingUntilAnswered(client))
            server.pause()
            defer { server.resume() }
            await #expect(throws: RedisError.timedOut(after: .milliseconds(300), sent: true)) { _ = try await client.send("PING") }
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "dropped the connection: nothing was read for 0.6 seconds with 1 replies due") == 1 },
                    "\(lines.all)")
            server.resume()
            #expect(await pingUntilAnswered(client))
            #expect(lines.count(containing: "connected to") == 2, "\(lines.all)")
        }
    }

    @Test("more overdue replies than maxAbandoned drop the connection")
    func tooManyAbandonedDropped() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let lines = LogLines()
            let client = RedisClient(server.address, commandTimeout: .seconds(1),
                                     breaker: CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(20), maxBackoff: .milliseconds(200)),
                                     maxAbandoned: 2, connectionTimeout: .seconds(60), observeLog: { lines.append($0) })
            #expect(await pingUntilAnswered(client))
            server.pause()
            defer { server.resume() }
            // Three commands written before the first timeout opens the breaker (a fire-and-forget
            // command counts too): all three time out together, one more than maxAbandoned.
            try client.sendAndForget("ECHO", "1")
            try client.sendAndForget("ECHO", "2")
            await #expect(throws: RedisError.timedOut(after: .seconds(1), sent: true)) { _ = try await client.send("ECHO", "3") }
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "dropped the connection: 3 commands timed out with their replies still due") == 1 },
                    "\(lines.all)")
        }
    }
}

@Suite("RedisClient's fire-and-forget scripts", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisClientForgetTests {
    @Test("evaluateAndForget returns at once, and the script runs even when the server's cache lost it (NOSCRIPT, then EVAL)")
    func evaluateAndForgetFallsBack() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let lines = LogLines()
            let client = makeClient(server.address, lines: lines)
            let script = RedisScript("return redis.call('INCR', KEYS[1])")
            let key = RedisLimitKeys("forget").key("count")
            try client.evaluateAndForget(script, keys: [key])
            #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "NOSCRIPT") == 1 })
            // A reply after the fallback's in the pipeline: the fallback ran.
            #expect(try await client.send("GET", key).string == "1")
            try client.evaluateAndForget(script, keys: [key])
            #expect(try await client.send("GET", key).string == "2")
            #expect(lines.count(containing: "NOSCRIPT") == 1)
        }
    }
}

@Suite("RedisClient's host lookup: bounded by the deadline of the command that connects")
struct HostLookupTests {
    @Test("a numeric address is converted at once, without asking the lookup")
    func numericAddressSkipsTheLookup() {
        let asked = Counter()
        let lookup: HostLookup.Lookup = { _, _ in
            asked.increment()
            return .failure(.failed("asked"))
        }
        let v4 = HostLookup.Resolver(host: "127.0.0.1", port: 6379, lookup: lookup).resolve(until: .now + .seconds(10))
        #expect((try? v4.get())?.map(\.family) == [AF_INET])
        let v6 = HostLookup.Resolver(host: "::1", port: 6379, lookup: lookup).resolve(until: .now + .seconds(10))
        #expect((try? v6.get())?.map(\.family) == [AF_INET6])
        #expect(asked.value == 0)
    }

    @Test("a name's lookup answers through its own thread: its addresses, or its failure's reason")
    func lookupAnswers() {
        let address = HostLookup.Address(family: AF_INET, bytes: [1, 2, 3])
        let found = HostLookup.Resolver(host: "redis.example.invalid", port: 6379, lookup: { _, _ in .success([address]) }).resolve(until: .now + .seconds(10))
        #expect(found == .success([address]))
        let failed = HostLookup.Resolver(host: "redis.example.invalid", port: 6379, lookup: { _, _ in .failure(.failed("no such host")) }).resolve(until: .now + .seconds(10))
        #expect(failed == .failure(.failed("no such host")))
    }

    @Test("a lookup that hangs is given up at the deadline")
    func hangingLookupEndsAtTheDeadline() async throws {
        let release = Latch()
        defer { release.countDown() }
        let (result, waited) = try await onNewThread(limit: .seconds(20)) { () -> (Result<[HostLookup.Address], HostLookup.Failure>, Duration) in
            let started = ContinuousClock.now
            let resolver = HostLookup.Resolver(host: "redis.hangs.invalid", port: 6379, lookup: { _, _ in
                release.wait(timeout: .seconds(20))
                return .failure(.failed("released"))
            })
            let result = resolver.resolve(until: started + .milliseconds(300))
            return (result, ContinuousClock.now - started)
        }
        #expect(result == .failure(.pastDeadline))
        #expect(waited >= .milliseconds(300) && waited < .seconds(10), "waited \(waited)")
    }

    @Test("commands waiting on a connect whose name lookup hangs fail at the first one's deadline, not sent, not when the lookup ends")
    func hangingLookupFailsTheCommands() async throws {
        let release = Latch()
        defer { release.countDown() }
        let lookups = Counter()
        let lines = LogLines()
        let client = RedisClient(
            .tcp(host: "redis.hangs.invalid", port: 6379), commandTimeout: .milliseconds(300), breaker: longBackoff,
            lookup: { _, _ in
                lookups.increment()
                release.wait(timeout: .seconds(20))
                return .failure(.failed("released"))
            },
            observeLog: { lines.append($0) })
        let started = ContinuousClock.now
        let outcomes = await withTaskGroup(of: RedisError?.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    do {
                        _ = try await client.send("PING")
                        return nil
                    } catch let error as RedisError {
                        return error
                    } catch {
                        return nil
                    }
                }
            }
            return await group.reduce(into: [RedisError?]()) { $0.append($1) }
        }
        let waited = ContinuousClock.now - started
        #expect(outcomes == Array(repeating: RedisError.timedOut(after: .milliseconds(300), sent: false), count: 3), "\(outcomes)")
        // Timed out, not sent: a command that waited for the lookup (which ends only when the test
        // lets it go, or after 20 s) would fail with its answer instead, refused. No upper bound on
        // the wait: a loaded machine may resume these tasks late.
        #expect(waited >= .milliseconds(300), "waited \(waited)")
        #expect(lookups.value == 1)
        #expect(await eventually { lines.count(containing: "could not connect to redis.hangs.invalid:6379") == 1 }, "\(lines.all)")
    }
}

@Suite("HostLookup.Memo: one lookup at a time per client, its addresses kept while fresh (made-up times)")
struct HostLookupMemoTests {
    let start = ContinuousClock.now
    let found = [HostLookup.Address(family: AF_INET, bytes: [1, 2, 3])]

    @Test("a connect while a lookup is in flight waits for that one instead of starting another")
    func oneLookupAtATime() {
        var memo = HostLookup.Memo(freshFor: .seconds(30))
        #expect(memo.next(at: start) == .start(1))
        #expect(memo.next(at: start + .seconds(2)) == .await(1))
        #expect(memo.next(at: start + .seconds(4)) == .await(1))
        #expect(memo.answer(of: 1) == nil)
        #expect(memo.started == 1)
        memo.finished(.success(found), at: start + .seconds(5))
        #expect(memo.answer(of: 1) == .success(found))
    }

    @Test("an answer that came after its connect gave up serves the next connects at once while under 30 s old, then the name is looked up again")
    func lateAnswerKeptWhileFresh() {
        var memo = HostLookup.Memo(freshFor: .seconds(30))
        #expect(memo.next(at: start) == .start(1))
        let answered = start + .milliseconds(150)
        memo.finished(.success(found), at: answered)
        #expect(memo.next(at: answered + .milliseconds(20)) == .use(found))
        #expect(memo.next(at: answered + .seconds(30) - .milliseconds(1)) == .use(found))
        #expect(memo.next(at: answered + .seconds(30)) == .start(2))
        #expect(memo.answer(of: 1) == .success(found))
        #expect(memo.answer(of: 2) == nil)
    }

    @Test("a failed answer goes to its connect and is not kept; forget drops kept addresses, and leaves a lookup in flight alone")
    func failuresAndForget() {
        var memo = HostLookup.Memo(freshFor: .seconds(30))
        #expect(memo.next(at: start) == .start(1))
        memo.finished(.failure(.failed("no such host")), at: start + .seconds(1))
        #expect(memo.answer(of: 1) == .failure(.failed("no such host")))
        #expect(memo.next(at: start + .seconds(1)) == .start(2))
        memo.finished(.success(found), at: start + .seconds(2))
        #expect(memo.next(at: start + .seconds(3)) == .use(found))
        memo.forget()
        #expect(memo.next(at: start + .seconds(3)) == .start(3))
        memo.forget()
        #expect(memo.next(at: start + .seconds(4)) == .await(3))
    }
}

@Suite("HostLookup.Resolver: a hanging or slow lookup is asked once for every connect")
struct HostLookupResolverTests {
    @Test("three connects on a lookup that hangs each give up at their deadline and start no second lookup; its answer, once it comes, serves the next at once")
    func hangingLookupAskedOnce() async throws {
        let release = Latch()
        defer { release.countDown() }
        let lookups = Counter()
        let address = HostLookup.Address(family: AF_INET, bytes: [1, 2, 3])
        let resolver = HostLookup.Resolver(host: "redis.hangs.invalid", port: 6379, lookup: { _, _ in
            lookups.increment()
            release.wait(timeout: .seconds(20))
            return .success([address])
        })
        let results = try await onNewThread(limit: .seconds(20)) {
            (0..<3).map { _ in resolver.resolve(until: .now + .milliseconds(100)) }
        }
        #expect(results == Array(repeating: .failure(.pastDeadline), count: 3))
        #expect(lookups.value == 1)
        #expect(resolver.started == 1)
        release.countDown()
        let answer = try await onNewThread(limit: .seconds(20)) { resolver.resolve(until: .now + .seconds(10)) }
        #expect(answer == .success([address]))
        #expect(await eventually { resolver.started == 1 && lookups.value == 1 })
    }

    @Test("a client whose name lookup takes 300 ms, longer than its 100 ms command timeout, connects with the late answer: the name is looked up once")
    func slowLookupConnects() async throws {
        try await withRedisServer(tcp: true) { server in
            guard case .tcp(_, let port) = server.address else { Issue.record("a TCP server"); return }
            let lookups = Counter()
            let lines = LogLines()
            let client = RedisClient(
                .tcp(host: "redis.slow.invalid", port: port), commandTimeout: .milliseconds(100), breaker: RedisClient.defaultBreaker,
                lookup: { _, port in
                    lookups.increment()
                    Thread.sleep(forTimeInterval: 0.3)
                    return .success(HostLookup.numeric("127.0.0.1", port) ?? [])
                },
                observeLog: { lines.append($0) })
            do {
                _ = try await client.send("PING")
                Issue.record("answered before the lookup did")
            } catch let error as RedisError {
                #expect(error == .timedOut(after: .milliseconds(100), sent: false))
            }
            try await Task.sleep(for: .seconds(1))
            #expect(await pingUntilAnswered(client), "\(lines.all)")
            #expect(lookups.value == 1, "\(lines.all)")
        }
    }
}

import Foundation
import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitRedis
import ThreadKitTestSupport

@Suite("FollowUps: what a flush waits for besides its PING")
struct FollowUpsTests {
    @Test("a follow-up is open until every holder lets it go; letting go of one that is done does nothing")
    func holders() {
        var followUps = FollowUps()
        let first = followUps.begin()
        followUps.hold(first)
        followUps.release(first)
        #expect(followUps.isOpen(through: first) && followUps.openCount == 1)
        followUps.release(first)
        #expect(!followUps.isOpen(through: first) && followUps.openCount == 0)
        followUps.release(first)
        #expect(followUps.openCount == 0)
    }

    @Test("a flush's mark covers the follow-ups begun before it, not those begun after")
    func markCoversEarlierOnly() {
        var followUps = FollowUps()
        let early = followUps.begin()
        let mark = followUps.mark
        let late = followUps.begin()
        #expect(mark == early && late == early + 1)
        #expect(followUps.isOpen(through: mark))
        followUps.release(early)
        #expect(!followUps.isOpen(through: mark))
        #expect(followUps.isOpen(through: followUps.mark))
    }
}

@Suite("RedisClient.flush: what was sent without waiting has reached the server", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisClientFlushTests {
    @Test("after 2,000 INCRs sent without waiting, flush returns once all have run: another client reads 2000")
    func flushAfterForgetSends() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let client = makeClient(server.address)
            let reader = makeClient(server.address)
            for _ in 0..<2_000 { try client.sendAndForget("INCR", "flushed") }
            try await client.flush(timeout: .seconds(5))
            #expect(try await reader.send("GET", "flushed").string == "2000")
        }
    }

    @Test("flush waits for the EVAL fallbacks of scripts sent without waiting after SCRIPT FLUSH: another client reads every run")
    func flushWaitsForFallbacks() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let client = makeClient(server.address)
            let reader = makeClient(server.address)
            // Slow enough (a loop before the INCR) that a read sent right after a flush that did not
            // wait for the fallbacks would come before some of them ran.
            let script = RedisScript("for i = 1, 20000 do end; return redis.call('INCR', KEYS[1])")
            for round in 1...20 {
                _ = try await reader.send("SCRIPT", "FLUSH")
                for _ in 0..<50 { try client.evaluateAndForget(script, keys: ["runs"]) }
                #expect(try await onNewThread(limit: .seconds(10)) { (try? client.flushSync(timeout: .seconds(5))) != nil })
                #expect(client.followUps.withLock { $0.openCount } == 0)
                #expect(try await reader.send("GET", "runs").string == String(round * 50), "round \(round)")
            }
        }
    }

    @Test("with the server stopped (SIGSTOP), flush fails with the PING's timeout instead of waiting on; it succeeds once the server goes on")
    func flushWithStoppedServer() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let client = makeClient(server.address, timeout: .milliseconds(300))
            _ = try await client.send("PING")
            try client.sendAndForget("SET", "k", "v")
            server.pause()
            let started = ContinuousClock.now
            // The flush's own bound is far off (30 s): failing well before it, the flush ended with
            // its PING's 300 ms timeout (a loaded machine took 4 s to get there, once).
            await #expect(throws: RedisError.timedOut(after: .milliseconds(300), sent: true)) { try await client.flush(timeout: .seconds(30)) }
            #expect(ContinuousClock.now - started < .seconds(20))
            server.resume()
            // The breaker may still be backing off from the timeout: the flush waits that out.
            try await client.flush(timeout: .seconds(5))
        }
    }

    @Test("a process that ends its last .serial task, flushes and exits at once hands its lease back: a queue of another process on the key starts within 2 s, not the lease's 10 s", .exitTestOnOwnThreads)
    func leaseHandedBackBeforeExit() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let path: String = server.socketPath
            await #expect(processExitsWith: .success) { [path = path as String] in
                let client = RedisClient(.unixSocket(path: path), commandTimeout: .seconds(5))
                let queue = ThrottledQueue(
                    label: "leaving", interval: .milliseconds(1), monitor: .serial,
                    coordination: .redis(client, key: "handover", whenUnavailable: .failClosed))
                try await queue.run {}
                await queue.waitUntilIdle()
                try await client.flush()
                exit(0)
            }
            let client = RedisClient(server.address, commandTimeout: .seconds(5))
            let queue = ThrottledQueue(
                label: "staying", interval: .milliseconds(1), monitor: .serial,
                coordination: .redis(client, key: "handover", whenUnavailable: .failClosed))
            let started = ContinuousClock.now
            try await queue.run {}
            let waited = ContinuousClock.now - started
            #expect(waited < .seconds(2), "the other process's start waited \(waited): its lease was not handed back")
        }
    }

    @Test("a pause the breaker refused, kept by the coordinator to send again, is on Redis once flush returns, though the flush's PING was answered a second before the pause was sent again")
    func flushWaitsForQueuedResend() async throws {
        try await withRedisServer { (server: RedisServer) async throws -> Void in
            let lines = LogLines()
            // A timeout opens the breaker; its back-off (1-2 s) ends in a probe, and a command refused
            // while the probe is out is told to come back when the probe's wait ends (the command
            // timeout, 1 s, and a margin), not sooner.
            let breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .seconds(2), maxBackoff: .seconds(2))
            let client = makeClient(server.address, timeout: .seconds(1), lines: lines, breaker: breaker)
            _ = try await client.send("PING")
            server.pause()
            await #expect(throws: RedisError.timedOut(after: .seconds(1), sent: true)) { try await client.send("PING") }
            // The first command the back-off lets through is the probe: it waits on the stopped server.
            let deadline = ContinuousClock.now + .seconds(10)
            while (try? client.sendAndForget("PING")) == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            let coordinator = RedisStartCoordinator(client: client, keys: RedisLimitKeys("resent"))
            coordinator.pause(for: .seconds(30))
            #expect(client.followUps.withLock { $0.openCount } == 1, "the pause was not kept to send again")
            server.resume()
            // The probe is answered and the breaker closes: the flush's PING goes at once and is
            // answered at once, while the pause waits on TimerThread for the probe's wait to end.
            #expect(await eventually { lines.count(containing: "answers again") == 1 }, "\(lines.all)")
            try await client.flush(timeout: .seconds(10))
            #expect(client.followUps.withLock { $0.openCount } == 0)
            let probe = SharedThrottleProbe(client: makeClient(server.address), key: "resent")
            let decision = try await onNewThread(limit: .seconds(10)) { try? probe.reserve(gap: 0, serial: false, limit: nil) }
            guard case .declined(let retryIn)? = decision else {
                Issue.record("a start was not declined after the flush: \(String(describing: decision)); the pause had not reached Redis")
                return
            }
            #expect(retryIn > 20_000_000, "the pause left \(retryIn) µs")
        }
    }

    @Test("flush with a timeout of zero stops, naming it", .exitTestOnOwnThreads)
    func zeroTimeout() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try? await RedisClient(.unixSocket(path: "/nonexistent")).flush(timeout: .zero)
        }
        expectMessage(result, contains: ["RedisClient.flush: timeout must be more than zero, got 0"])
    }
}

// The endpoint lease script, rule by rule, on a server of the test's own, with made-up times.

import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
@testable import ThreadKitRedis
import ThreadKitTestSupport

/// One endpoint's leases on a test's own server.
private struct LeaseHarness {
    let client: RedisClient
    let keys: RedisLimitKeys

    init(_ server: RedisServer, key: String = "api|http://api.example.com:80") {
        client = makeClient(server.address)
        keys = RedisLimitKeys(key)
    }

    func run(_ operation: EndpointLeaseCall.Operation, now: Int64?) async throws -> EndpointLeaseCall.Reply {
        try await EndpointLeaseCall(operation, now: now).run(on: client, keys: keys)
    }

    /// An acquire of `token` by `asker` (by default, an asker of its own: the token's first letter).
    func acquire(_ token: String, limit: Int = 2, ttl: Int64 = 1_000, asker: String? = nil, poll: Int64 = 1_000,
                 now: Int64?) async throws -> EndpointLeaseCall.Reply {
        try await run(.acquire(limit: limit, token: token, ttl: ttl, asker: asker ?? String(token.prefix(1)), poll: poll), now: now)
    }

    /// The askers in line, oldest first.
    func line() async throws -> [String] {
        (try await client.send("ZRANGE", EndpointLeaseScript.keys(keys)[2], "0", "-1").array ?? []).compactMap(\.string)
    }

    /// The leases held, by token, with their expiries.
    func leases() async throws -> [String: Int64] {
        let pairs = try await client.send("ZRANGE", EndpointLeaseScript.keys(keys)[0], "0", "-1", "WITHSCORES").array ?? []
        var leases: [String: Int64] = [:]
        for index in stride(from: 0, to: pairs.count - 1, by: 2) {
            leases[pairs[index].string ?? "?"] = Int64(pairs[index + 1].string ?? "") ?? -1
        }
        return leases
    }

    /// Nobody is in line: no line key, no waiting count.
    func expectNoLine(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let keys = EndpointLeaseScript.keys(keys)
        #expect(try await client.send("EXISTS", keys[2], keys[3]) == .integer(0), sourceLocation: sourceLocation)
        #expect(try await client.send("HEXISTS", keys[1], "waiting") == .integer(0), sourceLocation: sourceLocation)
    }

    /// Every key on the server has a TTL.
    func expectEveryKeyHasTTL(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let all = try await client.send("KEYS", "*").array ?? []
        #expect(!all.isEmpty, "no key at all", sourceLocation: sourceLocation)
        for key in all {
            let ttl = try await client.send("PTTL", key.string ?? "").integer ?? 0
            #expect(ttl > 0, "\(key) has no TTL", sourceLocation: sourceLocation)
        }
    }
}

@Suite("Endpoint lease script: the rules on a real server, with made-up times", .needsRedisServer)
struct EndpointLeaseScriptTests {
    @Test("acquire grants up to the limit, then answers full until the earliest expiry")
    func acquireUpToLimit() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            #expect(try await leases.acquire("a", ttl: 10_000, now: 10_000) == .granted(expiry: 20_000))
            #expect(try await leases.acquire("b", ttl: 50_000, now: 10_500) == .granted(expiry: 60_500))
            #expect(try await leases.acquire("c", now: 10_600) == .full(retryIn: 9_400))
            #expect(try await leases.leases() == ["a": 20_000, "b": 60_500])
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("an expired lease is dropped: its place goes to the next acquire")
    func expiryDrops() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a", ttl: 1_000, now: 10_000)
            _ = try await leases.acquire("b", ttl: 5_000, now: 10_000)
            #expect(try await leases.acquire("c", now: 10_999) == .full(retryIn: 1_000))   // 1 µs left, floored to 1 ms
            #expect(try await leases.acquire("c", ttl: 1_000, now: 11_000) == .granted(expiry: 12_000))
            #expect(try await leases.leases() == ["b": 15_000, "c": 12_000])
        }
    }

    @Test("acquiring with a token already held renews it and takes no second place")
    func acquireIsIdempotent() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a", now: 10_000)
            _ = try await leases.acquire("b", now: 10_000)
            #expect(try await leases.acquire("a", ttl: 1_000, now: 10_200) == .granted(expiry: 11_200))
            #expect(try await leases.leases() == ["a": 11_200, "b": 11_000])
        }
    }

    @Test("release gives a lease back once; a second release, or one of an unknown token, does nothing")
    func releaseIsIdempotent() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a", now: 10_000)
            _ = try await leases.acquire("b", ttl: 5_000, now: 10_000)
            #expect(try await leases.run(.release(token: "a"), now: 10_100) == .released(true))
            #expect(try await leases.run(.release(token: "a"), now: 10_100) == .released(false))
            #expect(try await leases.run(.release(token: "zz"), now: 10_100) == .released(false))
            #expect(try await leases.acquire("c", now: 10_200) == .granted(expiry: 11_200))
            #expect(try await leases.acquire("d", now: 10_700) == .full(retryIn: 1_000))   // 500 µs to c's expiry, floored to 1 ms
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("while nobody waits, an acquire writes no line: no line key and no waiting count")
    func noLineWhileNobodyWaits() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a1", now: 10_000)
            _ = try await leases.acquire("b1", now: 10_000)
            _ = try await leases.run(.release(token: "a1"), now: 10_100)
            _ = try await leases.acquire("c1", now: 10_200)
            try await leases.expectNoLine()
        }
    }

    @Test("two askers with a backlog and limit 1 take turns: the one that releases and asks at once is declined while the other waits")
    func lineAlternates() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            func ask(_ token: String, at now: Int64) async throws -> EndpointLeaseCall.Reply {
                try await leases.acquire(token, limit: 1, ttl: 100_000, poll: 1_000, now: now)
            }
            #expect(try await ask("a1", at: 10_000) == .granted(expiry: 110_000))
            #expect(try await ask("b1", at: 10_500) == .full(retryIn: 99_500))   // full: in line
            #expect(try await leases.line() == ["b"])
            var (holder, waiter) = ("a", "b")
            var (held, waiting) = ("a1", "b1")   // the holder's lease, the waiter's proposed token
            for round in 0..<4 {
                let t = Int64(15_000 + round * 5_000)
                let asked = "\(holder)\(round + 2)"
                // The holder releases and asks again at once: the waiter is older in line.
                #expect(try await leases.run(.release(token: held), now: t) == .released(true))
                #expect(try await ask(asked, at: t + 1) == .full(retryIn: 1_000))
                #expect(try await leases.line() == [waiter, holder])
                // The waiter asks at its next poll and gets the lease; it leaves the line.
                #expect(try await ask(waiting, at: t + 900) == .granted(expiry: t + 100_900))
                #expect(try await leases.line() == [holder])
                #expect(try await ask(asked, at: t + 1_800) == .full(retryIn: 99_100))
                (holder, waiter, held, waiting) = (waiter, holder, waiting, asked)
            }
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("an asker that has not asked for ten poll intervals leaves the line: free leases go to the others")
    func goneAskerDropped() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a1", limit: 1, ttl: 100_000, now: 10_000)
            // b asks once, with a poll of 1 ms, then never again: it counts as gone at 20 000.
            #expect(try await leases.acquire("b1", limit: 1, poll: 1_000, now: 10_000) == .full(retryIn: 100_000))
            _ = try await leases.run(.release(token: "a1"), now: 11_000)
            #expect(try await leases.acquire("a2", limit: 1, now: 19_999) == .full(retryIn: 1_000))
            #expect(try await leases.acquire("a2", limit: 1, ttl: 1_000, now: 20_000) == .granted(expiry: 21_000))
            #expect(try await leases.line() == [])
            try await leases.expectNoLine()
        }
    }

    @Test("an asker in line that asks through a shared pause of a hundred polls keeps its place: after the pause the older asker is still first")
    func pauseKeepsTheLine() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("h1", limit: 1, ttl: 1_000_000, now: 10_000)
            #expect(try await leases.acquire("a1", limit: 1, now: 11_000) == .full(retryIn: 999_000))
            #expect(try await leases.acquire("b1", limit: 1, now: 12_000) == .full(retryIn: 998_000))
            #expect(try await leases.line() == ["a", "b"])
            _ = try await leases.run(.release(token: "h1"), now: 13_000)
            #expect(try await leases.run(.pause(duration: 100_000), now: 13_000) == .pausedUntil(113_000))
            // Both ask every five polls while paused: far longer than their ten polls of liveness in all.
            for now in stride(from: Int64(15_000), to: 113_000, by: 5_000) {
                #expect(try await leases.acquire("b1", limit: 1, now: now) == .paused(remaining: 113_000 - now))
                #expect(try await leases.acquire("a1", limit: 1, now: now) == .paused(remaining: 113_000 - now))
            }
            #expect(try await leases.line() == ["a", "b"])
            // The pause over, the newer asker asks first: the older one is still ahead.
            #expect(try await leases.acquire("b1", limit: 1, now: 113_000) == .full(retryIn: 1_000))
            #expect(try await leases.acquire("a1", limit: 1, ttl: 1_000, now: 113_000) == .granted(expiry: 114_000))
            #expect(try await leases.line() == ["b"])
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("with limit 3, free leases go by rank in line: as many oldest askers as leases are free, newcomers after them")
    func freeLeasesByRank() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            func ask(_ token: String, at now: Int64) async throws -> EndpointLeaseCall.Reply {
                try await leases.acquire(token, limit: 3, ttl: 1_000_000, poll: 100_000, now: now)
            }
            for token in ["x1", "x2", "x3"] { #expect(try await ask(token, at: 1_000) == .granted(expiry: 1_001_000)) }
            for (token, time) in [("u1", 2_000), ("v1", 3_000), ("w1", 4_000)] {
                #expect(try await ask(token, at: Int64(time)) == .full(retryIn: 1_001_000 - Int64(time)))
            }
            #expect(try await leases.line() == ["u", "v", "w"])
            _ = try await leases.run(.release(token: "x1"), now: 5_000)
            _ = try await leases.run(.release(token: "x2"), now: 5_000)
            // Two free, three older askers: a newcomer and the third in line wait.
            #expect(try await ask("n1", at: 6_000) == .full(retryIn: 100_000))
            #expect(try await ask("w1", at: 6_000) == .full(retryIn: 100_000))
            // The second in line is among the first two: granted.
            #expect(try await ask("v1", at: 6_000) == .granted(expiry: 1_006_000))
            // One free: only the first in line may take it.
            #expect(try await ask("w1", at: 7_000) == .full(retryIn: 100_000))
            #expect(try await ask("u1", at: 7_000) == .granted(expiry: 1_007_000))
            #expect(try await ask("w1", at: 8_000) == .full(retryIn: 993_000))
            #expect(try await leases.line() == ["w", "n"])
            #expect(try await leases.leases().count == 3)
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("adopt grants a lease whatever the limit, the line or a pause, and it counts toward the limit")
    func adopt() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a1", limit: 1, ttl: 100_000, now: 10_000)
            _ = try await leases.acquire("b1", limit: 1, now: 10_000)   // in line
            #expect(try await leases.run(.adopt(token: "c1", ttl: 50_000), now: 11_000) == .granted(expiry: 61_000))
            _ = try await leases.run(.pause(duration: 100_000), now: 12_000)
            #expect(try await leases.run(.adopt(token: "c2", ttl: 50_000), now: 12_000) == .granted(expiry: 62_000))
            #expect(try await leases.leases() == ["a1": 110_000, "c1": 61_000, "c2": 62_000])
            #expect(try await leases.line() == ["b"])
            _ = try await leases.run(.release(token: "a1"), now: 200_000)
            // After the pause: c1 and c2 expired; b's liveness (10 polls) too.
            #expect(try await leases.acquire("d1", limit: 1, now: 200_000) == .granted(expiry: 201_000))
        }
    }

    @Test("renew moves a held lease's expiry; a lease that expired is not taken back")
    func renew() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a", limit: 1, ttl: 10_000, now: 10_000)
            #expect(try await leases.run(.renew(token: "a", ttl: 10_000), now: 19_000) == .renewed(expiry: 29_000))
            // Past its first expiry it still holds the only place.
            #expect(try await leases.acquire("b", limit: 1, now: 25_000) == .full(retryIn: 4_000))
            #expect(try await leases.run(.renew(token: "a", ttl: 10_000), now: 29_000) == .renewed(expiry: nil))
            #expect(try await leases.leases() == [:])
            #expect(try await leases.acquire("b", limit: 1, ttl: 1_000, now: 29_000) == .granted(expiry: 30_000))
        }
    }

    @Test("a pause answers paused until it ends, is never shortened, and a far one is clamped, not wrapped")
    func pause() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            #expect(try await leases.run(.pause(duration: 5_000), now: 10_000) == .pausedUntil(15_000))
            #expect(try await leases.run(.pause(duration: 1_000), now: 10_000) == .pausedUntil(15_000))
            #expect(try await leases.run(.pause(duration: -1_000), now: 10_000) == .pausedUntil(15_000))
            #expect(try await leases.acquire("a", now: 12_000) == .paused(remaining: 3_000))
            #expect(try await leases.leases() == [:])
            try await leases.expectEveryKeyHasTTL()
            #expect(try await leases.acquire("a", ttl: 1_000, now: 15_000) == .granted(expiry: 16_000))
            let max = EndpointLeaseCall.maxMicroseconds
            #expect(try await leases.run(.pause(duration: .max), now: 20_000) == .pausedUntil(max))
            #expect(try await leases.acquire("b", now: 30_000) == .paused(remaining: max - 30_000))
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("a clock that steps back does not move decisions back (high-water mark)")
    func clockHighWaterMark() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            _ = try await leases.acquire("a", limit: 1, ttl: 1_000, now: 10_000)
            _ = try await leases.run(.release(token: "a"), now: 20_000)
            // 5 000 is before the mark: the lease's expiry counts from 20 000.
            #expect(try await leases.acquire("b", limit: 1, ttl: 1_000, now: 5_000) == .granted(expiry: 21_000))
        }
    }

    @Test("Redis's own clock (TIME) is used when no time is given, in microseconds")
    func redisClock() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            let time = try await leases.client.send("TIME").array ?? []
            let serverNow = (Int64(time.first?.string ?? "") ?? 0) * 1_000_000
            guard case .granted(let expiry) = try await leases.acquire("a", ttl: 1_000_000, now: nil) else {
                Issue.record("not granted")
                return
            }
            #expect(expiry >= serverNow + 1_000_000 && expiry < serverNow + 1_000_000 + 60_000_000)
            try await leases.expectEveryKeyHasTTL()
        }
    }

    @Test("keys live for their last expiry or pause plus a minute, and every key has a TTL")
    func ttls() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            // Made-up times are far behind the server's clock: the TTL counts from the script's now.
            _ = try await leases.acquire("a", ttl: 30_000_000, now: 10_000)
            let keys = EndpointLeaseScript.keys(leases.keys)
            let leaseTTL = try await leases.client.send("PTTL", keys[0]).integer ?? 0
            let stateTTL = try await leases.client.send("PTTL", keys[1]).integer ?? 0
            // 30 s of lease and a minute of grace; more than the grace alone, however slow the machine.
            #expect(leaseTTL > 60_000 && leaseTTL <= 90_000)
            #expect(stateTTL > 60_000 && stateTTL <= 90_000)
            _ = try await leases.run(.release(token: "a"), now: 20_000)
            #expect(try await leases.client.send("EXISTS", keys[0]).integer == 0)
            let afterRelease = try await leases.client.send("PTTL", keys[1]).integer ?? 0
            #expect(afterRelease > 30_000 && afterRelease <= 60_000)
        }
    }

    @Test("bad arguments are an error reply naming them, and nothing is written")
    func badArguments() async throws {
        try await withRedisServer { server in
            let leases = LeaseHarness(server)
            let keys = EndpointLeaseScript.keys(leases.keys)
            for arguments in [["acquire", "10", "0", "t", "5", "a", "1"], ["acquire", "10", "1", "", "5", "a", "1"],
                              ["acquire", "10", "1", "t", "5", "", "1"], ["acquire", "10", "1", "t", "5", "a", "0"],
                              ["adopt", "10", "t", "0"], ["renew", "x"], ["nope", ""]] {
                await #expect(throws: RedisError.self) {
                    _ = try await leases.client.evaluate(EndpointLeaseScript.script, keys: keys, arguments: arguments)
                }
            }
            let error = await #expect(throws: RedisError.self) {
                _ = try await leases.client.evaluate(EndpointLeaseScript.script, keys: keys, arguments: ["acquire", "10", "0", "t", "5"])
            }
            #expect("\(error.map { "\($0)" } ?? "")".contains("threadkit endpoint leases: limit must be at least 1, got 0"))
            let written = try await leases.client.send("KEYS", "*").array ?? []
            #expect(written.isEmpty)
        }
    }
}

@Suite("RedisEndpointLeases: keys and tokens")
struct RedisEndpointLeasesKeysTests {
    @Test("each endpoint has its own keys under the user's key, braces and percent signs escaped")
    func keysPerEndpoint() {
        let leases = RedisEndpointLeases(client: RedisClient(.unixSocket(path: "/nonexistent")), key: "a{b}%")
        let first = leases.keys(for: "http://one.example:80")
        let second = leases.keys(for: "http://two.example:80")
        #expect(first.key == "a%7Bb%7D%25|http://one.example:80")
        #expect(first != second)
        #expect(EndpointLeaseScript.keys(first) == ["threadkit:{a%7Bb%7D%25|http://one.example:80}:leases",
                                                    "threadkit:{a%7Bb%7D%25|http://one.example:80}:leases:state",
                                                    "threadkit:{a%7Bb%7D%25|http://one.example:80}:leases:line",
                                                    "threadkit:{a%7Bb%7D%25|http://one.example:80}:leases:alive"])
    }
}

extension RedisEndpointLeasesKeysTests {
    @Test("a token's random part is drawn from 64 bits, not 32: replicas that are all pid 1 still propose different tokens")
    func tokenRandomIs64Bits() {
        let client = RedisClient(.unixSocket(path: "/nonexistent"))
        let randoms = (0..<64).compactMap { _ in
            RedisEndpointLeases(client: client, key: "k").tokenPrefix.split(separator: ".").last.flatMap { UInt64($0, radix: 36) }
        }
        #expect(randoms.count == 64)
        // 64 draws all below 2³² from 64 bits: a chance of 2⁻²⁰⁴⁸.
        #expect(randoms.contains { $0 > UInt64(UInt32.max) })
    }

    @Test("a release that keeps failing is kept only until its lease has expired anyway (leaseTTL after it), then ends its follow-up")
    func failedReleaseEndsAtItsExpiry() async throws {
        let client = makeClient(.unixSocket(path: "/nonexistent/threadkit-no-redis.sock"), breaker: longBackoff)
        _ = try? await client.send("PING")   // refused: the breaker opens for a minute
        let leases = RedisEndpointLeases(client: client, key: "k", leaseTTL: .seconds(1))
        let released = ContinuousClock.now
        leases.release(EndpointLease(endpoint: "http://api.example.com:80", token: "first"))
        #expect(leases.pendingReleaseCount == 1)
        #expect(client.followUps.withLock { $0.openCount } == 1)
        // The retry timer (every third of the lease, at most) sends it again, refused, until its
        // lease has expired: then it ends.
        #expect(await eventually { client.followUps.withLock { $0.openCount } == 0 })
        #expect(released.duration(to: .now) >= .milliseconds(750))
        #expect(leases.pendingReleaseCount == 0)
    }

    @Test("a release dropped beyond maxPendingReleases is logged, once until Redis answers")
    func droppedReleaseLogged() async {
        let lines = LogLines()
        let client = makeClient(.unixSocket(path: "/nonexistent/threadkit-no-redis.sock"), lines: lines, breaker: longBackoff)
        _ = try? await client.send("PING")   // refused: the breaker opens for a minute
        let leases = RedisEndpointLeases(client: client, key: "k", maxPendingReleases: 3)
        func release(_ range: Range<Int>) {
            for index in range { leases.release(EndpointLease(endpoint: "http://api.example.com:80", token: "t\(index)")) }
        }
        release(0..<3)
        #expect(leases.pendingReleaseCount == 3)
        #expect(lines.count(containing: "more are dropped") == 0)
        release(3..<10)
        #expect(leases.pendingReleaseCount == 3)
        #expect(lines.count(containing: "3 releases wait for Redis") == 1)
        #expect(lines.count(containing: "more are dropped") == 1)
    }
}

@Suite("Coordination of endpoint limits: equality and arguments")
struct EndpointCoordinationTests {
    @Test("coordinations are equal when they carry the same coordinator objects and fallback")
    func equality() {
        let client = RedisClient(.unixSocket(path: "/nonexistent"))
        let leases = RedisEndpointLeases(client: client, key: "api")
        let other = RedisEndpointLeases(client: client, key: "api")
        let shared = Coordination(coordinator: nil, endpoints: leases, whenUnavailable: .failClosed)
        #expect(Coordination.local == Coordination.local)
        #expect(shared == Coordination(coordinator: nil, endpoints: leases, whenUnavailable: .failClosed))
        #expect(shared != Coordination(coordinator: nil, endpoints: other, whenUnavailable: .failClosed))
        #expect(shared != Coordination(coordinator: nil, endpoints: leases, whenUnavailable: .failOpen))
        #expect(shared != .local)
        #expect(URLDispatcher.EndpointLimits(maxRequests: 2, coordination: shared) != URLDispatcher.EndpointLimits(maxRequests: 2))
        #expect(URLDispatcher.EndpointLimits(maxRequests: 2) == URLDispatcher.EndpointLimits(maxRequests: 2, coordination: .local))
    }

    @Test("endpoint limits shared with a fallback share out of range stop, naming it", .exitTestOnOwnThreads)
    func badShare() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let leases = RedisEndpointLeases(client: RedisClient(.unixSocket(path: "/nonexistent")), key: "api")
            let coordination = Coordination(coordinator: nil, endpoints: leases, whenUnavailable: .localFallback(share: 0))
            _ = URLDispatcher.EndpointLimits(maxRequests: 2, coordination: coordination)
        }
        expectMessage(result, contains: ["URLDispatcher.EndpointLimits.init: coordination: the fallback share must be in 0 < share ≤ 1, got 0.0"])
    }
}

@Suite("RedisEndpointLeases: answers and releases that could not be sent", .needsRedisServer)
struct RedisEndpointLeasesReleaseTests {
    static let endpoint = "http://api.example.com:80"

    func acquire(_ leases: RedisEndpointLeases, limit: Int = 2) async -> EndpointLeaseAnswer {
        await withCheckedContinuation { continuation in
            leases.acquire(EndpointLeaseRequest(endpoint: Self.endpoint, limit: limit)) { continuation.resume(returning: $0) }
        }
    }

    func tokens(_ client: RedisClient, _ leases: RedisEndpointLeases) async throws -> [String] {
        let key = EndpointLeaseScript.keys(leases.keys(for: Self.endpoint))[0]
        return (try await client.send("ZRANGE", key, "0", "-1").array ?? []).compactMap(\.string)
    }

    @Test("tokens are unique; a full endpoint is asked again within the poll interval; a pause is answered as such")
    func answers() async throws {
        try await withRedisServer { server in
            // Leases of 10 min: none expires during the test, however slow the machine.
            let leases = RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(600),
                                             pollInterval: .milliseconds(20))
            guard case .granted(let first) = await acquire(leases, limit: 1) else {
                Issue.record("the first acquire was not granted")
                return
            }
            #expect(await acquire(leases, limit: 1) == .full(retryIn: .milliseconds(20)))   // the lease has 10 min left
            leases.release(first)
            guard case .granted(let second) = await acquire(leases, limit: 1) else {
                Issue.record("the lease given back was not granted again")
                return
            }
            #expect(first.token != second.token)
            leases.pause(endpoint: Self.endpoint, for: .seconds(30))
            guard case .paused(let remaining) = await acquire(leases, limit: 5) else {
                Issue.record("the pause was not answered")
                return
            }
            #expect(remaining > .seconds(29) && remaining <= .seconds(30))
        }
    }

    @Test("a release lost after it was sent (its connection dropped while Redis was paused) is sent again: the lease is gone long before its TTL, and a flush waits for it")
    func lostReleaseIsSentAgain() async throws {
        try await withRedisServer { server in
            // The release times out after 100 ms and its connection is dropped after 300 ms, while
            // Redis holds it unrun (CLIENT PAUSE): dropped with its connection, it never runs.
            let client = makeClient(server.address, timeout: .milliseconds(100), connectionTimeout: .milliseconds(300))
            let leases = RedisEndpointLeases(client: client, key: "api", leaseTTL: .seconds(600))
            // The acquire is one EVALSHA round trip on an open connection, however loaded the
            // machine: the client connects first (a PING, bounded) and the script is cached.
            let observer = makeClient(server.address)
            _ = try await observer.send("SCRIPT", "LOAD", EndpointLeaseScript.script.source)
            #expect(await eventually { (try? client.sendSync("PING")) == .simpleString("PONG") })
            guard case .granted(let held) = await acquire(leases) else {
                Issue.record("the first acquire was not granted")
                return
            }
            #expect(try await tokens(observer, leases) == [held.token])
            #expect(try await observer.send("CLIENT", "PAUSE", "1500", "ALL") == .simpleString("OK"))
            let paused = ContinuousClock.now
            leases.release(held)
            // Once a flush succeeds, every release begun before it is answered.
            var flushed = false
            while !flushed, paused.duration(to: .now) < .seconds(10) {
                do {
                    try await client.flush(timeout: .seconds(5))
                    flushed = true
                } catch {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(flushed)
            #expect(try await tokens(observer, leases) == [])
            #expect(paused.duration(to: .now) < .seconds(10))   // not the lease's 10 min
            #expect(leases.pendingReleaseCount == 0)
        }
    }

    @Test("a release Redis answers with an error is sent again until it is answered, and a flush waits for it meanwhile")
    func failedReleaseHoldsFlush() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            let leases = RedisEndpointLeases(client: client, key: "api", leaseTTL: .seconds(600))
            guard case .granted(let held) = await acquire(leases) else {
                Issue.record("the first acquire was not granted")
                return
            }
            // The leases' set replaced by a string: the script fails (WRONGTYPE) while PING works.
            let observer = makeClient(server.address)
            let key = EndpointLeaseScript.keys(leases.keys(for: Self.endpoint))[0]
            _ = try await observer.send("RENAME", key, key + ":aside")
            _ = try await observer.send("SET", key, "not a sorted set")
            leases.release(held)
            let flushed = LockedValue(false)
            let flush = Task {
                try await client.flush(timeout: .seconds(10))
                flushed.value = true
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(!flushed.value)   // the release is still to be answered
            _ = try await observer.send("RENAME", key + ":aside", key)   // in one step: the string goes
            try await flush.value
            #expect(try await tokens(observer, leases) == [])   // at once: the flush waited for it
        }
    }

    @Test("an acquire whose outcome is unknown is given back however long Redis stays frozen: its lease's time counts from Redis's next answer, not from the release")
    func unknownAcquireKeptWhileFrozen() async throws {
        try await withRedisServer { server in
            // Leases of 1 s; the server stays frozen 1.5 s. Its buffered acquire runs when it goes
            // on, so that lease lives until a second after then, whatever the release's age.
            let client = makeClient(server.address, timeout: .milliseconds(200), breaker: longBackoff, connectionTimeout: .seconds(60))
            let leases = RedisEndpointLeases(client: client, key: "api", leaseTTL: .seconds(1))
            server.pause()
            guard case .unavailable = await acquire(leases) else {
                Issue.record("a frozen server's acquire was not unavailable")
                server.resume()
                return
            }
            #expect(leases.pendingReleaseCount == 1)
            try await Task.sleep(for: .milliseconds(1_500))
            // Sent again before this release (refused: the breaker is open), it is kept: Redis has
            // not answered since.
            leases.release(EndpointLease(endpoint: Self.endpoint, token: "other"))
            #expect(leases.pendingReleaseCount == 2)
            server.resume()
        }
    }

    @Test("an acquire whose answer timed out, and a release the breaker refused, are given back once Redis answers again")
    func lostAnswersAreGivenBack() async throws {
        try await withRedisServer { server in
            // The breaker stays open until the frozen server's late reply closes it, however slow the
            // machine; the connection is not dropped meanwhile.
            let client = makeClient(server.address, timeout: .milliseconds(300), breaker: longBackoff, connectionTimeout: .seconds(60))
            let leases = RedisEndpointLeases(client: client, key: "api")
            guard case .granted(let held) = await acquire(leases) else {
                Issue.record("the first acquire was not granted")
                return
            }
            server.pause()
            // Sent, then timed out: it may be granted once the server goes on, so it is given back;
            // the breaker is open now, so that release waits, as does the one below.
            guard case .unavailable = await acquire(leases) else {
                Issue.record("a frozen server's acquire was not unavailable")
                server.resume()
                return
            }
            leases.release(held)
            #expect(leases.pendingReleaseCount == 2)
            server.resume()
            let observer = makeClient(server.address)
            var granted: EndpointLease?
            let deadline = ContinuousClock.now + .seconds(10)
            while granted == nil, ContinuousClock.now < deadline {
                if case .granted(let lease) = await acquire(leases) { granted = lease } else { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(leases.pendingReleaseCount == 0)
            // The releases went out on the leases' own connection: the observer sees them soon.
            let expected = [granted?.token ?? "none"]
            var seen: [String] = []
            let seenBy = ContinuousClock.now + .seconds(10)
            while seen != expected, ContinuousClock.now < seenBy {
                seen = try await tokens(observer, leases)
                if seen != expected { try await Task.sleep(for: .milliseconds(5)) }
            }
            #expect(seen == expected)
        }
    }
}

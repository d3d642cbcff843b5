import Testing
import ThreadKit
@testable import ThreadKitRedis
import ThreadKitTestSupport

/// The shared throttle's Lua script on a real redis-server, rule by rule with made-up times (the
/// same cases as `SharedThrottleTests` drive the Swift model with), plus what only Redis has: the
/// clock's high-water mark, TTLs, clamping to Lua's exact integers, `TIME`, and `SCRIPT FLUSH`.
@Suite("The shared throttle script on a real redis-server", .needsRedisServer,
       .timeLimit(.minutes(1)))
struct SharedThrottleScriptTests {
    typealias Reply = SharedThrottleCall.Reply
    static let never = SharedThrottleCall.maxMicroseconds

    @Test(".concurrent: the first start is at once; the next waits for the gap that follows the last start, from its start")
    func concurrentGapFromStart() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            #expect(try await script.reserve(1_000, gap: 300) == .reserved(at: 1_000, wait: 0, token: nil))
            // The requester's own gap (50) follows its start; the last start's (300) decides this one.
            #expect(try await script.reserve(1_010, gap: 50) == .reserved(at: 1_300, wait: 290, token: nil))
            #expect(try await script.reserve(1_020, gap: 50) == .reserved(at: 1_350, wait: 330, token: nil))
            #expect(try await script.reserve(9_000, gap: 50) == .reserved(at: 9_000, wait: 0, token: nil))
            let state = try await script.stored()
            #expect(state.number("lastStart") == 9_000 && state.number("lastGap") == 50 && state.fields["monitor"] == "concurrent")
            try await script.expectBounded(count: nil)
        }
    }

    @Test("At most N starts in any window W; the log is a list of exactly the N latest starts, with a TTL")
    func slidingWindowAndBoundedLog() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let limit = (count: 3, window: Int64(1_000))
            for now: Int64 in [0, 10, 20] {
                #expect(try await script.reserve(now, gap: 0, limit: limit) == .reserved(at: now, wait: 0, token: nil))
            }
            #expect(try await script.reserve(30, gap: 0, limit: limit) == .reserved(at: 1_000, wait: 970, token: nil))
            #expect(try await script.reserve(40, gap: 0, limit: limit) == .reserved(at: 1_010, wait: 970, token: nil))
            #expect(try await script.stored().log == [20, 1_000, 1_010])
            // Two starts in one microsecond are two entries (a sorted set would merge them).
            let other = ThrottleScriptHarness(server, key: "other")
            for _ in 0..<2 { _ = try await other.reserve(5, gap: 0, limit: (4, 3_500)) }
            #expect(try await other.stored().log == [5, 5])
            for now in stride(from: Int64(0), to: 100_000, by: 1_000) {
                _ = try await other.reserve(now, gap: 0, limit: (4, 3_500))
                try await other.expectBounded(count: 4)
            }
            #expect(try await other.stored().log == [96_000, 97_000, 98_000, 99_000])
        }
    }

    @Test("No start before a pause ends; a pause is never shortened, and one already past is none")
    func pauses() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            #expect(try await script.pause(4_000, now: 1_000) == 5_000)
            #expect(try await script.pause(2_000, now: 1_000) == 5_000)
            #expect(try await script.pause(-100, now: 1_000) == 5_000)
            #expect(try await script.reserve(1_000) == .reserved(at: 5_000, wait: 4_000, token: nil))
            #expect(try await script.pause(5_000, now: 2_000) == 7_000)
            _ = try await script.reserve(8_000)
            #expect(try await script.stored().fields["pausedUntil"] == nil)
            #expect(try await script.pause(0, now: 8_000) == nil)
            try await script.expectBounded(count: nil)
        }
    }

    @Test("Beyond the horizon nothing is recorded and the decline says when the start falls inside it, never sooner than 1 ms")
    func horizonDeclines() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            _ = try await script.reserve(0, gap: 10_000)
            let before = try await script.stored()
            #expect(try await script.reserve(100, horizon: 2_000) == .declined(retryIn: 7_900))
            var after = try await script.stored()
            after.fields["lastNow"] = before.fields["lastNow"]
            #expect(after.fields == before.fields && after.log == before.log)
            // 10 µs beyond the horizon: asked again 1 ms later, not 10 µs (no busy loop).
            #expect(try await script.reserve(7_990, horizon: 2_000) == .declined(retryIn: 1_000))
            #expect(try await script.reserve(8_000, horizon: 2_000) == .reserved(at: 10_000, wait: 2_000, token: nil))
        }
    }

    @Test(".serial: another process's lease declines until it expires or one horizon passes; the gap counts from the end")
    func serialLease() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            guard case .reserved(0, 0, let token?) = try await script.reserve(0, gap: 100, monitor: .serial) else {
                Issue.record("no lease")
                return
            }
            var state = try await script.stored()
            #expect(state.number("token") == Int64(token) && state.number("expiry") == 10_000 && state.number("reserves") == 1
                && state.number("ends") == 0)
            #expect(try await script.reserve(50, monitor: .serial, horizon: 1_000, token: 2, asker: 2) == .declined(retryIn: 1_000))
            #expect(try await script.reserve(9_500, monitor: .serial, horizon: 1_000, token: 2, asker: 2) == .declined(retryIn: 1_000))
            #expect(try await script.reserve(9_500, monitor: .serial, horizon: 600, token: 2, asker: 2) == .declined(retryIn: 1_000))
            #expect(try await script.finished(token, now: 9_600))
            state = try await script.stored()
            #expect(state.fields["token"] == nil && state.number("lastEnd") == 9_600)
            guard case .reserved(9_700, 100, let next?) = try await script.reserve(9_600, monitor: .serial, token: 2, asker: 2) else {
                Issue.record("no start after the end")
                return
            }
            #expect(next == 2)
            // A token handed back again, or one that never held the lease, changes nothing.
            #expect(try await script.finished(token, number: 2, now: 9_800) == false)
            #expect(try await script.stored().number("token") == Int64(next))
            try await script.expectBounded(count: nil)
        }
    }

    @Test(".serial: an expired lease is dropped and its start taken to have ended at the expiry, even after a nested start ended")
    func serialLeaseExpires() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            guard case .reserved(0, 0, let token?) = try await script.reserve(0, gap: 100, monitor: .serial) else {
                Issue.record("no lease")
                return
            }
            // A nested start under the same lease, which ends; the outer task never reports its end.
            #expect(try await script.reserve(20, gap: 40, monitor: .serial, holding: token) == .reserved(at: 100, wait: 80, token: token))
            #expect(try await script.stored().number("reserves") == 2)
            #expect(try await script.finished(token, now: 150))
            #expect(try await script.stored().number("ends") == 1)
            // The lease (extended to 100 + 10,000 by the nested start) expires: the nested start's gap
            // (40) counts from the expiry, not from the nested start's earlier end (150).
            #expect(try await script.reserve(10_050, monitor: .serial, horizon: 5_000) == .declined(retryIn: 1_000))
            guard case .reserved(10_140, 30, let next?) = try await script.reserve(10_110, gap: 100, monitor: .serial, token: 3) else {
                Issue.record("the expired lease still holds, or the gap does not count from the expiry: \(try await script.stored())")
                return
            }
            #expect(next != token)
            // The crashed holder's late end is ignored.
            #expect(try await script.finished(token, now: 10_200) == false)
        }
    }

    @Test("A request with another monitor or limit than the limit's state is answered with a mismatch and records nothing")
    func mismatch() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            _ = try await script.reserve(0, gap: 100, limit: (5, 1_000))
            let before = try await script.stored()
            #expect(try await script.reserve(10, monitor: .serial, limit: (5, 1_000))
                == .mismatch(stored: .init(monitor: .concurrent, limit: .init(count: 5, window: 1_000))))
            #expect(try await script.reserve(10, limit: (4, 1_000)) == .mismatch(stored: .init(monitor: .concurrent, limit: .init(count: 5, window: 1_000))))
            #expect(try await script.reserve(10, limit: nil) == .mismatch(stored: .init(monitor: .concurrent, limit: .init(count: 5, window: 1_000))))
            let after = try await script.stored()
            #expect(after.log == before.log && after.number("lastStart") == before.number("lastStart"))
            let other = ThrottleScriptHarness(server, key: "serial")
            _ = try await other.reserve(0, monitor: .serial)
            #expect(try await other.reserve(10, monitor: .concurrent) == .mismatch(stored: .init(monitor: .serial, limit: nil)))
        }
    }

    @Test("Once nothing binds, the state goes (its rules, line and log with it); no other key is left")
    func stateExpires() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            guard case .reserved(1_000, 0, let token?) = try await script.reserve(1_000, gap: 300, monitor: .serial, limit: (2, 5_000), token: 1_001) else {
                Issue.record("no lease")
                return
            }
            #expect(token == 1_001)
            #expect(try await script.finished(token, now: 1_400))
            // Another configuration is refused while the state binds (the window runs to 6,000)...
            #expect(try await script.reserve(5_999, gap: 0) == .mismatch(stored: .init(monitor: .serial, limit: .init(count: 2, window: 5_000))))
            // ...and taken once it has gone.
            #expect(try await script.reserve(6_000, gap: 0) == .reserved(at: 6_000, wait: 0, token: nil))
            let state = try await script.stored()
            #expect(state.fields["monitor"] == "concurrent" && state.fields["count"] == "0" && state.log.isEmpty)
            #expect(state.logTTL == -2)
            #expect(try await script.client.send("KEYS", "*").array?.count == 1)
            try await script.expectBounded(count: nil)
        }
    }

    @Test(".serial on Redis: a waiter that stops asking is dropped after its retry and the grace, as in the model, and holds the line up no longer")
    func deadWaiterDropped() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let poll = SharedThrottle.waiterPoll, grace = SharedThrottle.waiterGrace
            #expect(try await script.reserve(0, gap: 0, monitor: .serial, token: 10, asker: 1) == .reserved(at: 0, wait: 0, token: 10))
            // B is declined (told to ask again in one horizon, sooner than a poll), then dies.
            #expect(try await script.reserve(100, gap: 0, monitor: .serial, horizon: 5_000, token: 11, asker: 2) == .declined(retryIn: 5_000))
            let deadline = 100 + 5_000 + grace
            #expect(try await script.stored().fields["waiters"] == "2:100:\(deadline)")
            #expect(try await script.finished(10, now: 200))
            // Until then A is held behind B, the line kept with the state.
            #expect(try await script.reserve(deadline - 1, gap: 0, monitor: .serial, token: 12, asker: 1) == .declined(retryIn: 2 * poll))
            // Once B's life is over (exactly at it), A is first and is served, and leaves the line.
            #expect(try await script.reserve(deadline, gap: 0, monitor: .serial, token: 13, asker: 1) == .reserved(at: deadline, wait: 0, token: 13))
            #expect(try await script.stored().fields["waiters"] == nil)
        }
    }

    @Test(".serial on Redis: waiters further back poll less, up to five polls, and the line holds at most maxWaiters askers, as in the model")
    func lineCappedAndPollByRank() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let poll = SharedThrottle.waiterPoll
            #expect(try await script.reserve(0, gap: 0, monitor: .serial, token: 10, asker: 1_000) == .reserved(at: 0, wait: 0, token: 10))
            var retries: [SharedThrottle.Decision] = []
            for asker in 1...SharedThrottle.maxWaiters {
                retries.append(try await script.reserve(1, gap: 0, monitor: .serial, token: 11, asker: UInt64(asker)))
            }
            let expected = [9_999] + (1..<SharedThrottle.maxWaiters).map { min(poll * Int64(1 + $0), SharedThrottle.maxWaiterPoll) }
            #expect(retries == expected.map { .declined(retryIn: $0) })
            // Full: one more is declined without a place.
            #expect(try await script.reserve(2, gap: 0, monitor: .serial, token: 12, asker: 999) == .declined(retryIn: SharedThrottle.maxWaiterPoll))
            let line = try await script.stored().fields["waiters"]?.split(separator: ",") ?? []
            #expect(line.count == SharedThrottle.maxWaiters && !line.contains { $0.hasPrefix("999:") })
        }
    }

    @Test(".serial on Redis: the holder's next reserve queues behind the older waiter, who is served next; the line lives in the state")
    func servedInTurn() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let poll = SharedThrottle.waiterPoll, grace = SharedThrottle.waiterGrace
            #expect(try await script.reserve(0, gap: 0, monitor: .serial, token: 10, asker: 1) == .reserved(at: 0, wait: 0, token: 10))
            // Told to ask again when the lease expires (10_000), sooner than a poll.
            #expect(try await script.reserve(100, gap: 0, monitor: .serial, token: 11, asker: 2) == .declined(retryIn: 9_900))
            #expect(try await script.stored().fields["waiters"] == "2:100:\(10_000 + grace)")
            #expect(try await script.finished(10, now: 200))
            // The holder asks again at once: behind 2, second in line, so it polls at twice the first's pace.
            #expect(try await script.reserve(200, gap: 0, monitor: .serial, token: 12, asker: 1) == .declined(retryIn: 2 * poll))
            #expect(try await script.reserve(300, gap: 0, monitor: .serial, token: 13, asker: 2) == .reserved(at: 300, wait: 0, token: 13))
            #expect(try await script.stored().fields["waiters"] == "1:200:\(200 + 2 * poll + grace)")
            // A nested start bypasses the line.
            #expect(try await script.reserve(310, gap: 0, monitor: .serial, holding: 13, token: 14, asker: 2) == .reserved(at: 310, wait: 0, token: 13))
            // An end sent twice counts once: the lease holds until the second end.
            #expect(try await script.finished(13, number: 1, now: 320))
            #expect(try await script.finished(13, number: 1, now: 330))
            #expect(try await script.stored().number("ends") == 1)
            #expect(try await script.finished(13, number: 2, now: 340))
            #expect(try await script.reserve(350, gap: 0, monitor: .serial, token: 15, asker: 1) == .reserved(at: 350, wait: 0, token: 15))
            #expect(try await script.stored().fields["waiters"] == nil)
            try await script.expectBounded(count: nil)
        }
    }

    @Test("A late end of an expired lease is refused even when it is the first call after the expiry")
    func lateFinishAfterExpiry() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            guard case .reserved(0, 0, let token?) = try await script.reserve(0, gap: 100, monitor: .serial, leaseTTL: 10_000) else {
                Issue.record("no lease")
                return
            }
            #expect(try await script.finished(token, now: 10_050) == false)
            let state = try await script.stored()
            #expect(state.fields["token"] == nil && state.number("lastEnd") == 10_000)
        }
    }

    @Test("A clock that steps back is taken at its high-water mark: decisions never move back")
    func clockSteppingBack() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            #expect(try await script.reserve(10_000, gap: 100) == .reserved(at: 10_000, wait: 0, token: nil))
            // The clock stepped back 5 ms: now is still 10,000.
            #expect(try await script.reserve(5_000, gap: 100) == .reserved(at: 10_100, wait: 100, token: nil))
            #expect(try await script.stored().number("lastNow") == 10_000)
            #expect(try await script.pause(1_000, now: 0) == 11_000)
        }
    }

    @Test("A gap and a pause of .seconds(Int64.max) come back as the clamped 'never' (2^53-1 µs), not negative or wrapped")
    func hugeValuesClamp() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let forever = Duration.seconds(Int64.max).microsecondsRoundedUp
            #expect(try await script.reserve(1_000, gap: forever) == .reserved(at: 1_000, wait: 0, token: nil))
            #expect(try await script.stored().number("lastGap") == Self.never)
            #expect(try await script.reserve(2_000, horizon: 1_000) == .declined(retryIn: Self.never - 2_000 - 1_000))
            #expect(try await script.reserve(2_000, horizon: forever) == .reserved(at: Self.never, wait: Self.never - 2_000, token: nil))
            let paused = ThrottleScriptHarness(server, key: "paused")
            #expect(try await paused.pause(forever, now: 1_000) == Self.never)
            #expect(try await paused.reserve(3_000, horizon: 1_000) == .declined(retryIn: Self.never - 3_000 - 1_000))
            #expect(try await paused.pause(-forever, now: 3_000) == Self.never)
            let serial = ThrottleScriptHarness(server, key: "serial")
            guard case .reserved(_, _, _?) = try await serial.reserve(0, monitor: .serial, leaseTTL: forever) else {
                Issue.record("no lease")
                return
            }
            #expect(try await serial.stored().number("expiry") == Self.never)
            // Held "forever": the others are told to ask again in one poll (and kept in line until then).
            #expect(try await serial.reserve(10, monitor: .serial, horizon: forever, token: 2, asker: 2) == .declined(retryIn: SharedThrottle.waiterPoll))
            for harness in [script, paused, serial] { try await harness.expectBounded(count: nil) }
        }
    }

    @Test("Both keys live as long as the state matters (here the window, 120 s) plus one minute, and then go")
    func ttlCoversTheState() async throws {
        try await withRedisServer { server async throws in
            /// The keys' TTLs read right after `call`, each within what the time taken can have counted down.
            func expectTTL(milliseconds expected: Int64, log: Bool, after call: () async throws -> Void) async throws {
                let started = ContinuousClock.now
                try await call()
                let state = try await ThrottleScriptHarness(server).stored()
                let elapsed = (ContinuousClock.now - started).microsecondsRoundedUp / 1_000
                let allowed = (expected - elapsed - 250)...expected
                #expect(allowed.contains(state.stateTTL), "\(state), \(elapsed) ms taken")
                if log { #expect(allowed.contains(state.logTTL), "\(state), \(elapsed) ms taken") }
            }
            let script = ThrottleScriptHarness(server)
            // 120 s of window + 60 s of grace.
            try await expectTTL(milliseconds: 180_000, log: true) {
                _ = try await script.reserve(0, gap: 30_000_000, limit: (2, 120_000_000))
            }
            _ = try await script.client.send("FLUSHALL")
            // 1 ms of pause + 60 s of grace.
            try await expectTTL(milliseconds: 60_001, log: false) { () async throws in
                #expect(try await script.pause(1_000, now: 0) == 1_000)
            }
        }
    }

    @Test("Without an explicit now the script reads Redis's TIME, in microseconds")
    func readsRedisTime() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            func time() async throws -> Int64 {
                let parts = try await script.client.send("TIME").array ?? []
                return (Int64(parts.first?.string ?? "") ?? 0) * 1_000_000 + (Int64(parts.last?.string ?? "") ?? 0)
            }
            let before = try await time()
            guard case .reserved(let at, 0, nil) = try await script.reserve(nil, gap: 0) else {
                Issue.record("not reserved at once")
                return
            }
            let after = try await time()
            #expect(before <= at && at <= after)
            #expect(try await script.pause(60_000_000, now: nil)! >= at + 60_000_000)
        }
    }

    @Test("After SCRIPT FLUSH before every call the script runs again (EVAL on NOSCRIPT) with the same state")
    func scriptFlush() async throws {
        try await withRedisServer { server async throws in
            let lines = LogLines()
            let script = ThrottleScriptHarness(server)
            let client = makeClient(server.address, lines: lines)
            let flushed = ThrottleScriptHarness(client: client, keys: script.keys)
            for step in Int64(0)..<10 {
                #expect(try await client.send("SCRIPT", "FLUSH") == .simpleString("OK"))
                let answer = try await flushed.reserve(step * 10, gap: 100, limit: (3, 1_000))
                let expected: Int64 = [0, 100, 200, 1_000, 1_100, 1_200, 2_000, 2_100, 2_200, 3_000][Int(step)]
                #expect(answer == .reserved(at: expected, wait: expected - step * 10, token: nil))
            }
            #expect(lines.count(containing: "NOSCRIPT") == 10)
            try await flushed.expectBounded(count: 3)
        }
    }

    @Test("Bad arguments are an error reply that names them, and nothing is written")
    func badArguments() async throws {
        try await withRedisServer { server async throws in
            let script = ThrottleScriptHarness(server)
            let keys = SharedThrottleScript.keys(script.keys)
            let cases: [([String], String)] = [
                (["reserve", "0", "100", "concurrent", "0", "0", "0", "10", "", "1", "1"], "horizon must be at least 1"),
                (["reserve", "0", "-1", "concurrent", "0", "0", "10", "10", "", "1", "1"], "gap must be at least 0"),
                (["reserve", "0", "1", "sideways", "0", "0", "10", "10", "", "1", "1"], "monitor must be concurrent or serial"),
                (["reserve", "x", "1", "serial", "0", "0", "10", "10", "", "1", "1"], "now must be an integer"),
                (["reserve", "0", "1", "serial", "0", "0", "10", "10", "", "0", "1"], "token must be at least 1"),
                (["reserve", "0", "1", "serial", "0", "0", "10", "10", "", "1", ""], "asker must be an integer"),
                (["finished", "0", "1.5", "1"], "token must be an integer"),
                (["finished", "0", "5", "0"], "end number must be at least 1"),
                (["consume", "0", "5", "concurrent", "0", "0"], "unknown operation"),
                (["wander", "0"], "unknown operation"),
            ]
            for (arguments, message) in cases {
                do {
                    let reply = try await script.client.evaluate(SharedThrottleScript.script, keys: keys, arguments: arguments)
                    Issue.record("\(arguments) answered \(reply)")
                } catch RedisError.server(let error) {
                    #expect(error.contains("threadkit shared throttle: \(message)"), "\(error)")
                }
            }
            #expect(try await script.client.send("KEYS", "*") == .array([]))
        }
    }
}

extension ThrottleScriptHarness {
    init(client: RedisClient, keys: RedisLimitKeys) {
        self.client = client
        self.keys = keys
    }
}

/// The codec alone: what it sends and what it makes of replies the script never gives.
@Suite("SharedThrottleCall's arguments and replies")
struct SharedThrottleCallTests {
    @Test("Arguments: the operation, now (empty for TIME), then the values, clamped to ±(2^53-1)")
    func arguments() {
        let huge = SharedThrottleCall(
            .reserve(gap: .max, monitor: .serial, limit: .init(count: 3, window: .max), horizon: 5, leaseTTL: 7, holding: 9,
                     token: (1 << 53) - 1, asker: 11))
        #expect(huge.arguments == ["reserve", "", "9007199254740991", "serial", "3", "9007199254740991", "5", "7", "9", "9007199254740991", "11"])
        let plain = SharedThrottleCall(
            .reserve(gap: 0, monitor: .concurrent, limit: nil, horizon: 1, leaseTTL: 1, holding: nil, token: 3, asker: 4), now: 42)
        #expect(plain.arguments == ["reserve", "42", "0", "concurrent", "0", "0", "1", "1", "", "3", "4"])
        #expect(SharedThrottleCall(.pause(duration: .min), now: 1).arguments == ["pause", "1", "-9007199254740991"])
        #expect(SharedThrottleCall(.finished(token: 12, number: 3)).arguments == ["finished", "", "12", "3"])
        #expect((0..<100).allSatisfy { _ in SharedThrottle.isID(SharedThrottleCall.randomID()) })
    }

    @Test("The script's two keys carry the limit's hash tag, so a Redis Cluster keeps them on one node")
    func keysShareTheHashTag() {
        let keys = SharedThrottleScript.keys(RedisLimitKeys("api.example.com"))
        #expect(keys == ["threadkit:{api.example.com}:throttle", "threadkit:{api.example.com}:throttle:log"])
    }

    @Test("A reply the script never gives is a BadReply that quotes it, never a trap")
    func badReplies() throws {
        let reserve = SharedThrottleCall(.reserve(gap: 0, monitor: .concurrent, limit: nil, horizon: 1, leaseTTL: 1, holding: nil, token: 1, asker: 1))
        let bulk = { (text: String) in RESPValue.bulkString(Array(text.utf8)) }
        let bad: [RESPValue] = [
            .integer(1), .array(nil), .array([]), .array([bulk("reserved")]), .array([bulk("reserved"), .integer(1)]),
            .array([bulk("reserved"), .integer(1), .integer(-1)]), .array([bulk("reserved"), .integer(1), .integer(0), .integer(0)]),
            .array([bulk("declined"), .integer(0)]), .array([bulk("declined"), bulk("soon")]),
            .array([bulk("mismatch"), bulk("sideways"), .integer(0), .integer(0)]), .array([bulk("granted"), .integer(1), .integer(1)]),
        ]
        for reply in bad {
            #expect(throws: SharedThrottleCall.BadReply.self, "\(reply)") { try reserve.decode(reply) }
        }
        #expect(throws: SharedThrottleCall.BadReply.self) { try SharedThrottleCall(.finished(token: 1, number: 1)).decode(.integer(2)) }
        #expect(throws: SharedThrottleCall.BadReply.self) { try SharedThrottleCall(.pause(duration: 1)).decode(.integer(-5)) }
        #expect(throws: SharedThrottleCall.BadReply.self) { try SharedThrottleCall(.pause(duration: 1)).decode(.simpleString("OK")) }
        let good = RESPValue.array([bulk("reserved"), .integer(7), .integer(2), .integer(3)])
        #expect(try reserve.decode(good) == .decision(.reserved(at: 7, wait: 2, token: 3)))
        #expect(throws: SharedThrottleCall.BadReply.self) {
            try reserve.decode(.array([bulk("reserved"), .integer(7), .integer(2), .integer(1 << 53)]))
        }
        #expect(throws: SharedThrottleCall.BadReply.self) {
            try SharedThrottleCall(.renew(token: 1, leaseTTL: 1)).decode(.integer(5))
        }
    }
}

/// The codec's preconditions: a call the script would refuse stops in the caller, naming the argument.
@Suite("SharedThrottleCall's preconditions")
struct SharedThrottleCallPreconditionTests {
    @Test("A horizon of zero stops, naming it (a zero horizon would decline with no wait, a busy loop)", .exitTestOnOwnThreads)
    func zeroHorizon() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = SharedThrottleCall(.reserve(gap: 0, monitor: .concurrent, limit: nil, horizon: 0, leaseTTL: 1, holding: nil, token: 1, asker: 1))
        }
        expectMessage(result, contains: ["SharedThrottleCall: horizon must be more than zero, got 0"])
    }

    @Test("A negative gap stops, naming it", .exitTestOnOwnThreads)
    func negativeGap() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = SharedThrottleCall(.reserve(gap: -1, monitor: .serial, limit: nil, horizon: 1, leaseTTL: 1, holding: nil, token: 1, asker: 1))
        }
        expectMessage(result, contains: ["SharedThrottleCall: gap must not be negative, got -1"])
    }

    @Test("A token beyond 2^53-1 stops, naming it (Lua could not hold it exactly)", .exitTestOnOwnThreads)
    func hugeToken() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = SharedThrottleCall(.finished(token: UInt64(1) << 53, number: 1))
        }
        expectMessage(result, contains: ["SharedThrottleCall: a token is in 1...2^53-1, got 9007199254740992"])
    }

    @Test("An end number of zero stops, naming it (ends are numbered from 1)", .exitTestOnOwnThreads)
    func zeroEndNumber() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = SharedThrottleCall(.finished(token: 1, number: 0))
        }
        expectMessage(result, contains: ["SharedThrottleCall: an end number is at least 1, got 0"])
    }
}

import Foundation
import Testing
import ThreadKit
import ThreadKitTestSupport
@testable import ThreadKitRedis

/// How the Redis coordinator turns the script's decisions and the client's failures into the
/// queue's answers: pure mappings, no server.
@Suite("RedisStartCoordinator's answers")
struct RedisStartCoordinatorAnswerTests {
    /// A coordinator whose client never connects (nothing listens there): the mappings only.
    let coordinator = RedisStartCoordinator(
        client: RedisClient(.unixSocket(path: "/nonexistent/threadkit.sock")), keys: RedisLimitKeys("api.example.com"))

    @Test("Every RedisError is an unavailable answer: consumed exactly when the command may have run and was not refused")
    func errorsMap() {
        let soon = RedisStartCoordinator.retryAfterFailure
        let cases: [(RedisError, CoordinatorAnswer)] = [
            (.unavailable(retryIn: .milliseconds(35), lastFailure: "refused"), .unavailable(consumed: false, retryIn: .milliseconds(35))),
            (.connectionRefused(address: "unix:/x", reason: "ENOENT"), .unavailable(consumed: false, retryIn: soon)),
            (.timedOut(after: .milliseconds(100), sent: true), .unavailable(consumed: true, retryIn: soon)),
            (.timedOut(after: .milliseconds(100), sent: false), .unavailable(consumed: false, retryIn: soon)),
            (.connectionLost("reset", sent: true), .unavailable(consumed: true, retryIn: soon)),
            (.connectionLost("reset", sent: false), .unavailable(consumed: false, retryIn: soon)),
            (.server("LOADING Redis is loading the dataset in memory"), .unavailable(consumed: false, retryIn: soon)),
            (.server("BUSY Redis is busy running a script"), .unavailable(consumed: false, retryIn: soon)),
            (.server("READONLY You can't write against a read only replica."), .unavailable(consumed: false, retryIn: soon)),
            (.server("ERR threadkit shared throttle: gap must be at least 0, got -1"),
             .unavailable(consumed: true, retryIn: RedisStartCoordinator.retryAfterError)),
            (.server("OOM command not allowed when used memory > 'maxmemory'"),
             .unavailable(consumed: true, retryIn: RedisStartCoordinator.retryAfterError)),
        ]
        for (error, expected) in cases {
            #expect(coordinator.answer(to: error) == expected, "\(error)")
        }
    }

    @Test("A follow-up a busy server did not run is sent again after 10 ms, then a wait that doubles up to 2 s, not every 10 ms")
    func followUpRetryBacksOff() {
        var waits: [Duration] = []
        var previous: Duration?
        for _ in 0..<10 {
            let next = RedisStartCoordinator.followUpRetry(after: previous)
            waits.append(next)
            previous = next
        }
        #expect(waits == [10, 20, 40, 80, 160, 320, 640, 1_280, 2_000, 2_000].map { .milliseconds($0) })
    }

    @Test("The script's decisions: a reservation's wait and token, a decline's retry, a mismatch that names both rules")
    func decisionsMap() {
        let request = CoordinatedRequest(gap: .milliseconds(10), monitor: .serial, limit: .rate(5, per: .seconds(1)), holding: nil, asker: 1)
        #expect(coordinator.answer(to: .reserved(at: 9_000, wait: 1_500, token: 7), asked: request) == .reserved(wait: .microseconds(1_500), token: 7))
        #expect(coordinator.answer(to: .declined(retryIn: 2_000), asked: request) == .declined(retryIn: .milliseconds(2)))
        let stored = SharedThrottle.Rules(monitor: .concurrent, limit: nil)
        guard case .mismatch(let reason) = coordinator.answer(to: .mismatch(stored: stored), asked: request) else {
            Issue.record("not a mismatch")
            return
        }
        #expect(reason == "{api.example.com} is used with .concurrent and no limit; this queue has .serial and at most 5 starts per 1.0 seconds")
    }
}

/// Queues in one process, each with its own client, sharing one key on a real redis-server.
@Suite("Queues sharing a key on Redis", .needsRedisServer, .timeLimit(.minutes(2)))
struct RedisCoordinationTests {
    @Test("Two queues of one key on two clients are one queue: reservations keep the gap and the window on Redis's clock, every task starts once")
    func twoQueuesAreOne() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let gap = Duration.milliseconds(15)
            let limit = RateLimit.rate(4, per: .milliseconds(150))
            let queues = (0..<2).map {
                redisQueue("q\($0)", client: makeClient(server.address), key: "two", interval: gap, limit: limit, answers: answers)
            }
            let started = AtomicCounters(count: 24)
            for index in 0..<12 {
                for (number, queue) in queues.enumerated() { try queue.async { started.increment(number * 12 + index) } }
            }
            #expect(await waitUntilIdle(queues))
            #expect(started.indices(notEqualTo: 1).isEmpty, "a task did not start exactly once")
            #expect(answers.unavailable(consumed: false) + answers.unavailable(consumed: true) == 0)
            // Every start was reserved; a reservation reached late is given up and asked again, so there may be more.
            #expect(answers.reservations.count >= 24)
            #expect(Set(answers.all.filter { $0.reservedAt != nil }.map(\.queue)) == ["q0", "q1"])
            expectSharedRules(answers.reservations, gap: gap, limit: (4, .milliseconds(150)))
        }
    }

    @Test("pause(for:) on one queue pauses the other: its next reservation is at or after the pause's end on Redis's clock")
    func pauseReachesTheOtherQueue() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let first = redisQueue("first", client: makeClient(server.address), key: "paused", interval: .milliseconds(5), answers: answers)
            let second = redisQueue("second", client: makeClient(server.address), key: "paused", interval: .milliseconds(5), answers: answers)
            try first.async {}
            #expect(await waitUntilIdle([first]))
            let observer = makeClient(server.address)
            let stateKey = SharedThrottleScript.keys(RedisLimitKeys("paused"))[0]
            let pausedAt = ContinuousClock.now
            first.pause(for: .milliseconds(400))
            // The pause goes without waiting, on the first queue's connection: wait until Redis has it.
            var pausedUntil: Int64?
            #expect(await eventually {
                pausedUntil = (try? observer.throttleStateFieldSync(stateKey, "pausedUntil"))?.string.flatMap { Int64($0) }
                return pausedUntil != nil
            })
            let startedAt = LockedValue<ContinuousClock.Instant?>(nil)
            try second.async { startedAt.value = ContinuousClock.now }
            #expect(await waitUntilIdle([second]))
            let reserved = answers.all.filter { $0.queue == "second" }.compactMap(\.reservedAt)
            #expect(reserved.count >= 1)
            if let pausedUntil, let last = reserved.last { #expect(last >= pausedUntil) }
            // On this process's clock too: not before the pause's 400 ms from the call.
            if let startedAt = startedAt.value { #expect(startedAt - pausedAt >= .milliseconds(399)) }
        }
    }

    @Test(".serial holds its lease across queues: tasks of two queues of one key never overlap, and each starts once")
    func serialLeaseAcrossQueues() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let queues = (0..<2).map {
                redisQueue("s\($0)", client: makeClient(server.address), key: "serial", interval: .milliseconds(2), monitor: .serial,
                           horizon: .milliseconds(50), answers: answers)
            }
            let running = Counter(), overlaps = Counter()
            let started = AtomicCounters(count: 10)
            for index in 0..<5 {
                for (number, queue) in queues.enumerated() {
                    try queue.async {
                        if running.increment() > 1 { overlaps.increment() }
                        started.increment(number * 5 + index)
                        Thread.sleep(forTimeInterval: 0.02)
                        running.increment(by: -1)
                    }
                }
            }
            #expect(await waitUntilIdle(queues))
            #expect(started.indices(notEqualTo: 1).isEmpty)
            #expect(overlaps.value == 0)
            // Both queues held the lease, in turns (a decline while the other held it).
            let declines = answers.all.filter { if case .declined = $0.answer { true } else { false } }
            #expect(declines.count >= 1)
            #expect(answers.unavailable(consumed: false) + answers.unavailable(consumed: true) == 0)
        }
    }

    @Test("SCRIPT FLUSH mid-run: the script is sent again with EVAL, every start stays coordinated, none lost or extra")
    func scriptFlushMidRun() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let lines = LogLines()
            let queue = redisQueue("flushed", client: makeClient(server.address, lines: lines), key: "flush", interval: .milliseconds(8),
                                   answers: answers)
            let flusher = makeClient(server.address)
            let started = AtomicCounters(count: 40)
            for index in 0..<40 { try queue.async { started.increment(index) } }
            let flushes = Counter()
            let flushing = Task {
                while !Task.isCancelled, flushes.value < 200 {
                    _ = try? await flusher.send("SCRIPT", "FLUSH")
                    flushes.increment()
                    try? await Task.sleep(for: .milliseconds(25))
                }
            }
            #expect(await waitUntilIdle([queue]))
            flushing.cancel()
            _ = await flushing.value
            #expect(started.indices(notEqualTo: 1).isEmpty)
            // No start fell back on the local throttle: each was reserved on Redis.
            #expect(answers.unavailable(consumed: false) + answers.unavailable(consumed: true) == 0)
            #expect(answers.reservations.count >= 40)
            #expect(lines.count(containing: "NOSCRIPT") >= 1)
            expectSharedRules(answers.reservations, gap: .milliseconds(8))
        }
    }

    @Test("Server restart mid-run: no start is lost; the lost state restarts the shared rules, which hold again among the reservations after it")
    func serverRestartMidRun() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let queues = (0..<2).map {
                redisQueue("r\($0)", client: makeClient(server.address, timeout: .milliseconds(300)), key: "restart",
                           interval: .milliseconds(10), answers: answers)
            }
            let started = AtomicCounters(count: 60)
            for index in 0..<30 {
                for (number, queue) in queues.enumerated() { try queue.async { started.increment(number * 30 + index) } }
            }
            #expect(await eventually { answers.reservations.count >= 10 })
            let beforeRestart = answers.all.count
            await server.killed()
            try await server.startedAgain()
            #expect(await waitUntilIdle(queues))
            #expect(started.indices(notEqualTo: 1).isEmpty, "a task was lost or ran twice")
            // Back on Redis (once a client's breaker lets it ask).
            for queue in queues { #expect(await coordinatedAgain(queue, answers), "the queue did not go back to Redis after the restart") }
            let before = answers.all.prefix(beforeRestart).compactMap(\.reservedAt)
            let after = answers.all.dropFirst(beforeRestart).compactMap(\.reservedAt)
            expectSharedRules(before, gap: .milliseconds(10))
            // The restarted server starts afresh (nothing was saved): the first reservation after it
            // may come sooner than the gap after the last one before it, but the gap holds again.
            expectSharedRules(after, gap: .milliseconds(10))
        }
    }

    @Test(".serial: a task that runs longer than the lease TTL has its lease renewed, so another queue of the key cannot start meanwhile")
    func longTaskRenewsItsLease() async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let queues = ["long", "waiting"].map {
                redisQueue($0, client: makeClient(server.address), key: "long", interval: .milliseconds(1), monitor: .serial,
                           horizon: .milliseconds(50), leaseTTL: .milliseconds(2_400), answers: answers)
            }
            let running = Counter(), overlaps = Counter()
            let longStarted = Latch(), release = Latch()
            let longEnded = LockedValue<ContinuousClock.Instant?>(nil)
            let otherStarted = LockedValue<ContinuousClock.Instant?>(nil)
            try queues[0].async {
                if running.increment() > 1 { overlaps.increment() }
                longStarted.countDown()
                _ = release.wait(timeout: .seconds(40))
                longEnded.value = .now
                running.increment(by: -1)
            }
            #expect(await onNewThread { longStarted.wait(timeout: .seconds(10)) })
            let longStartedAt = ContinuousClock.now
            try queues[1].async {
                if running.increment() > 1 { overlaps.increment() }
                otherStarted.value = .now
                running.increment(by: -1)
            }
            // The long task runs for two lease TTLs at least, and until the waiting queue has been
            // declined twice: it asked while the lease would long have expired without renewal.
            // Renewed every 800 ms, the 2.4 s lease survives a stall of the timer thread of 1.6 s.
            func declines() -> Int {
                answers.all.filter { if case .declined = $0.answer { $0.queue == "waiting" } else { false } }.count
            }
            #expect(await eventually(timeout: .seconds(30)) { declines() >= 2 && ContinuousClock.now - longStartedAt >= .milliseconds(2 * 2_400) })
            release.countDown()
            #expect(await waitUntilIdle(queues))
            #expect(overlaps.value == 0)
            if let ended = longEnded.value, let started = otherStarted.value { #expect(started >= ended) }
            // Once handed back, the lease is no longer renewed: nothing holds the key's state but its TTL.
            // The waiting queue's own `finished` may still be on its way: wait for it.
            let stateKey = SharedThrottleScript.keys(RedisLimitKeys("long"))[0]
            let observer = makeClient(server.address)
            var token = try await observer.throttleStateField(stateKey, "token")
            let deadline = ContinuousClock.now + .seconds(10)
            while token != .bulkString(nil), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
                token = try await observer.throttleStateField(stateKey, "token")
            }
            #expect(token == .bulkString(nil))
        }
    }

    @Test(".serial: a reserve that Redis ran but whose reply timed out is handed back by its proposed token at once, not after the lease's TTL")
    func unknownReserveHandedBack() async throws {
        try await withRedisServer { server async throws in
            let breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(300), maxBackoff: .milliseconds(300))
            let coordinator = RedisStartCoordinator(
                client: makeClient(server.address, timeout: .milliseconds(200), breaker: breaker), keys: RedisLimitKeys("unknown"),
                leaseTTL: .seconds(60))
            let request = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: nil, asker: 1)
            guard case .reserved(_, let token?) = await onNewThread({ coordinator.reserve(request) }) else {
                Issue.record("no lease")
                return
            }
            coordinator.finished(token: token)
            let observer = makeClient(server.address)
            let stateKey = SharedThrottleScript.keys(RedisLimitKeys("unknown"))[0]
            #expect(await eventually { (try? observer.throttleStateFieldSync(stateKey, "token")) == .bulkString(nil) })
            let firstStart = try await observer.throttleStateField(stateKey, "lastStart")
            // The server stops reading: the next reserve is sent, and times out unanswered.
            server.pause()
            let timedOut = await onNewThread { coordinator.reserve(request) }
            #expect(timedOut == .unavailable(consumed: true, retryIn: RedisStartCoordinator.retryAfterFailure))
            server.resume()
            // Redis runs it once it reads again (a new start, a new lease of a token this process
            // never heard of), and the end of the proposed token, sent until acknowledged, hands
            // it back: within 10 s, not the lease's 60.
            #expect(await eventually {
                let start = try? observer.throttleStateFieldSync(stateKey, "lastStart")
                return start != nil && start != firstStart && (try? observer.throttleStateFieldSync(stateKey, "token")) == .bulkString(nil)
            }, "the timed-out reserve did not run, or its lease was not handed back")
            // Another process gets the lease at once.
            let other = RedisStartCoordinator(client: makeClient(server.address), keys: RedisLimitKeys("unknown"))
            let otherRequest = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: nil, asker: 2)
            guard case .reserved = await onNewThread({ other.reserve(otherRequest) }) else {
                Issue.record("the lease of the timed-out reserve still holds")
                return
            }
        }
    }

    @Test(".serial: the holder's last end, sent while a nested reserve under its lease is held up, hands the lease back once Redis runs both, not after the TTL")
    func lastEndWhileNestedReserveInFlight() async throws {
        try await withRedisServer { server async throws in
            let keys = RedisLimitKeys("in-flight")
            let coordinator = RedisStartCoordinator(client: makeClient(server.address, timeout: .seconds(5)), keys: keys, leaseTTL: .seconds(60))
            let outer = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: nil, asker: 1)
            guard case .reserved(_, let token?) = await onNewThread({ coordinator.reserve(outer) }) else {
                Issue.record("no lease")
                return
            }
            // The server stops reading: a nested reserve is sent and waits for its answer.
            server.pause()
            let nested = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: token, asker: 1)
            async let nestedAnswer = onNewThread { coordinator.reserve(nested) }
            // Counted on its lease just before it is sent, then written to the connection at once.
            let counted = await eventually(timeout: .seconds(5)) { coordinator.heldLeases.leases[token]?.inFlight == 1 }
            #expect(counted)
            try await Task.sleep(for: .milliseconds(200))
            // The holder's task ends meanwhile: its last end follows the reserve on the connection.
            coordinator.finished(token: token)
            server.resume()
            guard case .reserved(_, token) = await nestedAnswer else {
                Issue.record("the nested reserve did not join the lease")
                return
            }
            // No task runs any more: the nested reservation is given up unused.
            coordinator.finished(token: token)
            #expect(coordinator.heldLeases.leases.isEmpty)
            // Another process gets the lease within seconds, not the 60 s TTL.
            let other = RedisStartCoordinator(client: makeClient(server.address), keys: keys)
            let otherRequest = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: nil, asker: 2)
            let served = await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(20)) {
                if case .reserved = other.reserve(otherRequest) { true } else { false }
            }
            #expect(served, "the lease outlived its holder's last end")
        }
    }

    /// With no interval each queue asks again the moment its task ends, before the other's next
    /// poll: without the line it would take every turn. With 100 ms, the gap after each end is
    /// checked (a reservation may start a tenth of it late on a loaded machine rather than be
    /// given up, which would hand the turn over).
    @Test(".serial with the default horizon: two queues with backlogs take the lease in turn, and each start keeps the gap after the end before it on Redis's clock",
          arguments: [0, 100])
    func backlogsServedInTurn(intervalMilliseconds: Int) async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let gap = Duration.milliseconds(intervalMilliseconds)
            let queues = ["a", "b"].map {
                redisQueue($0, client: makeClient(server.address), key: "turns", interval: gap, monitor: .serial, answers: answers)
            }
            let clock = makeClient(server.address)
            /// Redis's clock, in microseconds.
            @Sendable func redisNow() -> Int64 {
                let time = (try? clock.sendSync("TIME"))?.array?.compactMap { $0.string.flatMap { Int64($0) } } ?? []
                return time.count == 2 ? time[0] * 1_000_000 + time[1] : -1
            }
            // Each run: its queue, and Redis's clock read at its start and at its end.
            let runs = Recorder<(queue: Int, start: Int64, end: Int64)>()
            let perQueue = 8
            let labels = ["a", "b"]
            for index in 0..<perQueue {
                for (number, queue) in queues.enumerated() {
                    try queue.async {
                        // The first task holds the lease until the other queue has been answered
                        // (declined: it is in line), however late a loaded machine starts it (5 s at most).
                        let deadline = ContinuousClock.now + .seconds(5)
                        while index == 0, !answers.all.contains(where: { $0.queue == labels[1 - number] }), ContinuousClock.now < deadline {
                            Thread.sleep(forTimeInterval: 0.001)
                        }
                        let start = redisNow()
                        Thread.sleep(forTimeInterval: 0.01)
                        runs.append((number, start, redisNow()))
                    }
                }
            }
            #expect(await waitUntilIdle(queues, limit: .seconds(30)))
            let order = runs.values.map(\.queue)
            #expect(order.count == 2 * perQueue)
            // Neither runs two in a row while the other has tasks waiting: they alternate. The one
            // exception is a reservation given up (reached more than its lateness allowance late, on
            // a loaded machine): its turn passes to the other queue, which then runs twice in a row.
            // Without the line, the queue that got the lease first runs its whole backlog first.
            var left = [perQueue, perQueue]
            var twiceInARow = 0
            for (previous, next) in zip(order, order.dropFirst()) {
                left[previous] -= 1
                if previous == next && left[1 - next] > 0 { twiceInARow += 1 }
            }
            let givenUp = answers.reservations.count - order.count
            #expect(twiceInARow <= givenUp, "\(order), \(givenUp) reservations given up")
            // Each start is at least the gap after the end before it, on Redis's clock (read inside
            // the tasks: the end is read before the queue hands the lease back, the start after it
            // was granted, so the script's own times lie between).
            for (earlier, later) in zip(runs.values, runs.values.dropFirst()) {
                #expect(earlier.end > 0 && later.start - earlier.end >= gap.microsecondsRoundedUp,
                        "a start \(later.start - earlier.end) µs after the end before it")
            }
            #expect(answers.unavailable(consumed: false) + answers.unavailable(consumed: true) == 0)
        }
    }

    @Test("A lease handed back while the client's breaker is open is sent again once Redis answers: the others need not wait for its expiry")
    func releaseSentAgainAfterOutage() async throws {
        try await withRedisServer { server async throws in
            let breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .milliseconds(300), maxBackoff: .milliseconds(300))
            let coordinator = RedisStartCoordinator(
                client: makeClient(server.address, timeout: .milliseconds(200), breaker: breaker), keys: RedisLimitKeys("release"),
                leaseTTL: .seconds(60))
            let request = CoordinatedRequest(gap: .milliseconds(1), monitor: .serial, limit: nil, holding: nil, asker: 1)
            guard case .reserved(_, let token?) = await onNewThread({ coordinator.reserve(request) }) else {
                Issue.record("no lease")
                return
            }
            server.pause()
            // A command times out: the breaker opens for 150-300 ms, and refuses the end at once.
            let timedOut = await onNewThread { coordinator.reserve(request) }
            #expect(timedOut == .unavailable(consumed: true, retryIn: RedisStartCoordinator.retryAfterFailure))
            coordinator.finished(token: token)
            server.resume()
            let observer = makeClient(server.address)
            let stateKey = SharedThrottleScript.keys(RedisLimitKeys("release"))[0]
            // Within 10 s, not the lease's 60.
            #expect(await eventually { (try? observer.throttleStateFieldSync(stateKey, "token")) == .bulkString(nil) })
        }
    }

    @Test("A pause refused by the client's breaker and sent again later asks for what is left of it: it ends when it would have")
    func pauseSentAgainKeepsItsEnd() async throws {
        try await withRedisServer { server async throws in
            // Opens for 1-2 s (its jitter) on a failure.
            let breaker = CircuitBreaker(failureThreshold: 1, baseBackoff: .seconds(2), maxBackoff: .seconds(2))
            let coordinator = RedisStartCoordinator(
                client: makeClient(server.address, timeout: .milliseconds(200), breaker: breaker), keys: RedisLimitKeys("pause"))
            let request = CoordinatedRequest(gap: .milliseconds(1), monitor: .concurrent, limit: nil, holding: nil, asker: 1)
            guard case .reserved = await onNewThread({ coordinator.reserve(request) }) else {
                Issue.record("not reserved")
                return
            }
            server.pause()
            let timedOut = await onNewThread { coordinator.reserve(request) }
            #expect(timedOut == .unavailable(consumed: true, retryIn: RedisStartCoordinator.retryAfterFailure))
            let asked = ContinuousClock.now
            coordinator.pause(for: .seconds(5))   // refused (the breaker is open): sent again in 1-2 s
            server.resume()
            let observer = makeClient(server.address)
            let stateKey = SharedThrottleScript.keys(RedisLimitKeys("pause"))[0]
            var pausedUntil: Int64?
            let deadline = ContinuousClock.now + .seconds(10)
            while pausedUntil == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
                pausedUntil = try await observer.throttleStateField(stateKey, "pausedUntil").string.flatMap { Int64($0) }
            }
            // Measured before TIME is sent: a thread held back after its reply cannot shrink the bound.
            let sinceAsked = asked.duration(to: .now)
            let time = try await observer.send("TIME").array?.compactMap { $0.string.flatMap { Int64($0) } } ?? []
            guard let pausedUntil, time.count == 2 else {
                Issue.record("no pause on Redis (\(String(describing: pausedUntil))) or no TIME (\(time))")
                return
            }
            let remaining = Duration.microseconds(pausedUntil - (time[0] * 1_000_000 + time[1]))
            // The pause ends 5 s after it was asked for, however late it was sent: what is left is
            // 5 s less the time since (a pause re-timed from the retry, 1-2 s later, would have
            // that much more left). 500 ms of slack for the round trips.
            #expect(remaining > .zero && remaining <= .seconds(5) - sinceAsked + .milliseconds(500),
                    "\(remaining) left, \(sinceAsked) after it was asked for")
        }
    }

    @Test("The public constructor: queues made with .redis(client, key:) share the key's limit, and one with another monitor is told so and falls back")
    func publicConstructor() async throws {
        try await withRedisServer { server async throws in
            let limit = RateLimit.rate(3, per: .milliseconds(300))
            let queues = (0..<2).map { _ in
                ThrottledQueue(label: "public", interval: .milliseconds(1), limit: limit,
                               coordination: .redis(makeClient(server.address), key: "public.example.com"))
            }
            let started = Recorder<ContinuousClock.Instant>()
            for _ in 0..<4 { for queue in queues { try queue.async { started.append(.now) } } }
            #expect(await waitUntilIdle(queues))
            let starts = started.values.sorted()
            #expect(starts.count == 8)
            // 8 starts at 3 per 300 ms: the 7th and the 8th wait for a second window, 600 ms after
            // the first (two queues each on their own would have started all 8 within 300 ms); 100 ms
            // of slack for a first task that ran late.
            #expect(starts[7] - starts[0] >= .milliseconds(500))
            // A key whose state binds for a minute (its window): a .serial queue with the same limit
            // is told the key is .concurrent, and falls back (half the rate, locally).
            let minute = RateLimit.rate(3, per: .seconds(60))
            let first = ThrottledQueue(label: "first", interval: .milliseconds(1), limit: minute,
                                       coordination: .redis(makeClient(server.address), key: "mismatched"))
            try first.async {}
            #expect(await waitUntilIdle([first]))
            let answers = CoordinatorAnswers()
            let other = redisQueue("other", client: makeClient(server.address), key: "mismatched", interval: .milliseconds(1),
                                   monitor: .serial, limit: minute, answers: answers)
            let ran = Counter()
            try other.async { ran.increment() }
            #expect(await waitUntilIdle([other]))
            #expect(ran.value == 1)
            let mismatches = answers.all.compactMap { if case .mismatch(let reason) = $0.answer { reason } else { nil } }
            #expect(mismatches.first == "{mismatched} is used with .concurrent and at most 3 starts per 60.0 seconds; this queue has .serial and at most 3 starts per 60.0 seconds", "\(answers.all)")
        }
    }
}

/// The public constructor's preconditions, each stopping in a child process with a message that names the argument.
@Suite("Coordination.redis preconditions")
struct RedisCoordinationPreconditionTests {
    @Test("An empty key stops, naming the argument", .exitTestOnOwnThreads)
    func emptyKey() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = Coordination.redis(RedisClient(.unixSocket(path: "/nonexistent/redis.sock")), key: "")
        }
        expectMessage(result, contains: ["Coordination.redis(_:key:whenUnavailable:): key must not be empty"])
    }

    @Test("A key with a brace stops, naming the argument and the value", .exitTestOnOwnThreads)
    func braceKey() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = Coordination.redis(RedisClient(.unixSocket(path: "/nonexistent/redis.sock")), key: "api{1}")
        }
        expectMessage(result, contains: ["Coordination.redis(_:key:whenUnavailable:): key must not contain '{' or '}'", "got \"api{1}\""])
    }

    @Test("A fallback share outside 0 < share ≤ 1 stops, naming it", .exitTestOnOwnThreads)
    func badShare() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = Coordination.redis(RedisClient(.unixSocket(path: "/nonexistent/redis.sock")), key: "api", whenUnavailable: .localFallback(share: 1.5))
        }
        expectMessage(result, contains: ["Coordination.redis(_:key:whenUnavailable:): the fallback share must be in 0 < share ≤ 1, got 1.5"])
    }
}

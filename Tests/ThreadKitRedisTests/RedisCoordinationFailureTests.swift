import Foundation
import Testing
import ThreadKit
import ThreadKitTestSupport
@testable import ThreadKitRedis

/// A coordinated queue while its redis-server is stopped (SIGSTOP: commands time out) or killed
/// (connections refused), under each fallback, and its recovery when the server is back.
@Suite("Queues on Redis while it is down", .needsRedisServer, .timeLimit(.minutes(3)))
struct RedisCoordinationFailureTests {
    enum Outage: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// SIGSTOP: connections stay open, nothing is answered; each command times out (sent: consumed).
        case stopped
        /// SIGKILL: nothing listens; each connect is refused (not consumed).
        case killed
        var testDescription: String { rawValue }
    }

    enum Policy: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case localFallback, failClosed, failOpen
        var fallback: Fallback {
            switch self {
            case .localFallback: .localFallback(share: 0.5)
            case .failClosed: .failClosed
            case .failOpen: .failOpen
            }
        }
        var testDescription: String { rawValue }
    }

    static let interval = Duration.milliseconds(40)
    static let down = Duration.seconds(1)

    @Test("While Redis is down each fallback holds (.localFallback at half the rate, .failClosed nothing, .failOpen the local rate); once it is back every task has started once, coordinated again",
          arguments: Outage.allCases, Policy.allCases)
    func outage(_ outage: Outage, _ policy: Policy) async throws {
        try await withRedisServer { server async throws in
            let answers = CoordinatorAnswers()
            let client = makeClient(server.address, timeout: .milliseconds(200))
            let queue = redisQueue("down", client: client, key: "down", interval: Self.interval, whenUnavailable: policy.fallback, answers: answers)
            let starts = Recorder<ContinuousClock.Instant>()
            // Three starts reserved on Redis first. A command that times out on a loaded machine is
            // answered by the fallback, so tasks are added until three were reserved (bounded).
            var before = 0
            let warmUntil = ContinuousClock.now + .seconds(20)
            while answers.reservations.count < 3, ContinuousClock.now < warmUntil {
                try queue.async { starts.append(.now) }
                before += 1
                #expect(await waitUntilIdle([queue]))
            }
            #expect(answers.reservations.count >= 3)

            switch outage {
            case .stopped: server.pause()
            case .killed: await server.killed()
            }
            let downAt = ContinuousClock.now
            for _ in 0..<30 { try queue.async { starts.append(.now) } }
            try await Task.sleep(for: Self.down)
            if policy != .failClosed {
                // A loaded machine may take the whole second to time out the first command: the
                // outage lasts until the fallback has started something (bounded), and its rate is
                // checked over however long it lasted.
                _ = await eventually { starts.values.contains { $0 > downAt } }
            }
            let upAt = ContinuousClock.now
            let answeredWhileDown = answers.all.count
            let whileDown = starts.values.filter { $0 > downAt && $0 <= upAt }.count
            switch outage {
            case .stopped: server.resume()
            case .killed: try await server.startedAgain()
            }
            #expect(await waitUntilIdle([queue], limit: .seconds(30)))
            #expect(starts.count == before + 30, "a task was lost or ran twice")

            // Each start of the outage at most at the policy's rate (one more for the edge, one for
            // the start that a consumed command or the last coordinated start was counted from).
            let downFor = upAt - downAt
            print("outage \(outage) \(policy): \(whileDown) starts in \(downFor), answers \(answers.all.count)")
            switch policy {
            case .failClosed:
                #expect(whileDown == 0)
            case .localFallback:
                #expect(whileDown >= 1)
                #expect(whileDown <= Int(downFor / (Self.interval * 2)) + 2, "\(whileDown) starts in \(downFor)")
            case .failOpen:
                #expect(whileDown >= 1)
                #expect(whileDown <= Int(downFor / Self.interval) + 2, "\(whileDown) starts in \(downFor)")
            }
            let outageAnswers = answers.all.prefix(answeredWhileDown).filter {
                if case .unavailable = $0.answer { true } else { false }
            }
            #expect(!outageAnswers.isEmpty)
            switch outage {
            case .stopped:
                // The timeout path: a command sent and not answered counts as consumed.
                #expect(answers.unavailable(consumed: true) >= 1)
            case .killed:
                #expect(answers.unavailable(consumed: false) >= 1)
            }
            // Back on Redis: a start after the outage is reserved there again (once the client's breaker lets it ask).
            #expect(await coordinatedAgain(queue, answers), "no start was coordinated after the recovery")
        }
    }

    @Test("The loss of Redis and the automatic recovery are logged through Log, naming the policy that decides meanwhile",
          .exitTestOnOwnThreads)
    func lossAndRecoveryAreLogged() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            Log.enable(.throttle)
            guard let server = try? RedisServer() else { preconditionFailure("no redis-server") }
            let answers = CoordinatorAnswers()
            let queue = redisQueue(
                "logged", client: makeClient(server.address, timeout: .milliseconds(200)), key: "logged",
                interval: .milliseconds(5), answers: answers)
            try? queue.async {}
            let firstRan = await waitUntilIdle([queue])
            precondition(firstRan, "the first task did not run")
            server.kill()
            try? queue.async {}
            let fallbackRan = await waitUntilIdle([queue])
            precondition(fallbackRan, "the task did not run on the fallback")
            precondition(answers.unavailable(consumed: false) + answers.unavailable(consumed: true) >= 1, "Redis was not missed")
            do { try server.start() } catch { preconditionFailure("the server did not start again: \(error)") }
            // Until the breaker lets a probe through and it is answered: bounded.
            let deadline = ContinuousClock.now + .seconds(10)
            while answers.all.last?.reservedAt == nil, ContinuousClock.now < deadline {
                try? queue.async {}
                let ran = await waitUntilIdle([queue])
                precondition(ran, "a task did not run")
                try? await Task.sleep(for: .milliseconds(20))
            }
            precondition(answers.all.last?.reservedAt != nil, "the queue never went back to Redis")
            server.stop()
        }
        expectMessage(result, contains: [
            "logged: the coordinator cannot decide (unavailable); the local throttle at 0.5 of the rate decides",
            "logged: the coordinator answers again",
        ])
    }
}

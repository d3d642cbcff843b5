import Foundation
import Testing
import ThreadKit
import ThreadKitTestSupport
import ThreadKitRedis
import RedisFleet

/// Eight processes sharing one limit on a server of the test's own, checked on Redis's clock.
///
/// **What is measured.** The guarantee is defined on the reservations: the instants, on Redis's
/// clock (`TIME`), at which the shared throttle script records a start. The parent reads them
/// through a `MONITOR` connection (every `RPUSH` the script makes to the limit's log), so the check
/// depends on nothing the processes say about themselves; on them, the gap and the window hold to
/// the microsecond, with no slack. What the tasks did is read by the tasks: each records its start
/// (its first action) and its end (its last) with a one-line script that reads `TIME` and appends in
/// one atomic step. A measured start is at or after the real start and a measured end at or before
/// the real end, so two checks on them are exact too: the k-th start in time comes at or after the
/// k-th reservation (no process starts before its reservation), and with `.serial` each start comes
/// at least the gap after the previous task's end (the lease and the gap from the end hold across
/// processes). Gaps between measured starts are not checked against the gap: a task's reading comes
/// after its start by as long as its process is kept off a core, which a loaded machine makes
/// milliseconds, in either direction.
///
/// Each process runs its tasks through the public API, `ThrottledQueue(interval:monitor:limit:
/// coordination: .redis(client, key:, whenUnavailable: .failClosed))`, all submitted when the parent
/// lets every process go at once (`.failClosed`: a start the local fallback made would have no
/// reservation, and this checks the shared decisions). A reservation a process reaches late is
/// given up and counted as consumed, so there may be more reservations than tasks, never fewer.
///
/// The processes are copies of this test program, started with `posix_spawn` and running only
/// ``FleetMemberTests`` (its plan in an environment variable), not exit tests: an exit test blocks a
/// Swift concurrency thread while its child runs, so eight at once on two cores would run two at a
/// time. The parent's side and the checks are the `RedisFleet` target, which the benchmark's
/// `redis.fleet` row shares.
@Suite("Eight processes share one limit on Redis", .needsRedisServer, .serialized, .timeLimit(.minutes(3)))
struct FleetTests {
    static let members = 8

    @Test("a gap and a window: no two starts closer than the gap, never more than N in a window, every task run once")
    func gapAndWindow() async throws {
        let plan = FleetPlan(key: "fleet.gap", members: Self.members, tasks: 12, gap: 4_000, serial: false, count: 8, window: 100_000)
        let check = try await Self.run(plan)
        #expect(check.closePairs.isEmpty, "\(check)")
        #expect(check.minimumGap.map { $0 >= plan.gap } == true, "\(check)")
        #expect(check.maximumInWindow <= 8, "\(check)")
    }

    @Test("a rate limit alone: never more than N starts in any window, every task run once")
    func rateLimitAlone() async throws {
        let plan = FleetPlan(key: "fleet.rate", members: Self.members, tasks: 12, gap: 0, serial: false, count: 10, window: 100_000)
        let check = try await Self.run(plan)
        #expect(check.maximumInWindow <= 10, "\(check)")
    }

    @Test(".serial: one task at a time across the fleet, each starting at least the gap after the previous one ended")
    func serial() async throws {
        let plan = FleetPlan(
            key: "fleet.serial", members: Self.members, tasks: 6, gap: 2_000, serial: true, count: 5, window: 100_000,
            taskLength: 1_000)
        let check = try await Self.run(plan)
        #expect(check.serialViolations.isEmpty, "\(check)")
        #expect(check.closePairs.isEmpty, "\(check)")
        #expect(check.maximumInWindow <= 5, "\(check)")
    }

    /// Starts a server and `plan.members` members (copies of this program running only the member
    /// test), lets them go at once, waits for them, and checks what the server saw and what the tasks
    /// recorded: every member exited cleanly, every task ran exactly once, every run came at or
    /// after its reservation.
    static func run(_ plan: FleetPlan) async throws -> FleetCheck {
        try await withRedisServer { server in
            var plan = plan
            plan.socketPath = server.socketPath
            let program = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
            let arguments = ["--testing-library", "swift-testing", "--filter", "FleetMemberTests"]
            let outcome = try await onNewThread { [plan] in
                Result { try FleetRun.run(plan, program: program, arguments: arguments, logDirectory: server.directory) }
            }.get()
            let check = outcome.check
            for (member, status) in outcome.statuses.enumerated() where status != 0 {
                let ending = status.map { "status \($0)" } ?? "no exit: killed after 90 s"
                Issue.record("member \(member) ended with \(ending):\n\(outcome.failures[member] ?? "")")
            }
            #expect(outcome.unpairedRecords == 0, "\(check)")
            #expect(check.runCount == plan.members * plan.tasks, "\(check)")
            #expect(check.duplicateRuns == 0, "\(check)")
            #expect(check.reservationCount >= check.runCount, "\(check)")
            #expect(check.startsBeforeReservation == 0, "\(check)")
            print("fleet \(plan.key): \(plan.members) processes × \(plan.tasks) tasks: \(check)")
            return check
        }
    }
}

/// The member test: runs only in a copy of the test program started by ``FleetTests`` (its plan in
/// ``FleetMember/environmentName``); in an ordinary run it is skipped.
@Suite("A fleet member (runs only when started as one)")
struct FleetMemberTests {
    @Test("runs its plan's tasks on the shared limit", .enabled(if: FleetMember.plan != nil, "runs only in a process FleetTests starts"))
    func member() throws {
        guard let plan = FleetMember.plan else { return }
        try FleetMember.run(plan)
    }
}

/// The checks themselves, on made-up times: each finds the violation it exists for.
@Suite("What a fleet's run is checked for")
struct FleetCheckTests {
    func run(_ member: Int, _ task: Int, _ start: Int64, _ end: Int64) -> FleetCheck.Run {
        FleetCheck.Run(member: member, task: task, start: start, end: end)
    }

    @Test("reservations the gap apart pass; two closer than the gap are named")
    func gap() {
        let spaced = FleetCheck(reservations: [0, 100, 200, 300], runs: [], gap: 100, window: nil)
        #expect(spaced.closePairs.isEmpty)
        #expect(spaced.minimumGap == 100)
        let close = FleetCheck(reservations: [300, 0, 199, 100], runs: [], gap: 100, window: nil)
        #expect(close.closePairs.map { [$0.0, $0.1] } == [[100, 199]])
        #expect(close.minimumGap == 99)
    }

    @Test("the fullest window counts starts in [t, t + W): N at the edge pass, N + 1 inside one window are found")
    func window() {
        let edge = FleetCheck(reservations: [0, 10, 20, 1_000, 1_010, 1_020], runs: [], gap: 0, window: 1_000)
        #expect(edge.maximumInWindow == 3)
        let over = FleetCheck(reservations: [0, 10, 20, 999], runs: [], gap: 0, window: 1_000)
        #expect(over.maximumInWindow == 4)
    }

    @Test("a start before the reservation of its rank is counted; starts after theirs are not")
    func startsAfterReservations() {
        let reservations: [Int64] = [100, 200, 300]
        let fine = FleetCheck(
            reservations: reservations, runs: [run(0, 0, 150, 160), run(1, 0, 230, 240), run(0, 1, 300, 301)], gap: 0, window: nil)
        #expect(fine.startsBeforeReservation == 0)
        #expect(fine.startDelays == [50, 30, 0])
        let early = FleetCheck(
            reservations: reservations, runs: [run(0, 0, 150, 160), run(1, 0, 170, 180), run(0, 1, 300, 301)], gap: 0, window: nil)
        #expect(early.startsBeforeReservation == 1)
        let unreserved = FleetCheck(reservations: [100], runs: [run(0, 0, 150, 160), run(1, 0, 170, 180)], gap: 0, window: nil)
        #expect(unreserved.startsBeforeReservation == 1)
    }

    @Test(".serial: an overlap or a start less than the gap after the previous end is found")
    func serial() {
        let apart = FleetCheck(reservations: [], runs: [run(0, 0, 0, 10), run(1, 0, 15, 20)], gap: 0, window: nil, serialGap: 5)
        #expect(apart.serialViolations.isEmpty)
        let overlapping = FleetCheck(reservations: [], runs: [run(1, 0, 5, 20), run(0, 0, 0, 10)], gap: 0, window: nil, serialGap: 0)
        #expect(overlapping.serialViolations.count == 1)
        let soon = FleetCheck(reservations: [], runs: [run(0, 0, 0, 10), run(1, 0, 14, 20)], gap: 0, window: nil, serialGap: 5)
        #expect(soon.serialViolations.count == 1)
    }

    @Test("a task recorded twice is counted")
    func duplicates() {
        let check = FleetCheck(reservations: [0, 1], runs: [run(0, 0, 0, 1), run(0, 0, 2, 3)], gap: 0, window: nil)
        #expect(check.duplicateRuns == 1)
    }
}

/// A fleet's plan refuses what no run could mean, naming the argument and its value.
@Suite("A fleet's plan: bad arguments stop the process", .serialized)
struct FleetPlanExitTests {
    @Test("members, tasks, a negative gap and a count without a window each stop with a message naming them", .exitTestOnOwnThreads,
          arguments: ["members", "tasks", "gap", "count"])
    func stops(_ argument: String) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [argument] in
            switch argument {
            case "members": _ = FleetPlan(key: "k", members: 0, tasks: 1, gap: 0)
            case "tasks": _ = FleetPlan(key: "k", tasks: 0, gap: 0)
            case "gap": _ = FleetPlan(key: "k", tasks: 1, gap: -1)
            default: _ = FleetPlan(key: "k", tasks: 1, gap: 0, count: 3)
            }
        }
        expectMessage(result, contains: ["FleetPlan", argument])
    }
}

@Suite("A fleet's run records, read back")
struct FleetRecordsTests {
    @Test("each start is paired with its end; a record of another shape, a second start and an end without a start are counted, not paired")
    func pairs() {
        let parsed = FleetCheck.runs(from: [
            "0 0 start 10", "1 0 start 12", "0 0 end 20", "1 0 end 25", "garbage", "2 0 end 30", "3 0 start 40", "3 0 start 41",
        ])
        #expect(parsed.runs == [
            FleetCheck.Run(member: 0, task: 0, start: 10, end: 20), FleetCheck.Run(member: 1, task: 0, start: 12, end: 25),
        ])
        #expect(parsed.unpaired == 4)
    }
}


@Suite("The fleet's MONITOR reader", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisMonitorTests {
    @Test("every command sent after the constructor returns is seen, in order, also when thousands come in one read; stop ends the reader at once")
    func seesEveryCommandAndStops() async throws {
        try await withRedisServer { server in
            let outcome = try await onNewThread(limit: .seconds(20)) { () -> Result<(lines: [String], stopTook: Duration), any Error> in
                Result {
                    let monitor = try RedisMonitor(socketPath: server.socketPath)
                    let client = RedisClient(server.address, commandTimeout: .seconds(5))
                    // Sent without waiting: the server runs them back to back, and their MONITOR lines
                    // reach the reader many to a read.
                    for index in 0..<3_000 { try client.sendAndForget("SET", "k", String(index)) }
                    try client.flushSync(timeout: .seconds(10))
                    let deadline = ContinuousClock.now + .seconds(10)
                    while monitor.all.filter({ $0.contains("\"SET\"") }).count < 3_000, ContinuousClock.now < deadline { usleep(1_000) }
                    let lines = monitor.all
                    let started = ContinuousClock.now
                    monitor.stop()
                    return (lines, ContinuousClock.now - started)
                }
            }.get()
            let values = outcome.lines.filter { $0.contains("\"SET\"") }.compactMap { $0.split(separator: "\"").last.map(String.init) }
            #expect(outcome.lines.first == "+OK")
            #expect(values == (0..<3_000).map(String.init))
            #expect(outcome.stopTook < .seconds(1), "stop took \(outcome.stopTook)")
        }
    }
}

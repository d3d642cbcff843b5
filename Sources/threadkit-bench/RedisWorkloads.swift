// redis.*: limits shared by a fleet, on the benchmark's own redis-server (a Unix socket in a
// temporary folder). The floor is a PING round trip through ThreadKitRedis's client; a shared start
// decision is one run of the shared throttle script through the same client.
import Foundation
import RedisFleet
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitRedis
import ToolHarness

/// The redis.* workloads. Without a redis-server on PATH they are skipped, saying so.
enum RedisWorkloads {
    /// The workloads, in the order they run.
    static let catalogue: [WorkloadEntry] = [
        ("redis.ping", ping),
        ("redis.decision", decision),
        ("redis.hotkey", hotKey),
        ("redis.fleet", fleet),
    ]

    /// `redis.ping`: the floor, a PING round trip through `RedisClient` (blocking call, one client).
    static func ping(scale: Scale) -> Workload {
        let calls = scale.size(20_000)
        return Workload(
            id: "redis.ping", metrics: Metric.percentiles("round trip") + Metric.named(["server per call": "µs"]),
            contenders: [Contender(name: "floor", warmingUpOnATenth: { share in try measurePing(calls: share.of(calls)) })],
            finish: SharedServer.stop)
    }

    /// `redis.decision`: one shared start decision (the script reserves a start: gap 1 µs, at most
    /// 1,000 starts a millisecond, so every call records a start and trims the log, and none waits)
    /// against a PING round trip on the same client, in the same rounds.
    static func decision(scale: Scale) -> Workload {
        let calls = scale.size(20_000)
        return Workload(
            id: "redis.decision", metrics: Metric.percentiles("round trip") + Metric.named(["server per call": "µs"]),
            contenders: [
                Contender(name: "ThreadKit", warmingUpOnATenth: { share in try measureDecisions(calls: share.of(calls)) }),
                Contender(name: "PING", warmingUpOnATenth: { share in try measurePing(calls: share.of(calls)) }),
            ],
            finish: SharedServer.stop)
    }

    /// `redis.hotkey`: starts a second on one hot key, from 4 threads with a client each (as 4
    /// processes would), every call a start (gap 0).
    static func hotKey(scale: Scale) -> Workload {
        let duration = scale.duration(.seconds(2))
        return Workload(
            id: "redis.hotkey", metrics: Metric.named(["starts per second": "/s", "server per call": "µs"]),
            contenders: [
                Contender(name: "ThreadKit", warmingUpOnATenth: { share in try measureHotKey(for: share.of(duration), threads: 4) })
            ],
            finish: SharedServer.stop)
    }

    /// `redis.fleet`: 8 processes (this program again, as fleet members) share one limit — a 5 ms
    /// gap and at most 10 starts in any 100 ms — checked on Redis's clock: the reservations as the
    /// server recorded them (seen through MONITOR) and each task's start and end as it read them.
    static func fleet(scale: Scale) -> Workload {
        let tasks = scale.size(30)
        return Workload(
            id: "redis.fleet",
            metrics: Metric.named([
                "min gap / gap": "×", "max per window / N": "×", "close pairs": "count", "starts before reservation": "count",
                "unused reservations": "count",
            ]) + Metric.percentiles("start after reservation", unit: "ms"),
            contenders: [Contender(name: "ThreadKit", warmUp: nil, run: { try measureFleet(tasks: tasks) })],
            finish: SharedServer.stop)
    }

    /// A client of this process's server, with a generous timeout (the machine may be loaded).
    private static func client() throws -> RedisClient {
        RedisClient(.unixSocket(path: try SharedServer.get().socketPath), commandTimeout: .seconds(5))
    }

    static func measurePing(calls: Int) throws -> Measurement {
        let client = try client()
        _ = try client.sendSync("CONFIG", "RESETSTAT")
        var samples: [Double] = []
        samples.reserveCapacity(calls)
        for _ in 0..<calls {
            let start = ContinuousClock.now
            _ = try client.sendSync("PING")
            samples.append((ContinuousClock.now - start).microseconds)
        }
        var measurement = Measurement()
        measurement.addLatencyPercentiles("round trip", samples: samples)
        measurement["server per call"] = try serverMicroseconds(client, command: "ping")
        return measurement
    }

    static func measureDecisions(calls: Int) throws -> Measurement {
        let client = try client()
        let probe = SharedThrottleProbe(client: client, key: "bench.decision")
        _ = try probe.reserve(gap: 1, serial: false, limit: (1_000, 1_000))
        _ = try client.sendSync("CONFIG", "RESETSTAT")
        var samples: [Double] = []
        samples.reserveCapacity(calls)
        for _ in 0..<calls {
            let start = ContinuousClock.now
            _ = try probe.reserve(gap: 1, serial: false, limit: (1_000, 1_000))
            samples.append((ContinuousClock.now - start).microseconds)
        }
        var measurement = Measurement()
        measurement.addLatencyPercentiles("round trip", samples: samples)
        measurement["server per call"] = try serverMicroseconds(client, command: "evalsha")
        return measurement
    }

    static func measureHotKey(for duration: Duration, threads: Int) throws -> Measurement {
        let clients = try (0..<threads).map { _ in try client() }
        _ = try clients[0].sendSync("CONFIG", "RESETSTAT")
        let counts = SlotBuffer(count: threads, initialValue: 0)
        let failures = SlotBuffer<String?>(count: threads, initialValue: nil)
        let done = Countdown(threads)
        let deadline = ContinuousClock.now + duration
        let started = ContinuousClock.now
        for index in 0..<threads {
            let probe = SharedThrottleProbe(client: clients[index], key: "bench.hotkey")
            Thread {
                var count = 0
                do {
                    while ContinuousClock.now < deadline {
                        if case .reserved = try probe.reserve(gap: 0, serial: false, limit: nil) { count += 1 }
                    }
                } catch {
                    failures[index] = "\(error)"
                }
                counts[index] = count
                done.tick()
            }.start()
        }
        done.waitForAll()
        let elapsed = (ContinuousClock.now - started).seconds
        if let failure = (0..<threads).compactMap({ failures[$0] }).first { throw BenchRedisError("redis.hotkey: \(failure)") }
        var measurement = Measurement()
        measurement["starts per second"] = Double((0..<threads).map { counts[$0] }.reduce(0, +)) / elapsed
        measurement["server per call"] = try serverMicroseconds(clients[0], command: "evalsha")
        return measurement
    }

    static func measureFleet(tasks: Int) throws -> Measurement {
        let server = try SharedServer.get()
        let plan = FleetPlan(
            socketPath: server.socketPath, key: "bench.fleet.\(UInt32.random(in: 0...UInt32.max))", members: 8, tasks: tasks,
            gap: 5_000, count: 10, window: 100_000)
        let outcome = try FleetRun.run(plan, program: Runner.executable, arguments: [], logDirectory: server.directory)
        if let (member, output) = outcome.failures.first {
            let status = outcome.statuses[member].map { "status \($0)" } ?? "killed"
            throw BenchRedisError("redis.fleet: member \(member) failed (\(status)):\n\(output)")
        }
        let check = outcome.check
        guard check.runCount == plan.members * plan.tasks, check.duplicateRuns == 0, outcome.unpairedRecords == 0 else {
            throw BenchRedisError("redis.fleet: \(plan.members * plan.tasks) tasks planned, \(check)")
        }
        var measurement = Measurement()
        measurement["min gap / gap"] = Double(check.minimumGap ?? 0) / Double(plan.gap)
        measurement["max per window / N"] = Double(check.maximumInWindow) / Double(plan.count ?? 1)
        measurement["close pairs"] = Double(check.closePairs.count)
        measurement["starts before reservation"] = Double(check.startsBeforeReservation)
        measurement["unused reservations"] = Double(check.reservationCount - check.runCount)
        measurement.addLatencyPercentiles("start after reservation", samples: check.startDelays.map { Double($0) / 1_000 })
        return measurement
    }

    /// The server's own time per call of `command` since the last `CONFIG RESETSTAT`, in
    /// microseconds (`INFO commandstats`: `cmdstat_<command>:calls=…,usec=…,usec_per_call=…`).
    private static func serverMicroseconds(_ client: RedisClient, command: String) throws -> Double {
        let info = try client.sendSync("INFO", "commandstats").string ?? ""
        let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("cmdstat_\(command):") } ?? ""
        let field = line.split(separator: ",").first { $0.hasPrefix("usec_per_call=") }
        return field.flatMap { Double($0.dropFirst("usec_per_call=".count)) } ?? .nan
    }
}

/// This process's redis-server (RedisFleet's launcher), started on first use and stopped when a
/// redis.* workload finishes.
enum SharedServer {
    private static let slot = Locked<RedisServer?>(nil)

    /// The server, started (and waited for until it answers PING) if there is none.
    static func get() throws -> RedisServer {
        try slot.withLock { server in
            if let server { return server }
            let started = try RedisServer()
            server = started
            return started
        }
    }

    /// Stops the server, if one was started, and removes its folder.
    static func stop() {
        let server = slot.withLock { server in
            defer { server = nil }
            return server
        }
        // Released here, outside the lock: its deinit removes the folder.
        server?.stop()
    }
}

/// A redis.* row that could not run.
struct BenchRedisError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

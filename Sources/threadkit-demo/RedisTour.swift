// The Redis part of the tour: three processes (this program again, started with `--redis-member`)
// share one limit through a redis-server of the demo's own, and one 429 pauses them all. Every
// figure is read on Redis's clock: the starts each process recorded, and the reservations the
// shared throttle script made (seen through MONITOR), which the verdict is checked on.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackHTTPServer
import RedisFleet
import Synchronization
import ThreadKit
import ThreadKitRedis

/// The shared limit of the tour, what each process does with it, and what the parent shows.
enum SharedLimitTour {
    /// The first argument that makes this program a member process.
    static let memberFlag = "--redis-member"
    static let key = "demo-api"
    static let processes = 3
    static let callsPerProcess = 4
    static let gap = Duration.milliseconds(100)
    static let perSecond = 5
    /// Where the processes meet: counted ready, the go, process 1's pause sent, the calls recorded.
    static let readyKey = "demo:ready", goKey = "demo:go", pausedKey = "demo:paused", callsKey = "demo:calls"

    // MARK: - The parent

    /// The step: says how to get redis-server when there is none, else runs the three processes.
    static func run() {
        guard RedisAvailability.isAvailable else {
            say("  \(RedisAvailability.skipReason) to see three processes share one limit; skipped.")
            return
        }
        do {
            try showProcesses()
        } catch {
            say("  the Redis step failed: \(error)")
        }
    }

    private static func showProcesses() throws {
        let server = try RedisServer()
        defer { server.stop() }
        let answered = Mutex(0)
        let api = try LoopbackHTTPServer(address: "127.0.0.1") { _ in
            guard answered.withLock({ count in count += 1; return count }) > 1 else {
                return .respond(status: 429, headers: ["Retry-After": "1"], body: Array("slow down".utf8))
            }
            return .respond(status: 200, body: Array("ok".utf8))
        }
        defer { api.shutdown() }
        say("  our own redis-server on \(server.address); an API on \(api.baseURL) that answers its first call 429, Retry-After: 1")
        let client = RedisClient(server.address, commandTimeout: .seconds(2))
        let monitor = try RedisMonitor(socketPath: server.socketPath)
        defer { monitor.stop() }
        let program = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var pids: [pid_t] = []
        defer { _ = FleetRun.waitForAll(pids, within: .zero) }
        for member in 0..<processes {
            let arguments = [program, memberFlag, server.socketPath, api.baseURL.absoluteString, String(member)]
            pids.append(try FleetRun.spawn(arguments, environment: ProcessInfo.processInfo.environment, log: log(member, in: server)))
        }
        let readyBy = ContinuousClock.now + .seconds(10)
        while (try? client.sendSync("GET", readyKey).string) != String(processes), ContinuousClock.now < readyBy { usleep(2_000) }
        let go = try redisTime(client)
        _ = try client.sendSync("SET", goKey, "1")
        say("  \(processes) processes (pids \(pids.map(String.init).joined(separator: ", "))), \(callsPerProcess) calls each, every one through")
        say("  ThrottledQueue(interval: 100 ms, limit: .rate(5, per: 1 s), coordination: .redis(client, key: \"demo-api\")); go:")
        let statuses = FleetRun.waitForAll(pids, within: .seconds(10))
        pids = []
        monitor.stop()
        for (member, status) in statuses.enumerated() where status != 0 {
            let output = (try? String(contentsOfFile: log(member, in: server), encoding: .utf8)) ?? ""
            say("  process \(member + 1) failed (\(status.map { "status \($0)" } ?? "killed after 10 s")): \(output.suffix(400))")
        }
        let records = try client.sendSync("LRANGE", callsKey, "0", "-1").array?.compactMap(\.string).compactMap(Call.init) ?? []
        let reservations = monitor.scriptPushes(to: SharedThrottleProbe(client: client, key: key).logKey).compactMap { Int64($0) }
        show(records, reservations: reservations, go: go)
    }

    private static func log(_ member: Int, in server: RedisServer) -> String { "\(server.directory)/process-\(member + 1).log" }

    /// One call as its process recorded it, on Redis's clock (µs): `member number start status [pausedAt]`.
    struct Call {
        var member: Int
        var start: Int64
        var status: Int
        /// For the call answered 429: Redis's clock just before its process paused the limit.
        var pausedAt: Int64?

        init?(_ record: String) {
            let words = record.split(separator: " ").compactMap { Int64($0) }
            guard words.count >= 4 else { return nil }
            (member, start, status, pausedAt) = (Int(words[0]), words[2], Int(words[3]), words.count > 4 ? words[4] : nil)
        }
    }

    /// Prints a timeline per process (100 ms a column: `●` a start, `!` a start answered 429, `=`
    /// the pause) and the verdict, checked on the reservations.
    private static func show(_ calls: [Call], reservations: [Int64], go: Int64) {
        func slot(_ instant: Int64) -> Int { max(0, Int((instant - go) / 100_000)) }
        let pause = calls.compactMap(\.pausedAt).first.map { $0..<($0 + 1_000_000) }
        let width = max(30, (calls.map { slot($0.start) } + [pause.map { slot($0.upperBound) } ?? 0]).max()! + 1)
        say("                 " + stride(from: 0, to: width, by: 10).map { "\($0 / 10) s".padding(toLength: 10, withPad: " ", startingAt: 0) }.joined())
        for member in 0..<processes {
            var row = Array(repeating: Character("·"), count: width)
            let own = calls.filter { $0.member == member }.sorted { $0.start < $1.start }
            for call in own { row[slot(call.start)] = call.status == 429 ? "!" : "●" }
            let times = own.map { "\(($0.start - go) / 1_000)\($0.status == 429 ? " (429)" : "")" }.joined(separator: ", ")
            say("    process \(member + 1)    \(String(row))  starts at \(times) ms")
        }
        if let pause {
            var row = Array(repeating: Character(" "), count: width)
            for column in slot(pause.lowerBound)..<min(width, slot(pause.upperBound)) { row[column] = "=" }
            say("    pause        \(String(row))  \((pause.lowerBound - go) / 1_000) to \((pause.upperBound - go) / 1_000) ms, for all three")
        }
        let check = FleetCheck(reservations: reservations, runs: [], gap: gap.microseconds, window: 1_000_000)
        let inPause = pause.map { pause in reservations.filter { pause.contains($0) }.count } ?? 0
        let members = Set(calls.map(\.member)).count
        say("  verdict: \(calls.count) starts across \(members) processes, at most \(check.maximumInWindow) in any second (limit \(perSecond)), "
            + "\(check.closePairs.isEmpty ? "none" : "\(check.closePairs.count) pairs") closer than 100 ms; "
            + (pause == nil ? "no 429 was seen" : "\(inPause == 0 ? "none" : String(inPause)) during the 1 s pause"))
    }

    // MARK: - A member process

    /// Runs this process as member `arguments[2]` (socket path, API URL, member number); its exit status.
    static func runMember(_ arguments: [String]) -> Int32 {
        guard arguments.count == 3, let api = URL(string: arguments[1]), let member = Int(arguments[2]) else {
            FileHandle.standardError.write(Data("usage: threadkit-demo \(memberFlag) SOCKET API-URL MEMBER\n".utf8))
            return 2
        }
        do {
            try runMember(socketPath: arguments[0], api: api, member: member)
            return 0
        } catch {
            FileHandle.standardError.write(Data("process \(member + 1): \(error)\n".utf8))
            return 1
        }
    }

    /// Counts itself ready, waits for the go, and makes its calls through a queue that shares the
    /// limit; process 1 makes the first call alone (answered 429: it pauses the limit, for every
    /// process), and the others begin once that pause is on Redis.
    private static func runMember(socketPath: String, api: URL, member: Int) throws {
        let deadline = ContinuousClock.now + .seconds(10)
        let client = RedisClient(.unixSocket(path: socketPath), commandTimeout: .seconds(2))
        _ = try client.sendSync("INCR", readyKey)
        try waitFor(goKey, on: client, until: deadline)
        let queue = ThrottledQueue(
            label: "demo-api \(member + 1)", interval: gap, limit: .rate(perSecond, per: .seconds(1)),
            coordination: .redis(client, key: key))
        var numbers = 0..<callsPerProcess
        if member == 0 {
            try queue.sync { try call(0, member: member, api: api, queue: queue, client: client) }
            // The pause was sent without waiting: once flushed, it is on Redis for every process.
            try client.flushSync()
            _ = try client.sendSync("SET", pausedKey, "1")
            numbers = 1..<callsPerProcess
        } else {
            try waitFor(pausedKey, on: client, until: deadline)
        }
        let done = DispatchGroup()
        let failure = Mutex<String?>(nil)
        for number in numbers {
            done.enter()
            try queue.async {
                defer { done.leave() }
                do {
                    try call(number, member: member, api: api, queue: queue, client: client)
                } catch {
                    failure.withLock { $0 = "call \(number): \(error)" }
                }
            }
        }
        guard done.wait(timeout: .now() + max(deadline - .now, .zero).seconds) == .success else { throw DemoError("calls not done in 10 s") }
        if let failure = failure.withLock({ $0 }) { throw DemoError(failure) }
        try client.flushSync()
    }

    /// One call: reads Redis's clock (the start), calls the API, pauses the shared limit on a 429
    /// with Retry-After, and records `member number start status [pausedAt]`.
    private static func call(_ number: Int, member: Int, api: URL, queue: ThrottledQueue, client: RedisClient) throws {
        let start = try redisTime(client)
        let (status, retryAfter) = try get(api.appendingPathComponent("call/\(member + 1)/\(number + 1)"))
        var record = "\(member) \(number) \(start) \(status)"
        if status == 429, let retryAfter {
            record += " \(try redisTime(client))"
            queue.pause(for: .seconds(retryAfter))
        }
        _ = try client.sendSync("RPUSH", callsKey, record)
    }

    /// A GET, blocking (2 s at most): its status and its Retry-After in seconds.
    private static func get(_ url: URL) throws -> (Int, Int?) {
        let result = Mutex<Result<(Int, Int?), DemoError>>(.failure(DemoError("no answer from \(url) in 2 s")))
        let answered = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: URLRequest(url: url, timeoutInterval: 2)) { _, response, error in
            if let response = response as? HTTPURLResponse {
                let retryAfter = (response.value(forHTTPHeaderField: "Retry-After")).flatMap { Int($0) }
                result.withLock { $0 = .success((response.statusCode, retryAfter)) }
            } else {
                result.withLock { $0 = .failure(DemoError("\(url): \(error.map { "\($0)" } ?? "no response")")) }
            }
            answered.signal()
        }.resume()
        _ = answered.wait(timeout: .now() + 3)
        return try result.withLock { $0 }.get()
    }

    private static func waitFor(_ key: String, on client: RedisClient, until deadline: ContinuousClock.Instant) throws {
        while try client.sendSync("EXISTS", key).integer != 1 {
            guard ContinuousClock.now < deadline else { throw DemoError("no \(key) within 10 s") }
            usleep(1_000)
        }
    }

    /// Redis's clock (`TIME`) in microseconds.
    private static func redisTime(_ client: RedisClient) throws -> Int64 {
        let parts = try client.sendSync("TIME").array?.compactMap { $0.string.flatMap { Int64($0) } } ?? []
        guard parts.count == 2 else { throw DemoError("TIME answered \(parts)") }
        return parts[0] * 1_000_000 + parts[1]
    }
}

/// Something the Redis step could not do, said plainly.
struct DemoError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Duration {
    /// Whole microseconds.
    var microseconds: Int64 { components.seconds * 1_000_000 + components.attoseconds / 1_000_000_000_000 }
}

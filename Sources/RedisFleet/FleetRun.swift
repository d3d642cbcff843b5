// The parent's side of a fleet run: a MONITOR connection, the members as processes, the go, and
// what the server saw and the tasks recorded.
import Foundation
import ThreadKitRedis
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One run of a fleet on a server that is already up.
package struct FleetRun {
    /// What the run showed: the checks on Redis's clock, and each member's exit.
    package struct Outcome {
        package let check: FleetCheck
        /// Each member's exit status, `nil` for one killed after running too long.
        package let statuses: [Int32?]
        /// The last lines each member wrote, by member, for the members that failed.
        package let failures: [Int: String]
        /// Run records that were not one start and one end of a task.
        package let unpairedRecords: Int
    }

    /// Runs `plan` (its socket path set) with its members started as `program arguments…`, each
    /// with its plan in ``FleetMember/environmentName``, their output in `logDirectory`: waits for
    /// all to count themselves ready (30 s at most), lets them go at once, waits for them to exit
    /// (90 s at most, then kills them), and reads the reservations the server saw and the runs the
    /// tasks recorded.
    package static func run(_ plan: FleetPlan, program: String, arguments: [String], logDirectory: String) throws -> Outcome {
        let client = RedisClient(.unixSocket(path: plan.socketPath), commandTimeout: .seconds(5))
        let monitor = try RedisMonitor(socketPath: plan.socketPath)
        defer { monitor.stop() }
        var pids: [pid_t] = []
        do {
            for member in 0..<plan.members {
                var own = plan
                own.member = member
                var environment = ProcessInfo.processInfo.environment
                environment[FleetMember.environmentName] = try own.encoded()
                pids.append(try spawn([program] + arguments, environment: environment, log: "\(logDirectory)/member-\(member).log"))
            }
        } catch {
            _ = waitForAll(pids, within: .zero)
            throw error
        }
        let readyBy = ContinuousClock.now + .seconds(30)
        while (try? client.sendSync("GET", plan.readyKey).string) != String(plan.members), ContinuousClock.now < readyBy {
            usleep(5_000)
        }
        _ = try client.sendSync("SET", plan.goKey, "1")
        let statuses = waitForAll(pids, within: .seconds(90))
        monitor.stop()
        var failures: [Int: String] = [:]
        for (member, status) in statuses.enumerated() where status != 0 {
            let text = (try? String(contentsOfFile: "\(logDirectory)/member-\(member).log", encoding: .utf8)) ?? ""
            failures[member] = text.split(separator: "\n").suffix(12).joined(separator: "\n")
        }
        let records = try client.sendSync("LRANGE", plan.runsKey, "0", "-1").array?.compactMap(\.string) ?? []
        let reservations = monitor.scriptPushes(to: SharedThrottleProbe(client: client, key: plan.key).logKey).compactMap { Int64($0) }
        let parsed = FleetCheck.runs(from: records)
        let check = FleetCheck(
            reservations: reservations, runs: parsed.runs, gap: plan.gap, window: plan.window,
            serialGap: plan.serial ? plan.gap : nil)
        return Outcome(check: check, statuses: statuses, failures: failures, unpairedRecords: parsed.unpaired)
    }

    /// Starts `arguments` (the program first) with `environment`, its standard input /dev/null and its
    /// output and errors in the file `log`; returns its pid.
    package static func spawn(_ arguments: [String], environment: [String: String], log: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, nil, &argv, &envp)
        guard result == 0 else { throw FleetError("posix_spawn of a fleet member (\(arguments[0])) failed: error \(result)") }
        return pid
    }

    /// Waits for every process in `pids` to exit, for at most `limit`, then kills those still running;
    /// each one's exit status (`nil`: killed).
    package static func waitForAll(_ pids: [pid_t], within limit: Duration) -> [Int32?] {
        let deadline = ContinuousClock.now + limit
        var statuses: [Int32?] = Array(repeating: nil, count: pids.count)
        var running = Set(pids.indices)
        while !running.isEmpty, ContinuousClock.now < deadline {
            for index in running {
                var status: Int32 = 0
                if waitpid(pids[index], &status, WNOHANG) == pids[index] {
                    statuses[index] = status
                    running.remove(index)
                }
            }
            usleep(5_000)
        }
        for index in running {
            kill(pids[index], SIGKILL)
            var status: Int32 = 0
            waitpid(pids[index], &status, 0)
        }
        return statuses
    }
}

// One member of a fleet, in a process of its own: counts itself ready, waits for the parent's go,
// then runs its plan's tasks on a ThrottledQueue that shares the limit through Redis, each task
// recording its start and end on Redis's clock.
import Foundation
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitRedis

/// The member's side of a fleet run.
package enum FleetMember {
    /// The environment variable that makes a process a member, with its plan as JSON.
    package static let environmentName = "THREADKIT_FLEET_MEMBER"

    /// The plan this process is a member by; `nil` in an ordinary run.
    package static let plan: FleetPlan? = ProcessInfo.processInfo.environment[environmentName].flatMap { try? FleetPlan.decoded($0) }

    /// Runs `plan` in this process, within 60 s; throws on anything unexpected (the process then
    /// exits with a failure that the parent reports, with this process's output).
    ///
    /// The tasks go to one `ThrottledQueue(interval: gap, monitor:, limit:, coordination:
    /// .redis(client, key:, whenUnavailable: .failClosed))`, all submitted at the go: the public
    /// API, as a service would use it. `.failClosed`, and a 5 s command timeout, because the run
    /// checks the shared decisions: a start the local fallback made would have no reservation.
    package static func run(_ plan: FleetPlan) throws {
        let client = RedisClient(.unixSocket(path: plan.socketPath), commandTimeout: .seconds(5))
        _ = try client.sendSync("INCR", plan.readyKey)
        let deadline = ContinuousClock.now + .seconds(60)
        while try client.sendSync("EXISTS", plan.goKey).integer != 1 {
            guard ContinuousClock.now < deadline else { throw FleetError("member \(plan.member): no go within 60 s") }
            usleep(2_000)
        }
        let queue = ThrottledQueue(
            label: "fleet member \(plan.member)", interval: .microseconds(plan.gap), monitor: plan.serial ? .serial : .concurrent,
            limit: plan.limit.map { .rate($0.count, per: .microseconds($0.window)) },
            coordination: .redis(client, key: plan.key, whenUnavailable: .failClosed))
        let done = DispatchSemaphore(value: 0)
        let failures = Locked<[String]>([])
        for task in 0..<plan.tasks {
            try queue.async {
                do {
                    try runTask(task, plan, client: client)
                } catch {
                    failures.withLock { $0.append("task \(task): \(error)") }
                }
                done.signal()
            }
        }
        for finished in 0..<plan.tasks {
            guard done.wait(timeout: .now() + max(deadline - ContinuousClock.now, .zero).seconds) == .success else {
                throw FleetError("member \(plan.member): \(finished) of \(plan.tasks) tasks ran within 60 s")
            }
        }
        // A task's end reaches Redis after the task returns (a `.serial` lease is handed back
        // without waiting): wait until the queue has handed every end to the client, then until
        // the client has sent them all. Exiting sooner would leave the last lease held until it
        // expires, stalling every other process for the lease's TTL.
        queue.waitUntilIdle()
        try client.flushSync(timeout: .seconds(10))
        if let failure = failures.withLock({ $0.first }) { throw FleetError("member \(plan.member): \(failure)") }
    }

    /// Task `task`: its start and end recorded by ``fleetRecordScript``, `taskLength` apart at least.
    static func runTask(_ task: Int, _ plan: FleetPlan, client: RedisClient) throws {
        let name = "\(plan.member) \(task)"
        _ = try client.evaluateSync(fleetRecordScript, keys: [plan.runsKey], arguments: ["\(name) start"])
        if plan.taskLength > 0 { usleep(UInt32(plan.taskLength)) }
        _ = try client.evaluateSync(fleetRecordScript, keys: [plan.runsKey], arguments: ["\(name) end"])
    }
}

extension Duration {
    /// The duration in seconds, for Dispatch's timeouts.
    fileprivate var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

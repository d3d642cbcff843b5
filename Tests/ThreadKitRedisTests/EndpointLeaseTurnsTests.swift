// Processes that all have a backlog take turns at an endpoint's leases (the script's line), on a
// server of the test's own, with Redis's own clock.

import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitRedis
import ThreadKitTestSupport

/// One "process" with a backlog, driving its leases as a dispatcher does: until `grants` holds
/// `total` grants, it asks; a lease it gets it holds `hold`, gives back, and asks again at once; a
/// decline it waits out as the answer says. Answers come on the client's thread and waits run on
/// `TimerThread.shared`, not on the cooperative pool, which the other suites may starve for
/// seconds.
private final class BacklogProcess: Sendable {
    let name: String
    let leases: RedisEndpointLeases
    let limit: Int
    let hold: Duration
    let total: Int
    let grants: Recorder<String>

    init(_ name: String, _ leases: RedisEndpointLeases, limit: Int, hold: Duration, total: Int, grants: Recorder<String>) {
        (self.name, self.leases, self.limit, self.hold, self.total, self.grants) = (name, leases, limit, hold, total, grants)
    }

    func ask() {
        guard grants.values.count < total else { return }
        leases.acquire(EndpointLeaseRequest(endpoint: EndpointLeaseTurnsTests.endpoint, limit: limit)) { [self] answer in
            switch answer {
            case .granted(let lease):
                grants.append(name)
                after(hold) { [self] in
                    leases.release(lease)
                    ask()
                }
            case .full(let wait), .paused(let wait), .unavailable(let wait):
                after(wait) { [self] in ask() }
            }
        }
    }

    private func after(_ delay: Duration, _ work: @escaping @Sendable () -> Void) {
        if (try? TimerThread.shared.schedule(after: delay, work)) == nil { Issue.record("TimerThread.shared refused a call") }
    }
}

@Suite("RedisEndpointLeases: processes with a backlog take turns", .needsRedisServer)
struct EndpointLeaseTurnsTests {
    static let endpoint = "http://api.example.com:80"

    /// The order of the first `total` grants to `names`, one instance (one "process") each, all
    /// with a backlog, on one endpoint of `limit`; waits until every lease is back. A poll of
    /// 300 ms: a waiter stays in line 3 s without asking, however loaded the machine.
    func grants(_ names: [String], limit: Int, total: Int, on server: RedisServer) async throws -> [String] {
        let grants = Recorder<String>()
        let processes = names.map { name in
            BacklogProcess(name, RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(30),
                                                     pollInterval: .milliseconds(300)),
                           limit: limit, hold: .milliseconds(30), total: total, grants: grants)
        }
        for process in processes { process.ask() }
        #expect(await eventually(timeout: .seconds(60)) { grants.values.count >= total })
        let observer = makeClient(server.address)
        let key = EndpointLeaseScript.keys(processes[0].leases.keys(for: Self.endpoint))[0]
        #expect(await eventually { (try? observer.sendSync("ZCARD", key)) == .integer(0) })
        return Array(grants.values.prefix(total))
    }

    @Test("two instances (two processes) with a backlog on one endpoint of limit 1: grants alternate, ten each of twenty")
    func twoProcessesAlternate() async throws {
        try await withRedisServer { server in
            let order = try await grants(["a", "b"], limit: 1, total: 20, on: server)
            #expect(order.count == 20)
            #expect(order.filter { $0 == "a" }.count == 10)
            #expect(zip(order, order.dropFirst()).allSatisfy { $0 != $1 }, "grants did not alternate: \(order)")
        }
    }

    @Test("three instances with a backlog on one endpoint of limit 2: each gets about its share, none starves")
    func threeProcessesShare() async throws {
        try await withRedisServer { server in
            let order = try await grants(["a", "b", "c"], limit: 2, total: 30, on: server)
            #expect(order.count == 30)
            // In turns, each of three gets a third, give or take the first round's order and a turn
            // lost by an asker whose thread a loaded machine held back past its ten polls (the
            // alternation itself is exact in the two-instance test).
            for name in ["a", "b", "c"] {
                let count = order.filter { $0 == name }.count
                #expect((7...13).contains(count), "\(name) got \(count) of 30: \(order)")
            }
        }
    }
}

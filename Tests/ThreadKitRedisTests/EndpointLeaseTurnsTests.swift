// Processes that all have a backlog take turns at an endpoint's leases (the script's line), on a
// server of the test's own, with Redis's own clock.

import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitRedis
import ThreadKitTestSupport

@Suite("RedisEndpointLeases: processes with a backlog take turns", .needsRedisServer)
struct EndpointLeaseTurnsTests {
    static let endpoint = "http://api.example.com:80"

    func acquire(_ leases: RedisEndpointLeases, limit: Int) async -> EndpointLeaseAnswer {
        await withCheckedContinuation { continuation in
            leases.acquire(EndpointLeaseRequest(endpoint: Self.endpoint, limit: limit)) { continuation.resume(returning: $0) }
        }
    }

    /// One "process": until `grants` holds `total` grants (or 20 s pass), it asks for a lease; each
    /// one it gets it holds `hold`, gives back, and asks again at once, as a dispatcher with a
    /// backlog does; a decline it waits out as the answer says.
    func runBacklog(_ name: String, _ leases: RedisEndpointLeases, limit: Int, hold: Duration, total: Int,
                    grants: Recorder<String>) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while grants.values.count < total, ContinuousClock.now < deadline {
            switch await acquire(leases, limit: limit) {
            case .granted(let lease):
                grants.append(name)
                try await Task.sleep(for: hold)
                leases.release(lease)
            case .full(let wait), .paused(let wait), .unavailable(let wait):
                try await Task.sleep(for: wait)
            }
        }
    }

    /// The order of the first `total` grants to `names`, one instance (one "process") each, all
    /// with a backlog, on one endpoint of `limit`. A poll of 300 ms: a waiter stays in line 3 s
    /// without asking, however loaded the machine (under the thread sanitizer, with the other
    /// suites running, a turn can take half a second).
    func grants(_ names: [String], limit: Int, total: Int, on server: RedisServer) async throws -> [String] {
        let grants = Recorder<String>()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for name in names {
                let leases = RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(600),
                                                 pollInterval: .milliseconds(300))
                group.addTask { try await runBacklog(name, leases, limit: limit, hold: .milliseconds(30), total: total, grants: grants) }
            }
            try await group.waitForAll()
        }
        return Array(grants.values.prefix(total))
    }

    @Test("two instances (two processes) with a backlog on one endpoint of limit 1: grants alternate, six each of twelve")
    func twoProcessesAlternate() async throws {
        try await withRedisServer { server in
            let order = try await grants(["a", "b"], limit: 1, total: 12, on: server)
            #expect(order.count == 12)
            #expect(order.filter { $0 == "a" }.count == 6)
            #expect(zip(order, order.dropFirst()).allSatisfy { $0 != $1 }, "grants did not alternate: \(order)")
        }
    }

    @Test("three instances with a backlog on one endpoint of limit 2: each gets its share, none starves")
    func threeProcessesShare() async throws {
        try await withRedisServer { server in
            let order = try await grants(["a", "b", "c"], limit: 2, total: 18, on: server)
            #expect(order.count == 18)
            // In turns, each of three gets a third, give or take the first round's order.
            for name in ["a", "b", "c"] {
                let count = order.filter { $0 == name }.count
                #expect((4...8).contains(count), "\(name) got \(count) of 18: \(order)")
            }
        }
    }
}

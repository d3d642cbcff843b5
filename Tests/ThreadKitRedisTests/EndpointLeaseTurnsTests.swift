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
    /// A grant or an ask: which process, and when it was seen here.
    struct Event: Sendable {
        let name: String
        let at: ContinuousClock.Instant
    }

    let name: String
    let leases: RedisEndpointLeases
    let limit: Int
    let hold: Duration
    let total: Int
    let grants: Recorder<Event>
    let asks: Recorder<Event>

    init(_ name: String, _ leases: RedisEndpointLeases, limit: Int, hold: Duration, total: Int, grants: Recorder<Event>,
         asks: Recorder<Event>) {
        (self.name, self.leases, self.limit, self.hold, self.total, self.grants, self.asks) = (name, leases, limit, hold, total, grants, asks)
    }

    func ask() {
        guard grants.values.count < total else { return }
        asks.append(Event(name: name, at: .now))
        leases.acquire(EndpointLeaseRequest(endpoint: EndpointLeaseTurnsTests.endpoint, limit: limit)) { [self] answer in
            switch answer {
            case .granted(let lease):
                grants.append(Event(name: name, at: .now))
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

    /// The first `total` grants to `names`, in order, one instance (one "process") each, all
    /// with a backlog, on one endpoint of `limit`, and every ask; waits until every lease is back.
    /// A poll of 300 ms: a waiter stays in line 3 s without asking.
    private func grants(_ names: [String], limit: Int, total: Int, on server: RedisServer) async throws
        -> (grants: [BacklogProcess.Event], asks: [BacklogProcess.Event]) {
        let grants = Recorder<BacklogProcess.Event>(), asks = Recorder<BacklogProcess.Event>()
        let processes = names.map { name in
            BacklogProcess(name, RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(30),
                                                     pollInterval: .milliseconds(300)),
                           limit: limit, hold: .milliseconds(30), total: total, grants: grants, asks: asks)
        }
        for process in processes { process.ask() }
        #expect(await eventually(timeout: .seconds(60)) { grants.values.count >= total })
        let observer = makeClient(server.address)
        let key = EndpointLeaseScript.keys(processes[0].leases.keys(for: Self.endpoint))[0]
        #expect(await eventually { (try? observer.sendSync("ZCARD", key)) == .integer(0) })
        return (Array(grants.values.prefix(total)), asks.values)
    }

    @Test("two instances (two processes) with a backlog on one endpoint of limit 1: grants alternate, ten each of twenty, but where the other had not asked for its ten polls")
    func twoProcessesAlternate() async throws {
        try await withRedisServer { server in
            let (order, asks) = try await grants(["a", "b"], limit: 1, total: 20, on: server)
            let names = order.map(\.name)
            #expect(order.count == 20)
            // A second turn in a row is right only when the other process had not asked for the
            // line's ten polls (3 s: a loaded machine held its thread back), so the script dropped it
            // from the line; half a second of slack for the way to Redis.
            var excused = 0
            for (previous, grant) in zip(order, order.dropFirst()) where previous.name == grant.name {
                let otherAsked = asks.last { $0.name != grant.name && $0.at <= grant.at }?.at
                let silence = otherAsked.map { $0.duration(to: grant.at) } ?? .seconds(60)
                #expect(silence > .milliseconds(2_500), "\(grant.name) had two turns in a row while the other asked \(silence) before: \(names)")
                excused += 1
            }
            #expect(abs(names.filter { $0 == "a" }.count - 10) <= excused, "\(names)")
        }
    }

    @Test("three instances with a backlog on one endpoint of limit 2: each gets about its share, none starves")
    func threeProcessesShare() async throws {
        try await withRedisServer { server in
            let order = try await grants(["a", "b", "c"], limit: 2, total: 30, on: server).grants.map(\.name)
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

// The examples of Docs/SharedLimits.md, run against a redis-server of the test's own.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer
import ThreadKitTestSupport
@testable import ThreadKitRedis

@Suite("Docs/SharedLimits.md's examples", .needsRedisServer, .serialized)
struct SharedLimitsDocsTests {
    @Test("a queue shared on Redis: ten pages at five a second, each started once, the starts logged on Redis")
    func sharedQueue() async throws {
        try await withRedisServer { server in
            let socketPath = server.socketPath
            let starts = Recorder<ContinuousClock.Instant>()
            @Sendable func fetchPage(_ page: Int) { starts.append(.now) }
            // snippet: Docs/SharedLimits.md#1
            let redis = RedisClient(.unixSocket(path: socketPath))
            let api = ThrottledQueue(label: "API", limit: .rate(5, per: .seconds(1)),
                                     coordination: .redis(redis, key: "api.example.com"))
            for page in 1...10 {
                try api.async { fetchPage(page) }
            }
            // end snippet
            await api.waitUntilIdle()
            let recorded = starts.values
            #expect(recorded.count == 10)
            // The sixth start waits for the first to leave the window (a few ms for the two readings).
            #expect(recorded[5] - recorded[0] >= .milliseconds(995), "\(recorded[5] - recorded[0])")
            // Decided on Redis: its log holds the newest starts (five, unless a command timed out
            // on a loaded machine and the fallback decided some; none without the coordination).
            let observer = makeClient(server.address)
            let logged = try await observer.send("LLEN", "threadkit:{api.example.com}:throttle:log").integer ?? 0
            #expect((1...5).contains(logged), "\(logged)")
        }
    }

    @Test("a dispatcher sharing an endpoint's limit on Redis asks there for its request's lease, and leaves none behind")
    func sharedEndpoint() async throws {
        try await withRedisServer { server in
            let socketPath = server.socketPath
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            // snippet: Docs/SharedLimits.md#2
            let redis = RedisClient(.unixSocket(path: socketPath))
            let requests = URLDispatcher(limits: .init(maxRequests: 4,
                                                       coordination: .redis(redis, key: "api.example.com")))
            // end snippet
            defer { requests.dispose() }
            let endpoint = try URLDispatcher.Endpoint(url: http.baseURL)
            let observer = makeClient(server.address)
            let keys = EndpointLeaseScript.keys(RedisEndpointLeases(client: observer, key: "api.example.com").keys(for: endpoint.description))
            let (_, response) = try await requests.data(for: URLRequest(url: http.url("/?delay=100")))
            #expect(response.statusCode == 200)
            // The request asked Redis for a lease (the endpoint's state is there; with the default
            // 100 ms command timeout on a loaded machine the answer may have come too late, and the
            // fallback let it run), and no lease is left once it ended.
            #expect(try await observer.send("EXISTS", keys[1]) == .integer(1))
            #expect(await leases(observer, keys[0], become: 0))
        }
    }

    /// Whether the sorted set `key` holds `count` leases within 10 s.
    private func leases(_ client: RedisClient, _ key: String, become count: Int64) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if (try? await client.send("ZCARD", key)) == .integer(count) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    @Test("shutting down: once the queue is idle and the client flushed, the .serial lease is back on Redis")
    func shutDownHandsTheLeaseBack() async throws {
        try await withRedisServer { server in
            let redis = RedisClient(server.address, commandTimeout: .seconds(5))
            let api = ThrottledQueue(label: "API", monitor: .serial, coordination: .redis(redis, key: "api.example.com"))
            try await api.run {}
            // snippet: Docs/SharedLimits.md#3
            func shutDown() async throws {
                await api.waitUntilIdle()      // the last task has ended and handed its lease back
                try await redis.flush()        // and the hand-back has reached Redis
            }
            // end snippet
            try await shutDown()
            // Read at once, with no waiting: the flush is what makes it so.
            let observer = makeClient(server.address)
            let state = try await observer.send("EXISTS", "threadkit:{api.example.com}:throttle")
            #expect(state == .integer(1), "no shared state: the start was not decided on Redis")
            let probe = SharedThrottleProbe(client: observer, key: "api.example.com")
            let decision = try await onNewThread(limit: .seconds(10)) { try? probe.reserve(gap: 0, serial: true, limit: nil) }
            guard case .reserved? = decision else {
                Issue.record("another process's .serial start was not reserved at once: \(String(describing: decision))")
                return
            }
        }
    }
}

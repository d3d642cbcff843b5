// URLDispatchers with different Redis clients sharing one endpoint's limit, against a loopback
// HTTP server that counts the requests it handles at once.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer
@testable import ThreadKitRedis
import ThreadKitTestSupport

extension LoopbackHTTPServer {
    /// This server's endpoint.
    fileprivate var endpoint: URLDispatcher.Endpoint { try! URLDispatcher.Endpoint(url: baseURL) }
}

/// Limits of `maxRequests` shared through `server` under `key`, each call with a client of its own
/// (as two processes would have).
private func sharedLimits(_ address: RedisClient.Address, key: String = "api", maxRequests: Int = 2,
                          fallback: Fallback = .failClosed, leaseTTL: Duration = .seconds(10),
                          commandTimeout: Duration = .seconds(5)) -> URLDispatcher.EndpointLimits {
    let leases = RedisEndpointLeases(client: makeClient(address, timeout: commandTimeout), key: key, leaseTTL: leaseTTL)
    return URLDispatcher.EndpointLimits(maxRequests: maxRequests, coordination: Coordination(coordinator: nil, endpoints: leases, whenUnavailable: fallback))
}

/// Runs `body` with two dispatchers, disposed after it, within 30 s.
private func withTwoDispatchers<T: Sendable>(
    _ first: URLDispatcher.EndpointLimits, _ second: URLDispatcher.EndpointLimits,
    _ body: @escaping @Sendable (URLDispatcher, URLDispatcher) async throws -> T
) async throws -> T {
    let a = URLDispatcher(limits: first)
    let b = URLDispatcher(limits: second)
    defer {
        a.dispose()
        b.dispose()
    }
    return try await bounded { try await body(a, b) }
}

/// Runs `body`, failing with ``TestTimedOut`` after 30 s (`body` is cancelled then).
private func bounded<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try? await Task.sleep(for: .seconds(30))
            return nil
        }
        guard let first = try await group.next(), let value = first else {
            group.cancelAll()
            throw TestTimedOut(limit: .seconds(30))
        }
        group.cancelAll()
        return value
    }
}

/// Waits up to 10 s for `condition`. A release is sent after the request's caller resumes (and goes
/// out on the dispatcher's own connection): read what it changed on Redis with this, never at once.
private func waitFor(_ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(5))
    }
    return false
}

/// The leases held on the server for `endpoint` under `key`.
private func heldLeases(_ client: RedisClient, key: String = "api", endpoint: URLDispatcher.Endpoint) async throws -> Int64 {
    let leases = RedisEndpointLeases(client: client, key: key)
    return try await client.send("ZCARD", EndpointLeaseScript.keys(leases.keys(for: endpoint.description))[0]).integer ?? -1
}

/// How many processes wait in line on the server for `endpoint` under `key`.
private func inLine(_ client: RedisClient, key: String = "api", endpoint: URLDispatcher.Endpoint) async throws -> Int64 {
    let leases = RedisEndpointLeases(client: client, key: key)
    return try await client.send("ZCARD", EndpointLeaseScript.keys(leases.keys(for: endpoint.description))[2]).integer ?? -1
}

@Suite("URLDispatcher endpoint limits shared on Redis", .needsRedisServer, .serialized)
struct SharedEndpointLimitsTests {
    @Test("two dispatchers sharing maxRequests 2 never have more than 2 in flight together, and give every lease back")
    func neverMoreThanTheLimit() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            try await withTwoDispatchers(sharedLimits(redis.address), sharedLimits(redis.address)) { a, b in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in 0..<16 {
                        let dispatcher = index % 2 == 0 ? a : b
                        group.addTask { _ = try await dispatcher.data(for: URLRequest(url: http.url("/?delay=40"))) }
                    }
                    try await group.waitForAll()
                }
                #expect(http.peak == 2)
                #expect(http.total == 16)
                #expect(a.statistics(for: http.endpoint).completed == 8)
                #expect(b.statistics(for: http.endpoint).completed == 8)
                #expect(try await waitFor { try await heldLeases(makeClient(redis.address), endpoint: http.endpoint) == 0 })
            }
        }
    }

    @Test("three dispatchers sharing maxRequests 3 through the public Coordination.redis under load: never more than 3 in flight, every request served, every lease back")
    func underLoad() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let dispatchers = (0..<3).map { _ in
                URLDispatcher(limits: .init(maxRequests: 3, coordination: .redis(
                    makeClient(redis.address, timeout: .seconds(5)), key: "api", whenUnavailable: .failClosed)))
            }
            defer { for dispatcher in dispatchers { dispatcher.dispose() } }
            try await bounded {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    // Each request takes 50-80 ms, far longer than a lease's round trips, so that three
                    // run at once however busy the machine (with 0-30 ms, a busy run peaked at 2).
                    for index in 0..<60 {
                        let dispatcher = dispatchers[index % 3]
                        group.addTask { _ = try await dispatcher.data(for: URLRequest(url: http.url("/?delay=\(50 + index % 4 * 10)"))) }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(http.peak == 3)
            #expect(http.total == 60)
            #expect(dispatchers.map { $0.statistics(for: http.endpoint).completed } == [20, 20, 20])
            #expect(try await waitFor { try await heldLeases(makeClient(redis.address), endpoint: http.endpoint) == 0 })
        }
    }

    @Test("one shared EndpointLimits used by two endpoints keeps their leases apart")
    func endpointsApart() async throws {
        try await withRedisServer { redis in
            let first = try LoopbackHTTPServer()
            let second = try LoopbackHTTPServer()
            defer {
                first.shutdown()
                second.shutdown()
            }
            try await withTwoDispatchers(sharedLimits(redis.address, maxRequests: 1), .init()) { a, _ in
                let hanging = Task { try await a.data(for: URLRequest(url: first.url("/hang"))) }
                #expect(await eventually { first.current == 1 })
                _ = try await a.data(for: URLRequest(url: second.url("/other")))   // would wait forever if merged
                #expect(second.total == 1)
                hanging.cancel()
                _ = try? await hanging.value
            }
        }
    }

    @Test("a Retry-After 429 seen by one dispatcher pauses the other")
    func retryAfterPausesTheFleet() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            try await withTwoDispatchers(sharedLimits(redis.address), sharedLimits(redis.address)) { a, b in
                let (_, response) = try await a.data(for: URLRequest(url: http.url("/?status=429&retry-after=1")))
                #expect(response.statusCode == 429)
                // The pause goes out on the first dispatcher's connection: wait until Redis has it.
                let observer = makeClient(redis.address)
                let stateKey = EndpointLeaseScript.keys(RedisEndpointLeases(client: observer, key: "api").keys(for: http.endpoint.description))[1]
                #expect(try await waitFor { try await observer.send("HGET", stateKey, "pausedUntil").string != nil })
                _ = try await b.data(for: URLRequest(url: http.url("/second")))
                let arrivals = http.arrivals
                #expect(arrivals.count == 2)
                if arrivals.count == 2 {
                    let apart = arrivals[0].time.duration(to: arrivals[1].time)
                    #expect(apart >= .milliseconds(750), "the second dispatcher started \(apart) after the 429")
                }
                #expect(b.statistics(for: http.endpoint).completed == 1)
            }
        }
    }

    @Test("a cancelled request gives its lease back: a request waiting in the other dispatcher gets it at once")
    func cancelReleases() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let ttl = Duration.seconds(30)
            try await withTwoDispatchers(sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl),
                                         sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl)) { a, b in
                let hanging = Task { try await a.data(for: URLRequest(url: http.url("/hang"))) }
                #expect(await eventually { http.current == 1 })
                let waiting = Task { try await b.data(for: URLRequest(url: http.url("/after"))) }
                try await Task.sleep(for: .milliseconds(100))
                #expect(http.total == 1)   // the lease is held: the second request waits
                let cancelled = ContinuousClock.now
                hanging.cancel()
                _ = try await waiting.value
                // Far sooner than the lease's 30 s TTL. (The server may still count the cancelled
                // request: on a loaded machine its cancel can land after the slot's 1 s grace.)
                #expect(cancelled.duration(to: .now) < .seconds(10))
                await #expect(throws: CancellationError.self) { _ = try await hanging.value }
            }
        }
    }

    @Test("a request that times out gives its lease back: a request waiting in the other dispatcher gets it at once")
    func timeoutReleases() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let ttl = Duration.seconds(30)
            try await withTwoDispatchers(sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl),
                                         sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl)) { a, b in
                let hanging = Task { try await a.data(for: URLRequest(url: http.url("/hang")), timeout: .milliseconds(300)) }
                #expect(await eventually { http.current == 1 })
                let started = ContinuousClock.now
                _ = try await b.data(for: URLRequest(url: http.url("/after")))
                #expect(started.duration(to: .now) < .seconds(10))   // not the lease's 30 s TTL
                await #expect(throws: URLDispatcherError.self) { _ = try await hanging.value }
                #expect(a.statistics(for: http.endpoint).timedOut == 1)
                #expect(try await waitFor { try await heldLeases(makeClient(redis.address), endpoint: http.endpoint) == 0 })
            }
        }
    }

    @Test("every ending gives the lease back: a failed transfer, an error status, a dispose with a request running")
    func everyEndingReleases() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let observer = makeClient(redis.address)
            let dispatcher = URLDispatcher(limits: sharedLimits(redis.address, maxRequests: 1, leaseTTL: .seconds(30)))
            try await bounded {
                await #expect(throws: (any Error).self) { _ = try await dispatcher.data(for: URLRequest(url: http.url("/close"))) }
                let (_, response) = try await dispatcher.data(for: URLRequest(url: http.url("/?status=500")))
                #expect(response.statusCode == 500)
                let hanging = Task { try await dispatcher.data(for: URLRequest(url: http.url("/hang"))) }
                #expect(await eventually { http.current == 1 })
                #expect(try await heldLeases(observer, endpoint: http.endpoint) == 1)
                dispatcher.dispose()
                await #expect(throws: URLDispatcherError.disposed) { _ = try await hanging.value }
            }
            #expect(try await waitFor { try await heldLeases(observer, endpoint: http.endpoint) == 0 })
            let statistics = dispatcher.statistics(for: http.endpoint)
            #expect(statistics.completed == 1 && statistics.failed == 2)
        }
    }

    @Test("a lease goes back to the coordinator that granted it after setLimits turns sharing off: long before its 10 min TTL")
    func releasedAfterSharingTurnedOff() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let observer = makeClient(redis.address)
            let dispatcher = URLDispatcher(limits: sharedLimits(redis.address, maxRequests: 1, leaseTTL: .seconds(600)))
            defer { dispatcher.dispose() }
            try await bounded { () async throws -> Void in
                let hanging = Task { try await dispatcher.data(for: URLRequest(url: http.url("/hang"))) }
                #expect(await eventually { http.current == 1 })
                #expect(try await heldLeases(observer, endpoint: http.endpoint) == 1)
                dispatcher.setLimits(.init(maxRequests: 6), for: http.endpoint)
                hanging.cancel()
                _ = try? await hanging.value
                #expect(try await waitFor { try await heldLeases(observer, endpoint: http.endpoint) == 0 })
            }
        }
    }

    @Test("after setLimits moves an endpoint from one Redis coordinator to another, each lease goes back to the one that granted it")
    func releasedToItsCoordinatorAfterASwitch() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let observer = makeClient(redis.address)
            let ttl = Duration.seconds(600)
            let dispatcher = URLDispatcher(limits: sharedLimits(redis.address, key: "a", maxRequests: 1, leaseTTL: ttl))
            defer { dispatcher.dispose() }
            try await bounded { () async throws -> Void in
                let first = Task { try await dispatcher.data(for: URLRequest(url: http.url("/hang"))) }
                #expect(await eventually { http.current == 1 })
                #expect(try await heldLeases(observer, key: "a", endpoint: http.endpoint) == 1)
                dispatcher.setLimits(sharedLimits(redis.address, key: "b", maxRequests: 2, leaseTTL: ttl), for: http.endpoint)
                let second = Task { try await dispatcher.data(for: URLRequest(url: http.url("/hang"))) }
                #expect(await eventually { http.current == 2 })
                #expect(try await heldLeases(observer, key: "b", endpoint: http.endpoint) == 1)
                first.cancel()
                _ = try? await first.value
                #expect(try await waitFor { try await heldLeases(observer, key: "a", endpoint: http.endpoint) == 0 })
                #expect(try await heldLeases(observer, key: "b", endpoint: http.endpoint) == 1)
                second.cancel()
                _ = try? await second.value
                #expect(try await waitFor { try await heldLeases(observer, key: "b", endpoint: http.endpoint) == 0 })
            }
        }
    }

    @Test("a dispatcher with a backlog does not keep the lease: the other dispatcher's one request is served in turn, long before the backlog is done")
    func backlogTakesTurns() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            try await withTwoDispatchers(sharedLimits(redis.address, maxRequests: 1), sharedLimits(redis.address, maxRequests: 1)) { a, b in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<20 {
                        group.addTask { _ = try await a.data(for: URLRequest(url: http.url("/?delay=50")), queueTimeout: .seconds(20)) }
                    }
                    #expect(await eventually { http.current == 1 })
                    _ = try await b.data(for: URLRequest(url: http.url("/other")), queueTimeout: .seconds(20))
                    // In turn: after the request running when it asked, or the next (a waiter
                    // that stalls ten poll intervals loses its place); not after all twenty.
                    let before = a.statistics(for: http.endpoint).completed
                    #expect(before <= 10, "the other dispatcher's request waited for \(before) of the 20")
                    try await group.waitForAll()
                }
                #expect(http.peak == 1)
                #expect(a.statistics(for: http.endpoint).completed == 20)
            }
        }
    }

    @Test("requests failOpen started while Redis was frozen are adopted once it answers: the set counts them, and the other dispatcher's request waits for their end")
    func fallbackRequestsAdopted() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            let observer = makeClient(redis.address)
            let ttl = Duration.seconds(600)
            // The first dispatcher's asks time out after 200 ms while Redis is frozen: failOpen lets
            // its requests run alone.
            let fallingBack = sharedLimits(redis.address, maxRequests: 2, fallback: .failOpen, leaseTTL: ttl, commandTimeout: .milliseconds(200))
            try await withTwoDispatchers(fallingBack, sharedLimits(redis.address, maxRequests: 2, leaseTTL: ttl)) { a, b in
                redis.pause()
                let hanging = (0..<2).map { _ in Task { try await a.data(for: URLRequest(url: http.url("/hang"))) } }
                defer { for task in hanging { task.cancel() } }
                let startedAlone = await eventually { http.current == 2 }
                redis.resume()
                #expect(startedAlone)
                // Adopted: both hold a lease now, granted whatever the limit.
                #expect(try await waitFor { try await heldLeases(observer, endpoint: http.endpoint) == 2 })
                let waiting = Task { try await b.data(for: URLRequest(url: http.url("/after"))) }
                // The other dispatcher asked and was declined (it is in line on Redis): the fleet is
                // at its limit, so its request has not started.
                #expect(try await waitFor { try await inLine(observer, endpoint: http.endpoint) == 1 })
                #expect(http.total == 2)
                for task in hanging { task.cancel() }
                _ = try await waiting.value
                #expect(http.total == 3)
                #expect(try await waitFor { try await heldLeases(observer, endpoint: http.endpoint) == 0 })
            }
        }
    }

    @Test("a request running longer than its lease's TTL renews it: the other dispatcher waits for its end")
    func longRequestRenews() async throws {
        try await withRedisServer { redis in
            let http = try LoopbackHTTPServer()
            defer { http.shutdown() }
            // Renewed every 400 ms, a lease of 1.2 s survives stalls of 800 ms; unrenewed, it would
            // expire long before the request's 3 s are over.
            let ttl = Duration.milliseconds(1_200)
            try await withTwoDispatchers(sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl),
                                         sharedLimits(redis.address, maxRequests: 1, leaseTTL: ttl)) { a, b in
                let long = Task { try await a.data(for: URLRequest(url: http.url("/?delay=3000"))) }
                #expect(await eventually { http.current == 1 })
                _ = try await b.data(for: URLRequest(url: http.url("/after")))
                _ = try await long.value
                #expect(http.peak == 1)
                let arrivals = http.arrivals
                if arrivals.count == 2 {
                    #expect(arrivals[0].time.duration(to: arrivals[1].time) >= .milliseconds(2_950))
                }
            }
        }
    }
}

@Suite("URLDispatcher endpoint limits shared on Redis, while Redis does not answer", .serialized)
struct SharedEndpointLimitsFallbackTests {
    /// A client of a socket nobody listens on: every command is refused.
    static let nowhere = RedisClient.Address.unixSocket(path: "/nonexistent/threadkit-no-redis.sock")

    @Test("failOpen runs the local limits only; localFallback(share:) at most maxRequests × share", arguments: [
        (Fallback.failOpen, 3), (Fallback.localFallback(share: 0.5), 2),
    ])
    func fallbackLimit(fallback: Fallback, expectedPeak: Int) async throws {
        let http = try LoopbackHTTPServer()
        defer { http.shutdown() }
        let maxRequests = fallback == .failOpen ? 3 : 4
        try await withTwoDispatchers(sharedLimits(Self.nowhere, maxRequests: maxRequests, fallback: fallback), .init()) { a, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<6 { group.addTask { _ = try await a.data(for: URLRequest(url: http.url("/?delay=100"))) } }
                try await group.waitForAll()
            }
            #expect(http.peak == expectedPeak)
            #expect(a.statistics(for: http.endpoint).completed == 6)
        }
    }

    @Test("failClosed: nothing starts; the queue timeout ends the wait")
    func failClosed() async throws {
        let http = try LoopbackHTTPServer()
        defer { http.shutdown() }
        try await withTwoDispatchers(sharedLimits(Self.nowhere, fallback: .failClosed), .init()) { a, _ in
            let error = await #expect(throws: URLDispatcherError.self) {
                _ = try await a.data(for: URLRequest(url: http.url("/")), queueTimeout: .milliseconds(300))
            }
            if case .timedOut(_, _, let phase)? = error { #expect(phase == .queued) } else { Issue.record("not a queue timeout: \(String(describing: error))") }
            #expect(http.total == 0)
        }
    }
}

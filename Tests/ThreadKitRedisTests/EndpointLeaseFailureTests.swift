// RedisEndpointLeases when Redis answers with errors, or never answers again: what is given back,
// how often it is sent again, and when it is given up.

import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitRedis
import ThreadKitTestSupport

@Suite("RedisEndpointLeases: error replies and a Redis that never answers again", .needsRedisServer)
struct EndpointLeaseFailureTests {
    static let endpoint = "http://api.example.com:80"

    /// An acquire's answer; `onAnswer` runs in its callback, on the client's thread, before the
    /// awaiting task resumes (which a loaded machine may delay for seconds).
    func acquire(_ leases: RedisEndpointLeases, limit: Int = 2, adopt: Bool = false,
                 onAnswer: @escaping @Sendable () -> Void = {}) async -> EndpointLeaseAnswer {
        await withCheckedContinuation { continuation in
            leases.acquire(EndpointLeaseRequest(endpoint: Self.endpoint, limit: limit, adopt: adopt)) {
                onAnswer()
                continuation.resume(returning: $0)
            }
        }
    }

    /// The lease key of `leases` replaced by a string: every script run on it fails (WRONGTYPE).
    func breakLeaseKey(_ observer: RedisClient, _ leases: RedisEndpointLeases) async throws {
        let key = EndpointLeaseScript.keys(leases.keys(for: Self.endpoint))[0]
        _ = try await observer.send("SET", key, "not a sorted set")
    }

    /// How many scripts the server ran or refused (EVALSHA and EVAL calls) since its stats were reset.
    func scriptCalls(_ observer: RedisClient) async throws -> Int {
        let info = try await observer.send("INFO", "commandstats").string ?? ""
        var calls = 0
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_evalsha:") || line.hasPrefix("cmdstat_eval:") {
            guard let field = line.split(separator: ",").first?.split(separator: "=").last, let count = Int(field) else { continue }
            calls += count
        }
        return calls
    }

    /// An acquire sent to `server` frozen, which times out: its outcome is unknown. When it was
    /// answered unavailable, and how many follow-ups were open then; `nil` if it was answered
    /// otherwise (the server is left running then).
    func unknownAcquire(_ leases: RedisEndpointLeases, on server: RedisServer) async throws -> (time: ContinuousClock.Instant, openFollowUps: Int)? {
        _ = try await leases.client.send("PING")
        server.pause()
        let answered = LockedValue<(time: ContinuousClock.Instant, openFollowUps: Int)?>(nil)
        let answer = await acquire(leases) {
            answered.withLock { $0 = (.now, leases.client.followUps.withLock { $0.openCount }) }
        }
        guard case .unavailable = answer, let answered = answered.withLock({ $0 }) else {
            Issue.record("a frozen server's acquire was not unavailable")
            server.resume()
            return nil
        }
        return answered
    }

    @Test("an acquire or an adoption Redis answers with an error reply granted nothing: no release is kept for it")
    func errorReplyKeepsNoRelease() async throws {
        try await withRedisServer { server in
            let observer = makeClient(server.address)
            let leases = RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(600))
            try await breakLeaseKey(observer, leases)
            for index in 0..<50 {
                let answer = await acquire(leases, adopt: index.isMultiple(of: 2))
                #expect(answer == .unavailable(retryIn: .milliseconds(20)))
            }
            #expect(leases.pendingReleaseCount == 0)
            #expect(leases.client.followUps.withLock { $0.openCount } == 0)
        }
    }

    @Test("a release Redis keeps answering with an error is sent again with a growing back-off, not before every command nor every poll")
    func refusedReleaseBacksOff() async throws {
        try await withRedisServer { server in
            let observer = makeClient(server.address)
            let leases = RedisEndpointLeases(client: makeClient(server.address), key: "api", leaseTTL: .seconds(600),
                                             pollInterval: .milliseconds(20))
            guard case .granted(let held) = await acquire(leases) else {
                Issue.record("the first acquire was not granted")
                return
            }
            try await breakLeaseKey(observer, leases)
            _ = try await observer.send("CONFIG", "RESETSTAT")
            leases.release(held)
            // A dispatcher polling every 20 ms for a second, as it does while the endpoint is unavailable.
            let start = ContinuousClock.now
            var acquires = 0
            while start.duration(to: .now) < .seconds(1) {
                _ = await acquire(leases)
                acquires += 1
                try await Task.sleep(for: .milliseconds(20))
            }
            let calls = try await scriptCalls(observer)
            // Sent at 0, then 20, 60, 140, 300, 620 ms (later on a loaded machine): at most 6 in
            // the second, 10 allowed; not one per acquire, nor one per 20 ms.
            #expect(leases.pendingReleaseCount == 1)
            #expect(calls - acquires >= 1 && calls - acquires <= 10, "\(calls) scripts for \(acquires) acquires")
        }
    }

    @Test("the release of an acquire whose outcome is unknown ends leaseTTL after Redis's next answer, even an error reply")
    func unknownAcquireEndsAfterAnErrorAnswer() async throws {
        try await withRedisServer { server in
            let observer = makeClient(server.address)
            let client = makeClient(server.address, timeout: .milliseconds(200))
            let leases = RedisEndpointLeases(client: client, key: "api", leaseTTL: .milliseconds(300))
            try await breakLeaseKey(observer, leases)
            guard try await unknownAcquire(leases, on: server) != nil else { return }
            server.resume()
            // Every answer now is WRONGTYPE; the first one starts the lease's 300 ms, not the 10 min
            // an unanswered release is kept.
            #expect(await eventually(timeout: .seconds(10)) { client.followUps.withLock { $0.openCount } == 0 })
            #expect(leases.pendingReleaseCount == 0)
        }
    }

    @Test("the release of an acquire whose outcome is unknown is dropped, and logged, leaseTTL plus maxUnknownWait after it when Redis never answers again")
    func unknownAcquireDroppedWhenRedisNeverAnswers() async throws {
        try await withRedisServer { server in
            let lines = LogLines()
            let client = makeClient(server.address, timeout: .milliseconds(200), lines: lines)
            let leases = RedisEndpointLeases(client: client, key: "api", leaseTTL: .milliseconds(300), maxUnknownWait: .milliseconds(300))
            guard let answered = try await unknownAcquire(leases, on: server) else { return }
            #expect(answered.openFollowUps == 1)   // its release begun, before the answer
            // Kept (its follow-up open: a flush waits for it) until 600 ms after it began (then
            // the timer's back-off of at most 100 ms, or a probe's 200 ms timeout).
            #expect(await eventually(timeout: .seconds(10)) { client.followUps.withLock { $0.openCount } == 0 })
            #expect(answered.time.duration(to: .now) >= .milliseconds(550))
            #expect(leases.pendingReleaseCount == 0)
            #expect(lines.count(containing: "(an acquire whose outcome is unknown) is dropped") == 1)
            server.resume()
        }
    }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import ThreadKitURL
import LoopbackHTTPServer

/// The numeric arguments of ThreadKitURL's public API (and of the test server's initializer) that
/// work, at their edges: zero, negative and `.max`-style values, each checked for the meaning the
/// "Arguments" paragraphs of ``URLDispatcher`` and ``URLDispatcher/EndpointLimits`` give it.
/// The values that cannot work (a negative timeout among them) are rows of ``URLDispatcherExitTests``.
extension URLIntegrationTests {
@Suite("URL arguments at their edges mean what the docs say")
struct URLArgumentRulesTests {
    /// Far beyond what `Duration.seconds` makes, and beyond the monotonic clock.
    static let farOut = Duration.seconds(Int64.max) + .seconds(Int64.max)
    // No wall-clock bound says "at once" here (a loaded machine stretches any): a call whose time
    // is already up is made while what it would otherwise wait for cannot happen (`/hang` never
    // answers, a slot stays taken, a chunk is an hour away), so that its end shows it did not wait;
    // a pause shows in a queue timeout of zero, which a paused endpoint fails.

    enum Case: String, CaseIterable, Sendable, NamedTestCase {
        case maxRequestsIntMax = "EndpointLimits(maxRequests: Int.max) limits nothing in practice; its long limit defaults to 3"
        case longLimitJustBelowIntMax = "EndpointLimits(maxRequests: Int.max, maxLongRequests: Int.max - 1) allows long requests"
        case zeroLongLimit = "EndpointLimits(maxLongRequests: 0) refuses every long request"
        case zeroMaxRetryAfter = "EndpointLimits(maxRetryAfter: .zero): a Retry-After pauses nothing"
        case farOutMaxRetryAfter = "EndpointLimits(maxRetryAfter:) far out caps nothing: Retry-After: 3600 pauses an hour, from the answer"
        case timeoutZero = "data(for:timeout: .zero): the request times out at once, after 0 s, a thrown error"
        case queueTimeoutZero = "queueTimeout zero: a free slot is taken, else the request times out queued at once"
        case idleTimeoutZero = "stream(for:idleTimeout: .zero): the response comes, then the stream times out idle at once"
        case dataSyncTimeoutZero = "dataSync(for:timeout: .zero) times out at once, a thrown error"
        case farOutTimeouts = "Timeouts far out never expire: data, stream and dataSync requests complete"
        case requestTimeoutIntervals = "A request's timeoutInterval of 0 is a time already up; .infinity or 1e300 never expires; -1 is unused beside an explicit timeout"
        case serverConnectionsAtTheEdges = "LoopbackHTTPServer(maxConnections:) 1 and Int.max serve requests"
        case moreConnectionsThanLibcurlsDefault = "EndpointLimits(maxRequests: 10): ten requests reach one server at once, beyond libcurl's default of 6 per host"
    }

    @Test(arguments: Case.allCases)
    func argument(_ check: Case) async throws {
        switch check {
        case .maxRequestsIntMax:
            let limits = URLDispatcher.EndpointLimits(maxRequests: .max)
            #expect(limits.maxLongRequests == 3)
            try await withServerAndDispatcher(limits) { server, dispatcher in
                dispatcher.setLimits(limits, for: server.endpoint)
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<4 { group.addTask { try await dispatcher.data(for: server.request("/?i=\(index)")).1.statusCode } }
                    for try await status in group { #expect(status == 200) }
                }
            }
        case .longLimitJustBelowIntMax:
            try await withServerAndDispatcher(.init(maxRequests: .max, maxLongRequests: .max - 1)) { server, dispatcher in
                #expect(dispatcher.isLongRequestAllowed(to: server.baseURL))
                var chunks = 0
                for try await element in dispatcher.stream(for: server.request("/stream?chunks=2&interval=10")) {
                    if case .data = element { chunks += 1 }
                }
                #expect(chunks >= 2)
            }
        case .zeroLongLimit:
            try await withServerAndDispatcher(.init(maxRequests: 2, maxLongRequests: 0)) { server, dispatcher in
                #expect(!dispatcher.isLongRequestAllowed(to: server.baseURL))
                await #expect(throws: URLDispatcherError.longRequestLimit(endpoint: server.endpoint, limit: 0)) {
                    _ = try await dispatcher.data(for: server.request("/"), kind: .long())
                }
            }
        case .zeroMaxRetryAfter:
            try await withServerAndDispatcher(.init(maxRetryAfter: .zero)) { server, dispatcher in
                let (_, response) = try await dispatcher.data(for: server.request("/?status=429&retry-after=30"))
                #expect(response.statusCode == 429)
                #expect(dispatcher.statistics(for: server.endpoint).pausedUntil == nil)
                // Not paused: a free slot is taken at once, which a zero queue timeout requires
                // (while paused it fails: farOutMaxRetryAfter).
                let (_, next) = try await dispatcher.data(for: server.request("/next"), timeout: .seconds(10), queueTimeout: .zero)
                #expect(next.statusCode == 200)
            }
        case .farOutMaxRetryAfter:
            try await withServerAndDispatcher(.init(maxRetryAfter: Self.farOut)) { server, dispatcher in
                let sent = ContinuousClock.now
                let (_, response) = try await dispatcher.data(for: server.request("/?status=429&retry-after=3600"))
                let answered = ContinuousClock.now
                #expect(response.statusCode == 429)
                // An hour from the moment the answer came, which lies between sending and the return.
                let paused = try #require(dispatcher.statistics(for: server.endpoint).pausedUntil)
                #expect(paused >= sent + .seconds(3_600) && paused <= answered + .seconds(3_600),
                        "paused until \(sent.duration(to: paused)) after sending, \(answered.duration(to: paused)) after the answer")
                // The pause holds the next request: with a zero queue timeout, it times out queued.
                await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .zero, phase: .queued)) {
                    _ = try await dispatcher.data(for: server.request("/held"), timeout: .seconds(10), queueTimeout: .zero)
                }
                #expect(!server.arrivals.contains { $0.target == "/held" })
            }
        case .timeoutZero:
            try await withServerAndDispatcher { server, dispatcher in
                // `/hang` never answers: only the timeout ends the call, and the guard a wait.
                let error = try await bounded(.seconds(10)) { () -> URLDispatcherError? in
                    do {
                        _ = try await dispatcher.data(for: server.request("/hang"), timeout: .zero)
                        return nil
                    } catch {
                        return error as? URLDispatcherError
                    }
                }
                #expect(error == .timedOut(endpoint: server.endpoint, after: .zero, phase: .total))
                #expect(dispatcher.statistics(for: server.endpoint).timedOut == 1)
            }
        case .queueTimeoutZero:
            try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
                let (_, response) = try await dispatcher.data(for: server.request("/free"), timeout: .seconds(5), queueTimeout: .zero)
                #expect(response.statusCode == 200)
                let blocker = Task { try? await dispatcher.data(for: server.request("/hang"), timeout: .seconds(20)) }
                #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
                await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .zero, phase: .queued)) {
                    _ = try await dispatcher.data(for: server.request("/busy"), timeout: .seconds(5), queueTimeout: .zero)
                }
                // It did not wait for the slot: the blocker still holds it.
                #expect(dispatcher.statistics(for: server.endpoint).running == 1)
                blocker.cancel()
                _ = await blocker.value
                #expect(!server.arrivals.contains { $0.target == "/busy" })
            }
        case .idleTimeoutZero:
            try await withServerAndDispatcher { server, dispatcher in
                // The first chunk is an hour away: the idle timeout, not a chunk, comes next.
                var iterator = dispatcher.stream(for: server.request("/stream?chunks=3&interval=3600000"), timeout: .seconds(10),
                                                 idleTimeout: .zero).makeAsyncIterator()
                guard case .response? = try await iterator.next() else {
                    Issue.record("no response first")
                    return
                }
                await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .zero, phase: .idle)) {
                    _ = try await iterator.next()
                }
            }
        case .dataSyncTimeoutZero:
            try await withServerAndDispatcher { server, dispatcher in
                // `/hang` never answers: only the timeout ends the call, and the guard a wait.
                let error = try await onNewThread(limit: .seconds(10)) { () -> (any Error)? in
                    do {
                        _ = try dispatcher.dataSync(for: server.request("/hang"), timeout: .zero)
                        return nil
                    } catch {
                        return error
                    }
                }
                #expect((error as? URLDispatcherError) == .timedOut(endpoint: server.endpoint, after: .zero, phase: .total))
            }
        case .farOutTimeouts:
            try await withServerAndDispatcher { server, dispatcher in
                for timeout in [Duration.seconds(Int64.max), Self.farOut] {
                    let (_, response) = try await dispatcher.data(for: server.request("/"), timeout: timeout, queueTimeout: timeout)
                    #expect(response.statusCode == 200)
                    var chunks = 0
                    for try await element in dispatcher.stream(for: server.request("/stream?chunks=2&interval=10"), timeout: timeout, idleTimeout: timeout) {
                        if case .data = element { chunks += 1 }
                    }
                    #expect(chunks >= 2)
                    let status = try await onNewThread(limit: .seconds(20)) {
                        try? dispatcher.dataSync(for: server.request("/sync"), timeout: timeout).1.statusCode
                    }
                    #expect(status == 200)
                }
                #expect(dispatcher.statistics(for: server.endpoint).timedOut == 0)
            }
        case .requestTimeoutIntervals:
            try await withServerAndDispatcher { server, dispatcher in
                var passed = server.request("/hang")
                passed.timeoutInterval = 0
                await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .zero, phase: .total)) {
                    _ = try await dispatcher.data(for: passed)
                }
                // Negative, it would stop the program (URLDispatcherExitTests) where it is the
                // timeout; beside an explicit timeout it is not used.
                var unused = server.request("/")
                unused.timeoutInterval = -1
                #expect(try await dispatcher.data(for: unused, timeout: .seconds(10)).1.statusCode == 200)
                for seconds in [.infinity, 1e300] as [TimeInterval] {
                    var request = server.request("/")
                    request.timeoutInterval = seconds
                    let status = try await dispatcher.data(for: request).1.statusCode
                    #expect(status == 200, "timeoutInterval \(seconds)")
                }
            }
        case .moreConnectionsThanLibcurlsDefault:
            // Each request is held until all ten have arrived: a cap below ten holds them all.
            let arrived = Latch(count: 10)
            let handler: @Sendable (LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply = { _ in
                arrived.countDown()
                return arrived.wait(timeout: .seconds(10)) ? .respond(status: 200) : .respond(status: 503)
            }
            try await withServerAndDispatcher(.init(maxRequests: 10), handler: handler) { server, dispatcher in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<10 { group.addTask { try await dispatcher.data(for: server.request("/?i=\(index)")).1.statusCode } }
                    var statuses: [Int] = []
                    for try await status in group { statuses.append(status) }
                    #expect(statuses == Array(repeating: 200, count: 10))
                }
                #expect(server.peak == 10)
            }
        case .serverConnectionsAtTheEdges:
            for maxConnections in [1, Int.max] {
                let server = try LoopbackHTTPServer(maxConnections: maxConnections)
                defer { server.shutdown() }
                #expect(server.maxConnections == maxConnections)
                try await withDispatcher { dispatcher in
                    let status = try await bounded { try await dispatcher.data(for: server.request("/")).1.statusCode }
                    #expect(status == 200)
                }
            }
        }
    }
}
}

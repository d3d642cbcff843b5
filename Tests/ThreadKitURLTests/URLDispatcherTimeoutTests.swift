import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitURL
import LoopbackHTTPServer

/// Timeouts, cancel, Retry-After, rate and dispose.
extension URLIntegrationTests {
@Suite struct URLDispatcherTimeoutTests {
    @Test func aTimeoutOnAHungServerEndsTheCallOnTimeAndFreesTheSlot() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let start = ContinuousClock.now
            do {
                _ = try await dispatcher.data(for: server.request("/hang"), timeout: .milliseconds(300))
                Issue.record("a hung request returned")
            } catch let error as URLDispatcherError {
                let took = start.duration(to: .now)
                #expect(error == .timedOut(endpoint: server.endpoint, after: .milliseconds(300), phase: .total))
                #expect(error.description.contains("300"))
                #expect(took >= .milliseconds(300) && took < .seconds(1), "took \(took)")
            }
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.running == 0 && statistics.timedOut == 1)
            // The transfer was cancelled: the server sees the connection close.
            #expect(await eventually { server.current == 0 })
            // The slot is back: the next request goes through.
            let (_, response) = try await dispatcher.data(for: server.request("/"), timeout: .seconds(5))
            #expect(response.statusCode == 200)
        }
    }

    @Test func aSyncRequestTimesOutToo() async throws {
        try await withServer { server in
            try await withDispatcher { dispatcher in
                let outcome = try await onNewThread(limit: .seconds(30)) { () -> (Duration, (any Error)?) in
                    let start = ContinuousClock.now
                    do {
                        _ = try dispatcher.dataSync(for: server.request("/hang"), timeout: .milliseconds(200))
                        return (start.duration(to: .now), nil)
                    } catch {
                        return (start.duration(to: .now), error)
                    }
                }
                #expect((outcome.1 as? URLDispatcherError) == .timedOut(endpoint: server.endpoint, after: .milliseconds(200), phase: .total))
                #expect(outcome.0 >= .milliseconds(200) && outcome.0 < .seconds(1), "took \(outcome.0)")
            }
        }
    }

    @Test func aSlowButSteadyStreamOutlivesItsHeaderTimeoutWhileASilentOneIsCut() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            var chunks = 0
            let start = ContinuousClock.now
            for try await element in dispatcher.stream(for: server.request("/stream?chunks=8&interval=100"),
                                                       timeout: .milliseconds(300), idleTimeout: .milliseconds(300)) {
                if case .data = element { chunks += 1 }
            }
            #expect(chunks >= 8)
            #expect(start.duration(to: .now) > .milliseconds(700))
            let silent = dispatcher.stream(for: server.request("/stream?chunks=1&interval=5000"),
                                           timeout: .milliseconds(300), idleTimeout: .milliseconds(300))
            var iterator = silent.makeAsyncIterator()
            guard case .response? = try await iterator.next() else {
                Issue.record("no response first")
                return
            }
            let silentStart = ContinuousClock.now
            do {
                while try await iterator.next() != nil {}
                Issue.record("a silent stream ended normally")
            } catch let error as URLDispatcherError {
                #expect(error == .timedOut(endpoint: server.endpoint, after: .milliseconds(300), phase: .idle))
                let took = silentStart.duration(to: .now)
                #expect(took >= .milliseconds(250) && took < .seconds(1), "took \(took)")
            }
            #expect(dispatcher.statistics(for: server.endpoint).timedOut == 1)
        }
    }

    @Test func aLongRequestWithoutHeadersIsCutAtItsTimeout() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            var iterator = dispatcher.stream(for: server.request("/hang"), timeout: .milliseconds(200)).makeAsyncIterator()
            await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .milliseconds(200), phase: .headers)) {
                _ = try await iterator.next()
            }
        }
    }

    @Test func aRequestQueuedTooLongFailsWithQueuedPhase() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let blocker = Task { try? await dispatcher.data(for: server.request("/hang"), timeout: .seconds(3)) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
            let start = ContinuousClock.now
            await #expect(throws: URLDispatcherError.timedOut(endpoint: server.endpoint, after: .milliseconds(200), phase: .queued)) {
                try await dispatcher.data(for: server.request("/"), timeout: .seconds(5), queueTimeout: .milliseconds(200))
            }
            #expect(start.duration(to: .now) < .seconds(2))
            #expect(dispatcher.statistics(for: server.endpoint).queued == 0)
            blocker.cancel()
            _ = await blocker.value
            #expect(server.arrivals.map(\.target) == ["/hang"])
        }
    }

    @Test func cancellingAQueuedRequestRemovesItAtOnceAndNeverReportsSuccess() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let blocker = Task { try await dispatcher.data(for: server.request("/hang"), timeout: .seconds(20)) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
            let queued = Task { try await dispatcher.data(for: server.request("/never")) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).queued == 1 })
            queued.cancel()
            await #expect(throws: CancellationError.self) { try await queued.value }
            #expect(dispatcher.statistics(for: server.endpoint).queued == 0)
            blocker.cancel()
            _ = await blocker.result
            // A cancelled running request frees its slot.
            let running = Task { try await dispatcher.data(for: server.request("/hang")) }
            #expect(await eventually { server.current == 1 })
            running.cancel()
            await #expect(throws: CancellationError.self) { try await running.value }
            #expect(dispatcher.statistics(for: server.endpoint).running == 0)
            #expect(await eventually { server.current == 0 })
            #expect(!server.arrivals.contains { $0.target == "/never" })
            #expect(dispatcher.statistics(for: server.endpoint).failed == 3)
        }
    }

    @Test func a429WithRetryAfterHoldsThatEndpointOnly() async throws {
        try await withServer { limited in
            try await withServer { other in
                try await withDispatcher { dispatcher in
                    try await bounded {
                        let (_, response) = try await dispatcher.data(for: limited.request("/?status=429&retry-after=1"))
                        let answered = ContinuousClock.now
                        #expect(response.statusCode == 429)
                        let paused = try #require(dispatcher.statistics(for: limited.endpoint).pausedUntil)
                        #expect(paused > answered + .milliseconds(700))
                        let (_, fine) = try await dispatcher.data(for: other.request("/"))
                        #expect(fine.statusCode == 200)
                        _ = try await dispatcher.data(for: limited.request("/after"))
                    }
                    // The other endpoint was served during the pause.
                    let otherArrival = try #require(other.arrivals.first?.time)
                    #expect(otherArrival < limited.arrivals.last!.time)
                    // The pause starts when the 429's headers reach the dispatcher, after the
                    // server saw its request: the next one arrives at least a second later.
                    let arrivals = limited.arrivals.map(\.time)
                    #expect(arrivals.count == 2)
                    let held = arrivals[0].duration(to: arrivals[1])
                    #expect(held >= .seconds(1) && held < .milliseconds(2500), "held \(held)")
                    #expect(dispatcher.statistics(for: limited.endpoint).pausedUntil == nil)
                }
            }
        }
    }

    @Test func retryAfterIsCappedAndCanBeIgnored() async throws {
        try await withServerAndDispatcher(.init(maxRetryAfter: .milliseconds(300)), within: .seconds(20)) { server, dispatcher in
            // Retry-After: 100, capped at 300 ms.
            _ = try await dispatcher.data(for: server.request("/?status=503&retry-after=100"))
            _ = try await dispatcher.data(for: server.request("/capped"))
            dispatcher.setLimits(.init(honorRetryAfter: false), for: server.endpoint)
            // Ignored: no pause at all.
            _ = try await dispatcher.data(for: server.request("/?status=429&retry-after=100"))
            #expect(dispatcher.statistics(for: server.endpoint).pausedUntil == nil)
            _ = try await dispatcher.data(for: server.request("/ignored"))
            let times = server.arrivals.map(\.time)
            #expect(times.count == 4)
            let capped = times[0].duration(to: times[1])
            #expect(capped >= .milliseconds(300) && capped < .seconds(5), "capped pause: \(capped)")
            #expect(times[2].duration(to: times[3]) < .seconds(5))
        }
    }

    @Test func aHugeOrDecimalRetryAfterPausesTheEndpointForTheCap() async throws {
        // `/ra?v=N` answers 429 with the N-th Retry-After value; any other path 200.
        let values = [
            "99999999999999999999",            // 20 digits: more than the clock holds; capped, never "no pause"
            "0.1",                             // a decimal: rounded up to 1 s, capped
            "Sun, 06 Nov 1994 08:49:37 GMT",   // a date in the past: no pause
            "soon",                            // junk: ignored
        ]
        let handler: @Sendable (LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply = { request in
            guard request.path == "/ra", let index = request.query["v"].flatMap({ Int($0) }) else { return .respond(status: 200) }
            return .respond(status: 429, headers: ["Retry-After": values[index]])
        }
        try await withServer(handler) { server in
            // A cap of 1 s: the pause must still be in force when the caller, resumed on a loaded
            // machine, reads the statistics.
            try await withDispatcher(.init(maxRetryAfter: .seconds(1))) { dispatcher in
                try await bounded(.seconds(20)) {
                    for index in values.indices {
                        let (_, response) = try await dispatcher.data(for: server.request("/ra?v=\(index)"))
                        #expect(response.statusCode == 429)
                        let paused = dispatcher.statistics(for: server.endpoint).pausedUntil != nil
                        #expect(paused == (index < 2), "Retry-After: \(values[index])")
                        _ = try await dispatcher.data(for: server.request("/after?v=\(index)"))
                    }
                }
                let times = server.arrivals.map(\.time)
                #expect(times.count == 2 * values.count)
                for index in 0..<2 {
                    let held = times[2 * index].duration(to: times[2 * index + 1])
                    #expect(held >= .seconds(1) && held < .seconds(6), "Retry-After: \(values[index]) held \(held)")
                }
            }
        }
    }

    /// The promise is about starts: at most 2 in any window. The server sees a start only when its
    /// request arrives, late by as much as a loaded machine takes (230 ms under the thread
    /// sanitizer), and a late arrival can bring two arrivals closer than their starts were. It
    /// never makes one earlier: the k-th arrival is no earlier than the k-th start, which the rate
    /// puts ⌊k / 2⌋ whole windows after the calls, whatever the lateness. Starts two apart are
    /// also checked for a burst, allowing half a window of lateness.
    @Test func aRateCapsStartsPerWindow() async throws {
        let window = Duration.seconds(1)
        try await withServerAndDispatcher(.init(maxRequests: 6, maxLongRequests: 1, rate: .rate(2, per: window))) { server, dispatcher in
            let called = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<6 { group.addTask { _ = try await dispatcher.data(for: server.request("/")) } }
                try await group.waitForAll()
            }
            let times = server.arrivals.map(\.time).sorted()
            #expect(times.count == 6)
            for (index, time) in times.enumerated() {
                #expect(time >= called + window * (index / 2), "arrival \(index) only \(called.duration(to: time)) after the calls")
            }
            for index in 2..<times.count {
                let gap = times[index - 2].duration(to: times[index])
                #expect(gap >= window / 2, "starts \(index - 2) and \(index) arrived only \(gap) apart")
            }
        }
    }

    @Test func disposeFailsQueuedAndRunningRequestsAndRefusesNewOnes() async throws {
        try await withServer { server in
            let dispatcher = URLDispatcher(limits: .init(maxRequests: 1, maxLongRequests: 0))
            try await bounded {
                let running = Task { try await dispatcher.data(for: server.request("/hang")) }
                #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
                let queued = Task { try await dispatcher.data(for: server.request("/")) }
                #expect(await eventually { dispatcher.statistics(for: server.endpoint).queued == 1 })
                dispatcher.dispose()
                await #expect(throws: URLDispatcherError.disposed) { try await running.value }
                await #expect(throws: URLDispatcherError.disposed) { try await queued.value }
                await #expect(throws: URLDispatcherError.disposed) { try await dispatcher.data(for: server.request("/")) }
                #expect(!dispatcher.isLongRequestAllowed(to: server.baseURL))
                let statistics = dispatcher.statistics(for: server.endpoint)
                #expect(statistics.running == 0 && statistics.queued == 0 && statistics.failed == 3)
                dispatcher.dispose()
            }
        }
    }
}
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer
import SeededRandom

/// Records a delegate's events, checking their order as they come.
final class RecordingDelegate: URLDispatchDelegate, @unchecked Sendable {
    // Sendable: `events` and `problems` are guarded by `lock`.
    private let lock = NSLock()
    private var events: [String] = []
    private var problems: [String] = []
    private var inCall = false
    let done = NSCondition()
    private var completed = false

    private func record(_ event: String) {
        lock.lock()
        if inCall { problems.append("\(event) while another call was running") }
        if events.last?.hasPrefix("complete") == true { problems.append("\(event) after the completion") }
        if event == "response", !events.isEmpty { problems.append("response not first") }
        inCall = true
        events.append(event)
        lock.unlock()
        Thread.sleep(forTimeInterval: 0.0005)   // widen the window for overlapping calls
        lock.lock()
        inCall = false
        lock.unlock()
    }

    func operation(_ operation: URLDispatchOperation, didReceive response: HTTPURLResponse) { record("response") }
    func operation(_ operation: URLDispatchOperation, didReceive data: Data) { record("data") }
    func operation(_ operation: URLDispatchOperation, didCompleteWith error: (any Error)?) {
        record(error == nil ? "complete" : "complete: \(type(of: error!))")
        done.lock()
        completed = true
        done.broadcast()
        done.unlock()
    }

    var recorded: (events: [String], problems: [String]) {
        lock.lock()
        defer { lock.unlock() }
        return (events, problems)
    }

    func waitForCompletion(timeout: TimeInterval = 10) -> Bool {
        done.lock()
        defer { done.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while !completed { if !done.wait(until: deadline) { return completed } }
        return true
    }
}

extension URLIntegrationTests {
@Suite struct URLDispatcherDelegateTests {
    @Test func delegateEventsComeInOrderWithOneCompletionLast() async throws {
        try await withServer { server in
            try await withDispatcher { dispatcher in
                let delegate = RecordingDelegate()
                let operation = try dispatcher.dispatch(server.request("/stream?chunks=5&interval=20"), kind: .long(), delegate: delegate)
                #expect(operation.endpoint == server.endpoint)
                #expect(operation.kind == .long(whenFull: .reject))
                #expect(try await onNewThread(limit: .seconds(30)) { delegate.waitForCompletion() })
                let (events, problems) = delegate.recorded
                #expect(problems.isEmpty, "\(problems)")
                #expect(events.first == "response")
                #expect(events.last == "complete")
                #expect(events.filter { $0 == "data" }.count >= 5)
                operation.cancel()   // after the end: nothing more comes
                try await Task.sleep(for: .milliseconds(50))
                #expect(delegate.recorded.events == events)
            }
        }
    }

    @Test func cancellingADelegateOperationCompletesItOnceWithCancellationError() async throws {
        try await withServer { server in
            try await withDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { dispatcher in
                let streaming = RecordingDelegate()
                let running = try dispatcher.dispatch(server.request("/stream?interval=10"), delegate: streaming)
                let queuedDelegate = RecordingDelegate()
                let queued = try dispatcher.dispatch(server.request("/never"), delegate: queuedDelegate)
                #expect(dispatcher.statistics(for: server.endpoint).queued == 1)
                queued.cancel()
                #expect(queuedDelegate.recorded.events == ["complete: CancellationError"])
                #expect(dispatcher.statistics(for: server.endpoint).queued == 0)
                #expect(await eventually { streaming.recorded.events.count > 3 })
                running.cancel()
                running.cancel()
                #expect(try await onNewThread(limit: .seconds(30)) { streaming.waitForCompletion() })
                try await Task.sleep(for: .milliseconds(50))
                let (events, problems) = streaming.recorded
                #expect(problems.isEmpty, "\(problems)")
                #expect(events.last == "complete: CancellationError")
                #expect(events.filter { $0.hasPrefix("complete") }.count == 1)
                #expect(!server.arrivals.contains { $0.target == "/never" })
            }
        }
    }

    @Test func refusedDispatchesThrowAtOnceAndTellTheDelegateNothing() async throws {
        try await withServer { server in
            try await withDispatcher(.init(maxRequests: 2, maxLongRequests: 0)) { dispatcher in
                let delegate = RecordingDelegate()
                #expect(throws: URLDispatcherError.longRequestLimit(endpoint: server.endpoint, limit: 0)) {
                    try dispatcher.dispatch(server.request("/"), kind: .long(), delegate: delegate)
                }
                #expect(throws: URLDispatcherError.self) {
                    try dispatcher.dispatch(URLRequest(url: URL(string: "ftp://127.0.0.1/")!), delegate: delegate)
                }
                #expect(delegate.recorded.events.isEmpty)
            }
        }
    }
}
}

extension URLIntegrationTests {
@Suite struct URLDispatcherStressTests {
    @Test func brokenResponsesFailAndFreeTheirSlots() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            for path in ["/close", "/malformed", "/close", "/malformed"] {
                await #expect(throws: (any Error).self) {
                    try await dispatcher.data(for: server.request(path), timeout: .seconds(5))
                }
            }
            let (_, response) = try await dispatcher.data(for: server.request("/"), timeout: .seconds(5))
            #expect(response.statusCode == 200)
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.failed == 4 && statistics.completed == 1 && statistics.running == 0)
        }
    }

    /// 10,000 requests over 4 endpoints, of every ending; afterwards every endpoint is idle and its
    /// counts add up to what was sent to it. Under the thread sanitizer, which makes each request
    /// several times dearer, 1,000 (and fewer at once): the full number would starve the timing checks of the suites
    /// running beside it on two cores.
    @Test func tenThousandMixedRequestsLeaveEveryEndpointIdleWithCountsThatAddUp() async throws {
        let servers = try (0..<4).map { _ in try LoopbackHTTPServer() }
        defer { for server in servers { server.shutdown() } }
        let limits = URLDispatcher.EndpointLimits(maxRequests: 6, maxLongRequests: 2)
        try await withDispatcher(limits) { dispatcher in
            let total = threadSanitized ? 1_000 : 10_000
            let outcomes = try await bounded(.seconds(240)) {
                try await withThrowingTaskGroup(of: (Int, String).self) { group in
                    var results: [String: Int] = [:]
                    var random = SplitMix64(seed: 42)
                    var inFlight = 0
                    for index in 0..<total {
                        let server = servers[index % servers.count]
                        let roll = random.next() % 1000
                        let path: String
                        var cancelAfter: Duration?
                        switch roll {
                        case 0..<5: path = "/hang"
                        case 5..<15: path = "/close"
                        case 15..<25: path = "/malformed"
                        case 25..<125: path = "/?status=404"
                        case 125..<200: path = "/?status=500"
                        case 200..<220:
                            path = "/?delay=20"
                            cancelAfter = .milliseconds(Int64(random.next() % 30))
                        default: path = "/"
                        }
                        group.addTask {
                            let request = Task { try await dispatcher.data(for: server.request(path), timeout: .milliseconds(500),
                                                                    queueTimeout: .seconds(120)) }
                            if let cancelAfter {
                                try? await Task.sleep(for: cancelAfter)
                                request.cancel()
                            }
                            do {
                                let (_, response) = try await request.value
                                return (index, "status \(response.statusCode)")
                            } catch is CancellationError {
                                return (index, "cancelled")
                            } catch let error as URLDispatcherError {
                                if case .timedOut = error { return (index, "timed out") }
                                return (index, "dispatcher error")
                            } catch {
                                return (index, "transport error")
                            }
                        }
                        inFlight += 1
                        if inFlight >= (threadSanitized ? 48 : 200), let (_, outcome) = try await group.next() {
                            inFlight -= 1
                            results[outcome, default: 0] += 1
                        }
                    }
                    for try await (_, outcome) in group { results[outcome, default: 0] += 1 }
                    return results
                }
            }
            #expect(outcomes.values.reduce(0, +) == total)
            #expect(outcomes["status 200", default: 0] > total * 7 / 10)
            #expect(outcomes["timed out", default: 0] >= total / 250)
            #expect(outcomes["cancelled", default: 0] > 0)
            var summed = (completed: 0, failed: 0, timedOut: 0)
            for server in servers {
                let statistics = dispatcher.statistics(for: server.endpoint)
                #expect(statistics.running == 0, "\(server.endpoint): \(statistics)")
                #expect(statistics.runningLong == 0)
                #expect(statistics.queued == 0, "\(server.endpoint): \(statistics)")
                #expect(statistics.completed + statistics.failed + statistics.timedOut == total / servers.count,
                        "\(server.endpoint): \(statistics)")
                summed.completed += statistics.completed
                summed.failed += statistics.failed
                summed.timedOut += statistics.timedOut
            }
            let statuses = outcomes.filter { $0.key.hasPrefix("status") }.values.reduce(0, +)
            #expect(summed.completed == statuses)
            #expect(summed.timedOut == outcomes["timed out", default: 0])
            #expect(summed.failed == total - statuses - summed.timedOut)
            for server in servers { #expect(await eventually { server.current == 0 }) }
        }
    }
}
}

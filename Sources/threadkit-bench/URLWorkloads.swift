// url.loopback and url.timeout: URLDispatcher against a plain URLSession with the same
// configuration, over the package's own loopback HTTP server (127.0.0.1 only).
import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackHTTPServer
import ThreadKit
import ThreadKitURL

enum URLWorkloads {
    /// Requests in flight at once, from the benchmark's side, in `url.loopback`.
    static let inFlight = 256
    /// The per-endpoint limit of `url.loopback`: URLDispatcher's `maxRequests`, URLSession's
    /// `httpMaximumConnectionsPerHost`.
    static let perEndpoint = 6

    /// `url.loopback`: 10,000 short requests, round-robin over 4 loopback endpoints, each answered
    /// after 10 ms, at most 256 in flight; wall time, and how many endpoints saw more or fewer
    /// requests at once than the limit at their peak.
    static func loopback(scale: Scale) -> Workload {
        let requests = scale.size(10_000)
        func measure(_ fetch: @escaping @Sendable (URL) async throws -> Void) throws -> Measurement {
            let servers = try (0..<4).map { _ in try LoopbackHTTPServer() }
            defer { for server in servers { server.shutdown() } }
            let urls = servers.map { $0.url("/?delay=10") }
            let start = ContinuousClock.now
            let failures = blockingRun {
                await withTaskGroup(of: Bool.self) { group in
                    var failures = 0, next = 0
                    func submit() {
                        let url = urls[next % urls.count]
                        next += 1
                        group.addTask { (try? await fetch(url)) == nil }
                    }
                    while next < min(inFlight, requests) { submit() }
                    for await failed in group {
                        if failed { failures += 1 }
                        if next < requests { submit() }
                    }
                    return failures
                }
            }
            let elapsed = ContinuousClock.now - start
            guard failures == 0 else { throw RequestsFailed(failed: failures, of: requests) }
            let peaks = servers.map(\.peak)
            return Measurement(values: [
                "wall": elapsed.nanoseconds / 1e6,
                "requests per second": Double(requests) / (elapsed.nanoseconds / 1e9),
                "peak per endpoint": Double(peaks.max() ?? 0),
                "endpoints off the limit": Double(peaks.filter { $0 != perEndpoint }.count),
            ])
        }
        return Workload(
            id: "url.loopback",
            metrics: [
                Metric(name: "wall", unit: "ms"), Metric(name: "requests per second", unit: "/s"),
                Metric(name: "peak per endpoint", unit: "count"), Metric(name: "endpoints off the limit", unit: "count"),
            ],
            contenders: [
                Contender(name: "ThreadKit") {
                    let dispatcher = URLDispatcher(
                        limits: .init(maxRequests: perEndpoint, maxLongRequests: 1), configuration: .ephemeral)
                    defer { dispatcher.dispose() }
                    return try measure { url in _ = try await dispatcher.data(for: URLRequest(url: url), timeout: .seconds(10)) }
                },
                Contender(name: "URLSession") {
                    let configuration = URLSessionConfiguration.ephemeral
                    configuration.httpMaximumConnectionsPerHost = perEndpoint
                    let session = URLSession(configuration: configuration)
                    defer { session.finishTasksAndInvalidate() }
                    return try measure { url in _ = try await session.data(for: URLRequest(url: url)) }
                },
            ])
    }

    /// `url.timeout`: requests with a 250 ms timeout to a server that never answers, 8 at once
    /// (with room for 8 at once on the endpoint, so that none waits for a slot: a dispatcher's
    /// timeout counts from the slot's grant); how late each one ends after its 250 ms (negative:
    /// early). URLSession gets the same timeout as its request's `timeoutInterval`.
    static func timeout(scale: Scale) -> Workload {
        let calls = scale.size(40)
        let timeout = Duration.milliseconds(250)
        let atOnce = 8
        func measure(_ fetch: @escaping @Sendable (URL) async -> Void) throws -> Measurement {
            let server = try LoopbackHTTPServer()
            defer { server.shutdown() }
            let url = server.url("/hang")
            let lateness = blockingRun {
                await withTaskGroup(of: Double.self) { group in
                    var lateness: [Double] = [], next = 0
                    func submit() {
                        next += 1
                        group.addTask {
                            let start = ContinuousClock.now
                            await fetch(url)
                            return ((ContinuousClock.now - start) - timeout).nanoseconds / 1e6
                        }
                    }
                    while next < min(atOnce, calls) { submit() }
                    for await late in group {
                        lateness.append(late)
                        if next < calls { submit() }
                    }
                    return lateness
                }
            }
            var measurement = Measurement()
            measurement.addLatencyPercentiles("lateness", samples: lateness)
            return measurement
        }
        return Workload(
            id: "url.timeout", metrics: Metric.percentiles("lateness", unit: "ms"),
            contenders: [
                Contender(name: "ThreadKit") {
                    let dispatcher = URLDispatcher(limits: .init(maxRequests: atOnce, maxLongRequests: 1), configuration: .ephemeral)
                    defer { dispatcher.dispose() }
                    return try measure { url in _ = try? await dispatcher.data(for: URLRequest(url: url), timeout: timeout) }
                },
                Contender(name: "URLSession") {
                    let configuration = URLSessionConfiguration.ephemeral
                    configuration.timeoutIntervalForRequest = 0.25
                    configuration.httpMaximumConnectionsPerHost = atOnce
                    let session = URLSession(configuration: configuration)
                    defer { session.invalidateAndCancel() }
                    return try measure { url in
                        var request = URLRequest(url: url)
                        request.timeoutInterval = 0.25
                        _ = try? await session.data(for: request)
                    }
                },
            ])
    }

    /// Runs `body` on the cooperative pool and blocks the calling (non-cooperative) thread until it returns.
    private static func blockingRun<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let result = ResultBox<T>()
        Task.detached {
            result.value = await body()
            done.signal()
        }
        done.wait()
        return result.value!
    }
}

/// Some of a round's loopback requests failed: the round measured something else.
private struct RequestsFailed: Error, CustomStringConvertible {
    let failed: Int, of: Int
    var description: String { "\(failed) of \(of) loopback requests failed" }
}

/// A value handed from a task to the thread waiting for it; the semaphore orders the two.
private final class ResultBox<T>: @unchecked Sendable {
    // Sendable: written once by the task before it signals, read by the waiter after the wait.
    var value: T?
}

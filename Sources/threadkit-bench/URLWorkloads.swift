// url.loopback and url.timeout: URLDispatcher against a plain URLSession with the same
// configuration, over the package's own loopback HTTP server (127.0.0.1 only); url.history:
// URLDispatcher's cost per request over a long history.
import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackHTTPServer
import ThreadKit
import ThreadKitURL
import ToolHarness

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
                "requests per second": Double(requests) / elapsed.seconds,
                "peak per endpoint": Double(peaks.max() ?? 0),
                "endpoints off the limit": Double(peaks.filter { $0 != perEndpoint }.count),
            ])
        }
        return Workload(
            id: "url.loopback",
            metrics: Metric.named(["wall": "ms", "requests per second": "/s", "peak per endpoint": "count", "endpoints off the limit": "count"]),
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

    /// Requests per window of `url.history`.
    static let historyWindow = 1_000

    /// `url.history`: 40,000 short requests to one loopback endpoint that answers at once, 6 in
    /// flight, while a long request runs and another waits for its long slot at the front of the
    /// endpoint's queue; the cost of 1,000 requests at the start and at the end of the run, in
    /// process CPU time and in wall time, and the ratios. Each figure is the median of three
    /// windows of 1,000 (of one in quick mode), so that one window slowed by the machine does not
    /// make it.
    ///
    /// Every short request passes the waiting one: its bookkeeping must not grow with the requests
    /// that passed before (a queue that kept their places made each grant scan them all).
    static func history(scale: Scale) -> Workload {
        let requests = max(scale.size(40_000), 2 * historyWindow)
        let atOnce = 6
        return Workload(
            id: "url.history",
            metrics: Metric.named([
                "first 1,000 CPU": "ms", "last 1,000 CPU": "ms", "last / first CPU": "×",
                "first 1,000 wall": "ms", "last 1,000 wall": "ms", "last / first wall": "×",
            ]),
            contenders: [
                Contender(name: "ThreadKit") {
                    let server = try LoopbackHTTPServer()
                    defer { server.shutdown() }
                    let dispatcher = URLDispatcher(limits: .init(maxRequests: atOnce + 1, maxLongRequests: 1), configuration: .ephemeral)
                    defer { dispatcher.dispose() }
                    let endpoint = try URLDispatcher.Endpoint(url: server.baseURL)
                    func waitUntil(_ what: String, _ condition: () -> Bool) throws {
                        guard poll(timeout: .seconds(10), until: condition) else { throw HistorySetUpFailed(what: what) }
                    }
                    let hang = URLRequest(url: server.url("/hang"))
                    let long = Task { try await dispatcher.data(for: hang, kind: .long(), timeout: .seconds(3_600)) }
                    defer { long.cancel() }
                    try waitUntil("a long request running") { dispatcher.statistics(for: endpoint).runningLong == 1 }
                    let waiting = Task { try await dispatcher.data(for: hang, kind: .long(whenFull: .wait), timeout: .seconds(3_600)) }
                    defer { waiting.cancel() }
                    try waitUntil("a long request waiting") { dispatcher.statistics(for: endpoint).queued == 1 }
                    let url = server.url("/")
                    let windows = blockingRun {
                        await withTaskGroup(of: Bool.self) { group in
                            var windows: [(cpu: Double, wall: Duration)] = [], failures = 0, next = 0, done = 0
                            var cpuStart = ProcessCPU.nanoseconds(), wallStart = ContinuousClock.now
                            func submit() {
                                next += 1
                                group.addTask { (try? await dispatcher.data(for: URLRequest(url: url), timeout: .seconds(10))) == nil }
                            }
                            while next < min(atOnce, requests) { submit() }
                            for await failed in group {
                                if failed { failures += 1 }
                                done += 1
                                if done % historyWindow == 0 {
                                    let cpu = ProcessCPU.nanoseconds(), wall = ContinuousClock.now
                                    windows.append((cpu - cpuStart, wallStart.duration(to: wall)))
                                    (cpuStart, wallStart) = (cpu, wall)
                                }
                                if next < requests { submit() }
                            }
                            return failures == 0 ? windows : []
                        }
                    }
                    guard windows.count >= 2 else { throw RequestsFailed(failed: 1, of: requests) }
                    let statistics = dispatcher.statistics(for: endpoint)
                    precondition(statistics.queued == 1 && statistics.completed == requests, "url.history: \(statistics)")
                    let ends = min(3, windows.count / 2)
                    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
                    let firstCPU = median(windows.prefix(ends).map(\.cpu)) / 1e6, lastCPU = median(windows.suffix(ends).map(\.cpu)) / 1e6
                    let firstWall = median(windows.prefix(ends).map { $0.wall.nanoseconds }) / 1e6
                    let lastWall = median(windows.suffix(ends).map { $0.wall.nanoseconds }) / 1e6
                    return Measurement(values: [
                        "first 1,000 CPU": firstCPU, "last 1,000 CPU": lastCPU, "last / first CPU": lastCPU / firstCPU,
                        "first 1,000 wall": firstWall, "last 1,000 wall": lastWall, "last / first wall": lastWall / firstWall,
                    ])
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

/// `url.history` could not set up its waiting long request: the round would measure something else.
private struct HistorySetUpFailed: Error, CustomStringConvertible {
    let what: String
    var description: String { "url.history: no \(what) after 10 s" }
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

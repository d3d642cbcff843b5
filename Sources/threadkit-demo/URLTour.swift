// The URLDispatcher part of the tour: a client that keeps inside an API's rules.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import LoopbackHTTPServer
import ThreadKit
import ThreadKitURL

/// An embedded "API" with rules: at most `maxConcurrent` requests at once and `ratePerSecond` per
/// second. A request that breaks a rule is answered 429 with `Retry-After: 1` and counted as a
/// violation. `/events` is a long stream (10 chunks, 150 ms apart), `/slow` hangs, and `/quota`
/// answers 429 `Retry-After: 1` once, as an API does when a daily quota runs out. `/metrics`,
/// outside the rules, serves `Diagnostics.prometheusText()`, as a service's scrape endpoint does.
final class DemoAPIRules: Sendable {
    static let maxConcurrent = 3
    static let ratePerSecond = 15

    private struct Rules {
        var recent: [ContinuousClock.Instant] = []
        var violations = 0
        var quotaRefused = false
    }

    private let rules = Mutex(Rules())

    var violations: Int { rules.withLock { $0.violations } }

    func answer(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply {
        if request.path == "/metrics" {
            return .respond(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"],
                            body: Array(Diagnostics.prometheusText().utf8))
        }
        let broken = rules.withLock { rules -> Bool in
            let now = request.arrival
            rules.recent = rules.recent.filter { now - $0 < .seconds(1) } + [now]
            let broken = request.concurrent > Self.maxConcurrent || rules.recent.count > Self.ratePerSecond
            if broken {
                rules.violations += 1
                say("  rule broken by \(request.path): \(request.concurrent) at once, \(rules.recent.count) in the last second")
            }
            return broken
        }
        if broken { return .respond(status: 429, headers: ["Retry-After": "1"], body: Array("slow down".utf8)) }
        switch request.path {
        case "/events":
            return .stream(chunks: 10, chunkSize: 32, interval: .milliseconds(150))
        case "/slow":
            return .hang
        case "/quota":
            let refuse = rules.withLock { rules in
                defer { rules.quotaRefused = true }
                return !rules.quotaRefused
            }
            if refuse { return .respond(status: 429, headers: ["Retry-After": "1"], body: Array("quota".utf8)) }
            return .respond(status: 200, body: Array("quota ok".utf8))
        default:
            return .respond(status: 200, body: Array("item".utf8), delay: .milliseconds(60))
        }
    }
}

/// The API: its rules, and the loopback server that applies them.
struct DemoAPI {
    static let maxConcurrent = DemoAPIRules.maxConcurrent
    static let ratePerSecond = DemoAPIRules.ratePerSecond
    let rules = DemoAPIRules()
    let server: LoopbackHTTPServer

    init() throws {
        let rules = rules
        server = try LoopbackHTTPServer(address: "127.0.0.1") { rules.answer($0) }
    }

    var violations: Int { rules.violations }
}

func urlDispatcherTour() async throws {
    let api = try DemoAPI()
    defer { api.server.shutdown() }
    let base = api.server.baseURL
    say("  API server on \(base): at most \(DemoAPI.maxConcurrent) requests at once, \(DemoAPI.ratePerSecond) per second")

    // The client keeps inside the rules: the dispatcher caps requests in flight and starts per
    // window (a window 10 % longer than the server's, for the few ms a request takes to arrive);
    // a ThrottledQueue paces the producer of short requests.
    let client = URLDispatcher(limits: .init(maxRequests: DemoAPI.maxConcurrent, maxLongRequests: 1,
                                             rate: .rate(DemoAPI.ratePerSecond, per: .milliseconds(1100))))
    defer { client.dispose() }
    let endpoint = try URLDispatcher.Endpoint(url: base)
    let producer = ThrottledQueue(label: "Producer", interval: .milliseconds(30))

    // A long stream, open for about 1.5 s.
    let counts = TourCounts()
    let stream = Task {
        for try await element in client.stream(for: URLRequest(url: base.appendingPathComponent("events")),
                                               timeout: .seconds(2), idleTimeout: .seconds(1)) {
            switch element {
            case .response(let response): say("  a long stream opened (\(response.statusCode)); it takes 1 of the 3 slots")
            case .data: counts.chunks.add(1, ordering: .relaxed)
            }
        }
        counts.streamOpen.store(false, ordering: .relaxed)
    }

    // 16 short requests, produced 30 ms apart: with the stream, two more starts than a window allows.
    say("  16 short requests, produced 30 ms apart, each answered after 60 ms…")
    let shortStart = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for index in 0..<16 {
            try await producer.run {}
            group.addTask {
                let (_, response) = try await client.data(for: URLRequest(url: base.appendingPathComponent("items/\(index)")),
                                                          timeout: .seconds(2))
                if response.statusCode == 200, counts.streamOpen.load(ordering: .relaxed) { counts.doneWhileOpen.add(1, ordering: .relaxed) }
            }
        }
        try await group.waitForAll()
    }
    say("  16 short requests done in \(milliseconds(ContinuousClock.now - shortStart)),"
          + " \(counts.doneWhileOpen.load(ordering: .relaxed)) of them while the stream was open (\(counts.chunks.load(ordering: .relaxed)) chunks so far)")

    // A request to a hung endpoint, ended by the library's own timeout.
    let hungStart = ContinuousClock.now
    do {
        _ = try await client.data(for: URLRequest(url: base.appendingPathComponent("slow")), timeout: .milliseconds(300))
        say("  the hung request returned?")
    } catch {
        say("  hung request ended after \(milliseconds(ContinuousClock.now - hungStart)) (timeout set: 300 ms):\n    \(error)")
    }
    _ = try await stream.value
    say("  the stream ended normally after \(counts.chunks.load(ordering: .relaxed)) chunks")

    // A 429 with Retry-After: the endpoint pauses; the next request waits it out.
    let (_, refused) = try await client.data(for: URLRequest(url: base.appendingPathComponent("quota")))
    let refusedAt = ContinuousClock.now
    let pause = client.statistics(for: endpoint).pausedUntil.map { refusedAt.duration(to: $0) } ?? .zero
    say("  /quota answered \(refused.statusCode) with Retry-After: 1; the endpoint pauses for \(milliseconds(pause))")
    say("  the dispatcher in Diagnostics.snapshot() now:")
    let dump = Diagnostics.snapshot().description.split(separator: "\n", omittingEmptySubsequences: false)
    for line in dump.drop(while: { !$0.hasPrefix("URLDispatcher \"\(client.diagnosticsName)\"") }).prefix(while: { !$0.isEmpty }) {
        say("    \(line)")
    }
    let (_, after) = try await client.data(for: URLRequest(url: base.appendingPathComponent("quota")))
    say("  the next request got \(after.statusCode) after \(milliseconds(ContinuousClock.now - refusedAt))")

    say("  server's peak concurrency: \(api.server.peak) (limit \(DemoAPI.maxConcurrent)); rule violations: \(api.violations)")
    say("  client statistics: \(client.statistics(for: endpoint))")

    // The process's metrics, scraped from the server's /metrics as Prometheus would.
    let (metrics, scrape) = try await client.data(for: URLRequest(url: base.appendingPathComponent("metrics")))
    let lines = String(decoding: metrics, as: UTF8.self).split(separator: "\n")
    say("  GET /metrics: \(scrape.statusCode), \(scrape.value(forHTTPHeaderField: "Content-Type") ?? "?"), \(lines.count) lines; this client's:")
    for line in lines where line.hasPrefix("threadkit_url_requests_total{dispatcher=\"\(client.diagnosticsName)\"") && !line.hasSuffix(" 0") {
        say("    \(line)")
    }
}

/// What the tour's tasks count.
final class TourCounts: Sendable {
    let streamOpen = Atomic(true)
    let chunks = Atomic(0)
    let doneWhileOpen = Atomic(0)
}

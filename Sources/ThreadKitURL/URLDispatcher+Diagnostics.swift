import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// How the requests of one endpoint ended, counted under the dispatcher's lock where each one is
/// forgotten (exactly once per request): the `outcome` label of `requests_total`.
struct RequestOutcomes: Sendable, Equatable {
    /// A whole response, whatever its status.
    var success = 0
    /// A transport error, or a response that was not HTTP.
    var failure = 0
    /// Cancelled by its owner (before it was sent too).
    var cancelled = 0
    /// A ThreadKit timeout, in any phase (queued included).
    var timeout = 0
    /// Refused at the long-request limit.
    var rejected = 0
    /// Ended by ``URLDispatcher/dispose()``.
    var disposed = 0

    mutating func count(_ ending: RequestEnding) {
        switch ending {
        case .completed: success += 1
        case .failed, .notHTTP: failure += 1
        case .cancelled: cancelled += 1
        case .timedOut: timeout += 1
        case .longRequestLimit: rejected += 1
        case .disposed: disposed += 1
        }
    }

    /// The label values and counts, in a fixed order.
    var labelled: [(outcome: String, count: Int)] {
        [("success", success), ("failure", failure), ("cancelled", cancelled), ("timeout", timeout),
         ("rejected", rejected), ("disposed", disposed)]
    }
}

extension URLDispatcher: DiagnosticsReporting {
    private static let made = Locked(0)

    static func nextDiagnosticsName() -> String {
        "URLDispatcher#\(made.withLock { count -> Int in count += 1; return count })"
    }

    /// The dispatcher's entry: its default limits, each endpoint's counts and pause, and its
    /// requests by outcome. It owns no thread (its session's and ``TimerThread/shared``'s work for it).
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let books = core.diagnosticsBooks()
        let limits = core.defaultLimits
        var configuration = [
            Snapshot.Field("maxRequests", String(limits.maxRequests)),
            Snapshot.Field("maxLongRequests", String(limits.maxLongRequests)),
            Snapshot.Field("rate", limits.rate.map { "\($0.count)/\(DiagnosticsClock.text($0.window))" } ?? "none"),
            Snapshot.Field("honorRetryAfter", String(limits.honorRetryAfter)),
            Snapshot.Field("maxRetryAfter", DiagnosticsClock.text(limits.maxRetryAfter)),
            Snapshot.Field("coordination", limits.coordination.endpoints == nil ? "local" : "shared"),
        ]
        if books.disposed { configuration.append(Snapshot.Field("disposed", "true")) }
        var endpoints: [Snapshot.Endpoint] = []
        var metrics: [Snapshot.Metric] = []
        for entry in books.endpoints {
            let name = entry.endpoint.description
            let paused = entry.pausedUntil.map { clock.seconds(until: core.origin + $0) }.flatMap { $0 > 0 ? $0 : nil }
            endpoints.append(Snapshot.Endpoint(endpoint: name, running: entry.running, queued: entry.queued, pausedFor: paused))
            let label = Snapshot.Field("endpoint", name)
            for (outcome, count) in entry.outcomes.labelled {
                metrics.append(Snapshot.Metric(
                    "requests_total", .counter, Double(count), help: "Requests ended, by endpoint and outcome.",
                    labels: [label, Snapshot.Field("outcome", outcome)]))
            }
            metrics.append(Snapshot.Metric("requests_running", .gauge, Double(entry.running),
                                           help: "Requests holding a slot of the endpoint.", labels: [label]))
            metrics.append(Snapshot.Metric("requests_queued", .gauge, Double(entry.queued),
                                           help: "Requests waiting for a slot of the endpoint.", labels: [label]))
            metrics.append(Snapshot.Metric("pause_remaining_seconds", .gauge, paused ?? 0,
                                           help: "Time left of the endpoint's Retry-After pause.", labels: [label]))
        }
        return Snapshot.Component(
            kind: "URLDispatcher", name: diagnosticsName, configuration: configuration, metrics: metrics,
            pendingCount: endpoints.reduce(0) { $0 + $1.queued }, endpoints: endpoints)
    }
}

extension URLDispatcherCore {
    /// One endpoint's counts, as the books held them.
    struct EndpointBooks {
        let endpoint: URLDispatcher.Endpoint
        let running: Int
        let queued: Int
        let pausedUntil: Duration?
        let outcomes: RequestOutcomes
    }

    /// The books the diagnostics read: one brief hold of the lock, copying counts only; the
    /// endpoints sorted by their names.
    func diagnosticsBooks() -> (disposed: Bool, endpoints: [EndpointBooks]) {
        let (disposed, endpoints) = state.withLock { state in
            (state.disposed, state.endpoints.map { endpoint, entry in
                EndpointBooks(endpoint: endpoint, running: entry.slots.counts.running, queued: entry.slots.counts.queued,
                              pausedUntil: entry.slots.pausedUntil, outcomes: entry.outcomes)
            })
        }
        return (disposed, endpoints.sorted { $0.endpoint.description < $1.endpoint.description })
    }
}

/// What a blocked `dataSync` caller waits for: a slot of its endpoint, or its response. No one
/// thread holds either (the slots are held by requests in flight, the response is the server's).
final class URLWaitTarget: DiagnosticsWaitTarget {
    let waitDescription: String

    init(_ waitDescription: String) {
        self.waitDescription = waitDescription
    }

    var holdingThread: ThreadActivity? { nil }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import ThreadKit

extension URLDispatcher {
    /// The limits that apply to each endpoint.
    ///
    /// **Arguments.** A `maxRequests` below 1, a `maxLongRequests` below 0 or not below
    /// `maxRequests`, and a negative `maxRetryAfter` cannot work: each stops with a precondition
    /// failure naming the argument and the value, where the limits are made and again where they
    /// are handed over. Every other value works: `Int.max` requests is no limit in practice, a
    /// `maxLongRequests` of 0 allows no long request, a zero `maxRetryAfter` makes a `Retry-After`
    /// pause nothing, and one however far out (`.seconds(Int64.max)` and beyond) caps nothing.
    public struct EndpointLimits: Sendable, Equatable {
        /// The most requests in flight to the endpoint at once, every kind counted (sync too).
        public var maxRequests: Int
        /// The most long requests in flight at once; always less than ``maxRequests``, so short
        /// requests always keep a slot. 0 allows no long request.
        public var maxLongRequests: Int
        /// The most requests started in any sliding window (the rule of ThreadKit's `ThrottledQueue`); `nil`: no cap.
        public var rate: RateLimit?
        /// Whether a 429 or 503 with `Retry-After` pauses the endpoint until then.
        public var honorRetryAfter: Bool
        /// The longest pause a `Retry-After` can impose.
        public var maxRetryAfter: Duration
        /// Who else counts this endpoint's requests: `Coordination.local` (the default), this
        /// process alone; a `Coordination.redis(…)` value shares `maxRequests` with every process
        /// using the same key: a request runs only while it holds one of the endpoint's leases
        /// (at most `maxRequests` across the fleet, each renewed while its request runs and given
        /// back when it ends, however it ends), waiting requests ask in FIFO order, processes
        /// that all wait take turns (one that waited longer gets a freed lease first), and a
        /// `Retry-After` pause seen by one process pauses all. While Redis does not answer, the
        /// coordination's `Fallback` applies: `.localFallback(share:)` runs at most
        /// `maxRequests × share` (at least 1) in this process, `.failClosed` starts nothing (the
        /// `queueTimeout` applies), `.failOpen` keeps the local limits only. Once Redis answers
        /// again, the requests the fallback started get leases first, whatever the limit, and new
        /// ones wait until the fleet is back under it. The long-request limit and `rate` stay
        /// per process.
        public var coordination: Coordination

        /// The long-request limit when none is given: 3, or `maxRequests - 1` when that is less.
        static func defaultMaxLongRequests(forMaxRequests maxRequests: Int) -> Int {
            // Subtracted from only once at least 1: `Int.min - 1` would trap before `check(call:)` names it.
            maxRequests > 3 ? 3 : maxRequests >= 1 ? maxRequests - 1 : 0
        }

        /// Limits for an endpoint.
        ///
        /// A default never makes a valid argument trap: without `maxLongRequests`, the long limit
        /// is 3, or `maxRequests - 1` when that is less (`maxRequests: 3` gets 2, `maxRequests: 1`
        /// gets 0). A `maxLongRequests` given explicitly is checked as it is.
        ///
        /// - Parameters:
        ///   - maxRequests: At least 1.
        ///   - maxLongRequests: At least 0 and less than `maxRequests`; `nil` (the default): see above.
        ///   - rate: A cap on starts per window, or `nil`.
        ///   - honorRetryAfter: Pause the endpoint on a 429 or 503 with `Retry-After`.
        ///   - maxRetryAfter: At least zero: the longest such pause.
        ///   - coordination: `Coordination.local`, or a coordination that shares `maxRequests`
        ///     with other processes (see ``coordination``).
        public init(maxRequests: Int = 6, maxLongRequests: Int? = nil, rate: RateLimit? = nil,
                    honorRetryAfter: Bool = true, maxRetryAfter: Duration = .seconds(120), coordination: Coordination = .local) {
            self.maxRequests = maxRequests
            self.maxLongRequests = maxLongRequests ?? Self.defaultMaxLongRequests(forMaxRequests: maxRequests)
            self.rate = rate
            self.honorRetryAfter = honorRetryAfter
            self.maxRetryAfter = maxRetryAfter
            self.coordination = coordination
            check(call: "URLDispatcher.EndpointLimits.init")
        }

        /// The coordinator and fallback of slots shared by a fleet; `nil` for this process alone.
        var sharing: EndpointSharing? {
            coordination.endpoints.map { EndpointSharing(coordinator: ObjectIdentifier($0), fallback: coordination.whenUnavailable) }
        }

        /// Stops, naming `call`, the argument and its value, if these limits cannot work. The initializer
        /// checks them, and so do ``URLDispatcher/init(limits:configuration:)`` and
        /// ``URLDispatcher/setLimits(_:for:)``: limits changed through the properties are refused
        /// where they are handed over, not at some later request.
        func check(call: String) {
            EndpointSlots<Int>.checkLimits(maxRequests: maxRequests, maxLongRequests: maxLongRequests, call: call)
            precondition(maxRetryAfter >= .zero, "\(call): maxRetryAfter must not be negative, got \(maxRetryAfter)")
            if coordination.endpoints != nil { coordination.whenUnavailable.validate("\(call): coordination") }
        }
    }

    /// Where requests go: a lower-cased scheme, a lower-cased host and a port.
    ///
    /// `http://API.example.com/a`, `HTTP://api.example.com:80/b` are the same endpoint;
    /// `https://api.example.com` is another one (port 443).
    public struct Endpoint: Hashable, Sendable, CustomStringConvertible {
        /// `http` or `https`.
        public let scheme: String
        /// The host, lower-cased.
        public let host: String
        /// The explicit port, else 80 for http, 443 for https.
        public let port: Int

        /// The endpoint of `url`; the scheme's case does not matter.
        ///
        /// - Throws: ``URLDispatcherError/unsupportedURL`` if the scheme is not http or https
        ///   (`ws` and `wss` included: URLSession's data tasks cannot serve them), or there is no host.
        public init(url: URL) throws {
            guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
                Log.log(.urlDispatcher, "unsupported URL \(url.absoluteString): no host")
                throw URLDispatcherError.unsupportedURL
            }
            let defaultPort: Int
            switch scheme {
            case "http": defaultPort = 80
            case "https": defaultPort = 443
            default:
                Log.log(.urlDispatcher, "unsupported URL \(url.absoluteString): scheme \(scheme)")
                throw URLDispatcherError.unsupportedURL
            }
            self.scheme = scheme
            self.host = host
            self.port = url.port ?? defaultPort
        }

        /// `scheme://host:port`.
        public var description: String { "\(scheme)://\(host):\(port)" }
    }

    /// What to do with a long request when the endpoint's long requests are at their limit.
    public enum LongRequestPolicy: Sendable, Hashable {
        /// Refuse it at once with ``URLDispatcherError/longRequestLimit(endpoint:limit:)``.
        case reject
        /// Queue it until a long slot is free, never exceeding the long limit.
        case wait
    }

    /// Whether a request is short (answered soon) or long (a stream that stays open).
    public enum Kind: Sendable, Hashable {
        /// A request answered soon; its timeout is a total deadline.
        case short
        /// A long-lived request (a stream, long polling): counted against `maxLongRequests` too; its
        /// timeout is the time to the response's headers, then an idle timeout between chunks.
        case long(whenFull: LongRequestPolicy = .reject)
    }

    /// An endpoint's counts, as ``URLDispatcher/statistics(for:)`` reports them.
    public struct EndpointStatistics: Sendable, Equatable, CustomStringConvertible {
        /// Requests holding a slot, every kind.
        public var running: Int = 0
        /// Long requests holding a slot.
        public var runningLong: Int = 0
        /// Requests waiting for a slot, every kind, blocked `dataSync` callers included.
        public var queued: Int = 0
        /// Until when a `Retry-After` holds the endpoint's starts, if it still does.
        public var pausedUntil: ContinuousClock.Instant? = nil
        /// Requests ended with a whole response, whatever its status.
        public var completed: Int = 0
        /// Requests ended with any other error (cancel, dispose, refused, transport, malformed response).
        public var failed: Int = 0
        /// Requests ended by a ThreadKit timeout, in any phase.
        public var timedOut: Int = 0

        /// A one-line summary.
        public var description: String {
            "running \(running) (long \(runningLong)), queued \(queued), completed \(completed), failed \(failed), timed out \(timedOut)"
                + (pausedUntil.map { " paused for \(ContinuousClock.now.duration(to: $0))" } ?? "")
        }
    }
}

/// Why a ``URLDispatcher`` request failed. Each description names the endpoint and the limit or
/// timeout involved.
public enum URLDispatcherError: Error, Equatable, CustomStringConvertible {
    /// The phase of a request that a timeout ended.
    public enum TimeoutPhase: Sendable, Hashable, CustomStringConvertible {
        /// Waiting for a slot (`queueTimeout`).
        case queued
        /// A short or sync request's total time from its slot (`timeout`).
        case total
        /// A long request's time from its slot to the response headers (`timeout`).
        case headers
        /// A long request's time between two chunks of its body (`idleTimeout`).
        case idle

        /// The phase, as a phrase.
        public var description: String {
            switch self {
            case .queued: "waiting for a slot"
            case .total: "for the whole request"
            case .headers: "waiting for the response headers"
            case .idle: "waiting for the next chunk of the body"
            }
        }
    }

    /// The URL has no host, or a scheme other than http and https (in any case). (`Log.enable(.urlDispatcher)`
    /// logs the URL.)
    case unsupportedURL
    /// A long request with the `.reject` policy found the endpoint's long requests at `limit`.
    case longRequestLimit(endpoint: URLDispatcher.Endpoint, limit: Int)
    /// ThreadKit ended the request after `after` in `phase`.
    case timedOut(endpoint: URLDispatcher.Endpoint, after: Duration, phase: TimeoutPhase)
    /// The dispatcher was disposed before the request could finish.
    case disposed
    /// The server's answer was not an HTTP response.
    case notHTTP(endpoint: URLDispatcher.Endpoint)

    /// A readable description that names the endpoint and the limit or timeout.
    public var description: String {
        switch self {
        case .unsupportedURL:
            "URLDispatcher: unsupported URL: it needs an http or https scheme and a host"
        case .longRequestLimit(let endpoint, let limit):
            "URLDispatcher: \(endpoint) already has its limit of \(limit) long request\(limit == 1 ? "" : "s") in flight or waiting"
        case .timedOut(let endpoint, let after, let phase):
            "URLDispatcher: request to \(endpoint) timed out after \(after.readable) \(phase)"
        case .disposed:
            "URLDispatcher: disposed; the request was refused or cancelled"
        case .notHTTP(let endpoint):
            "URLDispatcher: \(endpoint) answered with something that is not an HTTP response"
        }
    }
}

extension Duration {
    /// "300 ms", "1.5 s": for messages; any duration, however far out.
    var readable: String {
        let milliseconds = self / .milliseconds(1)
        if milliseconds < 1_000 { return "\(String(format: "%g", milliseconds)) ms" }
        return "\(String(format: "%g", milliseconds / 1e3)) s"
    }
}

/// How an endpoint's slots are shared by a fleet: through which coordinator, and what a start does
/// while it cannot decide. Another coordinator (another client, another key) is another sharing,
/// whatever its fallback: an ask on its way to the old one is forgotten.
struct EndpointSharing: Equatable, Sendable {
    /// The identity of the endpoint's ``EndpointCoordinator``.
    var coordinator: ObjectIdentifier
    /// What a start does while the coordinator cannot decide.
    var fallback: Fallback
}

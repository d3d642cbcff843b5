import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import ThreadKit

/// Keeps the HTTP requests in flight to each endpoint under a limit, keeps long-lived requests
/// (streams) from starving short ones, and enforces timeouts itself.
///
/// An endpoint is a scheme, a host and a port (``Endpoint``). Each has at most `maxRequests`
/// requests in flight, every kind counted, of which at most `maxLongRequests` long ones; requests
/// over the limit wait in one FIFO per endpoint, and start the moment a slot is free (and the
/// endpoint's `rate` and any `Retry-After` pause allow). Endpoints are independent.
///
/// Timeouts are ThreadKit's, counted from when a request gets its slot: FoundationNetworking on
/// Linux truncates request timeouts to whole seconds, counts time queued in libcurl, and never
/// enforces `timeoutIntervalForResource`, so the dispatcher sets the session's own timeouts far out
/// and cancels the transfer itself. Its session keeps no cache. See `Docs/URLDispatcher.md`.
///
/// Four ways to send a request: ``data(for:kind:timeout:queueTimeout:)`` (async),
/// ``stream(for:kind:timeout:idleTimeout:)`` (an async sequence of the response and the body's
/// chunks), ``dataSync(for:timeout:)`` (blocking), and ``dispatch(_:kind:delegate:)`` (a delegate).
///
/// A dispatcher keeps its `URLSession` until ``dispose()``, as a session keeps its delegate until
/// it is invalidated.
///
/// **Arguments.** Limits are ``EndpointLimits``'s, checked again where they are handed over
/// (``init(limits:configuration:)``, ``setLimits(_:for:)``). A timeout (`timeout`, `queueTimeout`,
/// `idleTimeout`, or the request's `timeoutInterval` in their place) of zero is a time already up,
/// as for GCD's and Java's timed waits: a request that finds no free slot at once fails with
/// ``URLDispatcherError/timedOut(endpoint:after:phase:)`` (`.queued`, after 0 s), and one that gets a
/// slot times out at once; a thrown error, as for any timeout. One however far out
/// (`.seconds(Int64.max)` and beyond, a `timeoutInterval` of `.infinity`) never expires. A negative
/// timeout, or a negative or NaN `timeoutInterval` where it stands in for one, cannot work: the call
/// it is handed to stops at once with a precondition failure naming the call, the argument and the
/// value (`URLDispatcher.dataSync(for:timeout:): timeout must not be negative, got -1.0 seconds`),
/// ``stream(for:kind:timeout:idleTimeout:)`` included, whose other errors come out of the
/// iteration. This is ThreadKit's design rule: a negative duration means "now" only where a time in
/// the past makes sense (a pause, a `Retry-After` date), and a timeout is neither.
public final class URLDispatcher: Sendable {
    /// A dispatcher with the default limits and an ephemeral session configuration; never disposed.
    public static let shared = URLDispatcher(limits: .init(), configuration: .ephemeral, name: "shared")

    let core: URLDispatcherCore
    /// Its name in ``Diagnostics``: `"shared"`, else `"URLDispatcher#<n>"`, n counting from 1 in
    /// the order dispatchers were made.
    package let diagnosticsName: String

    /// A dispatcher whose endpoints get `limits` until ``setLimits(_:for:)`` says otherwise.
    ///
    /// - Parameters:
    ///   - limits: The limits of every endpoint without limits of its own.
    ///   - configuration: The session's configuration, copied. Its timeouts are set to a hundred
    ///     years (ThreadKit enforces its own; FoundationNetworking cannot take `.infinity`, so a
    ///     transfer that runs longer than a century ends), its `httpMaximumConnectionsPerHost` to
    ///     `Int.max`, above every ThreadKit limit, and
    ///     its cache off, whatever it says (`urlCache = nil`, `.reloadIgnoringLocalCacheData`):
    ///     FoundationNetworking's cache lookup races with a cancel and takes the process down
    ///     (swift-corelibs-foundation issue 3296).
    public convenience init(limits: EndpointLimits = .init(), configuration: URLSessionConfiguration = .ephemeral) {
        self.init(limits: limits, configuration: configuration, name: nil)
    }

    private init(limits: EndpointLimits, configuration: URLSessionConfiguration, name: String?) {
        limits.check(call: "URLDispatcher.init(limits:configuration:)")
        core = URLDispatcherCore(limits: limits, configuration: configuration)
        diagnosticsName = name ?? Self.nextDiagnosticsName()
        DiagnosticsRegistry.add(self)
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(self))
    }

    /// Gives `endpoint` its own limits, from now on: waiting requests start at once if they now fit;
    /// running ones over lowered limits finish, and no new one starts until the counts are below them.
    public func setLimits(_ limits: EndpointLimits, for endpoint: Endpoint) {
        limits.check(call: "URLDispatcher.setLimits(_:for:)")
        core.setLimits(limits, for: endpoint)
    }

    /// Whether a long request to `url` with the `.reject` policy would be accepted now: its endpoint's
    /// long requests, running and waiting, are below `maxLongRequests`. `false` for an unsupported URL
    /// or after ``dispose()``.
    public func isLongRequestAllowed(to url: URL) -> Bool {
        guard let endpoint = try? Endpoint(url: url) else { return false }
        return core.isLongRequestAllowed(to: endpoint)
    }

    /// The counts of `endpoint`: zeros for one never used.
    public func statistics(for endpoint: Endpoint) -> EndpointStatistics {
        core.statistics(for: endpoint)
    }

    /// Refuses new requests with ``URLDispatcherError/disposed``; queued ones fail with it at once;
    /// running ones are cancelled and fail with it too. The session is then invalidated. Calling it again
    /// does nothing.
    public func dispose() {
        core.dispose()
    }

    // MARK: - Making requests

    /// Registers a request with the dispatcher; its timeouts are the explicit ones, else the
    /// request's `timeoutInterval`. Every registered request is then submitted. Called by the
    /// public `call` on its caller's thread, so that a timeout that cannot work stops there, first.
    func makeRecord(_ request: URLRequest, kind: Kind, timeout: Duration?, idleTimeout: Duration?,
                    queueTimeout: Duration?, syncWaiter: SyncWaiter? = nil, call: String = #function) throws -> RequestRecord {
        let total = Self.kept(timeout ?? Self.timeout(of: request, call: call), "timeout", call)
        let idle = idleTimeout.map { Self.kept($0, "idleTimeout", call) } ?? total
        let queue = queueTimeout.map { Self.kept($0, "queueTimeout", call) } ?? total
        guard let url = request.url else { throw URLDispatcherError.unsupportedURL }
        let endpoint = try Endpoint(url: url)
        let running: RequestTimeouts.Running = kind == .short ? .total(total) : .headersThenIdle(headers: total, idle: idle)
        return core.register(endpoint: endpoint, kind: kind, request: request,
                             timeouts: RequestTimeouts(queue: queue, running: running), syncWaiter: syncWaiter)
    }

    /// A timeout as the dispatcher keeps it (see "Arguments" above): a negative one stops, naming
    /// `call`, `argument` and the value; one past `.seconds(Int64.max)`, already "never" on the
    /// monotonic clock, is kept as that, so that no deadline computed from it can overflow.
    static func kept(_ timeout: Duration, _ argument: String, _ call: String) -> Duration {
        precondition(timeout >= .zero, "URLDispatcher.\(call): \(argument) must not be negative, got \(timeout)")
        return min(timeout, .seconds(Int64.max))
    }

    /// The request's own `timeoutInterval` as a timeout; NaN or negative stops, naming it and `call`.
    static func timeout(of request: URLRequest, call: String) -> Duration {
        let seconds = request.timeoutInterval
        precondition(!seconds.isNaN, "URLDispatcher.\(call): the request's timeoutInterval must be a number, got \(seconds)")
        precondition(seconds >= 0, "URLDispatcher.\(call): the request's timeoutInterval must not be negative, got \(seconds)")
        return seconds >= Double(Int64.max) ? .seconds(Int64.max) : .seconds(seconds)
    }

    /// Sends `request` and returns its whole body and response, whatever the status; the caller
    /// suspends, no thread is blocked.
    ///
    /// - Parameters:
    ///   - request: An http or https request.
    ///   - kind: `.short` (default) or `.long`: a long one counts against `maxLongRequests` too.
    ///   - timeout: From the slot on: a total deadline for a short request; for a long one, the time
    ///     to the response headers, then the same between chunks; not negative. Default: the
    ///     request's `timeoutInterval`.
    ///   - queueTimeout: The longest wait for a slot; not negative. Default: `timeout`.
    /// - Returns: The body and the response.
    /// - Throws: ``URLDispatcherError`` (unsupported URL, long-request limit, timeout, disposed),
    ///   `CancellationError` if the calling task is cancelled (one cancelled before the call never
    ///   sends its request), or the transfer's `URLError`.
    public func data(for request: URLRequest, kind: Kind = .short, timeout: Duration? = nil,
                     queueTimeout: Duration? = nil) async throws -> (Data, HTTPURLResponse) {
        let record = try makeRecord(request, kind: kind, timeout: timeout, idleTimeout: nil, queueTimeout: queueTimeout)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>) in
                record.mailbox.attach(CollectingSink(endpoint: record.endpoint) { continuation.resume(with: $0) })
                if let error = core.submit(record) { record.mailbox.post(.completion(error)) }
            }
        } onCancel: {
            core.cancel(record)
        }
    }

    /// Sends `request` and returns its response, then the chunks of its body as they arrive.
    ///
    /// It never throws when called: every error (unsupported URL, long-request limit, timeout,
    /// transport) comes out of the iteration, before any element if the request never got a
    /// response. The request is sent at once, unless the calling task is already cancelled: then
    /// it is never sent and the iteration throws `CancellationError`. Leaving the iteration early
    /// (or dropping its iterator) cancels the request and frees its slot, even while the stream
    /// itself is kept; cancelling the iterating task does too, and the iteration throws
    /// `CancellationError`, as with AsyncHTTPClient's body streams. A negative timeout is no error
    /// but a mistake in the calling code: it stops the program here, at the call (see "Arguments").
    ///
    /// - Parameters:
    ///   - request: An http or https request.
    ///   - kind: `.long()` (default: refused when the long limit is reached) or `.short`.
    ///   - timeout: From the slot: to the response headers for a long request, the total for a
    ///     short one; not negative. Default: the request's `timeoutInterval`.
    ///   - idleTimeout: The longest silence between chunks of a long request; not negative.
    ///     Default: `timeout`.
    public func stream(for request: URLRequest, kind: Kind = .long(), timeout: Duration? = nil,
                       idleTimeout: Duration? = nil) -> URLResponseStream {
        let record: RequestRecord
        do {
            record = try makeRecord(request, kind: kind, timeout: timeout, idleTimeout: idleTimeout, queueTimeout: nil)
        } catch {
            return .failed(error)
        }
        let core = core
        let (stream, sink) = URLResponseStream.make { core.cancel(record) }
        record.mailbox.attach(sink)
        // Asked for by a cancelled task: refused when submitted, with CancellationError.
        if Task.isCancelled { core.cancel(record) }
        if let error = core.submit(record) { record.mailbox.post(.completion(error)) }
        return stream
    }

    /// Sends `request` and blocks the calling thread until its whole response is in.
    ///
    /// The caller waits in its endpoint's FIFO like any request (``EndpointStatistics/queued``
    /// counts it). It blocks the calling thread, so async code awaits
    /// ``data(for:kind:timeout:queueTimeout:)`` instead.
    ///
    /// - Parameters:
    ///   - request: An http or https request.
    ///   - timeout: From the slot, for the whole request; also the longest wait for a slot; not
    ///     negative. Default: the request's `timeoutInterval`.
    /// - Returns: The body and the response, whatever the status.
    /// - Throws: ``URLDispatcherError`` or the transfer's `URLError`.
    @available(*, noasync, message: "it blocks the thread; use 'try await data(for:)' in async code")
    public func dataSync(for request: URLRequest, timeout: Duration? = nil) throws -> (Data, HTTPURLResponse) {
        let waiter = SyncWaiter()
        let record = try makeRecord(request, kind: .short, timeout: timeout, idleTimeout: nil, queueTimeout: nil, syncWaiter: waiter)
        record.mailbox.attach(CollectingSink(endpoint: record.endpoint) { waiter.finish($0) })
        if let error = core.submit(record) {
            record.mailbox.detach()
            throw error
        }
        return try waiter.blockingWaitForResult(endpoint: record.endpoint).get()
    }

    /// Sends `request` and reports to `delegate`: the response, the body's chunks, then exactly one
    /// completion, in order, one at a time, and nothing after it.
    ///
    /// Delegate methods run on the session's delegate queue (one serial queue per dispatcher), the
    /// completions of timeouts included: never on ThreadKit's `TimerThread.shared`. A request still waiting
    /// for its slot that a call of yours ends (``URLDispatchOperation/cancel()``, ``dispose()``) gets
    /// its completion on your thread before that call returns; a running one once the session has
    /// carried out the cancel of its transfer (25 ms at most), on the delegate queue. Keep them
    /// short, as with `URLSession` delegates: a slow one holds up the other operations' events.
    ///
    /// - Parameters:
    ///   - request: An http or https request; its `timeoutInterval` is the timeout (a total deadline for
    ///     a short request; to the headers, then between chunks, for a long one) and the longest wait
    ///     for a slot; not negative.
    ///   - kind: `.short` (default) or `.long(whenFull:)`.
    ///   - delegate: Kept until the completion has been delivered.
    /// - Returns: The operation, to cancel it.
    /// - Throws: ``URLDispatcherError/unsupportedURL``, ``URLDispatcherError/longRequestLimit(endpoint:limit:)``
    ///   or ``URLDispatcherError/disposed``, at once; the delegate then hears nothing.
    public func dispatch(_ request: URLRequest, kind: Kind = .short, delegate: any URLDispatchDelegate) throws -> URLDispatchOperation {
        let record = try makeRecord(request, kind: kind, timeout: nil, idleTimeout: nil, queueTimeout: nil)
        let operation = URLDispatchOperation(record: record, core: core)
        record.mailbox.attach(DelegateSink(operation: operation, delegate: delegate))
        if let error = core.submit(record) {
            record.mailbox.detach()
            throw error
        }
        return operation
    }
}

/// Blocks a `dataSync` caller until its result is in, reported blocked for a slot of its endpoint,
/// then (once it has one) for the response.
final class SyncWaiter: @unchecked Sendable {
    // Sendable: `result` and `started` are guarded by `condition`'s lock.
    private let condition = NSCondition()
    private var result: Result<(Data, HTTPURLResponse), any Error>?
    private var started = false

    func finish(_ result: Result<(Data, HTTPURLResponse), any Error>) {
        condition.lock()
        self.result = result
        condition.broadcast()
        condition.unlock()
    }

    /// The request got its slot and its transfer started: the wait is now for the response.
    func slotGranted() {
        condition.lock()
        started = true
        condition.broadcast()
        condition.unlock()
    }

    func blockingWaitForResult(endpoint: URLDispatcher.Endpoint) -> Result<(Data, HTTPURLResponse), any Error> {
        let activity = ThreadActivity.current
        activity.blocked("slot", on: URLWaitTarget("a slot of endpoint \(endpoint)")) {
            wait { started || result != nil }
        }
        return activity.blocked("response", on: URLWaitTarget("the response of endpoint \(endpoint)")) {
            wait { result != nil }
            return condition.withLock { result! }
        }
    }

    private func wait(until done: () -> Bool) {
        condition.lock()
        defer { condition.unlock() }
        while !done() { condition.wait() }
    }
}

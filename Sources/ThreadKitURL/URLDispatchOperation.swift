import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Receives the events of a request sent with ``URLDispatcher/dispatch(_:kind:delegate:)``: the
/// response, the body's chunks, then exactly one completion, in order, one at a time.
public protocol URLDispatchDelegate: AnyObject, Sendable {
    /// The response's status and headers came; first, at most once.
    func operation(_ operation: URLDispatchOperation, didReceive response: HTTPURLResponse)
    /// The next chunk of the body came.
    func operation(_ operation: URLDispatchOperation, didReceive data: Data)
    /// The request ended: `nil` after a whole response (any status), else the error
    /// (``URLDispatcherError``, `CancellationError`, `URLError`). Last, exactly once.
    func operation(_ operation: URLDispatchOperation, didCompleteWith error: (any Error)?)
}

/// A request sent with ``URLDispatcher/dispatch(_:kind:delegate:)``, to cancel it.
public final class URLDispatchOperation: Sendable {
    /// The request as given.
    public let request: URLRequest
    /// Its endpoint.
    public let endpoint: URLDispatcher.Endpoint
    /// Its kind.
    public let kind: URLDispatcher.Kind
    private let record: RequestRecord
    private let core: URLDispatcherCore

    init(record: RequestRecord, core: URLDispatcherCore) {
        self.record = record
        self.core = core
        request = record.request
        endpoint = record.endpoint
        kind = record.kind
    }

    /// Cancels the request: a queued one leaves the queue at once, a running one has its transfer
    /// cancelled and its slot freed. The delegate then gets `didCompleteWith(CancellationError())`,
    /// unless the request had already ended. It never reports success.
    public func cancel() {
        core.cancel(record)
    }
}

/// Feeds a ``URLDispatchDelegate``.
final class DelegateSink: RequestSink {
    private let operation: URLDispatchOperation
    private let delegate: any URLDispatchDelegate

    init(operation: URLDispatchOperation, delegate: any URLDispatchDelegate) {
        self.operation = operation
        self.delegate = delegate
    }

    var callsUserCode: Bool { true }

    func deliver(_ event: RequestEvent) {
        switch event {
        case .response(let response): delegate.operation(operation, didReceive: response)
        case .data(let data): delegate.operation(operation, didReceive: data)
        case .completion(let error): delegate.operation(operation, didCompleteWith: error)
        }
    }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The answer to ``URLDispatcher/stream(for:kind:timeout:idleTimeout:)``: the response, then the
/// body's chunks as they arrive; it ends when the body is complete, or throws the request's error.
public struct URLResponseStream: AsyncSequence, Sendable {
    /// One element: the response first, then chunks of the body.
    public enum Element: Sendable {
        /// The response's status and headers; always the first element.
        case response(HTTPURLResponse)
        /// The next chunk of the body, as it arrived.
        case data(Data)
    }

    /// The stream's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<Element, any Error>.AsyncIterator

        /// The next element, `nil` at the end of the body.
        ///
        /// - Throws: The request's error: ``URLDispatcherError``, `CancellationError` or a `URLError`.
        public mutating func next() async throws -> Element? {
            try await base.next()
        }
    }

    let base: AsyncThrowingStream<Element, any Error>

    /// An iterator over the elements; the stream can be iterated once.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }
}

/// Feeds a ``URLResponseStream``.
final class StreamSink: RequestSink {
    private let continuation: AsyncThrowingStream<URLResponseStream.Element, any Error>.Continuation

    init(continuation: AsyncThrowingStream<URLResponseStream.Element, any Error>.Continuation) {
        self.continuation = continuation
    }

    func deliver(_ event: RequestEvent) {
        switch event {
        case .response(let response): continuation.yield(.response(response))
        case .data(let data): continuation.yield(.data(data))
        case .completion(let error?): continuation.finish(throwing: error)
        case .completion(nil): continuation.finish()
        }
    }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// The answer to ``URLDispatcher/stream(for:kind:timeout:idleTimeout:)``: the response, then the
/// body's chunks as they arrive; it ends when the body is complete, or throws the request's error.
///
/// Its iteration owns the request, as AsyncHTTPClient's body streams do: leaving the loop early
/// (`break`, a thrown error, or dropping the iterator any other way) cancels the request and frees
/// its slot at once, even while the stream value itself is still around; cancelling the task that
/// iterates cancels the request too, and the iteration throws `CancellationError`. Iterate it once.
public struct URLResponseStream: AsyncSequence, Sendable {
    /// One element: the response first, then chunks of the body.
    public enum Element: Sendable {
        /// The response's status and headers; always the first element.
        case response(HTTPURLResponse)
        /// The next chunk of the body, as it arrived.
        case data(Data)
    }

    /// The stream's iterator. When the last copy of it goes away, the request is cancelled (it
    /// does nothing to a request that has ended).
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<Element, any Error>.AsyncIterator
        let ending: StreamEnding
        let lifetime: IterationLifetime
        var finished = false

        /// The next element, `nil` at the end of the body.
        ///
        /// - Throws: The request's error: ``URLDispatcherError`` or a `URLError`; `CancellationError`
        ///   if the calling task is cancelled before the body is complete (the request is then cancelled).
        public mutating func next() async throws -> Element? {
            guard !finished else { return nil }
            if Task.isCancelled, !ending.isComplete { return try cancelled() }
            let element: Element?
            do {
                element = try await base.next()
            } catch {
                finished = true
                throw error
            }
            if let element { return element }
            // The base stream also ends, without an error, when the task waiting in it is cancelled.
            guard ending.isComplete else { return try cancelled() }
            finished = true
            return nil
        }

        private mutating func cancelled() throws -> Element? {
            finished = true
            lifetime.cancelRequest()
            throw CancellationError()
        }
    }

    let base: AsyncThrowingStream<Element, any Error>
    let ending: StreamEnding
    /// Cancels the request; nothing once it has ended.
    let cancelRequest: @Sendable () -> Void

    /// An iterator over the elements; the stream can be iterated once.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), ending: ending, lifetime: IterationLifetime(cancelRequest))
    }

    /// A stream and the sink that feeds it. `cancelRequest` is called when the iteration ends
    /// early, when the task waiting in it is cancelled, or when the stream is dropped unread (and,
    /// harmlessly, after the request has ended).
    static func make(cancelRequest: @escaping @Sendable () -> Void) -> (stream: URLResponseStream, sink: StreamSink) {
        let (base, continuation) = AsyncThrowingStream<Element, any Error>.makeStream()
        let ending = StreamEnding()
        continuation.onTermination = { termination in
            // Cancelled first: a chunk or completion posted after this is dropped by the base stream.
            if case .cancelled = termination { ending.markCancelled() }
            cancelRequest()
        }
        return (URLResponseStream(base: base, ending: ending, cancelRequest: cancelRequest),
                StreamSink(continuation: continuation, ending: ending))
    }

    /// A stream whose iteration throws `error` before any element.
    static func failed(_ error: any Error) -> URLResponseStream {
        let (base, continuation) = AsyncThrowingStream<Element, any Error>.makeStream()
        continuation.finish(throwing: error)
        return URLResponseStream(base: base, ending: StreamEnding(), cancelRequest: {})
    }
}

/// How a stream's base ended, whichever came first: the whole body, or a cancel (of the task
/// waiting in it, or of the stream dropped). Shared by its sink, its termination handler and its
/// iterators.
///
/// The base stream ends without an error both after the whole body and when the task waiting in
/// it is cancelled, and after a cancel it drops whatever is yielded: a body completed after the
/// cancel has lost chunks on the way, so only a completion that came first makes a normal end.
final class StreamEnding: Sendable {
    private enum State { case open, complete, cancelled }
    private let state = Locked(State.open)

    /// The whole body is in: set before the base stream finishes, so an iterator that sees the
    /// end knows how it came. Nothing if the base was cancelled first.
    func markComplete() { state.withLock { if $0 == .open { $0 = .complete } } }

    /// The base was cancelled: nothing yielded from now on reaches an iterator. Nothing if the
    /// whole body was in first (it was all yielded before).
    func markCancelled() { state.withLock { if $0 == .open { $0 = .cancelled } } }

    /// Whether the whole body came in before any cancel.
    var isComplete: Bool { state.withLock { $0 == .complete } }
}

/// Held by an iterator and its copies only: the last one to go cancels the request.
final class IterationLifetime: Sendable {
    let cancelRequest: @Sendable () -> Void

    init(_ cancelRequest: @escaping @Sendable () -> Void) {
        self.cancelRequest = cancelRequest
    }

    deinit { cancelRequest() }
}

/// Feeds a ``URLResponseStream``.
final class StreamSink: RequestSink {
    private let continuation: AsyncThrowingStream<URLResponseStream.Element, any Error>.Continuation
    private let ending: StreamEnding

    init(continuation: AsyncThrowingStream<URLResponseStream.Element, any Error>.Continuation, ending: StreamEnding) {
        self.continuation = continuation
        self.ending = ending
    }

    /// Yielding to the stream, or finishing it, only resumes the iterating task.
    var callsUserCode: Bool { false }

    func deliver(_ event: RequestEvent) {
        switch event {
        case .response(let response): continuation.yield(.response(response))
        case .data(let data): continuation.yield(.data(data))
        case .completion(let error?): continuation.finish(throwing: error)
        case .completion(nil):
            ending.markComplete()
            continuation.finish()
        }
    }
}

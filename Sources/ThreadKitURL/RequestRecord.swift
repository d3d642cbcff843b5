import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// What a request's owner receives: the response, chunks of its body, then one completion.
enum RequestEvent: Sendable {
    case response(HTTPURLResponse)
    case data(Data)
    /// The end: `nil` after a whole response, else the error.
    case completion((any Error)?)
}

/// Receives one request's events, in order, one at a time, never after the completion.
protocol RequestSink: AnyObject, Sendable {
    func deliver(_ event: RequestEvent)
    /// Whether delivering runs user code (a delegate), rather than resuming a continuation or
    /// waking a waiter: such events never go out from the shared timer thread.
    var callsUserCode: Bool { get }
}

/// One request as it was asked for, and the mailbox its owner hears it through.
///
/// It holds no state of the dispatcher's: where the request is in its life is the
/// ``RequestStateMachine`` the dispatcher keeps for it, under its own lock.
struct RequestRecord: Sendable {
    let id: Int
    let endpoint: URLDispatcher.Endpoint
    let kind: URLDispatcher.Kind
    let request: URLRequest
    /// The blocked `dataSync` caller, told when its request gets its slot (for the diagnostics).
    var syncWaiter: SyncWaiter? = nil
    let mailbox = RequestMailbox()
}

/// Delivers one request's events to its owner: in order, one at a time, never after the completion.
///
/// ``post(_:)`` appends; whichever thread finds no delivery in progress delivers, outside every
/// lock, until the mailbox is empty. So events of one request come in order and one at a time from
/// whatever threads they are posted (the session's delegate queue, the timer thread, a canceller),
/// and nothing comes after the completion.
final class RequestMailbox: Sendable {
    private struct Contents: Sendable {
        var events: [RequestEvent] = []
        var delivering = false
        var completionPosted = false
        var sink: (any RequestSink)?
    }

    private let contents = Locked(Contents())

    /// Sets who receives the events; before the request is submitted.
    func attach(_ sink: any RequestSink) {
        contents.withLock { $0.sink = sink }
    }

    /// Whether delivering an event to the owner runs user code (see ``RequestSink/callsUserCode``).
    var callsUserCode: Bool {
        contents.withLock { $0.sink?.callsUserCode ?? false }
    }

    /// Lets go of the sink without telling it anything (a request refused at once, whose caller got
    /// the error thrown). The sink is released after the lock.
    func detach() {
        let sink = contents.withLock { box -> (any RequestSink)? in
            defer { box.sink = nil }
            box.completionPosted = true
            return box.sink
        }
        _ = sink
    }

    /// Queues `event` for the owner and delivers it unless another thread is delivering; dropped
    /// after the completion.
    func post(_ event: RequestEvent) {
        let drains = contents.withLock { box -> Bool in
            guard !box.completionPosted else { return false }
            if case .completion = event { box.completionPosted = true }
            box.events.append(event)
            guard !box.delivering else { return false }
            box.delivering = true
            return true
        }
        guard drains else { return }
        while true {
            // The sink is moved out with the completion, and released here, outside the lock.
            let next = contents.withLock { box -> (RequestEvent, (any RequestSink)?)? in
                guard !box.events.isEmpty else {
                    box.delivering = false
                    return nil
                }
                let event = box.events.removeFirst()
                let sink = box.sink
                if case .completion = event { box.sink = nil }
                return (event, sink)
            }
            guard let (event, sink) = next else { return }
            sink?.deliver(event)
        }
    }
}

/// Collects a whole response for `data(for:)` and `dataSync(for:)`.
final class CollectingSink: RequestSink, @unchecked Sendable {
    // Sendable: `response` and `body` are touched only inside deliver(_:), which the request's
    // mailbox lock serialises (one delivery at a time, each after the previous one).
    private var response: HTTPURLResponse?
    private var body = Data()
    private let endpoint: URLDispatcher.Endpoint
    private let finish: @Sendable (Result<(Data, HTTPURLResponse), any Error>) -> Void

    init(endpoint: URLDispatcher.Endpoint, finish: @escaping @Sendable (Result<(Data, HTTPURLResponse), any Error>) -> Void) {
        self.endpoint = endpoint
        self.finish = finish
    }

    /// `finish` resumes a continuation or wakes a blocked `dataSync` caller.
    var callsUserCode: Bool { false }

    func deliver(_ event: RequestEvent) {
        switch event {
        case .response(let response):
            self.response = response
        case .data(let data):
            body.append(data)
        case .completion(let error?):
            finish(.failure(error))
        case .completion(nil):
            if let response {
                finish(.success((body, response)))
            } else {
                finish(.failure(URLDispatcherError.notHTTP(endpoint: endpoint)))
            }
        }
    }
}

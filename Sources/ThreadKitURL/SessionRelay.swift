import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

/// The session's delegate: hands every event to the dispatcher's core.
///
/// The session keeps it (and through it the core) until the session is invalidated by `dispose()`.
final class SessionRelay: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // Sendable: its only state, `core`, is a Locked.
    let core = Locked<URLDispatcherCore?>(nil)

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        // Never `.cancel`: see URLDispatcherCore.received(_:for:allow:).
        core.withLock { $0 }?.received(response, for: dataTask) { completionHandler(.allow) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        core.withLock { $0 }?.received(data, for: dataTask)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        core.withLock { $0 }?.completed(task, error: error)
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        // The core goes out of the lock first, and is released after it.
        let released = core.withLock { core -> URLDispatcherCore? in
            defer { core = nil }
            return core
        }
        _ = released
    }
}

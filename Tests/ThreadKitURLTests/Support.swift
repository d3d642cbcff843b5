// What only the URL tests share; what both test targets share is in ThreadKitTestSupport,
// re-exported here so that every test file has it.

@_exported import ThreadKitTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer

/// The suites that talk to loopback servers, run one test at a time: their timing checks must
/// not compete with the 10,000-request test for the two cores.
@Suite(.serialized) struct URLIntegrationTests {}

/// Runs `body`, failing with ``TestTimedOut`` if it takes longer than `limit`. The body is
/// cancelled then; every dispatcher call honours cancellation.
func bounded<T: Sendable>(_ limit: Duration = .seconds(30), _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        guard let first = try await group.next(), let value = first else {
            group.cancelAll()
            throw TestTimedOut(limit: limit)
        }
        group.cancelAll()
        return value
    }
}

/// A loopback server for the length of `body`, shut down after it.
func withServer<T: Sendable>(_ handler: @escaping @Sendable (LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply = LoopbackHTTPServer.Reply.route,
                             _ body: (LoopbackHTTPServer) async throws -> T) async throws -> T {
    let server = try LoopbackHTTPServer(handler: handler)
    defer { server.shutdown() }
    return try await body(server)
}

/// A dispatcher for the length of `body`, disposed after it.
func withDispatcher<T: Sendable>(_ limits: URLDispatcher.EndpointLimits = .init(),
                                 _ body: (URLDispatcher) async throws -> T) async throws -> T {
    let dispatcher = URLDispatcher(limits: limits)
    defer { dispatcher.dispose() }
    return try await body(dispatcher)
}

/// A loopback server (answering with `handler`) and a dispatcher with `limits`, for the length of
/// `body`, which fails with ``TestTimedOut`` if it takes longer than `limit`: the frame of every
/// test that sends requests.
func withServerAndDispatcher<T: Sendable>(
    _ limits: URLDispatcher.EndpointLimits = .init(),
    handler: @escaping @Sendable (LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply = LoopbackHTTPServer.Reply.route,
    within limit: Duration = .seconds(30),
    _ body: @escaping @Sendable (LoopbackHTTPServer, URLDispatcher) async throws -> T
) async throws -> T {
    try await withServer(handler) { server in
        try await withDispatcher(limits) { dispatcher in
            try await bounded(limit) { try await body(server, dispatcher) }
        }
    }
}

extension LoopbackHTTPServer {
    /// A request for `pathAndQuery` on this server.
    func request(_ pathAndQuery: String) -> URLRequest { URLRequest(url: url(pathAndQuery)) }

    /// This server's endpoint.
    var endpoint: URLDispatcher.Endpoint { try! URLDispatcher.Endpoint(url: baseURL) }
}

/// Milliseconds, for messages.
func ms(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15
}

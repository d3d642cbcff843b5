import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import ThreadKitURL
import Testing
import ThreadKit
import LoopbackHTTPServer

/// The URLDispatcher blocks of the README and Docs/URLDispatcher.md, compiled and run as written
/// against the loopback server (each between its `// snippet:` markers).
extension URLIntegrationTests {
@Suite(.timeLimit(.minutes(1))) struct ReadmeURLExampleTests {
    @Test func urlDispatcherQuickStart() async throws {
        let arrivals = try await bounded {
            // snippet: README.md#7
            let server = try LoopbackHTTPServer()                // 127.0.0.1, a free port; answers every request
            let base = server.baseURL                            // your service's URL
            let api = URLDispatcher(limits: .init(maxRequests: 4, maxLongRequests: 1, rate: .rate(20, per: .seconds(1))))
            let items = URLRequest(url: base.appendingPathComponent("items"))
            let (body, response) = try await api.data(for: items, timeout: .milliseconds(800))   // waits its turn; then 800 ms at most
            print(response.statusCode, body.count)               // any status; a 429/503 with Retry-After pauses the endpoint
            for try await element in api.stream(for: URLRequest(url: base.appendingPathComponent("events")),
                                                timeout: .seconds(5), idleTimeout: .seconds(30)) {
                if case .data(let chunk) = element { print("chunk of \(chunk.count) bytes") }   // .response first, then chunks
            }
            print(api.statistics(for: try .init(url: base)))     // running, queued, completed, failed, timed out
            api.dispose()                                        // queued and running requests fail with .disposed
            server.shutdown()
            // end snippet

            #expect(response.statusCode == 200)
            #expect(api.statistics(for: try .init(url: base)).completed == 2)
            return server.arrivals.map(\.target)
        }
        #expect(arrivals == ["/items", "/events"])
    }

    @Test func urlDispatcherDocsIntroduction() async throws {
        let server = try LoopbackHTTPServer()
        defer { server.shutdown() }
        let url = server.url("/items")
        try await bounded {
            // snippet: Docs/URLDispatcher.md#1
            let api = URLDispatcher(limits: .init(maxRequests: 6, maxLongRequests: 2))
            let (body, response) = try await api.data(for: URLRequest(url: url), timeout: .milliseconds(800))
            // end snippet

            #expect(response.statusCode == 200)
            #expect(body.count == Int(response.value(forHTTPHeaderField: "Content-Length") ?? "") ?? body.count)
            api.dispose()
        }
        #expect(server.arrivals.map(\.target) == ["/items"])
    }
}
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking                          // URLRequest on Linux
#endif
import ThreadKit
import ThreadKitURL

/// The reports seen so far; every method runs on the thread "Store".
actor ReportStore {
    private let thread = DedicatedThread(name: "Store")
    private var lineCounts: [String: Int] = [:]
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    func save(_ lines: Int, for name: String) { lineCounts[name] = lines }
    func lines(of name: String) -> Int? { lineCounts[name] }
    nonisolated func close() { thread.dispose() }     // its queued jobs run, then the thread exits
}

final class ReportService: Sendable {
    let base: URL
    let http = URLDispatcher(limits: .init(maxRequests: 4))   // at most 4 requests at once per endpoint
    let upstream = ThrottledQueue(label: "Upstream", interval: .milliseconds(100))
    let parsers = ThreadPool(name: "Parse", size: 2)          // threads start on demand, at most 2
    let store = ReportStore()

    init(base: URL) { self.base = base }

    func refresh(_ name: String) async throws -> Int {
        let request = URLRequest(url: base.appendingPathComponent(name))
        let body = try await upstream.run {                   // one at a time, starts at least 100 ms apart
            let (body, response) = try await self.http.data(for: request, timeout: .seconds(5))
            guard response.statusCode == 200 else { throw URLError(.badServerResponse) }
            return body
        }
        let lines = try await parsers.run {                   // on a pool thread; no Swift thread blocked
            body.split(separator: UInt8(ascii: "\n")).count
        }
        await store.save(lines, for: name)
        return lines
    }

    func shutDown() {
        http.dispose()                                        // queued and running requests fail
        parsers.dispose()                                     // queued work runs, then the threads exit
        store.close()
    }
}
import LoopbackHTTPServer
import Testing

// The DocC landing page's "Getting started" (Sources/ThreadKit/ThreadKit.docc/ThreadKit.md), compiled
// and run as written: the service above is the page's first block, the test body holds its second.

/// Upstream reports: `/today` has three lines, `/missing` is a 404, any other path has one line.
private func reportReply(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply {
    switch request.path {
    case "/missing": .respond(status: 404)
    case "/today": .respond(status: 200, body: Array("a\nb\nc\n".utf8))
    default: .respond(status: 200, body: Array("a\n".utf8))
    }
}

extension URLIntegrationTests {
@Suite struct DocCExampleTests {
    @Test func gettingStartedServiceFetchesParsesAndStoresAReport() async throws {
        let server = try LoopbackHTTPServer(handler: reportReply)
        defer { server.shutdown() }
        let base = server.baseURL
        let counted = try await bounded {
            let service = ReportService(base: base)               // base: the upstream API's URL
            let lines = try await service.refresh("today")
            print("today: \(lines) lines, stored: \(await service.store.lines(of: "today") ?? 0)")
            service.shutDown()
            return lines
        }
        #expect(counted == 3)
        #expect(server.arrivals.map(\.target) == ["/today"])
    }

    @Test func gettingStartedServiceSpacesUpstreamCallsAndReportsAFailedOne() async throws {
        let server = try LoopbackHTTPServer(handler: reportReply)
        defer { server.shutdown() }
        let service = ReportService(base: server.baseURL)
        defer { service.shutDown() }
        let start = ContinuousClock.now
        let counts = try await bounded {
            async let first = service.refresh("a")
            async let second = service.refresh("b")
            async let third = service.refresh("today")
            return try await [first, second, third]
        }
        // Three upstream calls start at least 100 ms apart: the last no sooner than 200 ms after the first.
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        #expect(counts == [1, 1, 3])
        #expect(await service.store.lines(of: "b") == 1)
        await #expect(throws: URLError.self) { try await service.refresh("missing") }
        #expect(await service.store.lines(of: "missing") == nil)
    }
}
}

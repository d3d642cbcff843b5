import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking                          // URLRequest on Linux
#endif
import LoopbackHTTPServer
import Testing
import ThreadKit
import ThreadKitTestSupport
import ThreadKitURL

// The DocC landing page's "Getting started" (Sources/ThreadKit/ThreadKit.docc/ThreadKit.md),
// compiled and run as written: both of the page's blocks, between their `// snippet:` markers, then
// the service's other promises, shutdown while refreshes are in flight among them. In a child
// process: a store used after its thread was disposed stops the program, which must fail this test
// rather than end the run.

/// Upstream reports: `/today` has three lines, `/missing` is a 404, `/slow` (one line) is answered
/// after 2 s, any other path has one line.
@Sendable func reportReply(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply {
    switch request.path {
    case "/missing": .respond(status: 404)
    case "/today": .respond(status: 200, body: Array("a\nb\nc\n".utf8))
    case "/slow": .respond(status: 200, body: Array("a\n".utf8), delay: .seconds(2))
    default: .respond(status: 200, body: Array("a\n".utf8))
    }
}

extension URLIntegrationTests {
@Suite(.timeLimit(.minutes(1))) struct DocCExampleTests {
    @Test("The Getting started service fetches, parses and stores; spaces upstream calls; shuts down after the refreshes in flight", .exitTestOnOwnThreads)
    func gettingStartedService() async {
        await #expect(processExitsWith: .success) {
            // snippet: Sources/ThreadKit/ThreadKit.docc/ThreadKit.md#1
            /// The reports seen so far; every method runs on the thread "Store".
            actor ReportStore {
                private let thread = DedicatedThread(name: "Store")
                private var lineCounts: [String: Int] = [:]
                nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

                func save(_ lines: Int, for name: String) { lineCounts[name] = lines }
                func lines(of name: String) -> Int? { lineCounts[name] }
                nonisolated func close() { thread.dispose() }     // its queued jobs run, then the thread exits
            }

            /// Fetches reports upstream, parses them on a pool and keeps their line counts.
            actor ReportService {
                let base: URL
                let http = URLDispatcher(limits: .init(maxRequests: 4))   // at most 4 requests at once per endpoint
                let upstream = ThrottledQueue(label: "Upstream", interval: .milliseconds(100))
                let parsers = ThreadPool(name: "Parse", size: 2)          // threads start on demand, at most 2
                let store = ReportStore()
                private var inFlight: [Int: Task<Int, any Error>] = [:]   // the refreshes running, by number
                private var started = 0
                private var closing = false

                init(base: URL) { self.base = base }

                /// Fetches, parses and stores the report `name`; throws `CancellationError` once shutDown() began.
                func refresh(_ name: String) async throws -> Int {
                    guard !closing else { throw CancellationError() }
                    started += 1
                    let number = started
                    let refresh = Task { try await fetchParseAndStore(name) }
                    inFlight[number] = refresh
                    defer { inFlight[number] = nil }
                    return try await refresh.value
                }

                /// Stops new refreshes, waits for those in flight, and only then lets the threads go.
                func shutDown() async {
                    closing = true                                        // 1. no refresh starts from now on
                    for refresh in inFlight.values { _ = try? await refresh.value }   // 2. those running end
                    http.dispose()                                        // 3. nothing uses the parts any more
                    parsers.dispose()                                     // queued work runs, then the threads exit
                    store.close()                                         // last: a call to the store after it would trap
                }

                private nonisolated func fetchParseAndStore(_ name: String) async throws -> Int {
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
            }
            // end snippet

            let server = try LoopbackHTTPServer(handler: reportReply)
            defer { server.shutdown() }
            let base = server.baseURL
            try await bounded {
                // snippet: Sources/ThreadKit/ThreadKit.docc/ThreadKit.md#2
                let service = ReportService(base: base)               // base: the upstream API's URL
                let lines = try await service.refresh("today")
                print("today: \(lines) lines, stored: \(await service.store.lines(of: "today") ?? 0)")
                await service.shutDown()                              // waits for refreshes still running
                // end snippet

                #expect(lines == 3)
                #expect(server.arrivals.map(\.target) == ["/today"])
                await #expect(throws: CancellationError.self) { try await service.refresh("today") }
            }

            // Three upstream calls start at least 100 ms apart: the last no sooner than 200 ms after the first.
            let spaced = ReportService(base: base)
            let start = ContinuousClock.now
            let counts = try await bounded {
                async let first = spaced.refresh("a")
                async let second = spaced.refresh("b")
                async let third = spaced.refresh("today")
                return try await [first, second, third]
            }
            #expect(ContinuousClock.now - start >= .milliseconds(200))
            #expect(counts == [1, 1, 3])
            #expect(await spaced.store.lines(of: "b") == 1)
            await #expect(throws: URLError.self) { try await spaced.refresh("missing") }
            #expect(await spaced.store.lines(of: "missing") == nil)
            await spaced.shutDown()

            // Shutdown while refreshes are in flight: one at the server, two queued upstream behind
            // it. Each ends with its lines stored; none reaches the store after it was closed (which
            // would stop this child process) nor the dispatcher after it was disposed.
            let busy = ReportService(base: base)
            let slow = Task { try await busy.refresh("slow") }
            #expect(await eventually { server.arrivals.contains { $0.target == "/slow" } })
            let refreshes = [slow] + ["x", "y"].map { name in
                Task { try await busy.refresh(name) }
            }
            #expect(await eventually { busy.upstream.pendingCount == 2 })
            try await bounded { await busy.shutDown() }
            // Had shutDown() not waited, the dispatcher's refusal or the closed store would show here.
            for refresh in refreshes {
                #expect(try await refresh.value == 1)
            }
            await #expect(throws: CancellationError.self) { try await busy.refresh("late") }
        }
    }
}
}

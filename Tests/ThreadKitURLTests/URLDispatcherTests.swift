import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer

extension URLIntegrationTests {
@Suite struct URLDispatcherTests {
    @Test func getsABodyAndAnyStatusBack() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            let (body, response) = try await dispatcher.data(for: server.request("/?bytes=5"))
            #expect(response.statusCode == 200)
            #expect(body == Data("xxxxx".utf8))
            let (_, missing) = try await dispatcher.data(for: server.request("/?status=404"))
            #expect(missing.statusCode == 404)
            let (_, broken) = try await dispatcher.data(for: server.request("/?status=500"))
            #expect(broken.statusCode == 500)
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.completed == 3)
            #expect(statistics.running == 0 && statistics.queued == 0)
        }
    }
}
}

/// Limits, order and independence of endpoints, seen by the server.
extension URLIntegrationTests {
@Suite struct URLDispatcherLimitTests {
    @Test func theServerSeesExactlyMaxRequestsAtOnceUnderLoad() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 4, maxLongRequests: 1)) { server, dispatcher in
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<40 {
                    group.addTask { try await dispatcher.data(for: server.request("/?delay=40")).1.statusCode }
                }
                for try await status in group { #expect(status == 200) }
            }
            #expect(server.peak == 4)
            #expect(server.total == 40)
            #expect(dispatcher.statistics(for: server.endpoint).completed == 40)
        }
    }

    @Test func shortRequestsFinishWhileTwoLongStreamsStayOpen() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 3, maxLongRequests: 2)) { server, dispatcher in
            let streams = (0..<2).map { _ in
                dispatcher.stream(for: server.request("/stream?interval=100"), timeout: .seconds(5))
            }
            var iterators = streams.map { $0.makeAsyncIterator() }
            for index in iterators.indices {
                guard case .response(let response)? = try await iterators[index].next() else {
                    Issue.record("stream \(index) gave no response first")
                    return
                }
                #expect(response.statusCode == 200)
            }
            #expect(!dispatcher.isLongRequestAllowed(to: server.baseURL))
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<20 {
                    group.addTask { try await dispatcher.data(for: server.request("/?n=\(index)&delay=10")).1.statusCode }
                }
                for try await status in group { #expect(status == 200) }
            }
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.runningLong == 2)
            #expect(statistics.completed == 20)
            // The streams are still open and still flowing.
            for index in iterators.indices {
                guard case .data(let chunk)? = try await iterators[index].next() else {
                    Issue.record("stream \(index) ended early")
                    return
                }
                #expect(!chunk.isEmpty)
            }
            #expect(server.peak <= 3)
        }
    }

    @Test func oneFIFOPerEndpointWithSyncRequestsIncluded() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let blocker = Task { try await dispatcher.data(for: server.request("/hang"), timeout: .seconds(20)) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
            var waiting: [Task<Void, any Error>] = []
            for index in 0..<8 {
                if index % 3 == 1 {
                    Thread { _ = try? dispatcher.dataSync(for: server.request("/n?i=\(index)")) }.start()
                } else {
                    waiting.append(Task { _ = try await dispatcher.data(for: server.request("/n?i=\(index)")) })
                }
                #expect(await eventually { dispatcher.statistics(for: server.endpoint).queued == index + 1 })
            }
            blocker.cancel()   // frees the slot: the queue drains in order
            _ = await blocker.result
            for task in waiting { try await task.value }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).completed == 8 })
            #expect(dispatcher.statistics(for: server.endpoint).failed == 1)
            let order = server.arrivals.map(\.target)
            #expect(order == ["/hang"] + (0..<8).map { "/n?i=\($0)" })
            #expect(server.peak == 1)
        }
    }

    @Test func aHungEndpointNeverDelaysAnother() async throws {
        try await withServer { hung in
            try await withServer { healthy in
                try await withDispatcher(.init(maxRequests: 2, maxLongRequests: 1)) { dispatcher in
                    try await bounded {
                        let stuck = (0..<6).map { _ in
                            Task { try? await dispatcher.data(for: hung.request("/hang"), timeout: .seconds(20)) }
                        }
                        #expect(await eventually { dispatcher.statistics(for: hung.endpoint).queued == 4 })
                        let start = ContinuousClock.now
                        try await withThrowingTaskGroup(of: Int.self) { group in
                            for _ in 0..<10 { group.addTask { try await dispatcher.data(for: healthy.request("/")).1.statusCode } }
                            for try await status in group { #expect(status == 200) }
                        }
                        let took = start.duration(to: .now)
                        #expect(took < .seconds(4), "10 requests to a healthy endpoint took \(took)")
                        #expect(dispatcher.statistics(for: hung.endpoint).running == 2)
                        for task in stuck { task.cancel() }
                        for task in stuck { _ = await task.value }
                    }
                    let statistics = dispatcher.statistics(for: hung.endpoint)
                    #expect(statistics.running == 0 && statistics.queued == 0)
                    #expect(statistics.failed == 6)
                }
            }
        }
    }

    @Test func endpointsAreSchemeHostAndPort() throws {
        let a = try URLDispatcher.Endpoint(url: URL(string: "http://API.Example.com/a")!)
        let b = try URLDispatcher.Endpoint(url: URL(string: "http://api.example.com:80/b?c=d")!)
        let c = try URLDispatcher.Endpoint(url: URL(string: "https://api.example.com/a")!)
        let d = try URLDispatcher.Endpoint(url: URL(string: "HTTPS://api.example.com:443")!)
        let e = try URLDispatcher.Endpoint(url: URL(string: "http://api.example.com:8080")!)
        let f = try URLDispatcher.Endpoint(url: URL(string: "HTTP://API.example.COM/x")!)
        #expect(a == b)
        #expect(a != c)
        #expect(c == d)
        #expect(a == f)
        #expect(f.scheme == "http")
        #expect(a.description == "http://api.example.com:80")
        #expect(c.port == 443)
        #expect(e.port == 8080)
        #expect(throws: URLDispatcherError.unsupportedURL) { try URLDispatcher.Endpoint(url: URL(string: "ftp://example.com/")!) }
        #expect(throws: URLDispatcherError.unsupportedURL) { try URLDispatcher.Endpoint(url: URL(string: "file:///tmp/x")!) }
        #expect(URLDispatcherError.unsupportedURL.description.contains("http or https"))
    }

    @Test func webSocketSchemesAreRefusedAtOnceByEveryEntryPoint() async throws {
        try await withDispatcher { dispatcher in
            for address in ["ws://127.0.0.1:9/socket", "wss://127.0.0.1:9/socket", "WS://127.0.0.1:9/", "gopher://127.0.0.1:9/"] {
                let url = URL(string: address)!
                #expect(throws: URLDispatcherError.unsupportedURL) { try URLDispatcher.Endpoint(url: url) }
                await #expect(throws: URLDispatcherError.unsupportedURL) { try await dispatcher.data(for: URLRequest(url: url)) }
                #expect(throws: URLDispatcherError.unsupportedURL) { try dispatcher.dataSync(for: URLRequest(url: url)) }
                let delegate = RecordingDelegate()
                #expect(throws: URLDispatcherError.unsupportedURL) { try dispatcher.dispatch(URLRequest(url: url), delegate: delegate) }
                #expect(delegate.recorded.events.isEmpty)
                var iterator = dispatcher.stream(for: URLRequest(url: url)).makeAsyncIterator()
                await #expect(throws: URLDispatcherError.unsupportedURL) { _ = try await iterator.next() }
                let allowed = dispatcher.isLongRequestAllowed(to: url)
                #expect(!allowed)
            }
        }
    }

    @Test func anUpperCaseSchemeIsServedLikeALowerCaseOne() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            let url = URL(string: "HTTP://127.0.0.1:\(server.port)/?n=upper")!
            let (body, response) = try await dispatcher.data(for: URLRequest(url: url), timeout: .seconds(5))
            #expect(response.statusCode == 200)
            #expect(body == Data("ok".utf8))
            var iterator = dispatcher.stream(for: URLRequest(url: URL(string: "Http://127.0.0.1:\(server.port)/?n=stream")!),
                                             kind: .short, timeout: .seconds(5)).makeAsyncIterator()
            guard case .response(let streamed)? = try await iterator.next() else {
                Issue.record("no response first")
                return
            }
            #expect(streamed.statusCode == 200)
            while try await iterator.next() != nil {}
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.completed == 2 && statistics.failed == 0)
            #expect(server.arrivals.map(\.target) == ["/?n=upper", "/?n=stream"])
        }
    }

    @Test func streamNeverThrowsWhenCalledItsErrorsComeOutOfTheIteration() async throws {
        try await withDispatcher { dispatcher in
            let stream = dispatcher.stream(for: URLRequest(url: URL(string: "ftp://127.0.0.1/file")!))
            var iterator = stream.makeAsyncIterator()
            await #expect(throws: URLDispatcherError.unsupportedURL) { _ = try await iterator.next() }
            #expect(!dispatcher.isLongRequestAllowed(to: URL(string: "ftp://127.0.0.1/file")!))
            await #expect(throws: URLDispatcherError.unsupportedURL) {
                try await dispatcher.data(for: URLRequest(url: URL(string: "mailto:someone@127.0.0.1")!))
            }
        }
    }

    @Test func aLongRequestOverTheLimitIsRefusedOrWaits() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 3, maxLongRequests: 1)) { server, dispatcher in
            let first = dispatcher.stream(for: server.request("/stream?interval=50"), timeout: .seconds(5))
            let consumer = Task {
                var iterator = first.makeAsyncIterator()
                while try await iterator.next() != nil {}
            }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).runningLong == 1 })
            var refused = dispatcher.stream(for: server.request("/stream?interval=50")).makeAsyncIterator()
            do {
                _ = try await refused.next()
                Issue.record("a second long request was accepted over a limit of 1")
            } catch let error as URLDispatcherError {
                #expect(error == .longRequestLimit(endpoint: server.endpoint, limit: 1))
                #expect(error.description.contains(server.endpoint.description))
                #expect(error.description.contains("1 long request"))
            }
            await #expect(throws: URLDispatcherError.self) {
                try await dispatcher.data(for: server.request("/"), kind: .long())
            }
            // `.wait` queues it; it starts when the first stream ends.
            let waiter = Task {
                try await dispatcher.data(for: server.request("/?n=waiter"), kind: .long(whenFull: .wait), timeout: .seconds(5))
            }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).queued == 1 })
            let (_, shortResponse) = try await dispatcher.data(for: server.request("/?n=short"))
            #expect(shortResponse.statusCode == 200)
            #expect(dispatcher.statistics(for: server.endpoint).queued == 1)
            consumer.cancel()   // ends the first stream's iteration: cancels its request
            let (_, response) = try await waiter.value
            #expect(response.statusCode == 200)
            _ = await consumer.result   // a cancelled iteration ends (AsyncThrowingStream returns nil)
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.running == 0)
            #expect(statistics.runningLong == 0)
        }
    }
}
}

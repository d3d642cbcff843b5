import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer

/// A stream's iteration owns its request, as AsyncHTTPClient's body streams do: leaving the loop
/// cancels the request and frees its slot, cancelling the iterating task throws
/// `CancellationError`; and the one cancellation rule holds for `stream(for:)` and `data(for:)`.
extension URLIntegrationTests {
@Suite struct URLResponseStreamTests {
    @Test func leavingTheLoopCancelsTheRequestAndFreesItsSlotWhileTheStreamLives() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 2, maxLongRequests: 1)) { server, dispatcher in
            let stream = dispatcher.stream(for: server.request("/stream?interval=20"), timeout: .seconds(5))
            var chunks = 0
            for try await element in stream {
                if case .data = element { chunks += 1 }
                if chunks == 2 { break }
            }
            #expect(await eventually(timeout: .seconds(5)) { dispatcher.statistics(for: server.endpoint).running == 0 },
                    "\(dispatcher.statistics(for: server.endpoint))")
            let statistics = dispatcher.statistics(for: server.endpoint)
            #expect(statistics.runningLong == 0 && statistics.failed == 1, "\(statistics)")
            let allowed = dispatcher.isLongRequestAllowed(to: server.baseURL)
            #expect(allowed)
            #expect(await eventually(timeout: .seconds(5)) { server.current == 0 })
            withExtendedLifetime(stream) {}
        }
    }

    @Test func cancellingTheIteratingTaskThrowsCancellationErrorAndFreesTheSlot() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 2, maxLongRequests: 1)) { server, dispatcher in
            let stream = dispatcher.stream(for: server.request("/stream?interval=20"), timeout: .seconds(5))
            let gotData = Locked(false)
            let iteration = Task {
                for try await element in stream {
                    if case .data = element { gotData.withLock { $0 = true } }
                }
            }
            #expect(await eventually { gotData.withLock { $0 } })
            iteration.cancel()
            await #expect(throws: CancellationError.self) { try await iteration.value }
            #expect(await eventually(timeout: .seconds(5)) { dispatcher.statistics(for: server.endpoint).running == 0 })
            #expect(await eventually(timeout: .seconds(5)) { server.current == 0 })
        }
    }

    @Test func aStreamAskedForByACancelledTaskNeverStartsAndThrowsCancellationError() async throws {
        try await Self.expectNeverSentFromACancelledTask { dispatcher, request in
            var iterator = dispatcher.stream(for: request, kind: .short).makeAsyncIterator()
            return try await iterator.next() == nil ? "ended" : "an element"
        }
    }

    @Test func dataForACancelledTaskNeverStartsAndThrowsCancellationError() async throws {
        try await Self.expectNeverSentFromACancelledTask { dispatcher, request in
            _ = try await dispatcher.data(for: request)
            return "a response"
        }
    }

    /// Runs `send` in a task cancelled before it starts: it must throw `CancellationError`, its
    /// request must never reach the server, and it counts as one failure.
    static func expectNeverSentFromACancelledTask(
        _ send: @escaping @Sendable (URLDispatcher, URLRequest) async throws -> String
    ) async throws {
        try await withServerAndDispatcher { server, dispatcher in
            let outcome = await Task {
                withUnsafeCurrentTask { $0?.cancel() }
                do {
                    return try await send(dispatcher, server.request("/?n=cancelled"))
                } catch is CancellationError {
                    return "cancelled"
                } catch {
                    return "\(error)"
                }
            }.value
            #expect(outcome == "cancelled")
            _ = try await dispatcher.data(for: server.request("/?n=after"))
            #expect(server.arrivals.map(\.target) == ["/?n=after"])
            let failed = dispatcher.statistics(for: server.endpoint).failed
            #expect(failed == 1)
        }
    }

    @Test func aQueuedStreamWhoseIterationIsCancelledNeverStarts() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let blocker = Task { try? await dispatcher.data(for: server.request("/hang"), timeout: .seconds(10)) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
            let stream = dispatcher.stream(for: server.request("/?n=queued"), kind: .short)
            let queued = dispatcher.statistics(for: server.endpoint).queued
            #expect(queued == 1)
            let iteration = Task { for try await _ in stream {} }
            iteration.cancel()
            await #expect(throws: CancellationError.self) { try await iteration.value }
            let queuedAfter = dispatcher.statistics(for: server.endpoint).queued
            #expect(queuedAfter == 0)
            blocker.cancel()
            _ = await blocker.value
            #expect(!server.arrivals.contains { $0.target == "/?n=queued" })
        }
    }
}
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer

/// A delegate that takes its time: it blocks for `completionTakes` in its completion, and for
/// `firstDataTakes` in its first chunk.
final class SlowDelegate: URLDispatchDelegate, @unchecked Sendable {
    // Sendable: `error`, `completedAt` and `sawData` are guarded by `lock`.
    private let lock = NSLock()
    private let completionTakes: TimeInterval
    private let firstDataTakes: TimeInterval
    private var sawData = false
    private var result: (error: (any Error)?, returnedAt: ContinuousClock.Instant)?

    init(completionTakes: Duration = .zero, firstDataTakes: Duration = .zero) {
        self.completionTakes = Double(completionTakes.components.seconds) + Double(completionTakes.components.attoseconds) / 1e18
        self.firstDataTakes = Double(firstDataTakes.components.seconds) + Double(firstDataTakes.components.attoseconds) / 1e18
    }

    func operation(_ operation: URLDispatchOperation, didReceive response: HTTPURLResponse) {}

    func operation(_ operation: URLDispatchOperation, didReceive data: Data) {
        let first = lock.withLock {
            defer { sawData = true }
            return !sawData
        }
        if first { Thread.sleep(forTimeInterval: firstDataTakes) }
    }

    func operation(_ operation: URLDispatchOperation, didCompleteWith error: (any Error)?) {
        Thread.sleep(forTimeInterval: completionTakes)
        lock.withLock { result = (error, .now) }
    }

    var hasReceivedData: Bool { lock.withLock { sawData } }

    /// The completion's error, once the completion has returned.
    var completion: (error: (any Error)?, returnedAt: ContinuousClock.Instant)? { lock.withLock { result } }
}

/// User code never runs on `TimerThread.shared`: a delegate that blocks in a completion the
/// dispatcher decided on a timer (a queue timeout, the end of a cancel's grace) delays no one's timer.
extension URLIntegrationTests {
@Suite struct URLDispatcherDeliveryTests {
    /// How late a `TimerThread.shared` call due `after` from now runs.
    static func lateness(ofSharedTimerCallDueAfter after: Duration) async throws -> Duration {
        let deadline = ContinuousClock.now + after
        let ranAt = Locked<ContinuousClock.Instant?>(nil)
        try TimerThread.shared.schedule(at: deadline) { ranAt.withLock { $0 = .now } }
        #expect(await eventually(timeout: .seconds(10)) { ranAt.withLock { $0 } != nil })
        return deadline.duration(to: ranAt.withLock { $0 } ?? .now)
    }

    /// Dispatches `path` with a 200 ms timeout to a delegate whose completion takes 2 s; expects a
    /// `TimerThread.shared` call due `after` from now to run less than 1 s late meanwhile, and the
    /// request to time out in `phase`.
    static func expectATimedOutSlowCompletionDelaysNoTimer(
        _ path: String, on server: LoopbackHTTPServer, _ dispatcher: URLDispatcher,
        timerCallDueAfter after: Duration, phase: URLDispatcherError.TimeoutPhase,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let delegate = SlowDelegate(completionTakes: .seconds(2))
        var request = server.request(path)
        request.timeoutInterval = 0.2
        _ = try dispatcher.dispatch(request, delegate: delegate)
        let late = try await lateness(ofSharedTimerCallDueAfter: after)
        #expect(late < .seconds(1), "a timer call due while a completion ran came \(late) late", sourceLocation: sourceLocation)
        #expect(await eventually { delegate.completion != nil }, sourceLocation: sourceLocation)
        #expect((delegate.completion?.error as? URLDispatcherError)
                == .timedOut(endpoint: server.endpoint, after: .milliseconds(200), phase: phase), sourceLocation: sourceLocation)
    }

    @Test func aSlowCompletionForAQueueTimeoutDelaysNoTimer() async throws {
        try await withServerAndDispatcher(.init(maxRequests: 1, maxLongRequests: 0)) { server, dispatcher in
            let blocker = Task { try? await dispatcher.data(for: server.request("/hang"), timeout: .seconds(10)) }
            #expect(await eventually { dispatcher.statistics(for: server.endpoint).running == 1 })
            try await Self.expectATimedOutSlowCompletionDelaysNoTimer(
                "/never", on: server, dispatcher, timerCallDueAfter: .milliseconds(600), phase: .queued)
            blocker.cancel()
            _ = await blocker.value
            #expect(!server.arrivals.contains { $0.target == "/never" })
        }
    }

    @Test func aSlowCompletionAfterACancelsGraceDelaysNoTimer() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            // Holds the delegate queue for 2 s from its first chunk: the cancel below cannot
            // be reported complete meanwhile, so its completion waits for the grace to end.
            let holder = SlowDelegate(firstDataTakes: .seconds(2))
            let holding = try dispatcher.dispatch(server.request("/stream?interval=10"), kind: .long(), delegate: holder)
            #expect(await eventually { holder.hasReceivedData })
            try await Self.expectATimedOutSlowCompletionDelaysNoTimer(
                "/hang", on: server, dispatcher, timerCallDueAfter: .milliseconds(700), phase: .total)
            holding.cancel()
            #expect(await eventually { holder.completion != nil })
        }
    }
}
}

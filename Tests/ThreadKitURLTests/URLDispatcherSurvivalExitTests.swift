import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKitURL
import LoopbackHTTPServer

/// Thousands of transfers cancelled just after they started, by the caller or by a 1 ms timeout.
///
/// FoundationNetworking's cache lookup races with a cancel and can take the process down
/// (swift-corelibs-foundation issue 3296), so each run is a child process: a crash fails the test
/// instead of killing the runner. The child checks that every request got exactly one completion.
extension URLIntegrationTests {
@Suite struct URLDispatcherSurvivalExitTests {
    @Test func threeThousandCancelsJustAfterTheStartLeaveTheProcessStanding() async {
        await #expect(processExitsWith: .success) {
            SurvivalRun.run(requests: 3_000) { dispatcher, server, delegate, index in
                let operation = try dispatcher.dispatch(server.request("/?delay=20"), delegate: delegate)
                // Cancel at once, or after up to 300 µs: inside and around the transfer's first steps.
                let spin = ContinuousClock.now + .microseconds(index % 4 * 100)
                while ContinuousClock.now < spin {}
                operation.cancel()
            }
        }
    }

    @Test func threeThousandOneMillisecondTimeoutsLeaveTheProcessStanding() async {
        await #expect(processExitsWith: .success) {
            SurvivalRun.run(requests: 3_000) { dispatcher, server, delegate, _ in
                var request = server.request("/?delay=20")
                request.timeoutInterval = 0.001
                _ = try dispatcher.dispatch(request, delegate: delegate)
            }
        }
    }
}
}

/// The body of a survival run, in the child process: `requests` requests over 4 threads, each
/// thread waiting for its request's completion before it sends the next.
enum SurvivalRun {
    static func run(requests: Int,
                    _ send: @escaping @Sendable (URLDispatcher, LoopbackHTTPServer, CompletionCounter, Int) throws -> Void) {
        let server = try! LoopbackHTTPServer()
        let dispatcher = URLDispatcher(limits: .init(maxRequests: 16, maxLongRequests: 1))
        let threads = 4
        let finished = DispatchGroup()
        let counters = (0..<threads).map { _ in CompletionCounter() }
        for thread in 0..<threads {
            finished.enter()
            Thread {
                let counter = counters[thread]
                for index in stride(from: thread, to: requests, by: threads) {
                    let before = counter.count
                    try! send(dispatcher, server, counter, index)
                    precondition(counter.waitForCount(above: before, timeout: 10), "request \(index) got no completion")
                }
                finished.leave()
            }.start()
        }
        precondition(finished.wait(timeout: .now() + 120) == .success, "the run did not finish")
        dispatcher.dispose()
        server.shutdown()
        let completions = counters.map(\.count).reduce(0, +)
        precondition(completions == requests, "\(completions) completions for \(requests) requests")
        precondition(counters.allSatisfy { $0.extraCalls == 0 }, "an event came after a completion")
    }
}

/// Counts the completions of its operations, one at a time.
final class CompletionCounter: URLDispatchDelegate, @unchecked Sendable {
    // Sendable: `completions`, `completedOperations` and `extra` are guarded by `condition`'s lock.
    private let condition = NSCondition()
    private var completions = 0
    /// Kept alive, so that no identifier is reused by a later operation.
    private var completedOperations: [ObjectIdentifier: URLDispatchOperation] = [:]
    private var extra = 0

    var count: Int { condition.lock(); defer { condition.unlock() }; return completions }
    var extraCalls: Int { condition.lock(); defer { condition.unlock() }; return extra }

    private func event(_ operation: URLDispatchOperation, completes: Bool) {
        condition.lock()
        defer { condition.unlock() }
        let id = ObjectIdentifier(operation)
        if completedOperations[id] != nil {
            extra += 1
            return
        }
        guard completes else { return }
        completedOperations[id] = operation
        completions += 1
        condition.broadcast()
    }

    func operation(_ operation: URLDispatchOperation, didReceive response: HTTPURLResponse) { event(operation, completes: false) }
    func operation(_ operation: URLDispatchOperation, didReceive data: Data) { event(operation, completes: false) }
    func operation(_ operation: URLDispatchOperation, didCompleteWith error: (any Error)?) { event(operation, completes: true) }

    /// Waits until more than `count` completions came; false after `timeout` seconds.
    func waitForCount(above count: Int, timeout: TimeInterval) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while completions <= count {
            if !condition.wait(until: deadline) { return completions > count }
        }
        return true
    }
}

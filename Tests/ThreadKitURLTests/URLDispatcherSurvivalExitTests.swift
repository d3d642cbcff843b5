import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKitURL
import LoopbackHTTPServer

/// Thousands of transfers cancelled just after they started, by the caller or by a 1 ms timeout,
/// while the server answers at once: the cancel races the transfer's own completion.
///
/// With a cache, FoundationNetworking's lookup runs on a queue of its own before the transfer
/// exists, and a cancel landing then completes the task a second time: "a task that is not in the
/// registry" (swift-corelibs-foundation issue 3296). So each run is a child process: a crash
/// fails the test instead of killing the runner. The child checks that every request got exactly
/// one completion and nothing after it.
extension URLIntegrationTests {
@Suite struct URLDispatcherSurvivalExitTests {
    @Test(.exitTestOnOwnThreads) func threeThousandCancelsJustAfterTheStartLeaveTheProcessStanding() async {
        await #expect(processExitsWith: .success) {
            SurvivalRun.run(requests: 3_000) { dispatcher, server, delegate, index in
                let operation = try dispatcher.dispatch(server.request("/"), delegate: delegate)
                // Cancel at once, or after up to 300 µs: inside and around the transfer's first steps.
                let spin = ContinuousClock.now + .microseconds(index % 4 * 100)
                while ContinuousClock.now < spin {}
                operation.cancel()
            }
        }
    }

    @Test(.exitTestOnOwnThreads) func threeThousandOneMillisecondTimeoutsLeaveTheProcessStanding() async {
        await #expect(processExitsWith: .success) {
            SurvivalRun.run(requests: 3_000) { dispatcher, server, delegate, _ in
                var request = server.request("/")
                request.timeoutInterval = 0.001
                _ = try dispatcher.dispatch(request, delegate: delegate)
            }
        }
    }
}
}

/// The body of a survival run, in the child process: `requests` requests over 8 threads, each
/// with up to 8 in flight.
enum SurvivalRun {
    static func run(requests: Int,
                    _ send: @escaping @Sendable (URLDispatcher, LoopbackHTTPServer, CompletionCounter, Int) throws -> Void) {
        let server = try! LoopbackHTTPServer()
        let dispatcher = URLDispatcher(limits: .init(maxRequests: 64, maxLongRequests: 1))
        let threads = 8
        let finished = DispatchGroup()
        let counters = (0..<threads).map { _ in CompletionCounter() }
        for thread in 0..<threads {
            finished.enter()
            Thread {
                let counter = counters[thread]
                for index in stride(from: thread, to: requests, by: threads) {
                    let before = counter.count
                    try! send(dispatcher, server, counter, index)
                    // Up to 8 requests in flight per thread: each waits only for its own completion.
                    if index % 32 < 8 { continue }
                    precondition(counter.waitForCount(above: before, timeout: 10), "request \(index) got no completion")
                }
                let sent = (requests - thread + threads - 1) / threads
                precondition(counter.waitForCount(above: sent - 1, timeout: 10), "\(sent - counter.count) requests got no completion")
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

// Each blocking call, made from async code, must draw the compiler's diagnostic with the message
// that names its async twin (an error in Swift 6 mode, a warning in Swift 5 mode). .ci/compile-probes
// checks that every line marked `expect:` gets a diagnostic containing the text after it, and that
// no other line gets one.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import ThreadKit
import ThreadKitURL

func blockingCallsFromAsyncCode(
    pool: ThreadPool, task: ScheduledTask, thread: DedicatedThread, queue: ThrottledQueue,
    chain: ExecutionChain<Int>, dispatcher: URLDispatcher, request: URLRequest
) async throws {
    _ = pool.awaitTermination(timeout: .seconds(1))  // expect: it blocks the thread; use 'await awaitTermination()' in async code
    task.wait()  // expect: it blocks the thread; submit with 'try await pool.run { }' in async code
    _ = task.wait(timeout: .seconds(1))  // expect: it blocks the thread; submit with 'try await pool.run { }' in async code
    _ = thread.sync { 1 }  // expect: it blocks the thread; use 'try await run { }' in async code
    _ = thread.awaitTermination(timeout: .seconds(1))  // expect: it blocks the thread; use 'await awaitTermination()' in async code
    _ = queue.sync { 1 }  // expect: it blocks the thread; use 'try await run { }' in async code
    _ = queue.sync(interval: .zero) { 1 }  // expect: it blocks the thread; use 'try await run { }' in async code
    _ = try chain.wait()  // expect: it blocks the thread; use 'try await chain.value' in async code
    _ = try dispatcher.dataSync(for: request)  // expect: it blocks the thread; use 'try await data(for:)' in async code
    // In async code the async overload is chosen, and it must be awaited.
    queue.waitUntilIdle()  // expect: expression is 'async' but is not marked with 'await'
}

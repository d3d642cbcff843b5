// The async twins, as async code writes them: no diagnostic at all (.ci/compile-probes checks it).
import ThreadKit

func asyncTwins(pool: ThreadPool, thread: DedicatedThread, queue: ThrottledQueue, chain: ExecutionChain<Int>) async throws {
    let poolEnded: Bool = await pool.awaitTermination()
    let threadEnded: Bool = await thread.awaitTermination()
    await queue.waitUntilIdle()
    let value = try await chain.value
    _ = (poolEnded, threadEnded, value)
}

/// Synchronous code may still block: no diagnostic.
func blockingCallsFromSynchronousCode(pool: ThreadPool, thread: DedicatedThread, queue: ThrottledQueue) {
    _ = pool.awaitTermination(timeout: .seconds(1))
    _ = thread.sync { 1 }
    _ = thread.awaitTermination(timeout: .seconds(1))
    queue.waitUntilIdle()
    _ = queue.sync { 1 }
}

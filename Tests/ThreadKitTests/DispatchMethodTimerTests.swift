import Foundation
import Testing
@testable import ThreadKit

/// A `.after` step is handed to its target by a call on `TimerThread.shared`, which every timeout and
/// delayed call in the process shares: the hand-over never blocks that thread, and never runs the
/// step there.
@Suite struct DispatchMethodTimerTests {
    /// Fills `pool`, of one thread and a queue limit of one: its thread runs a task that waits for
    /// the returned latch, and one task waits in its queue.
    static func fill(_ pool: ThreadPool, sourceLocation: SourceLocation = #_sourceLocation) throws -> Latch {
        let release = Latch()
        let started = Latch()
        try pool.execute {
            started.countDown()
            release.wait(timeout: .seconds(30))
        }
        #expect(started.wait(timeout: .seconds(10)), sourceLocation: sourceLocation)
        try pool.execute {}  // the queue is full now
        return release
    }

    @Test(".after onto a full pool waits for room without holding up the shared timer, then runs on a pool thread",
          arguments: [ThreadPool.OverflowPolicy.block, .runOnCaller])
    func afterOntoAFullPoolNeverHoldsUpTheSharedTimer(policy: ThreadPool.OverflowPolicy) async throws {
        let pool = ThreadPool(name: "AfterFull", size: 1, queueLimit: 1, whenFull: policy)
        defer { pool.dispose() }
        let release = try Self.fill(pool)
        let stepThreads = Recorder<Bool>()
        let chain = DispatchMethod.after(.milliseconds(1), on: .pool(pool)).execute {
            stepThreads.append(pool.isCurrentThreadMember)
        }
        // The step's hand-over fell due at 1 ms; a later call on the same timer runs all the same.
        let laterCall = Latch()
        try TimerThread.shared.schedule(after: .milliseconds(20)) { laterCall.countDown() }
        let ran = laterCall.wait(timeout: .seconds(5))
        #expect(stepThreads.values.isEmpty, "the step ran before the pool had room")
        release.countDown()
        #expect(ran, "the shared timer waited for room in a pool")
        #expect(await eventually(timeout: .seconds(10)) { stepThreads.values.count == 1 })
        #expect(stepThreads.values == [true], "the step ran off the pool's threads")
        _ = try await chain.value
    }

    @Test(".after onto a full pool that rejects fails the chain with the pool's error")
    func afterOntoAFullRejectingPoolFailsTheChain() async throws {
        let pool = ThreadPool(name: "AfterReject", size: 1, queueLimit: 1, whenFull: .reject)
        defer { pool.dispose() }
        let release = try Self.fill(pool)
        defer { release.countDown() }
        let chain = DispatchMethod.after(.milliseconds(1), on: .pool(pool)).execute { 1 }
        await #expect(throws: ThreadPoolError.self) { try await chain.value }
    }

    @Test(".after step still waiting for room when the pool is disposed fails its chain, its work released after the pool's lock",
          arguments: [false, true])
    func afterStepWaitingForRoomEndsWithTheDisposal(now: Bool) async throws {
        let pool = ThreadPool(name: now ? "AfterDispNow" : "AfterDispose", size: 1, queueLimit: 1)
        let release = try Self.fill(pool)
        defer { release.countDown() }
        let reads = Counter()
        let chain: ExecutionChain<Int>
        do {
            // Read the pool's statistics when released: under the pool's lock, that never returns.
            let reader = ThreadPoolHardeningTests.StatisticsReaderOnDeinit(pool: pool, reads: reads)
            chain = DispatchMethod.after(.zero, on: .pool(pool)).execute { withExtendedLifetime(reader) { 1 } }
        }
        // The shared timer runs its calls one at a time, in deadline order: once this later one has
        // run, the step has been handed to the pool, where it waits for room.
        let handedOver = Latch()
        try TimerThread.shared.schedule(after: .zero) { handedOver.countDown() }
        #expect(handedOver.wait(timeout: .seconds(10)))
        let handedBack = await guarded { () -> Int in
            guard now else {
                pool.dispose()
                return 0
            }
            return pool.disposeNow().count
        }
        // disposeNow() hands back the queued task and the step, which had not started either.
        #expect(handedBack == (now ? 2 : 0), "the disposal hung, or left out the waiting step")
        #expect(reads.value == 1, "the step's work was not released")
        guard handedBack != nil else { return }  // the disposing thread is stuck: so is the chain
        await #expect(throws: CancellationError.self) { try await chain.value }
        release.countDown()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }
}

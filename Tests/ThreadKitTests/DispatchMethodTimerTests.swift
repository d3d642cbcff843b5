import Foundation
import Testing
@testable import ThreadKit

/// A `.after` step is handed to its target by a call on `TimerThread.shared`, which every timeout and
/// delayed call in the process shares: the hand-over never blocks that thread, and never runs the
/// step there.
@Suite struct DispatchMethodTimerTests {
    @Test(".after onto a full pool waits for room without holding up the shared timer, then runs on a pool thread",
          arguments: [ThreadPool.OverflowPolicy.block, .runOnCaller])
    func afterOntoAFullPoolNeverHoldsUpTheSharedTimer(policy: ThreadPool.OverflowPolicy) async throws {
        let pool = ThreadPool(name: "AfterFull", size: 1, queueLimit: 1, whenFull: policy)
        defer { pool.dispose() }
        let release = Latch()
        let started = Latch()
        try pool.execute {
            started.countDown()
            release.wait(timeout: .seconds(30))
        }
        #expect(started.wait(timeout: .seconds(10)))
        try pool.execute {}  // the queue is full now
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
        let release = Latch()
        let started = Latch()
        try pool.execute {
            started.countDown()
            release.wait(timeout: .seconds(30))
        }
        defer { release.countDown() }
        #expect(started.wait(timeout: .seconds(10)))
        try pool.execute {}
        let chain = DispatchMethod.after(.milliseconds(1), on: .pool(pool)).execute { 1 }
        await #expect(throws: ThreadPoolError.self) { try await chain.value }
    }
}

import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// An `ExecutionChain`'s bookkeeping, and waits on a chain from inside its own steps.
@Suite("ExecutionChain bookkeeping", .timeLimit(.minutes(1)))
struct ExecutionChainBookkeepingTests {
    @Test("A chain of 100,000 steps keeps no bookkeeping for its finished steps")
    func finishedStepsLeaveNoBookkeeping() throws {
        let first = DispatchMethod.inline.execute { 0 }
        var link = first
        for _ in 0..<100_000 {
            link = link.then(.inline) { $0 + 1 }
        }
        #expect(try link.wait() == 100_000)
        #expect(link.group.cancellerCount == 0)
        #expect(first.group === link.group)
    }

    @Test("Only unfinished steps are kept: 1,000 steps queued behind a blocked one, then none once they ran")
    func unfinishedStepsAreKeptUntilTheyEnd() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("ECbk"))
        defer { thread.dispose() }
        let gate = Latch()
        var link = DispatchMethod.async(on: .thread(thread)).execute { () -> Int in
            gate.wait()
            return 0
        }
        let group = link.group
        for _ in 0..<1_000 {
            link = link.then(.async(on: .thread(thread))) { $0 + 1 }
        }
        #expect(group.cancellerCount == 1_001)
        gate.countDown()
        #expect(try await link.value == 1_000)
        #expect(group.cancellerCount == 0)
    }

    @Test("then racing cancel() from another thread: every new link fails with CancellationError, and none stays registered")
    func thenRacingCancel() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("ECrc"), size: 1)
        defer { pool.dispose() }
        let rounds = 500
        let published = LockedValue<(round: Int, chain: ExecutionChain<Int>)?>(nil)
        let seen = Atomic<Int>(0)
        let canceller = Latch()
        // Cancels each round's chain the moment it is published, while the other thread adds links
        // to it. Both run on threads of their own, never on Swift's cooperative threads.
        Thread {
            var round = 0
            while round < rounds {
                guard let (next, chain) = published.value, next > round else {
                    sched_yield()
                    continue
                }
                chain.cancel()
                round = next
                seen.store(round, ordering: .releasing)
            }
            canceller.countDown()
        }.start()
        let (cancelled, passedOn, leftOver) = await onNewThread { () -> (Int, Int, Int) in
            var cancelled = 0, passedOn = 0, leftOver = 0
            for round in 1...rounds {
                let root = DispatchMethod.async(on: .pool(pool)).execute { 0 }
                published.value = (round, root)
                let links = (0..<4).map { _ in root.then(.inline) { $0 + 1 } }
                while seen.load(ordering: .acquiring) < round { sched_yield() }
                for link in links {
                    // A root whose step ran before the cancel passes its value on.
                    do {
                        if try link.wait() == 1 { passedOn += 1 }
                    } catch is CancellationError {
                        cancelled += 1
                    } catch {}
                }
                leftOver += root.group.cancellerCount
            }
            return (cancelled, passedOn, leftOver)
        }
        #expect(canceller.wait(timeout: .seconds(10)))
        #expect(cancelled + passedOn == rounds * 4)
        #expect(leftOver == 0)
    }

    @Test("A step that waits for another branch of its own chain (fan-out) is not a wait on itself: it returns")
    func waitOnASiblingBranchReturns() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("ECsib"), size: 2)
        defer { pool.dispose() }
        let root = DispatchMethod.async(on: .pool(pool)).execute { 1 }
        let sibling = LockedValue<ExecutionChain<Int>?>(nil)
        let ready = Latch()
        let waiter = root.then(.async(on: .pool(pool))) { value -> Int in
            ready.wait(timeout: .seconds(5))
            return try sibling.value!.wait() + value
        }
        sibling.value = root.then(.async(on: .pool(pool))) { $0 + 10 }
        ready.countDown()
        #expect(try await waiter.value == 12)
    }
}

/// A step that waits for its own chain could never finish: the wait is reported, not hung.
@Suite("ExecutionChain waits on itself", .serialized)
struct ExecutionChainSelfWaitExitTests {
    /// In a child process: a step on a pool waits for its own link, or for the link after it.
    /// A hang returns after 5 s, and the child exits normally: the expectation of a failure fails.
    static func stepWaitsForItsOwnChain(waitingForLaterLink: Bool) {
        let pool = ThreadPool(name: "chain", size: 2)
        let waited = LockedValue<ExecutionChain<Int>?>(nil)
        let ready = Latch(), returned = Latch()
        let first = DispatchMethod.async(on: .pool(pool)).execute { () -> Int in
            ready.wait(timeout: .seconds(5))
            _ = try? waited.value?.wait()
            returned.countDown()
            return 1
        }
        let later = first.then(.async(on: .pool(pool))) { $0 + 1 }
        waited.value = waitingForLaterLink ? later : first
        ready.countDown()
        _ = returned.wait(timeout: .seconds(5))
    }

    static let message = "deadlock: ExecutionChain.wait() from inside a step of the same chain"

    @Test("wait() from inside a step for its own link stops with a deadlock message instead of hanging", .exitTestOnOwnThreads)
    func waitForOwnLink() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            Self.stepWaitsForItsOwnChain(waitingForLaterLink: false)
        }
        #expect(stopped(result, saying: Self.message))
    }

    @Test("wait() from inside a step for a link after it stops with a deadlock message instead of hanging", .exitTestOnOwnThreads)
    func waitForLaterLink() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            Self.stepWaitsForItsOwnChain(waitingForLaterLink: true)
        }
        #expect(stopped(result, saying: Self.message))
    }
}

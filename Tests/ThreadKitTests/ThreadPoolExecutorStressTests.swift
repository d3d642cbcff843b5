import Foundation
import Synchronization
import Testing
@testable import ThreadKit

// The pool as a Swift task executor under many jobs: enough child tasks to fill hundreds of the
// intake's blocks, so that every block is taken, emptied and let go of many times over.

@Suite("ThreadPool as a TaskExecutor under load", .timeLimit(.minutes(1)))
struct ThreadPoolExecutorStressTests {
    @Test("20,000 child tasks on a 2-thread pool each run once, on a pool thread, and the pool counts each job")
    func manyChildTasksRunOnceOnThePool() async throws {
        let pool = ThreadPool(name: "ExStr", size: 2)
        defer { pool.dispose() }
        let children = 20_000
        let runs = AtomicCounters(count: children)
        let offPool = Counter()
        let sum = await withTaskExecutorPreference(pool) {
            await withTaskGroup(of: Int.self) { group in
                for index in 0..<children {
                    group.addTask {
                        runs.increment(index)
                        if !pool.isCurrentThreadMember { offPool.increment() }
                        return index
                    }
                }
                return await group.reduce(0, +)
            }
        }
        #expect(sum == children * (children - 1) / 2)
        #expect(runs.indices(notEqualTo: 1) == [])
        #expect(offPool.value == 0, "child tasks ran off the pool")
        // Every child is a job, and so is each resumption of the parent on the pool.
        #expect(await eventually { pool.statistics.completedTasks >= children })
    }

    @Test("On a one-thread pool, child tasks start in the order the parent added them")
    func childTasksStartInOrder() async throws {
        let pool = ThreadPool(name: "ExFifo", size: 1)
        defer { pool.dispose() }
        let children = 5_000
        let started = StartOrder()
        await withTaskExecutorPreference(pool) {
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<children {
                    group.addTask { started.record(index) }
                }
                await group.waitForAll()
            }
        }
        #expect(started.order == Array(0..<children))
    }
}

/// The order in which child tasks started.
private final class StartOrder: Sendable {
    private let indices = Mutex<[Int]>([])

    func record(_ index: Int) {
        indices.withLock { $0.append(index) }
    }

    var order: [Int] { indices.withLock { $0 } }
}

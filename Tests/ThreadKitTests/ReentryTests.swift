import Foundation
import Testing
@testable import ThreadKit

/// The re-entry rule in ThreadKit's own blocking waits: a wait for a context the thread holds runs
/// the work inline instead of waiting for itself.
@Suite("Re-entry in ThreadKit's waits", .timeLimit(.minutes(1)))
struct ReentryTests {
    @Test("ScheduledTask.wait on a one-thread pool's own thread runs the queued task inline, counted once")
    func waitOnOwnOneThreadPool() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("RTw"), size: 1)
        defer { pool.dispose() }
        let outcome = await guarded { () -> (Bool, Bool)? in
            let result = LockedValue<(Bool, Bool)?>(nil)
            let outer = try? pool.schedule {
                let inner = try? pool.schedule { _ = pool.isCurrentThreadMember }
                inner?.wait()
                result.value = (inner?.isCompleted ?? false, inner?.cancel() == false)
            }
            outer?.wait()
            return result.value
        }
        let seen = outcome ?? nil
        #expect(seen?.0 == true && seen?.1 == true, "the wait hung or the task did not run")
        #expect(await eventually { pool.statistics.queuedTasks == 0 && pool.statistics.completedTasks == 2 })
    }

    @Test("A → B → A through a dedicated thread and a one-thread pool: the pool's task waited for from B runs inline")
    func waitThroughAnotherContext() async throws {
        try await withPoolAndThread(pool: "RTp", thread: "RTt") { pool, thread in
            let value = await guarded { () -> Int? in
                let result = LockedValue<Int?>(nil)
                let outer = try? pool.schedule {
                    // On the pool's thread: wait for the dedicated thread, whose work waits for the pool.
                    result.value = thread.sync { () -> Int in
                        let box = LockedValue(0)
                        let task = try? pool.schedule { box.value = 9 }
                        task?.wait()
                        return box.value
                    }
                }
                outer?.wait()
                return result.value
            }
            #expect(value == 9)  // nil: it hung
        }
    }

    @Test("A .block submission onto a full one-thread pool from work its thread waits for runs on the caller")
    func blockFromHolder() async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("RTb"), size: 1, queueLimit: 1, whenFull: .block)
        let thread = DedicatedThread(name: KernelThreads.uniqueName("RTbt"))
        defer {
            pool.dispose()
            thread.dispose()
        }
        let ran = await guarded { () -> [String]? in
            let order = Recorder<String>()
            let outer = try? pool.schedule {
                thread.sync {
                    try? pool.execute { order.append("queued") }  // fills the queue
                    try? pool.execute { order.append("on caller") }
                }
                order.append("outer")
            }
            outer?.wait()
            return order.values
        }
        #expect((ran ?? nil)?.first == "on caller")
        #expect(await eventually { pool.statistics.queuedTasks == 0 })
    }
}

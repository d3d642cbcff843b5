import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// The wait-for graph of real blocked `sync` calls: its edges, their holders, no cycle where none is.
@Suite("The wait-for graph of sync calls")
struct WaitGraphDiagnosticsTests {
    @Test("A chain of syncs A → B → C over three dedicated threads is three edges, each held by the next thread, and no cycle")
    func chainOfSyncs() async throws {
        let a = DedicatedThread(name: "dq-chain-A"), b = DedicatedThread(name: "dq-chain-B"), c = DedicatedThread(name: "dq-chain-C")
        let ids = [a, b, c].map { thread in thread.sync { ThreadActivity.currentKernelThreadID() } }
        let inC = Latch(), release = Latch(), returned = Latch()
        let callerID = LockedValue<Int32>(0)
        Thread {
            callerID.withLock { $0 = ThreadActivity.currentKernelThreadID() }
            a.sync {
                b.sync {
                    c.sync {
                        inC.countDown()
                        release.wait(timeout: .seconds(60))
                    }
                }
            }
            returned.countDown()
        }.start()
        defer { release.countDown() }
        #expect(inC.wait(timeout: .seconds(10)))
        let caller = callerID.withLock { $0 }
        let involved = Set([caller] + ids)
        // The waits register just before they block: wait until all three show.
        let allBlocked = await eventually(pollingEvery: .milliseconds(50)) {
            Diagnostics.snapshot().waits.filter { involved.contains($0.thread.kernelThreadID) }.count == 3
        }
        #expect(allBlocked)
        let snapshot = Diagnostics.snapshot()
        let edges = snapshot.waits.filter { involved.contains($0.thread.kernelThreadID) }
        let expected: [(Int32, String, Int32)] = [
            (caller, "DedicatedThread \"dq-chain-A\"", ids[0]),
            (ids[0], "DedicatedThread \"dq-chain-B\"", ids[1]),
            (ids[1], "DedicatedThread \"dq-chain-C\"", ids[2]),
        ]
        for (thread, waitsFor, holder) in expected {
            let edge = edges.first { $0.thread.kernelThreadID == thread }
            #expect(edge?.kind == "sync")
            #expect(edge?.waitsFor == waitsFor)
            #expect(edge?.holder?.kernelThreadID == holder)
        }
        #expect(!edges.contains { $0.thread.kernelThreadID == ids[2] })
        #expect(snapshot.cycles.allSatisfy { cycle in !cycle.contains { involved.contains($0.thread.kernelThreadID) } })
        let entries = ["dq-chain-A", "dq-chain-B"].map { name in snapshot.components.first { $0.name == name }?.threads.first }
        #expect(entries.allSatisfy { $0?.state == .blocked })
        #expect(snapshot.components.first { $0.name == "dq-chain-C" }?.threads.first?.state == .running)
        release.countDown()
        #expect(returned.wait(timeout: .seconds(10)))
    }

    @Test("A → B → A nested syncs: A's thread, serving the nested request in its wait, shows running it, and no cycle is reported")
    func nestedRequestIsNoCycle() throws {
        let a = DedicatedThread(name: "dq-nest-A"), b = DedicatedThread(name: "dq-nest-B")
        let aID = a.sync { ThreadActivity.currentKernelThreadID() }
        let bID = b.sync { ThreadActivity.currentKernelThreadID() }
        let inner = Latch(), release = Latch(), returned = Latch()
        try a.execute {
            b.sync {
                a.sync {                      // runs on A's thread, which serves it in its wait
                    inner.countDown()
                    release.wait(timeout: .seconds(60))
                }
            }
            returned.countDown()
        }
        defer { release.countDown() }
        #expect(inner.wait(timeout: .seconds(10)))
        let snapshot = Diagnostics.snapshot()
        let aThread = snapshot.components.first { $0.name == "dq-nest-A" }?.threads.first
        #expect(aThread?.kernelThreadID == aID)
        #expect(aThread?.state == .running)
        #expect(aThread?.work == "a nested request")
        // B waits for A, whose thread runs: an edge, but no cycle.
        #expect(snapshot.waits.first { $0.thread.kernelThreadID == bID }?.holder?.kernelThreadID == aID)
        #expect(!snapshot.waits.contains { $0.thread.kernelThreadID == aID })
        #expect(snapshot.cycles.allSatisfy { cycle in !cycle.contains { [aID, bID].contains($0.thread.kernelThreadID) } })
        release.countDown()
        #expect(returned.wait(timeout: .seconds(10)))
    }

    @Test("DispatchMethod.sync on a dedicated thread is reported as a sync wait for it")
    func dispatchMethodSync() async throws {
        let thread = DedicatedThread(name: "dq-dispatch")
        let release = Latch()
        defer { release.countDown() }
        let threadID = try #require(try occupy(thread, until: release))
        let caller = try #require(await BlockedCaller.start { _ = try? DispatchMethod.sync(on: .thread(thread)).execute {}.wait() })
        let wait = caller.edge()
        #expect(wait?.kind == "sync")
        #expect(wait?.waitsFor == "DedicatedThread \"dq-dispatch\"")
        #expect(wait?.holder?.kernelThreadID == threadID)
        release.countDown()
        #expect(caller.returned.wait(timeout: .seconds(10)))
    }

    @Test("A thread waiting for a chain's step on a busy dedicated thread waits in chain for it, held by its thread")
    func chainWait() async throws {
        let thread = DedicatedThread(name: "dq-chain-wait")
        let release = Latch()
        defer { release.countDown() }
        let threadID = try #require(try occupy(thread, until: release))
        let step = DispatchMethod.async(on: .thread(thread)).execute {}
        let caller = try #require(await BlockedCaller.start { _ = try? step.wait() })
        let wait = caller.edge()
        #expect(wait?.kind == "chain")
        #expect(wait?.waitsFor == "DedicatedThread \"dq-chain-wait\"")
        #expect(wait?.holder?.kernelThreadID == threadID)
        release.countDown()
        #expect(caller.returned.wait(timeout: .seconds(10)))
    }
}

/// A thread of the test's own, blocked in one of ThreadKit's waits: its kernel id, and a latch
/// counted down once the wait has returned.
struct BlockedCaller: Sendable {
    let threadID: Int32
    let returned: Latch

    /// Runs `wait` on a new thread and suspends until a snapshot shows that thread blocked (at
    /// most 60 s: on a loaded machine the polling task may wait seconds for a cooperative thread,
    /// and what blocks the caller is held that long too); `nil` if it never does.
    static func start(_ wait: @escaping @Sendable () -> Void) async -> BlockedCaller? {
        let activity = LockedValue<ThreadActivity?>(nil)
        let returned = Latch()
        Thread {
            activity.withLock { $0 = ThreadActivity.current }
            wait()
            returned.countDown()
        }.start()
        // The thread's own state, not a whole snapshot, is polled: cheap for every other test.
        let blocked = await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(20)) {
            activity.withLock { $0 }?.read().phase == .blocked
        }
        guard blocked, let caller = activity.withLock({ $0 }) else { return nil }
        return BlockedCaller(threadID: caller.kernelThreadID, returned: returned)
    }

    /// Its edge of the wait-for graph in `snapshot`.
    func edge(in snapshot: Snapshot = Diagnostics.snapshot()) -> Snapshot.Wait? {
        snapshot.waits.first { $0.thread.kernelThreadID == threadID }
    }
}

/// Runs a task on `thread` (labelled `label`, if given) that holds it until `release` is counted
/// down (at most 60 s); returns once the task has begun, with the thread's kernel id.
func occupy(_ thread: DedicatedThread, label: String? = nil, until release: Latch) throws -> Int32? {
    let inside = Latch()
    let id = LockedValue<Int32>(0)
    let work: @Sendable () -> Void = {
        id.withLock { $0 = ThreadActivity.currentKernelThreadID() }
        inside.countDown()
        release.wait(timeout: .seconds(60))
    }
    if let label { try thread.execute(label: label, work) } else { try thread.execute(work) }
    return inside.wait(timeout: .seconds(10)) ? id.withLock { $0 } : nil
}

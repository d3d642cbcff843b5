import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// A dedicated thread's entry in the snapshot, and the waits for it, against known set-ups: real
/// threads, every wait bounded. Other tests' components are in the snapshot too: each test finds
/// its own by a name no other test uses.
@Suite("DedicatedThread in the diagnostics")
struct DedicatedThreadDiagnosticsTests {
    static func component(_ name: String, in snapshot: Snapshot) -> Snapshot.Component? {
        snapshot.components.first { $0.kind == "DedicatedThread" && $0.name == name }
    }

    static func metric(_ name: String, of component: Snapshot.Component?) -> Double? {
        component?.metrics.first { $0.name == name }?.value
    }

    @Test("A thread blocked in sync on a busy dedicated thread is an edge: thread → DedicatedThread → the thread running its task")
    func blockedSyncIsAnEdge() async throws {
        let thread = DedicatedThread(name: "dq-a")
        synchronously { thread.sync {} }
        let release = Latch()
        defer { release.countDown() }
        let threadID = try #require(try occupy(thread, label: "holding the lock", until: release))
        let blocked = try #require(await BlockedCaller.start { thread.sync {} })
        let caller = blocked.threadID
        let snapshot = Diagnostics.snapshot()
        let wait = try #require(blocked.edge(in: snapshot))
        #expect(wait.kind == "sync")
        #expect(wait.waitsFor == "DedicatedThread \"dq-a\"")
        #expect(wait.holder?.kernelThreadID == threadID)
        #expect(wait.holder?.name == "dq-a")
        #expect(snapshot.otherThreads.first { $0.kernelThreadID == caller }?.state == .blocked)
        #expect(snapshot.otherThreads.first { $0.kernelThreadID == caller }?.waitsFor == "DedicatedThread \"dq-a\"")

        let entry = try #require(Self.component("dq-a", in: snapshot))
        #expect(entry.threads.count == 1)
        #expect(entry.threads.first?.kernelThreadID == threadID)
        #expect(entry.threads.first?.name == "dq-a")
        #expect(entry.threads.first?.state == .running)
        #expect(entry.threads.first?.work == "holding the lock")
        #expect(entry.pendingCount == 1)  // the sync caller's work
        #expect(Self.metric("tasks_queued", of: entry) == 1)
        #expect(Self.metric("tasks_completed_total", of: entry) == 1)  // the first sync
        #expect(Self.metric("paused", of: entry) == 0)
        #expect(entry.configuration == [Snapshot.Field("state", "running")])
        #expect(snapshot.cycles.allSatisfy { cycle in !cycle.contains { $0.thread.kernelThreadID == caller } })
        // Listed among the long waits once over the threshold (here, at once).
        let text = Diagnostics.snapshot(longWaitsOver: .zero).description
        #expect(text.contains("(tid \(caller)) waits "))
        #expect(text.contains("in sync for DedicatedThread \"dq-a\", held by \"dq-a\" (tid \(threadID))"))

        release.countDown()
        #expect(blocked.returned.wait(timeout: .seconds(10)))
        let after = Diagnostics.snapshot()
        #expect(!after.waits.contains { $0.thread.kernelThreadID == caller })
        // The thread counts a task once it has run it, after the sync caller it ran for is let go.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { Self.metric("tasks_completed_total", of: Self.component("dq-a", in: Diagnostics.snapshot())) == 3 })
    }

    @Test("An idle dedicated thread sleeps; a paused one says so")
    func idleAndPaused() async throws {
        let thread = DedicatedThread(name: "dq-idle")
        let ranFirst = Latch()
        try thread.execute { ranFirst.countDown() }
        // Asleep after its first task (it may have slept once before taking it).
        #expect(await onNewThread { ranFirst.wait(timeout: .seconds(10)) })
        let asleep = await eventually(pollingEvery: .milliseconds(50)) {
            Self.component("dq-idle", in: Diagnostics.snapshot())?.threads.first?.state == .sleeping
        }
        #expect(asleep)
        thread.pause()
        try thread.execute {}
        try thread.execute {}
        let entry = try #require(Self.component("dq-idle", in: Diagnostics.snapshot()))
        #expect(entry.configuration == [Snapshot.Field("state", "paused")])
        #expect(entry.pendingCount == 2)
        #expect(Self.metric("paused", of: entry) == 1)
        #expect(entry.threads.first?.state == .sleeping)
        thread.resume()
        let ran = await eventually(pollingEvery: .milliseconds(50)) { Self.metric("tasks_completed_total", of: Self.component("dq-idle", in: Diagnostics.snapshot())) == 3 }
        #expect(ran)
    }

    @Test("Work submitted with a label shows it while it runs: execute, sync and run")
    func labels() async throws {
        let thread = DedicatedThread(name: "dq-labels")
        let inSync = synchronously { thread.sync(label: "sync label") { Self.component("dq-labels", in: Diagnostics.snapshot())?.threads.first?.work } }
        #expect(inSync == "sync label")
        let inRun = try await thread.run(label: "run label") { Self.component("dq-labels", in: Diagnostics.snapshot())?.threads.first?.work }
        #expect(inRun == "run label")
        let seen = LockedValue<String?>(nil)
        let done = Latch()
        try thread.execute(label: "execute label") {
            seen.withLock { $0 = Self.component("dq-labels", in: Diagnostics.snapshot())?.threads.first?.work }
            done.countDown()
        }
        #expect(done.wait(timeout: .seconds(10)))
        #expect(seen.withLock { $0 } == "execute label")
        // Unlabelled work shows no label of an earlier one.
        let plain = synchronously { thread.sync { Self.component("dq-labels", in: Diagnostics.snapshot())?.threads.first?.work } }
        #expect(plain != "execute label" && plain != "sync label" && plain != "run label")
    }

    @Test("A thread in awaitTermination(timeout:) waits in termination for the dedicated thread, held by its thread")
    func terminationWait() async throws {
        let thread = DedicatedThread(name: "dq-term")
        let release = Latch()
        defer { release.countDown() }
        let threadID = try #require(try occupy(thread, until: release))
        thread.dispose()
        let caller = try #require(await BlockedCaller.start { _ = thread.awaitTermination(timeout: .seconds(60)) })
        let snapshot = Diagnostics.snapshot()
        let wait = try #require(caller.edge(in: snapshot))
        #expect(wait.kind == "termination")
        #expect(wait.waitsFor == "DedicatedThread \"dq-term\"")
        #expect(wait.holder?.kernelThreadID == threadID)
        #expect(Self.component("dq-term", in: snapshot)?.configuration == [Snapshot.Field("state", "disposed")])
        release.countDown()
        #expect(caller.returned.wait(timeout: .seconds(10)))
        #expect(Self.component("dq-term", in: Diagnostics.snapshot())?.threads.isEmpty == true)
    }

    @Test("A dedicated thread leaves the inventory when it is released")
    func leavesOnRelease() async throws {
        weak var weakThread: DedicatedThread?
        do {
            let thread = DedicatedThread(name: "dq-leaving")
            weakThread = thread
            let started = await eventually(pollingEvery: .milliseconds(50)) { Self.component("dq-leaving", in: Diagnostics.snapshot())?.threads.count == 1 }
            #expect(started)
            #expect(Self.component("dq-leaving", in: Diagnostics.snapshot())?.pendingCount == 0)
        }
        // Another test's snapshot may be reading it this moment: it goes once that read ends.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { weakThread == nil })
        #expect(Self.component("dq-leaving", in: Diagnostics.snapshot()) == nil)
    }
}

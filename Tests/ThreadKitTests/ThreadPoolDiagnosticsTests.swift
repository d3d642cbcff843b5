import Foundation
import Testing
import ThreadKitTestSupport
@testable import ThreadKit

/// The entry of the live component of `kind` named `name` in a new snapshot, if there is one.
func diagnosticsComponent(_ kind: String, named name: String) -> Snapshot.Component? {
    Diagnostics.snapshot().components.first { $0.kind == kind && $0.name == name }
}

extension Snapshot.Component {
    /// The value of the metric named `name` (a histogram's sum).
    func metric(_ name: String) -> Double? {
        metrics.first { $0.name == name }?.value
    }

    /// The configuration as a dictionary.
    var settings: [String: String] {
        Dictionary(uniqueKeysWithValues: configuration.map { ($0.name, $0.value) })
    }
}

/// The waits of a snapshot whose target's description starts with `prefix`.
func diagnosticsWaits(for prefix: String) -> [Snapshot.Wait] {
    Diagnostics.snapshot().waits.filter { $0.waitsFor.hasPrefix(prefix) }
}

@Suite struct ThreadPoolDiagnosticsTests {
    @Test func aPoolShowsItsConfigurationMetricsAndEachThreadWithItsLabel() async throws {
        let name = "dpool.inventory.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 3, keepAlive: .seconds(60), collectionInterval: .seconds(90))
        let release = Latch()
        let bothRunning = Latch(count: 2)
        try pool.execute(label: "resize a") { bothRunning.countDown(); release.wait() }
        let second = try pool.schedule(label: "resize b") { bothRunning.countDown(); release.wait() }
        #expect(bothRunning.wait(timeout: .seconds(10)))
        let quick = try pool.schedule {}
        #expect(synchronously { quick.wait(timeout: .seconds(10)) })
        // The third thread ran the quick task and went to sleep (after a spin of at most 50 µs).
        #expect(await eventually(pollingEvery: .milliseconds(50)) {
            diagnosticsComponent("ThreadPool", named: name)?.threads.filter { $0.state == .sleeping }.count == 1
        })
        let entry = try #require(diagnosticsComponent("ThreadPool", named: name))
        #expect(entry.settings == [
            "size": "3", "keepAlive": "60s", "collectionInterval": "90s", "queueLimit": "none", "whenFull": "block",
        ])
        #expect(entry.configuration.map(\.name) == ["size", "keepAlive", "collectionInterval", "queueLimit", "whenFull"])
        #expect(entry.threads.map(\.name) == ["\(name) Thread1", "\(name) Thread2", "\(name) Thread3"])
        let running = entry.threads.filter { $0.state == .running }
        #expect(running.compactMap(\.work).sorted() == ["resize a", "resize b"])
        #expect(entry.threads.filter { $0.state == .sleeping }.map(\.name) == ["\(name) Thread3"])
        #expect(Set(entry.threads.map(\.kernelThreadID)).count == 3)
        #expect(entry.pendingCount == 0)
        #expect(entry.metric("threads") == 3)
        #expect(entry.metric("threads_busy") == 2)
        #expect(entry.metric("threads_idle") == 1)
        #expect(entry.metric("threads_peak") == 3)
        #expect(entry.metric("threads_started_total") == 3)
        #expect(entry.metric("threads_exited_total") == 0)
        #expect(entry.metric("tasks_queued") == 0)
        #expect(entry.metric("tasks_completed_total") == 1)
        #expect(entry.metric("submitters_blocked") == 0)
        #expect(entry.metrics.first { $0.name == "tasks_completed_total" }?.kind == .counter)
        #expect(entry.metrics.first { $0.name == "threads" }?.kind == .gauge)

        release.countDown()
        #expect(synchronously { second.wait(timeout: .seconds(10)) })
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsComponent("ThreadPool", named: name)?.metric("tasks_completed_total") == 3 })
        #expect(await eventually(pollingEvery: .milliseconds(50)) {
            diagnosticsComponent("ThreadPool", named: name)?.threads.allSatisfy { $0.state == .sleeping && $0.work == nil } == true
        })
        pool.dispose()
    }

    @Test func queuedTasksAreThePendingCount() async throws {
        let name = "dpool.queued.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 1, queueLimit: 5, whenFull: .reject)
        let release = Latch()
        let running = Latch()
        try pool.execute { running.countDown(); release.wait() }
        #expect(running.wait(timeout: .seconds(10)))
        let queued = try (0..<3).map { _ in try pool.schedule {} }
        _ = queued[1].cancel()
        let entry = try #require(diagnosticsComponent("ThreadPool", named: name))
        #expect(entry.pendingCount == 2)
        #expect(entry.metric("tasks_queued") == 2)
        #expect(entry.settings["queueLimit"] == "5")
        #expect(entry.settings["whenFull"] == "reject")
        release.countDown()
        #expect(synchronously { queued[2].wait(timeout: .seconds(10)) })
        pool.dispose()
    }

    @Test func aRunCallShowsItsLabelWhileItRuns() async throws {
        let name = "dpool.run.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 2)
        let seen = try await pool.run(label: "render page") {
            diagnosticsComponent("ThreadPool", named: name)?.threads.compactMap(\.work)
        }
        #expect(seen == ["render page"])
        let plain = try await pool.run {
            diagnosticsComponent("ThreadPool", named: name)?.threads.compactMap(\.work)
        }
        #expect(plain == ["task"])
        pool.dispose()
    }

    @Test func aThreadWaitingForATaskWaitsForItsWorkerOrForNoOneWhileItIsQueued() async throws {
        let name = "dpool.wait.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 1)
        let release = Latch()
        let running = Latch()
        let first = try pool.schedule(label: "first") { running.countDown(); release.wait() }
        #expect(running.wait(timeout: .seconds(10)))
        let second = try pool.schedule(label: "second") {}
        let waited = Latch(count: 2)
        // Bounded far beyond the test's own steps, which may each wait seconds for a cooperative thread.
        for task in [first, second] {
            Thread { _ = task.wait(timeout: .seconds(120)); waited.countDown() }.start()
        }
        let prefix = "a task of ThreadPool \"\(name)\""
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: prefix).count == 2 })
        let waits = diagnosticsWaits(for: prefix)
        let worker = try #require(diagnosticsComponent("ThreadPool", named: name)?.threads.first)
        let onFirst = try #require(waits.first { $0.waitsFor == "\(prefix) \"first\"" })
        let onSecond = try #require(waits.first { $0.waitsFor == "\(prefix) \"second\"" })
        #expect(onFirst.kind == "wait")
        #expect(onFirst.holder?.kernelThreadID == worker.kernelThreadID)
        #expect(onFirst.holder?.name == "\(name) Thread1")
        #expect(onSecond.kind == "wait")
        #expect(onSecond.holder == nil)
        release.countDown()
        #expect(waited.wait(timeout: .seconds(10)))
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: prefix).isEmpty })
        pool.dispose()
    }

    @Test func aOneThreadPoolIsHeldByItsThreadOnlyWhileThatRunsATask() async throws {
        let pool = ThreadPool(name: "dpool.holder.\(UUID().uuidString.prefix(8))", size: 1)
        let running = Latch(), release = Latch()
        let workerID = LockedValue<Int32>(0)
        try pool.execute {
            workerID.withLock { $0 = ThreadActivity.currentKernelThreadID() }
            running.countDown()
            release.wait(timeout: .seconds(60))
        }
        #expect(running.wait(timeout: .seconds(10)))
        #expect(pool.holdingThread?.kernelThreadID == workerID.withLock { $0 })
        release.countDown()
        // Idle (spinning, then asleep), its thread holds nothing.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { pool.statistics.idleThreads == 1 })
        #expect(pool.holdingThread == nil)
        pool.dispose()
    }

    @Test func aWaitForAnUnlabelledTaskOfALargerPoolNamesThePoolAndTheWorker() async throws {
        let name = "dpool.wait2.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 2)
        let release = Latch()
        let running = Latch()
        let task = try pool.schedule { running.countDown(); release.wait() }
        #expect(running.wait(timeout: .seconds(10)))
        let waited = Latch()
        Thread { task.wait(); waited.countDown() }.start()
        let prefix = "a task of ThreadPool \"\(name)\""
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: prefix).count == 1 })
        let wait = try #require(diagnosticsWaits(for: prefix).first)
        #expect(wait.waitsFor == prefix)
        #expect(wait.holder?.name == "\(name) Thread1")
        release.countDown()
        #expect(waited.wait(timeout: .seconds(10)))
        pool.dispose()
    }

    @Test func aSubmitterBlockedOnAFullQueueWaitsForThePool() async throws {
        let name = "dpool.full.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 1, queueLimit: 1, whenFull: .block)
        let release = Latch()
        let running = Latch()
        try pool.execute { running.countDown(); release.wait() }
        #expect(running.wait(timeout: .seconds(10)))
        try pool.execute {}
        let submitted = Latch()
        Thread { try? pool.execute {}; submitted.countDown() }.start()
        let target = "ThreadPool \"\(name)\""
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: target).contains { $0.kind == "full queue" } })
        let wait = try #require(diagnosticsWaits(for: target).first { $0.kind == "full queue" })
        #expect(wait.waitsFor == target)
        #expect(wait.holder?.name == "\(name) Thread1")
        #expect(diagnosticsComponent("ThreadPool", named: name)?.metric("submitters_blocked") == 1)
        release.countDown()
        #expect(submitted.wait(timeout: .seconds(10)))
        pool.dispose()
    }

    @Test func aFullQueueOfALargerPoolIsHeldByNoOneThread() async throws {
        let name = "dpool.full2.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 2, queueLimit: 1, whenFull: .block)
        let release = Latch()
        let running = Latch(count: 2)
        for _ in 0..<2 { try pool.execute { running.countDown(); release.wait() } }
        #expect(running.wait(timeout: .seconds(10)))
        try pool.execute {}
        let submitted = Latch()
        Thread { try? pool.execute {}; submitted.countDown() }.start()
        let target = "ThreadPool \"\(name)\""
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: target).contains { $0.kind == "full queue" } })
        #expect(diagnosticsWaits(for: target).first { $0.kind == "full queue" }?.holder == nil)
        release.countDown()
        #expect(submitted.wait(timeout: .seconds(10)))
        pool.dispose()
    }

    @Test func awaitingTerminationIsAWaitForThePool() async throws {
        let name = "dpool.term.\(UUID().uuidString.prefix(8))"
        let pool = ThreadPool(name: name, size: 2)
        let release = Latch()
        let running = Latch()
        try pool.execute { running.countDown(); release.wait() }
        #expect(running.wait(timeout: .seconds(10)))
        pool.dispose()
        let terminated = LockedValue<Bool?>(nil)
        Thread { let done = pool.awaitTermination(timeout: .seconds(20)); terminated.withLock { $0 = done } }.start()
        let target = "ThreadPool \"\(name)\""
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsWaits(for: target).contains { $0.kind == "termination" } })
        release.countDown()
        #expect(await eventually(pollingEvery: .milliseconds(50)) { terminated.withLock { $0 } == true })
    }

    @Test func aReleasedPoolLeavesTheInventory() async throws {
        let name = "dpool.gone.\(UUID().uuidString.prefix(8))"
        do {
            let pool = ThreadPool(name: name, size: 2)
            try synchronously { try pool.schedule {}.wait() }
            #expect(diagnosticsComponent("ThreadPool", named: name) != nil)
            pool.dispose()
            #expect(synchronously { pool.awaitTermination(timeout: .seconds(10)) })
        }
        // Its last thread lets go of it as it returns.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { diagnosticsComponent("ThreadPool", named: name) == nil })
    }
}

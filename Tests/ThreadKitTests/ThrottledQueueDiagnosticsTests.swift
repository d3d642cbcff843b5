import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// Why a throttled queue's next start waits, decided by its pure schedule with made-up instants
/// (milliseconds after an arbitrary origin): no threads, no clock.
@Suite("ThrottleSchedule: why the next start waits")
struct ThrottleScheduleHindranceTests {
    typealias Schedule = ThrottleSchedule<Int>

    func at(_ milliseconds: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: 1_000_000_000_000).advanced(by: .milliseconds(milliseconds))
    }

    func explained(_ schedule: Schedule, now: Int) -> (at: MonotonicInstant, hindrance: StartHindrance)? {
        schedule.explainNextStart(now: at(now))
    }

    @Test("Nothing queued: nothing to explain; a first task on a new queue is due at once")
    func idleAndFirst() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        #expect(explained(schedule, now: 0) == nil)
        schedule.submit(1)
        #expect(explained(schedule, now: 0)! == (at(0), .due))
    }

    @Test("After a task has ended, the gap holds the next; once it has passed, the next is due")
    func gap() {
        for monitor in [ThrottledQueue.Monitor.concurrent, .serial] {
            var schedule = Schedule(interval: .milliseconds(100), monitor: monitor, mutability: .all, limit: nil)
            schedule.submit(1)
            schedule.submit(2)
            _ = schedule.start(at: at(0))
            schedule.end(at: at(10))
            let gapEnd = monitor == .concurrent ? at(100) : at(110)
            #expect(explained(schedule, now: 20)! == (gapEnd, .gap))
            #expect(explained(schedule, now: 200)! == (at(200), .due))
        }
    }

    @Test("While a task runs, the next waits for its end, at the earliest the gap from its start")
    func runningTask() {
        var schedule = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        schedule.submit(2)
        _ = schedule.start(at: at(0))
        #expect(explained(schedule, now: 20)! == (at(100), .end))
        #expect(explained(schedule, now: 300)! == (at(300), .end))
    }

    @Test("A full rate-limit window holds the next start past the gap; a later pause holds it past the window")
    func windowAndPause() {
        var schedule = Schedule(interval: .milliseconds(10), monitor: .concurrent, mutability: .all, limit: .rate(2, per: .seconds(1)))
        for task in 1...3 { schedule.submit(task) }
        _ = schedule.start(at: at(0))
        schedule.end(at: at(1))
        #expect(explained(schedule, now: 2)! == (at(10), .gap))
        _ = schedule.start(at: at(10))
        schedule.end(at: at(11))
        #expect(explained(schedule, now: 20)! == (at(1000), .window))
        schedule.pause(until: at(500))
        #expect(explained(schedule, now: 20)! == (at(1000), .window))
        schedule.pause(until: at(1500))
        #expect(explained(schedule, now: 20)! == (at(1500), .pause))
        // On a tie, the pause is named.
        var tie = Schedule(interval: .milliseconds(100), monitor: .concurrent, mutability: .all, limit: nil)
        tie.submit(1)
        tie.submit(2)
        _ = tie.start(at: at(0))
        tie.end(at: at(1))
        tie.pause(until: at(100))
        #expect(explained(tie, now: 5)! == (at(100), .pause))
        #expect(explained(tie, now: 100)! == (at(100), .due))
    }

    @Test("A coordinator's reservation later than the local rules holds the start: a lease for .serial, the coordinator else")
    func coordinator() {
        var starts = CoordinatedStarts(policy: .failClosed, asker: 5)
        #expect(starts.explainStart(localAllowed: at(0), now: at(0), monitor: .concurrent) == nil)
        _ = starts.step(localAllowed: at(0), now: at(0), nested: false, gap: .milliseconds(100), monitor: .concurrent, limit: nil)
        // Asked, not yet answered: the coordinator holds the start.
        #expect(starts.explainStart(localAllowed: at(0), now: at(1), monitor: .concurrent)! == (at(1), .coordinator))
        _ = starts.answered(.reserved(wait: .milliseconds(50), token: nil), now: at(2))
        #expect(starts.explainStart(localAllowed: at(0), now: at(3), monitor: .concurrent)! == (at(52), .coordinator))
        #expect(starts.explainStart(localAllowed: at(0), now: at(3), monitor: .serial)! == (at(52), .lease))
        // Local rules later than the reservation decide.
        #expect(starts.explainStart(localAllowed: at(60), now: at(3), monitor: .concurrent) == nil)
        // A decline is asked again at the time it gave.
        var declined = CoordinatedStarts(policy: .failClosed, asker: 5)
        _ = declined.step(localAllowed: at(0), now: at(0), nested: false, gap: .milliseconds(100), monitor: .concurrent, limit: nil)
        _ = declined.answered(.declined(retryIn: .milliseconds(300)), now: at(1))
        #expect(declined.explainStart(localAllowed: at(0), now: at(2), monitor: .concurrent)! == (at(301), .coordinator))
    }

    @Test("Starts and ends are counted, nested ones included")
    func counts() {
        var schedule = Schedule(interval: .zero, monitor: .concurrent, mutability: .all, limit: nil)
        schedule.submit(1)
        _ = schedule.start(at: at(0))
        schedule.startNested(at: at(1), gap: nil)
        schedule.end(at: at(2))
        #expect(schedule.startedCount == 2)
        #expect(schedule.endedCount == 1)
        schedule.end(at: at(3))
        #expect(schedule.endedCount == 2)
    }
}

/// A throttled queue's entry in the snapshot against known set-ups: real threads, bounded waits.
/// Each test's queue has a name no other test uses.
@Suite("ThrottledQueue in the diagnostics")
struct ThrottledQueueDiagnosticsTests {
    static func component(_ name: String, in snapshot: Snapshot = Diagnostics.snapshot()) -> Snapshot.Component? {
        snapshot.components.first { $0.kind == "ThrottledQueue" && $0.name == name }
    }

    static func metric(_ name: String, of component: Snapshot.Component?) -> Double? {
        component?.metrics.first { $0.name == name }?.value
    }

    @Test("Three tasks queued behind a 300 ms gap: pending 3, the next start due within the gap, held by the gap")
    func gap() async throws {
        let queue = ThrottledQueue(label: "dq-gap", interval: .milliseconds(300))
        defer { queue.cancelAll() }
        synchronously { queue.sync {} }
        for _ in 0..<3 { try queue.async {} }
        let entry = try #require(Self.component("dq-gap"))
        #expect(entry.pendingCount == 3)
        #expect(entry.pending.count == 1)
        let next = try #require(entry.pending.first)
        #expect(next.what == "the next task")
        #expect(next.reason == "gap")
        #expect(next.dueIn > 0 && next.dueIn <= 0.3)
        #expect(Self.metric("tasks_pending", of: entry) == 3)
        #expect(Self.metric("tasks_started_total", of: entry) == 1)
        #expect(Self.metric("tasks_completed_total", of: entry) == 1)
        #expect(Self.metric("paused", of: entry) == 0)
        #expect(Self.metric("interval_seconds", of: entry) == 0.3)
        #expect(entry.configuration == [
            Snapshot.Field("interval", "300ms"), Snapshot.Field("monitor", "concurrent"),
            Snapshot.Field("mutability", "all"), Snapshot.Field("coordination", "local"),
        ])
        #expect(entry.description(in: Diagnostics.snapshot()).contains("ThrottledQueue \"dq-gap\": interval=300ms"))
    }

    @Test("Tasks queued behind a full rate-limit window: held by the window")
    func window() async throws {
        // A window longer than any stall of a loaded machine: the worker still sleeps it out when
        // the test looks, however late (cancelAll ends it).
        let queue = ThrottledQueue(label: "dq-window", interval: .zero, limit: .rate(1, per: .seconds(30)))
        defer { queue.cancelAll() }
        synchronously { queue.sync {} }
        for _ in 0..<3 { try queue.async {} }
        let entry = try #require(Self.component("dq-window"))
        #expect(entry.pendingCount == 3)
        #expect(entry.pending.first?.reason == "window")
        #expect((entry.pending.first?.dueIn ?? 0) > 0 && (entry.pending.first?.dueIn ?? 31) <= 30)
        #expect(entry.configuration.contains(Snapshot.Field("limit", "1 per 30s")))
        // The worker sleeps out the window, and says so.
        let sleeping = await eventually(pollingEvery: .milliseconds(50)) {
            let thread = Self.component("dq-window")?.threads.first
            return thread?.state == .sleeping && thread?.work == "window" && (thread?.until ?? 0) > 0
        }
        #expect(sleeping)
    }

    @Test("Tasks queued on a paused queue: held by the pause")
    func pause() async throws {
        let queue = ThrottledQueue(label: "dq-pause", interval: .zero)
        defer { queue.cancelAll() }
        queue.pause(for: .seconds(5))
        for _ in 0..<3 { try queue.async {} }
        let entry = try #require(Self.component("dq-pause"))
        #expect(entry.pendingCount == 3)
        #expect(entry.pending.first?.reason == "pause")
        #expect((entry.pending.first?.dueIn ?? 0) > 4 && (entry.pending.first?.dueIn ?? 9) <= 5)
        #expect(Self.metric("paused", of: entry) == 1)
        #expect((Self.metric("pause_remaining_seconds", of: entry) ?? 0) > 4)
        queue.resume()
        let ran = await eventually(pollingEvery: .milliseconds(50)) { Self.component("dq-pause")?.pendingCount == 0 }
        #expect(ran)
        #expect(Self.metric("paused", of: Self.component("dq-pause")) == 0)
    }

    @Test("A labelled task shows its label on the worker; a sync caller waits for the queue, held by the worker")
    func labelledTaskAndSyncWait() async throws {
        let queue = ThrottledQueue(label: "dq-labelled", interval: .zero)
        let inside = Latch(), release = Latch()
        let workerID = LockedValue<Int32>(0)
        try queue.async(label: "fetching page 2") {
            workerID.withLock { $0 = ThreadActivity.currentKernelThreadID() }
            inside.countDown()
            release.wait(timeout: .seconds(60))
        }
        defer { release.countDown() }
        #expect(inside.wait(timeout: .seconds(10)))
        let blocked = try #require(await BlockedCaller.start { queue.sync {} })
        let snapshot = Diagnostics.snapshot()
        let wait = try #require(blocked.edge(in: snapshot))
        #expect(wait.kind == "sync")
        #expect(wait.waitsFor == "ThrottledQueue \"dq-labelled\"")
        #expect(wait.holder?.kernelThreadID == workerID.withLock { $0 })
        let entry = try #require(Self.component("dq-labelled", in: snapshot))
        #expect(entry.threads.count == 1)
        #expect(entry.threads.first?.kernelThreadID == workerID.withLock { $0 })
        #expect(entry.threads.first?.state == .running)
        #expect(entry.threads.first?.work == "fetching page 2")
        #expect(entry.pendingCount == 1)
        #expect(entry.pending.first?.reason == "end")
        release.countDown()
        #expect(blocked.returned.wait(timeout: .seconds(10)))
        // Between tasks, nobody holds the queue.
        #expect(queue.holdingThread == nil)
        // A sync caller runs its task on its own thread, which shows the label meanwhile.
        let labelled = synchronously { queue.sync(label: "inline") { ThreadActivity.current.read().work } }
        #expect(labelled == "inline")
        #expect(ThreadActivity.current.read().work != "inline")
    }

    @Test("A sync caller running its turn holds the queue; waitUntilIdle waits in idle for it")
    func idleWait() async throws {
        let queue = ThrottledQueue(label: "dq-idle", interval: .zero)
        let inside = Latch(), release = Latch(), syncDone = Latch()
        let runnerID = LockedValue<Int32>(0)
        Thread {
            queue.sync(label: "inline work") {
                runnerID.withLock { $0 = ThreadActivity.currentKernelThreadID() }
                inside.countDown()
                release.wait(timeout: .seconds(60))
            }
            syncDone.countDown()
        }.start()
        defer { release.countDown() }
        #expect(inside.wait(timeout: .seconds(10)))
        let blocked = try #require(await BlockedCaller.start { queue.waitUntilIdle() })
        let runner = runnerID.withLock { $0 }
        // The caller's thread belongs to no component; it shows among the other threads, running its label.
        let row = Diagnostics.snapshot().otherThreads.first { $0.kernelThreadID == runner }
        #expect(row?.state == .running)
        #expect(row?.work == "inline work")
        let wait = try #require(blocked.edge())
        #expect(wait.kind == "idle")
        #expect(wait.waitsFor == "ThrottledQueue \"dq-idle\"")
        #expect(wait.holder?.kernelThreadID == runner)
        release.countDown()
        #expect(blocked.returned.wait(timeout: .seconds(10)))
        #expect(syncDone.wait(timeout: .seconds(10)))
    }

    @Test("A throttled queue leaves the inventory when it is released")
    func leavesOnRelease() async throws {
        weak var weakQueue: ThrottledQueue?
        do {
            let queue = ThrottledQueue(label: "dq-leaving")
            weakQueue = queue
            let entry = try #require(Self.component("dq-leaving"))
            #expect(entry.pendingCount == 0)
            #expect(entry.pending.isEmpty)
            #expect(entry.threads.isEmpty)
        }
        // Another test's snapshot may be reading it this moment: it goes once that read ends.
        #expect(await eventually(pollingEvery: .milliseconds(50)) { weakQueue == nil })
        #expect(Self.component("dq-leaving") == nil)
    }
}

extension Snapshot.Component {
    /// This component's block of `snapshot`'s text.
    func description(in snapshot: Snapshot) -> String {
        snapshot.description.components(separatedBy: "\n\n").first { $0.hasPrefix("\(kind) \"\(name)\"") } ?? ""
    }
}

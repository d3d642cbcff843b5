import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// ThrottledQueue on real threads and real clocks.
///
/// The throttle's rules themselves (every monitor, mutability, interval change, rate limit and
/// pause) are proven exactly, with made-up instants, in ``ThrottleScheduleTests``. Here each rule is
/// checked once end to end (the gap, `.serial`, the rate window, a pause, cancelling), together
/// with what only real threads show: `sync` and `run`, waking, threads and their CPU use.
///
/// Every start is checked against the rules with no tolerance in the early direction, and with
/// 250 ms in the late one (a loaded 2-core machine). How the early check stays exact: a task measures
/// its start first thing in its body and its end last thing, so a measured start is never earlier
/// than the start the queue recorded, and a measured end never later than the end it recorded. The
/// earliest allowed start of each task is then rebuilt from instants that cannot be later than the
/// queue's own (submissions measured before the call, measured ends, and the *bound* of the previous
/// start rather than its measured start), so a measured start below its bound is a real violation.
///
/// Blocking calls (`waitUntilIdle`, `sync`) run on threads of their own, never on Swift's
/// cooperative pool, so the suite never starves other suites' tasks. The suite is serialized: its
/// timing is its own.
@Suite("ThrottledQueue", .serialized, .timeLimit(.minutes(1)))
struct ThrottledQueueTests {
    typealias Instant = ContinuousClock.Instant

    /// How late a start may be on a loaded machine.
    static let lateness = Duration.milliseconds(250)

    /// How late a `run` start may be: its work resumes on Swift's shared cooperative threads (two on
    /// this machine), which other suites running in parallel, exit tests above all, can hold for a
    /// while. The queue's own lateness is bounded by ``lateness``; "never early" stays exact.
    static let asyncLateness = Duration.seconds(1)

    // MARK: - Helpers

    /// What one task saw.
    struct Run: Sendable {
        var tag: Int
        /// Measured first thing in the task's body.
        var start: Instant
        /// Measured last thing in the task's body.
        var end: Instant
        var threadName: String
        /// The thread that ran the task (`nil` for async work, which may move between threads).
        var thread: ObjectIdentifier?
    }

    /// Collects what tasks saw, from any thread.
    final class RunRecorder: Sendable {
        private let runs = Recorder<Run>()

        /// A task that records itself as `tag`, runs `body` and lasts at least `duration`.
        func task(_ tag: Int, lasting duration: Duration = .zero, _ body: @escaping @Sendable () -> Void = {}) -> @Sendable () -> Void {
            { [self] in
                let start = ContinuousClock.now
                body()
                if duration > .zero { Thread.sleep(forTimeInterval: duration.seconds) }
                record(tag, start: start)
            }
        }

        /// Records `tag` as having started at `start` and ending now, on this thread.
        func record(_ tag: Int, start: Instant) {
            let name = Thread.current.name ?? ""
            let thread = ObjectIdentifier(Thread.current)
            let end = ContinuousClock.now
            runs.append(Run(tag: tag, start: start, end: end, threadName: name, thread: thread))
        }

        /// Every run so far, in order of their starts.
        var all: [Run] { runs.values.sorted { $0.start < $1.start } }
        var count: Int { runs.count }
    }

    /// Set once, from any thread.
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

    struct Failure: Error, Equatable {
        var code: Int
    }

    /// The name of the threads that blocking calls (`sync`, `waitUntilIdle`) are made from.
    static let caller = "TQ test caller"

    /// Submits a task that blocks `queue` until the returned gate opens (60 s at most), and
    /// returns once it runs.
    static func occupy(_ queue: ThrottledQueue, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Latch {
        let gate = Latch(), started = Flag()
        try queue.async {
            started.set()
            gate.wait(timeout: .seconds(60))
        }
        #expect(await eventually(timeout: .seconds(3)) { started.isSet }, "the blocking task did not start", sourceLocation: sourceLocation)
        return gate
    }

    /// Waits for every task of `queues` to finish, off the cooperative pool.
    ///
    /// A queue that is still busy after `timeout` is a failure, not a hang: the issue is recorded and
    /// the queues' waiting tasks are cancelled, so that the test can go on and end.
    static func waitUntilIdle(_ queues: ThrottledQueue..., within timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation) async {
        let idle = Latch()
        Thread {
            for queue in queues { queue.waitUntilIdle() }
            idle.countDown()
        }.start()
        if await !onNewThread({ idle.wait(timeout: timeout) }) {
            Issue.record("the queues were still busy after \(timeout)", sourceLocation: sourceLocation)
            for queue in queues { queue.cancelAll() }
        }
    }

    /// Expects `runs`, in queue order, to keep the queue's rules: never a nanosecond earlier than
    /// allowed, and late by less than 250 ms. Returns each start's lower bound.
    ///
    /// - Parameters:
    ///   - gaps: The gap after each task.
    ///   - submitted: For each task, instants measured just before and just after its submission.
    ///   - notBefore: A pause in force: no task starts before it.
    @discardableResult
    static func expectThrottled(
        _ runs: [Run], gaps: [Duration], monitor: ThrottledQueue.Monitor = .concurrent, limit: RateLimit? = nil,
        submitted: [ClosedRange<Instant>], notBefore: Instant? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> [Instant] {
        #expect(runs.count == gaps.count, "runs", sourceLocation: sourceLocation)
        #expect(runs.count == submitted.count, "submissions", sourceLocation: sourceLocation)
        guard runs.count == gaps.count, runs.count == submitted.count else { return [] }
        var lower: [Instant] = []
        for k in runs.indices {
            var earliest = submitted[k].lowerBound
            var latest = submitted[k].upperBound
            if let notBefore {
                earliest = max(earliest, notBefore)
                latest = max(latest, notBefore)
            }
            if k > 0 {
                let previous = runs[k - 1]
                switch monitor {
                case .concurrent:
                    earliest = max(earliest, previous.end, lower[k - 1] + gaps[k - 1])
                    latest = max(latest, previous.end, previous.start + gaps[k - 1])
                case .serial:
                    earliest = max(earliest, previous.end + gaps[k - 1])
                    latest = max(latest, previous.end + gaps[k - 1])
                }
            }
            if let limit, k >= limit.count {
                earliest = max(earliest, lower[k - limit.count] + limit.window)
                latest = max(latest, runs[k - limit.count].start + limit.window)
            }
            lower.append(earliest)
            #expect(runs[k].start >= earliest, "task \(runs[k].tag) started \(earliest - runs[k].start) early", sourceLocation: sourceLocation)
            #expect(runs[k].start - latest < lateness, "task \(runs[k].tag) started \(runs[k].start - latest) late", sourceLocation: sourceLocation)
        }
        return lower
    }

    /// Submits to `queue` one task per entry of `durations`, tagged 0, 1, … and lasting that long, and
    /// waits until the queue is idle. Returns the runs in start order and the instants just before
    /// and just after the submissions.
    static func submitAndWait(
        _ queue: ThrottledQueue, lasting durations: [Duration], sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (runs: [Run], window: ClosedRange<Instant>) {
        let recorder = RunRecorder()
        let before = ContinuousClock.now
        for (tag, duration) in durations.enumerated() { try queue.async(recorder.task(tag, lasting: duration)) }
        let after = ContinuousClock.now
        await waitUntilIdle(queue, sourceLocation: sourceLocation)
        return (recorder.all, before...after)
    }

    /// The same submission window for `count` tasks.
    static func submitted(_ range: ClosedRange<Instant>, count: Int) -> [ClosedRange<Instant>] {
        Array(repeating: range, count: count)
    }

    // MARK: - The rules, end to end: the gap and .serial

    @Test("The first task on an idle queue starts at once; after its gap has passed, a new task starts at once again")
    func idleQueueStartsAtOnce() async throws {
        let queue = ThrottledQueue(label: "TQ idle", interval: .milliseconds(200))
        let recorder = RunRecorder()
        let before0 = ContinuousClock.now
        try queue.async(recorder.task(0))
        let after0 = ContinuousClock.now
        try queue.async(recorder.task(1))  // inside the gap: waits for its end
        let after1 = ContinuousClock.now
        await Self.waitUntilIdle(queue)

        let first = recorder.all
        #expect(first.map(\.tag) == [0, 1])
        try #require(first.count == 2)
        // "At once": no gap is waited; what remains is the time a loaded machine takes to wake the
        // queue's thread, bounded like every lateness here.
        #expect(first[0].start - before0 < Self.lateness, "the first task started \(first[0].start - before0) after submission")

        // Wait until the gap after task 1 has passed, then submit to the idle queue.
        try await Task.sleep(until: first[1].start + .milliseconds(230))
        let before2 = ContinuousClock.now
        try queue.async(recorder.task(2))
        let after2 = ContinuousClock.now
        await Self.waitUntilIdle(queue)

        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1, 2])
        try #require(runs.count == 3)
        #expect(runs[2].start - before2 < Self.lateness, "a task on an idle queue started \(runs[2].start - before2) after submission")
        Self.expectThrottled(
            runs, gaps: Array(repeating: .milliseconds(200), count: 3),
            submitted: [before0...after0, after0...after1, before2...after2])
    }

    @Test(".serial counts the gap from the previous task's end")
    func serialCountsFromTheEnd() async throws {
        let queue = ThrottledQueue(label: "TQ serial", interval: .milliseconds(100), monitor: .serial)
        let (runs, window) = try await Self.submitAndWait(queue, lasting: [.milliseconds(150), .milliseconds(10), .zero])
        #expect(runs.map(\.tag) == [0, 1, 2])
        try #require(runs.count == 3)
        #expect(runs[1].start >= runs[0].end + .milliseconds(100))
        #expect(runs[2].start >= runs[1].end + .milliseconds(100))
        Self.expectThrottled(runs, gaps: Array(repeating: .milliseconds(100), count: 3), monitor: .serial, submitted: Self.submitted(window, count: 3))
    }

    // MARK: - sync

    @Test("sync returns the work's value and rethrows its error")
    func syncReturnsAndRethrows() async throws {
        let queue = ThrottledQueue(label: "TQ sync value", interval: .milliseconds(20))
        let values: [Int] = await onNewThread(named: Self.caller) {
            var values = [queue.sync { 42 }, queue.sync(interval: .zero) { 43 }]
            do {
                try queue.sync { () throws -> Void in throw Failure(code: 7) }
                values.append(0)
            } catch let failure as Failure {
                values.append(failure.code)
            } catch {
                values.append(-1)
            }
            do {
                _ = try queue.sync(interval: .milliseconds(5)) { () throws -> Int in throw Failure(code: 8) }
            } catch let failure as Failure {
                values.append(failure.code)
            } catch {
                values.append(-1)
            }
            values.append(queue.sync { 44 })  // a thrown error ended its task: the queue goes on
            return values
        }
        #expect(values == [42, 43, 7, 8, 44])
        #expect(queue.pendingCount == 0)
    }

    @Test("sync returns once its work has run, long before the gap that follows it")
    func syncReturnsBeforeTheFollowingGap() async throws {
        let queue = ThrottledQueue(label: "TQ sync gap", interval: .milliseconds(500))
        let recorder = RunRecorder()
        let (before, returned, afterSecond): (Instant, Instant, Instant) = await onNewThread(named: Self.caller) {
            let before = ContinuousClock.now
            queue.sync { recorder.record(0, start: .now) }
            let returned = ContinuousClock.now
            queue.sync { recorder.record(1, start: .now) }
            return (before, returned, ContinuousClock.now)
        }
        #expect(returned - before < Self.lateness, "the first sync on an idle queue took \(returned - before), the gap is 500 ms")
        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1])
        try #require(runs.count == 2)
        #expect(afterSecond >= runs[1].end)
        Self.expectThrottled(runs, gaps: [.milliseconds(500), .milliseconds(500)], submitted: [before...returned, returned...afterSecond])
    }

    @Test("A sync from inside the queue's own task does not deadlock: it waits the gap and runs there, ahead of queued tasks")
    func nestedSyncRunsInPlace() async throws {
        let queue = ThrottledQueue(label: "TQ nested", interval: .milliseconds(100))
        let recorder = RunRecorder()
        let outerThread = LockedValue<ObjectIdentifier?>(nil)
        let nestedResult = LockedValue<[Int]>([])
        queue.pause(for: .seconds(60))
        let before = ContinuousClock.now
        try queue.async {
            let start = ContinuousClock.now
            outerThread.value = ObjectIdentifier(Thread.current)
            let value = queue.sync { () -> Int in
                recorder.record(1, start: .now)
                return 11
            }
            var caught = 0
            do {
                try queue.sync(interval: .zero) { () throws -> Void in
                    recorder.record(2, start: .now)
                    throw Failure(code: 12)
                }
            } catch let failure as Failure {
                caught = failure.code
            } catch {
                caught = -1
            }
            nestedResult.value = [value, caught]
            recorder.record(0, start: start)
        }
        try queue.async(recorder.task(3))
        queue.resume()
        let after = ContinuousClock.now
        await Self.waitUntilIdle(queue)

        #expect(nestedResult.value == [11, 12])
        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1, 2, 3], "the nested syncs ran inside task 0, before task 3")
        try #require(runs.count == 4)
        let outer = try #require(outerThread.value)
        #expect(runs[1].thread == outer && runs[2].thread == outer, "nested syncs run on the task's own thread")
        #expect(runs[3].start >= runs[0].end)
        // Starts in order: outer (gap 100), nested (gap 100), nested (gap 0), queued task 3.
        var lower = before
        #expect(runs[1].start >= lower + .milliseconds(100))
        lower = lower + .milliseconds(100)
        #expect(runs[2].start >= lower + .milliseconds(100))
        lower = lower + .milliseconds(100)
        #expect(runs[3].start >= max(lower, runs[0].end))
        #expect(runs[3].start - max(runs[2].start, runs[0].end) < Self.lateness)
        #expect(runs[1].start - after < .milliseconds(100) + Self.lateness)
        #expect(queue.pendingCount == 0)
    }

    @Test("resume() reaches a nested sync that waits out a pause")
    func resumeReachesANestedSync() async throws {
        let queue = ThrottledQueue(label: "TQ nested resume", interval: .zero)
        let recorder = RunRecorder()
        let paused = Flag()
        try queue.async(recorder.task(0) {
            queue.pause(for: .seconds(5))
            paused.set()
            queue.sync { recorder.record(1, start: .now) }
        })
        #expect(await eventually(timeout: .seconds(3)) { paused.isSet })
        try await Task.sleep(for: .milliseconds(100))
        let resumed = ContinuousClock.now
        queue.resume()
        await Self.waitUntilIdle(queue)
        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1])
        try #require(runs.count == 2)
        #expect(runs[1].start >= resumed)
        #expect(runs[1].start - resumed < Self.lateness, "the nested sync started \(runs[1].start - resumed) after resume()")
    }

    @Test("A sync from another thread waits its turn behind queued tasks and runs on the calling thread")
    func syncFromAnotherThreadRunsOnCaller() async throws {
        let queue = ThrottledQueue(label: "TQsync", interval: .milliseconds(50))
        let recorder = RunRecorder()
        queue.pause(for: .seconds(60))
        let before = ContinuousClock.now
        try queue.async(recorder.task(0))
        try queue.async(recorder.task(1))
        let caller = Task {
            await onNewThread(named: Self.caller) {
                queue.sync { () -> String in
                    recorder.record(2, start: .now)
                    return Thread.current.name ?? ""
                }
            }
        }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 3 })
        try queue.async(recorder.task(3))
        queue.resume()
        let after = ContinuousClock.now
        #expect(await caller.value == Self.caller)
        await Self.waitUntilIdle(queue)

        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1, 2, 3])
        try #require(runs.count == 4)
        #expect(runs[2].threadName == Self.caller)
        #expect(runs[0].threadName == "TQsync Thread1")
        Self.expectThrottled(runs, gaps: Array(repeating: .milliseconds(50), count: 4), submitted: Self.submitted(before...after, count: 4))
    }

    // In AHDispatch, sync from the main thread deadlocked: waiting out the gap needed the main queue.
    @Test("sync from a thread with no run loop (the test's own) waits out the gap and returns")
    func syncNeedsNoMainQueue() throws {
        // Called on the test's own thread (a cooperative-pool thread with no run loop), twice so
        // that the second waits out a gap.
        let queue = ThrottledQueue(label: "TQ no main", interval: .milliseconds(60))
        let before = ContinuousClock.now
        let first = queue.sync { ContinuousClock.now }
        let second = queue.sync { ContinuousClock.now }
        #expect(second >= before + .milliseconds(60))
        #expect(second - first < .milliseconds(60) + Self.lateness)
    }

    // MARK: - Independence

    // AHDispatch 0.9.1 serialised all queues behind two global locks. Shown by events, not by a total
    // time: one queue holds its worker in a task and another waits out an hour's gap, with work queued
    // behind each, while a third runs all its tasks on its own schedule.
    @Test("Two queues throttle independently: one blocked in a task or waiting out an hour's gap never holds up another")
    func twoQueuesAreIndependent() async throws {
        let blocked = ThrottledQueue(label: "TQ pair A", interval: .zero)
        let waiting = ThrottledQueue(label: "TQ pair W", interval: .seconds(3600))
        let free = ThrottledQueue(label: "TQ pair B", interval: .milliseconds(100))
        let release = Latch(), blockedStarted = Latch(), waitingRan = Latch()
        try blocked.async {
            blockedStarted.countDown()
            _ = release.wait(timeout: .seconds(60))
        }
        try blocked.async {}
        try waiting.async { waitingRan.countDown() }
        try waiting.async {}
        #expect(await guarded { blockedStarted.wait(timeout: .seconds(10)) && waitingRan.wait(timeout: .seconds(10)) } == true)

        let recorder = RunRecorder()
        let before = ContinuousClock.now
        for tag in 0..<5 { try free.async(recorder.task(tag)) }
        let after = ContinuousClock.now
        #expect(await eventually(timeout: .seconds(30)) { recorder.all.count == 5 })

        #expect(blocked.pendingCount == 1, "the blocked queue's second task ran: it was not blocked")
        #expect(waiting.pendingCount == 1, "the hour's gap did not hold the waiting queue's second task")
        #expect(recorder.all.map(\.tag) == [0, 1, 2, 3, 4])
        Self.expectThrottled(recorder.all, gaps: Array(repeating: .milliseconds(100), count: 5), submitted: Self.submitted(before...after, count: 5))
        release.countDown()
        #expect(waiting.cancelAll() == 1)
        await Self.waitUntilIdle(blocked, free)
    }

    // MARK: - Rate limits

    @Test("A rate limit of n per window is never exceeded over any window", arguments: [
        (Duration.zero, RateLimit.rate(3, per: .milliseconds(300)), 10),
        (Duration.milliseconds(50), RateLimit.rate(2, per: .milliseconds(250)), 7),
    ])
    func rateLimitIsNeverExceeded(interval: Duration, limit: RateLimit, count: Int) async throws {
        let queue = ThrottledQueue(label: "TQ rate", interval: interval, limit: limit)
        let (runs, window) = try await Self.submitAndWait(queue, lasting: Array(repeating: .zero, count: count))
        #expect(runs.map(\.tag) == Array(0..<count))
        try #require(runs.count == count)
        // Every window: the (i+n)th start is at least a window after the i-th (whose lower bound
        // stands for it, exactly), so no window of that length holds more than n starts.
        let lower = Self.expectThrottled(runs, gaps: Array(repeating: interval, count: count), limit: limit, submitted: Self.submitted(window, count: count))
        for i in runs.indices.dropLast(limit.count) {
            #expect(runs[i + limit.count].start >= lower[i] + limit.window, "more than \(limit) starting at task \(i)")
        }
        // And the limit does not hold back more than it must: n start at once.
        #expect(runs[limit.count - 1].start - window.lowerBound < Self.lateness)
    }

    // MARK: - Pauses

    @Test("pause(for:) holds the next start; a shorter pause does not shorten it")
    func pauseForHoldsTheNextStart() async throws {
        let queue = ThrottledQueue(label: "TQ pause for", interval: .milliseconds(50))
        let recorder = RunRecorder()
        let before = ContinuousClock.now
        queue.pause(for: .milliseconds(300))
        queue.pause(for: .milliseconds(100))
        try queue.async(recorder.task(0))
        try queue.async(recorder.task(1))
        let after = ContinuousClock.now
        await Self.waitUntilIdle(queue)

        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1])
        Self.expectThrottled(runs, gaps: [.milliseconds(50), .milliseconds(50)], submitted: Self.submitted(before...after, count: 2), notBefore: before + .milliseconds(300))
    }

    @Test("resume() ends a pause at once but keeps the gap")
    func resumeEndsAPause() async throws {
        let queue = ThrottledQueue(label: "TQ resume", interval: .milliseconds(200))
        let recorder = RunRecorder()
        queue.pause(for: .seconds(60))
        try queue.async(recorder.task(0))
        try queue.async(recorder.task(1))
        try await Task.sleep(for: .milliseconds(150))
        #expect(recorder.count == 0, "a task started during a pause")
        #expect(queue.pendingCount == 2)

        let resumed = ContinuousClock.now
        queue.resume()
        let after = ContinuousClock.now
        await Self.waitUntilIdle(queue)
        let runs = recorder.all
        #expect(runs.map(\.tag) == [0, 1])
        Self.expectThrottled(runs, gaps: [.milliseconds(200), .milliseconds(200)], submitted: Self.submitted(resumed...after, count: 2))
    }

    // MARK: - cancelAll, waitUntilIdle, pendingCount

    @Test("cancelAll() returns exactly how many queued tasks will never run, and they never do")
    func cancelAllRemovesQueuedTasks() async throws {
        let queue = ThrottledQueue(label: "TQ cancelAll", interval: .milliseconds(10))
        let recorder = RunRecorder()
        let gate = Latch(), started = Flag()
        try queue.async(recorder.task(0) {
            started.set()
            gate.wait(timeout: .seconds(60))
        })
        for tag in 1...5 { try queue.async(recorder.task(tag)) }
        #expect(await eventually(timeout: .seconds(3)) { started.isSet })
        #expect(queue.pendingCount == 5)
        #expect(queue.cancelAll() == 5)
        #expect(queue.pendingCount == 0)
        #expect(queue.cancelAll() == 0)
        gate.countDown()
        await Self.waitUntilIdle(queue)
        try await Task.sleep(for: .milliseconds(150))
        #expect(recorder.all.map(\.tag) == [0], "cancelled tasks ran")

        // The queue goes on.
        try queue.async(recorder.task(6))
        await Self.waitUntilIdle(queue)
        #expect(recorder.all.map(\.tag) == [0, 6])
    }

    @Test("cancelAll() hands back run waiters (CancellationError) and queued tasks, but a blocked sync caller keeps its place")
    func cancelAllAndWaiters() async throws {
        let queue = ThrottledQueue(label: "TQ cancel waiters", interval: .milliseconds(10))
        let gate = try await Self.occupy(queue)
        let runRan = Flag(), asyncRan = Flag(), syncRan = Flag()
        let waiter = Task { try await queue.run { runRan.set() } }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 1 })
        let syncCaller = Task {
            await onNewThread(named: Self.caller) {
                queue.sync { () -> Int in
                    syncRan.set()
                    return 5
                }
            }
        }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 2 })
        try queue.async { asyncRan.set() }
        #expect(queue.pendingCount == 3)

        #expect(queue.cancelAll() == 2)
        #expect(queue.pendingCount == 1)
        gate.countDown()  // before awaiting the waiter: had it stayed queued, it would now run, not hang
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(await syncCaller.value == 5)
        await Self.waitUntilIdle(queue)
        try await Task.sleep(for: .milliseconds(50))
        #expect(syncRan.isSet)
        #expect(!runRan.isSet)
        #expect(!asyncRan.isSet)
    }

    @Test("waitUntilIdle() returns when every accepted task has finished, not after the gap that follows")
    func waitUntilIdleSkipsTheLastGap() async throws {
        let queue = ThrottledQueue(label: "TQ idle wait", interval: .milliseconds(300))
        let recorder = RunRecorder()
        await Self.waitUntilIdle(queue)  // an idle queue: at once
        let before = ContinuousClock.now
        try queue.async(recorder.task(0))
        try queue.async(recorder.task(1, lasting: .milliseconds(20)))
        let after = ContinuousClock.now
        let (countAtReturn, returned): (Int, Instant) = await onNewThread(named: Self.caller) {
            queue.waitUntilIdle()
            return (recorder.count, ContinuousClock.now)
        }
        #expect(countAtReturn == 2)
        let runs = recorder.all
        try #require(runs.count == 2)
        #expect(returned >= runs[1].end)
        #expect(returned - runs[1].end < Self.lateness, "waitUntilIdle returned \(returned - runs[1].end) after the last task, the gap is 300 ms")
        Self.expectThrottled(runs, gaps: [.milliseconds(300), .milliseconds(300)], submitted: Self.submitted(before...after, count: 2))
    }

    @Test("pendingCount counts accepted tasks that have not started")
    func pendingCountCountsNotStarted() async throws {
        let queue = ThrottledQueue(label: "TQ pending", interval: .zero)
        #expect(queue.pendingCount == 0)
        let gate = Latch(), started = Flag()
        queue.pause(for: .seconds(60))
        try queue.async {
            started.set()
            gate.wait(timeout: .seconds(60))
        }
        for _ in 0..<3 { try queue.async {} }
        #expect(queue.pendingCount == 4)
        queue.resume()
        #expect(await eventually(timeout: .seconds(3)) { started.isSet })
        #expect(queue.pendingCount == 3, "the running task is no longer pending")
        gate.countDown()
        await Self.waitUntilIdle(queue)
        #expect(queue.pendingCount == 0)
    }

    // MARK: - run

    @Test("run throttles async work: one at a time, starts spaced by the interval, each returning its value")
    func runThrottlesAsyncWork() async throws {
        let queue = ThrottledQueue(label: "TQ run", interval: .milliseconds(100))
        let before = ContinuousClock.now
        let runs = try await withThrowingTaskGroup(of: Run.self) { group in
            for tag in 0..<4 {
                group.addTask {
                    try await queue.run {
                        let start = ContinuousClock.now
                        try await Task.sleep(for: .milliseconds(10))
                        return Run(tag: tag, start: start, end: .now, threadName: "", thread: nil)
                    }
                }
            }
            return try await group.reduce(into: [Run]()) { $0.append($1) }
        }
        let starts = runs.sorted { $0.start < $1.start }
        #expect(Set(runs.map(\.tag)) == [0, 1, 2, 3])
        // Whatever order the callers queued in, the k-th start is at least k gaps after the first
        // could have been (an order statistic of starts that are each no earlier than their bound).
        for k in starts.indices {
            #expect(starts[k].start >= before + .milliseconds(100) * k)
            if k > 0 {
                #expect(starts[k].start >= starts[k - 1].end, "run work overlapped")
                #expect(starts[k].start - max(starts[k - 1].start + .milliseconds(100), starts[k - 1].end) < Self.asyncLateness)
            }
        }
    }

    @Test("run returns the work's value and rethrows its error")
    func runReturnsAndRethrows() async throws {
        let queue = ThrottledQueue(label: "TQ run value", interval: .milliseconds(10))
        #expect(try await queue.run { 42 } == 42)
        await #expect(throws: Failure(code: 3)) {
            try await queue.run { () async throws -> Int in throw Failure(code: 3) }
        }
        #expect(try await queue.run { "after" } == "after")
        #expect(queue.pendingCount == 0)
    }

    @Test("run reports its end: .serial counts the gap from the end of the async work")
    func runReportsItsEnd() async throws {
        let queue = ThrottledQueue(label: "TQ run serial", interval: .milliseconds(100), monitor: .serial)
        let first = try await queue.run { () async throws -> (Instant, Instant) in
            let start = ContinuousClock.now
            try await Task.sleep(for: .milliseconds(150))
            return (start, ContinuousClock.now)
        }
        let second = try await queue.run { ContinuousClock.now }
        #expect(second >= first.1 + .milliseconds(100))
        #expect(second - (first.1 + .milliseconds(100)) < Self.asyncLateness)
    }

    @Test("A cancelled run waiter leaves the queue with CancellationError, and its work never runs")
    func cancelledRunWaiterLeaves() async throws {
        let queue = ThrottledQueue(label: "TQ run cancel", interval: .milliseconds(10))
        let gate = try await Self.occupy(queue)
        let ran = Flag()
        let waiter = Task { try await queue.run { ran.set() } }
        #expect(await eventually(timeout: .seconds(3)) { queue.pendingCount == 1 })
        waiter.cancel()
        #expect(queue.pendingCount == 0, "the cancelled waiter left the queue at once")
        gate.countDown()  // before awaiting the waiter: had it stayed queued, it would now run, not hang
        await #expect(throws: CancellationError.self) { try await waiter.value }
        await Self.waitUntilIdle(queue)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!ran.isSet)

        // Already cancelled before calling run: it never queues.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await queue.run { ran.set() }
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(queue.pendingCount == 0)
        #expect(!ran.isSet)
        #expect(try await queue.run { 1 } == 1)
    }

    // MARK: - Threads

    #if os(Linux)
    // AHDispatch waited out the gap in a busy spin.
    @Test("Waiting out a 1 s gap is a timed wait that uses no CPU")
    func gapUsesNoCPU() async throws {
        let queue = ThrottledQueue(label: "TQ cpu", interval: .seconds(1))
        let atEnd = LockedValue<(ThreadUsage, ObjectIdentifier, Instant)?>(nil)
        let atStart = LockedValue<(Instant, ThreadUsage, ObjectIdentifier)?>(nil)
        try queue.async {
            let usage = ThreadUsage.current()
            atEnd.value = (usage, ObjectIdentifier(Thread.current), .now)
        }
        try queue.async {
            let start = ContinuousClock.now
            let usage = ThreadUsage.current()
            atStart.value = (start, usage, ObjectIdentifier(Thread.current))
        }
        await Self.waitUntilIdle(queue)

        let (first, firstThread, end) = try #require(atEnd.value)
        let (start, second, secondThread) = try #require(atStart.value)
        #expect(firstThread == secondThread, "both tasks run on the queue's one worker thread")
        #expect(start - end >= .milliseconds(900))
        let cpu = second.cpuTime - first.cpuTime
        let switches = second.voluntarySwitches - first.voluntarySwitches
        #expect(cpu < .milliseconds(20), "the worker used \(cpu) of CPU during a 1 s gap")
        #expect(switches <= 3, "the worker woke \(switches) times during a 1 s gap")
    }

    @Test("An idle queue's thread is collected by its pool, and the queue gets a new one when work comes")
    func idleThreadIsCollected() async throws {
        let pool = ThreadPool(name: "TQReap", size: 1, keepAlive: .milliseconds(100), collectionInterval: .milliseconds(100))
        let queue = ThrottledQueue(label: "TQ reap", interval: .milliseconds(50), pool: pool)
        let recorder = RunRecorder()
        let seen = Recorder<(threads: Int, kernelName: String?)>()
        for tag in 0..<2 {
            try queue.async(recorder.task(tag) {
                let threads = pool.statistics.threads
                seen.append((threads, KernelThreads.currentName()))
            })
        }
        await Self.waitUntilIdle(queue)
        let whileBusy = seen.values
        #expect(whileBusy.map(\.threads) == [1, 1])
        #expect(whileBusy.map(\.kernelName) == ["TQReap Thread1", "TQReap Thread1"])
        #expect(recorder.all.map(\.threadName) == ["TQReap Thread1", "TQReap Thread1"])

        #expect(await eventually(timeout: .seconds(3)) { pool.statistics.threads == 0 }, "the idle queue's thread was not collected")
        #expect(await eventually(timeout: .seconds(3)) { !KernelThreads.names().contains("TQReap Thread1") }, "the kernel still lists the thread")

        try queue.async(recorder.task(2))
        await Self.waitUntilIdle(queue)
        #expect(recorder.all.map(\.threadName) == ["TQReap Thread1", "TQReap Thread1", "TQReap Thread2"])
    }
    #endif

    @Test("Tasks run on a thread named after the label (\"<label> Thread1\" in the queue's own pool)")
    func tasksRunOnANamedThread() async throws {
        let queue = ThrottledQueue(label: "TQnames", interval: .zero)
        let recorder = RunRecorder()
        let kernelName = LockedValue<String?>(nil)
        try queue.async(recorder.task(0) { kernelName.value = KernelThreads.currentName() })
        await Self.waitUntilIdle(queue)
        #expect(recorder.all.map(\.threadName) == ["TQnames Thread1"])
        #if os(Linux)
        #expect(kernelName.value == "TQnames Thread1")
        #endif

        // A label too long for the kernel: the kernel's name (which Foundation reads back on Linux)
        // keeps the thread's number and as much of the label as fits.
        let long = ThrottledQueue(label: "TQ long label", interval: .zero)
        let longRecorder = RunRecorder()
        try long.async(longRecorder.task(0))
        await Self.waitUntilIdle(long)
        let longName = try #require(longRecorder.all.first?.threadName)
        #if os(Linux)
        #expect(longName == "TQ long Thread1")
        #else
        #expect(longName == "TQ long label Thread1")
        #endif

        // With a given pool, the pool's name.
        let pool = ThreadPool(name: "TQgiven", size: 2)
        let shared = ThrottledQueue(label: "TQ given", interval: .zero, pool: pool)
        let sharedRecorder = RunRecorder()
        try shared.async(sharedRecorder.task(0))
        await Self.waitUntilIdle(shared)
        #expect(sharedRecorder.all.map(\.threadName) == ["TQgiven Thread1"])
        pool.dispose()
    }

    // AHDispatch silently ignored foreign queues and nil blocks.
    @Test("Every accepted closure runs exactly once, in order: the types admit no foreign queue and no nil block")
    func everyAcceptedClosureRunsOnce() async throws {
        let queue = ThrottledQueue(label: "TQ exactly once", interval: .zero)
        // The only things a queue accepts are non-optional closures: there is no queue parameter
        // to get wrong and no nil to pass. These conversions compile only with exactly those types.
        let submit: (@escaping @Sendable () -> Void) throws -> Void = queue.async
        let submitWithInterval: (Duration, @escaping @Sendable () -> Void) throws -> Void = queue.async(interval:_:)

        let counts = AtomicCounters(count: 200)
        let order = Recorder<Int>()
        for index in 0..<200 {
            let work: @Sendable () -> Void = {
                counts.increment(index)
                order.append(index)
            }
            if index.isMultiple(of: 2) { try submit(work) } else { try submitWithInterval(.zero, work) }
        }
        await Self.waitUntilIdle(queue)
        try await Task.sleep(for: .milliseconds(20))
        #expect(counts.values == [Int](repeating: 1, count: 200))
        #expect(order.values == Array(0..<200))
        #expect(queue.pendingCount == 0)
    }
}

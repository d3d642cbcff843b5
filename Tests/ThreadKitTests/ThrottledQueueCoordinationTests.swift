import Foundation
import Testing
@testable @_spi(ThreadKitTools) import ThreadKit

/// Queues that decide their starts through one in-memory coordinator, standing in for processes
/// sharing a limit on Redis: real threads, exact counts, rules checked on the instants the
/// coordinator recorded and on the task bodies' own start instants.
@Suite("ThrottledQueue with a start coordinator", .timeLimit(.minutes(1)))
struct ThrottledQueueCoordinationTests {
    /// A start as a task saw it: its queue, and its start and end on the monotonic clock (µs).
    struct Run: Sendable {
        var queue: String
        var start: Int64
        var end: Int64
    }

    static func now() -> Int64 { CoordinatedStarts.microseconds(.now()) }

    func makeQueues(
        _ count: Int, coordinator: InMemoryCoordinator, interval: Duration, monitor: ThrottledQueue.Monitor = .concurrent,
        limit: RateLimit? = nil, whenUnavailable: UnavailablePolicy = .standard
    ) -> [ThrottledQueue] {
        (0..<count).map { index in
            ThrottledQueue(label: "q\(index)", interval: interval, monitor: monitor, limit: limit,
                           coordinator: coordinator.client("q\(index)"), whenUnavailable: whenUnavailable)
        }
    }

    /// Queues `count` tasks on `queue`, each recording its run (sleeping `duration` first).
    func submit(_ count: Int, to queue: ThrottledQueue, duration: Duration = .zero, into runs: Recorder<Run>) throws {
        for _ in 0..<count {
            try queue.async {
                let start = queue.startOfCurrentTask.map { $0.microsecondsRoundedUp } ?? 0
                if duration > .zero { Thread.sleep(forTimeInterval: Double(duration.components.attoseconds) / 1e18) }
                runs.append(Run(queue: queue.label, start: start, end: Self.now()))
            }
        }
    }

    func waitIdle(_ queues: [ThrottledQueue]) async {
        for queue in queues { await cancelling(after: .seconds(20)) { await queue.waitUntilIdle() } }
    }

    @Test("Queues sharing a coordinator run every task; the recorded starts keep the gap and the window, and no task starts before its reservation")
    func gapAndWindowAcrossQueues() async throws {
        let coordinator = InMemoryCoordinator()
        let limit = RateLimit.rate(3, per: .milliseconds(150))
        let queues = makeQueues(3, coordinator: coordinator, interval: .milliseconds(20), limit: limit)
        let runs = Recorder<Run>()
        for queue in queues { try submit(8, to: queue, into: runs) }
        await waitIdle(queues)
        #expect(runs.count == 24)
        // A reservation reached late (a loaded machine) is given up, counted, and another asked for.
        let reserved = coordinator.reservations
        #expect(reserved.count >= 24)
        for index in reserved.indices.dropFirst() {
            #expect(reserved[index].at - reserved[index - 1].at >= 20_000, "starts \(index - 1) and \(index) closer than the gap")
        }
        for index in reserved.indices.dropFirst(3) {
            #expect(reserved[index].at - reserved[index - 3].at >= 150_000, "more than 3 starts in a window")
        }
        for queue in queues {
            let started = runs.values.filter { $0.queue == queue.label }.map(\.start)
            let reservedHere = reserved.filter { $0.client == queue.label }.map(\.at)
            #expect(started.count == 8)
            expectEachStartAfterItsReservation(started, reservedHere, queue.label)
        }
    }

    /// Each start in `starts` (in order) follows a reservation of its own, later than the previous
    /// start's, by less than a second (reservations given up in between are skipped).
    func expectEachStartAfterItsReservation(_ starts: [Int64], _ reservations: [Int64], _ label: String) {
        var next = reservations.startIndex
        for start in starts {
            guard let used = reservations[next...].lastIndex(where: { $0 <= start }) else {
                Issue.record("\(label) started at \(start) before any reservation of its own left")
                return
            }
            #expect(start - reservations[used] < 1_000_000, "\(label) started a second after its reservation")
            next = used + 1
        }
    }

    @Test(".serial across queues: a task never starts until the gap after another queue's task ended")
    func serialAcrossQueues() async throws {
        let coordinator = InMemoryCoordinator(horizon: .milliseconds(20))
        let queues = makeQueues(2, coordinator: coordinator, interval: .milliseconds(10), monitor: .serial)
        let runs = Recorder<Run>()
        for queue in queues { try submit(6, to: queue, duration: .milliseconds(15), into: runs) }
        await waitIdle(queues)
        let sorted = runs.values.sorted { $0.start < $1.start }
        #expect(sorted.count == 12)
        for index in sorted.indices.dropFirst() {
            #expect(sorted[index].start >= sorted[index - 1].end + 10_000, "run \(index) less than the gap after the end of run \(index - 1)")
        }
        #expect(coordinator.state.lease == nil)
    }

    @Test(".serial: two queues given one coordinator are two askers in line, and take the lease in turn as two processes do")
    func queuesSharingACoordinatorTakeTurns() async throws {
        let coordinator = InMemoryCoordinator(horizon: .milliseconds(50))
        let shared = coordinator.client("shared")
        let queues = ["a", "b"].map {
            ThrottledQueue(label: $0, interval: .zero, monitor: .serial, limit: nil, coordinator: shared, whenUnavailable: .failClosed)
        }
        let runs = Recorder<String>()
        let perQueue = 8
        for index in 0..<perQueue {
            for queue in queues {
                try queue.async {
                    // The first task holds the lease until the other queue stands in line, however
                    // late a loaded machine starts it (5 s at most).
                    let deadline = ContinuousClock.now + .seconds(5)
                    while index == 0, coordinator.state.waiters.isEmpty, ContinuousClock.now < deadline {
                        Thread.sleep(forTimeInterval: 0.001)
                    }
                    Thread.sleep(forTimeInterval: 0.01)
                    runs.append(queue.label)
                }
            }
        }
        await waitIdle(queues)
        let order = runs.values
        #expect(order.count == 2 * perQueue)
        // Neither runs two in a row while the other has tasks waiting, except after a reservation
        // given up (reached late on a loaded machine), whose turn passes to the other queue. With
        // one asker for both, the queue that ends asks again at once, finds itself first in line,
        // and runs its whole backlog.
        var left = ["a": perQueue, "b": perQueue]
        var twiceInARow = 0
        for (previous, next) in zip(order, order.dropFirst()) {
            left[previous, default: 0] -= 1
            if previous == next && left[previous == "a" ? "b" : "a", default: 0] > 0 { twiceInARow += 1 }
        }
        let givenUp = coordinator.reservations.count - order.count
        #expect(twiceInARow <= givenUp, "\(order), \(givenUp) reservations given up")
        #expect(coordinator.state.lease == nil)
    }

    @Test("A pause in one queue pauses the others, and a shorter pause does not shorten it")
    func pauseIsShared() async throws {
        let coordinator = InMemoryCoordinator(horizon: .seconds(2))
        let queues = makeQueues(2, coordinator: coordinator, interval: .zero)
        let before = Self.now()
        queues[0].pause(for: .milliseconds(400))
        queues[1].pause(for: .milliseconds(50))
        let runs = Recorder<Run>()
        try submit(1, to: queues[1], into: runs)
        await waitIdle(queues)
        #expect(runs.count == 1)
        #expect(runs.values.first!.start >= before + 400_000)
    }

    @Test("cancelAll while the worker waits out a reservation removes the task at once and hands the lease back")
    func cancelWhileWaiting() async throws {
        let coordinator = InMemoryCoordinator(horizon: .seconds(120))
        // Another process's start, followed by a minute's gap that this queue's own rules do not have.
        let queues = makeQueues(2, coordinator: coordinator, interval: .seconds(60), monitor: .serial)
        try await queues[0].run {}
        queues[1].interval = .zero
        let runs = Recorder<Run>()
        try submit(1, to: queues[1], into: runs)
        #expect(await eventually { coordinator.reservations.contains { $0.client == "q1" } })
        #expect(coordinator.state.lease != nil)
        let reservedAt = coordinator.reservations.last { $0.client == "q1" }?.at ?? 0
        #expect(queues[1].cancelAll() == 1)
        await waitIdle([queues[1]])
        #expect(await eventually { coordinator.state.lease == nil })
        // At once: long before the reserved start, which was a minute away.
        #expect(Self.now() < reservedAt)
        #expect(runs.count == 0)
    }

    @Test("A run caller cancelled while its turn waits out a reservation throws CancellationError at once")
    func runCancelledWhileWaiting() async throws {
        let coordinator = InMemoryCoordinator(horizon: .seconds(120))
        let queues = makeQueues(2, coordinator: coordinator, interval: .seconds(60))
        try await queues[0].run {}
        let waiting = Task { try await queues[1].run {} }
        #expect(await eventually { coordinator.reservations.contains { $0.client == "q1" } })
        let reservedAt = coordinator.reservations.last { $0.client == "q1" }?.at ?? 0
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        // At once: long before the reserved start, which was a minute away.
        #expect(Self.now() < reservedAt)
    }

    @Test("A sync caller waits out its reservation on its own thread, and sync and async starts share the gap")
    func syncCallers() async throws {
        let coordinator = InMemoryCoordinator()
        let queues = makeQueues(2, coordinator: coordinator, interval: .milliseconds(30))
        let starts = Recorder<Int64>()
        await onThreads(4) { index in
            for _ in 0..<3 {
                queues[index % 2].sync { starts.append(queues[index % 2].startOfCurrentTask!.microsecondsRoundedUp) }
            }
        }
        #expect(starts.count == 12)
        let reserved = coordinator.reservations.map(\.at)
        #expect(reserved.count >= 12)
        for index in reserved.indices.dropFirst() { #expect(reserved[index] - reserved[index - 1] >= 30_000) }
    }

    @Test("A slow coordinator never holds the queue's lock: the queue answers while a reservation is asked for")
    func slowCoordinatorOutsideTheLock() async throws {
        let coordinator = InMemoryCoordinator()
        let release = coordinator.holdReservations()
        let queue = makeQueues(1, coordinator: coordinator, interval: .zero)[0]
        let runs = Recorder<Run>()
        try submit(1, to: queue, into: runs)
        #expect(await eventually { coordinator.isBlocking })
        queue.interval = .milliseconds(5)
        #expect(queue.pendingCount == 1)
        // Both calls took the queue's lock, and returned while the coordinator was still asked.
        #expect(coordinator.isBlocking)
        release.countDown()
        await waitIdle([queue])
        #expect(runs.count == 1)
    }

    // MARK: - The coordinator unavailable

    @Test(".failClosed: nothing starts while the coordinator is down; everything runs once it is back")
    func failClosed() async throws {
        let coordinator = InMemoryCoordinator()
        coordinator.fail(.refused)
        let queue = makeQueues(1, coordinator: coordinator, interval: .milliseconds(10), whenUnavailable: .failClosed)[0]
        let runs = Recorder<Run>()
        try submit(3, to: queue, into: runs)
        try await Task.sleep(for: .milliseconds(300))
        #expect(runs.count == 0)
        coordinator.fail(nil)
        await waitIdle([queue])
        #expect(runs.count == 3)
        // At least one each (more if a reservation reached late on a loaded machine was given up).
        #expect(coordinator.reservations.count >= 3)
    }

    @Test(".failOpen: the queue's own rules alone while the coordinator is down")
    func failOpen() async throws {
        let coordinator = InMemoryCoordinator()
        coordinator.fail(.refused)
        let queue = makeQueues(1, coordinator: coordinator, interval: .milliseconds(20), whenUnavailable: .failOpen)[0]
        let runs = Recorder<Run>()
        try submit(5, to: queue, into: runs)
        await waitIdle([queue])
        #expect(runs.count == 5)
        #expect(coordinator.reservations.isEmpty)
        let starts = runs.values.map(\.start)
        for index in starts.indices.dropFirst() { #expect(starts[index] - starts[index - 1] >= 20_000) }
    }

    @Test(".localFallback: at the share of the rate while the coordinator is down, coordinated again once it is back")
    func localFallback() async throws {
        let coordinator = InMemoryCoordinator()
        coordinator.fail(.timeout(after: .milliseconds(30)))
        let queue = makeQueues(1, coordinator: coordinator, interval: .milliseconds(100), whenUnavailable: .localFallback(share: 0.5))[0]
        let runs = Recorder<Run>()
        // Each task also reads the start its queue's fallback recorded for it (on the same clock).
        let fallbackStarts = Recorder<Int64>()
        for _ in 0..<4 {
            try queue.async {
                runs.append(Run(queue: queue.label, start: queue.startOfCurrentTask!.microsecondsRoundedUp, end: Self.now()))
                fallbackStarts.append(queue.mutex.withLock { queue.coordination!.starts.fallback.lastStart! })
            }
        }
        await waitIdle([queue])
        #expect(runs.count == 4)
        #expect(coordinator.reservations.isEmpty)
        let recorded = fallbackStarts.values
        // The fallback's gap is 200 ms (the queue's own, 100 ms), and no task starts before its time.
        for index in recorded.indices.dropFirst() { #expect(recorded[index] - recorded[index - 1] >= 200_000) }
        for (run, at) in zip(runs.values, recorded) { #expect(run.start >= at) }
        coordinator.fail(nil)
        try await Task.sleep(for: .milliseconds(100))
        try submit(2, to: queue, into: runs)
        await waitIdle([queue])
        #expect(runs.count == 6)
        #expect(coordinator.reservations.count >= 2)
    }

    // MARK: - Step 2

    @Test(".serial: a nested run cancelled while it waits out its reservation gives the lease back when its holder ends, not at the lease's expiry")
    func cancelledNestedReservationGivenUp() async throws {
        let coordinator = InMemoryCoordinator(horizon: .seconds(30), leaseTTL: .seconds(60))
        let queues = makeQueues(2, coordinator: coordinator, interval: .zero, monitor: .serial)
        try await queues[0].run {
            // Another process's pause, shared: the nested start is reserved 10 s out.
            queues[1].pause(for: .seconds(10))
            await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await queues[0].run {} }
                // The nested start holds the lease too (the outer one may have been reserved more
                // than once, a reservation reached late on a loaded machine being given up).
                #expect(await eventually { coordinator.state.lease.map { $0.reserves - $0.ends } == 2 })
                group.cancelAll()
                await #expect(throws: CancellationError.self) { try await group.next() }
            }
        }
        let endedAt = Self.now()
        #expect(await eventually(timeout: .seconds(8)) { coordinator.state.lease == nil })
        #expect(Self.now() - endedAt < 8_000_000)
    }

    @Test("A queue whose rules differ from the shared ones is told so and applies its fallback, leaving the shared rules as they were")
    func mismatchedRulesFallBack() async throws {
        let coordinator = InMemoryCoordinator()
        // Its 10 min gap keeps the shared state (and its rules) alive while the other queue asks.
        let concurrent = makeQueues(1, coordinator: coordinator, interval: .seconds(600))[0]
        let limited = ThrottledQueue(
            label: "limited", interval: .milliseconds(20), limit: .rate(5, per: .seconds(1)),
            coordinator: coordinator.client("limited"), whenUnavailable: .localFallback(share: 0.5))
        let runs = Recorder<Run>()
        try submit(1, to: concurrent, into: runs)
        await waitIdle([concurrent])
        // Each task reads the start its queue's fallback recorded for it (its reservation).
        let fallbackStarts = Recorder<Int64>()
        for _ in 0..<2 {
            try limited.async {
                runs.append(Run(queue: limited.label, start: limited.startOfCurrentTask!.microsecondsRoundedUp, end: Self.now()))
                fallbackStarts.append(limited.mutex.withLock { limited.coordination!.starts.fallback.lastStart! })
            }
        }
        await waitIdle([limited])
        #expect(runs.count == 3)
        // Only q0's (more than one if a reservation reached late was given up on a loaded machine).
        #expect(Set(coordinator.reservations.map(\.client)) == ["q0"])
        #expect(coordinator.state.rules == SharedThrottle.Rules(monitor: .concurrent, limit: nil))
        // The fallback decided: its gap is 40 ms (20 ms at a share of 0.5), and no task started
        // before the start the fallback reserved for it.
        let recorded = fallbackStarts.values
        #expect(recorded.count == 2 && recorded[1] - recorded[0] >= 40_000)
        for (run, at) in zip(runs.values.filter { $0.queue == "limited" }, recorded) { #expect(run.start >= at) }
    }

    @Test("The public initializer: .local makes a queue of its own; a package coordinator with a Fallback decides through it")
    func publicCoordination() async throws {
        let local = ThrottledQueue(label: "local", interval: .milliseconds(10), monitor: .serial, limit: nil, coordination: .local)
        #expect(local.coordination == nil)
        let runs = Recorder<Run>()
        try submit(3, to: local, into: runs)
        await waitIdle([local])
        #expect(runs.count == 3)
        let coordinator = InMemoryCoordinator()
        coordinator.fail(.refused)
        let shared = ThrottledQueue(
            label: "shared", interval: .milliseconds(10),
            coordination: Coordination(coordinator: coordinator.client("shared"), whenUnavailable: .failClosed))
        #expect(shared.coordination?.starts.policy == .failClosed)
        try submit(1, to: shared, into: runs)
        try await Task.sleep(for: .milliseconds(200))
        #expect(runs.count == 3)
        coordinator.fail(nil)
        await waitIdle([shared])
        #expect(runs.count == 4)
        #expect(Set(coordinator.reservations.map(\.client)) == ["shared"])
    }
}


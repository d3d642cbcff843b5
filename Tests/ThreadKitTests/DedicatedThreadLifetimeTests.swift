import Foundation
import Testing
@testable import ThreadKit

/// A `DedicatedThread` that nothing references any more runs what it accepted, then its thread
/// ends, as a released `TimerThread`'s does. Threads are told apart by their kernel name.
@Suite("DedicatedThread lifetime", .timeLimit(.minutes(1)))
struct DedicatedThreadLifetimeTests {
    /// The names of `names` that the kernel still lists.
    static func alive(_ names: [String]) -> [String] {
        let live = Set(KernelThreads.names())
        return names.filter(live.contains)
    }

    @Test("100 dropped DedicatedThreads, a third with queued work, run that work and all their threads end")
    func droppedThreadsRunTheirQueueAndEnd() async throws {
        let names = (0..<100).map { _ in KernelThreads.uniqueName("DTgone") }
        let ran = AtomicCounters(count: names.count)
        do {
            let threads = names.map { DedicatedThread(name: $0) }
            // Each thread has run something, so each kernel thread is up before the drop.
            for thread in threads { try await thread.run {} }
            for (index, thread) in threads.enumerated() where index % 3 == 0 {
                // The first item keeps the thread busy, so the rest is still queued when it is dropped.
                try thread.execute {
                    usleep(20_000)
                    ran.increment(index)
                }
                try thread.execute { ran.increment(index) }
                try thread.execute { ran.increment(index) }
            }
            #expect(Self.alive(names).count == 100)
        }
        #expect(await eventually(timeout: .seconds(10)) { Self.alive(names).isEmpty },
                "still alive: \(Self.alive(names).count) of 100")
        let expected = (0..<names.count).map { $0 % 3 == 0 ? 3 : 0 }
        #expect(ran.values == expected)
    }

    @Test("A dropped paused thread resumes, runs its queue and ends")
    func droppedPausedThreadDrainsAndEnds() async throws {
        let name = KernelThreads.uniqueName("DTgoneP")
        let ran = Counter()
        do {
            let thread = DedicatedThread(name: name)
            try await thread.run {}
            thread.pause()
            for _ in 0..<5 { try thread.execute { ran.increment() } }
        }
        #expect(await eventually(timeout: .seconds(10)) { Self.alive([name]).isEmpty }, "the thread \(name) is still alive")
        #expect(ran.value == 5)
    }

    @Test("Queued work that captures its thread keeps it until that work has run; then the thread ends")
    func workCapturingItsThreadKeepsItUntilItRan() async throws {
        let name = KernelThreads.uniqueName("DTgoneS")
        let seen = LockedValue<Bool?>(nil)
        let gate = Latch()
        let started = Latch()
        do {
            let thread = DedicatedThread(name: name)
            try thread.execute {
                started.countDown()
                gate.wait(timeout: .seconds(10))
            }
            try thread.execute { seen.value = thread.isCurrent }
        }
        // The second closure holds the thread: it must not end before that closure has run.
        #expect(started.wait(timeout: .seconds(10)))
        #expect(Self.alive([name]) == [name])
        gate.countDown()
        #expect(await eventually(timeout: .seconds(10)) { Self.alive([name]).isEmpty }, "the thread \(name) is still alive")
        #expect(seen.value == true)
    }

    @Test("An actor's dedicated thread ends once the actor and its thread are dropped")
    func actorsThreadEndsWithTheActor() async throws {
        let name = KernelThreads.uniqueName("DTgoneA")
        do {
            let counter = PinnedCounter(thread: DedicatedThread(name: name))
            #expect(await counter.increment() == 1)
        }
        #expect(await eventually(timeout: .seconds(10)) { Self.alive([name]).isEmpty }, "the thread \(name) is still alive")
    }
}

/// `DedicatedThread.run` follows the package's cancellation rule: cancelled before the thread
/// starts the work, the work never runs and the await throws `CancellationError`; once started,
/// the work runs to its end and the await returns its result.
@Suite("DedicatedThread.run and cancellation", .timeLimit(.minutes(1)))
struct DedicatedThreadRunCancellationTests {
    @Test("Cancelled while queued: the work never runs, and the await throws CancellationError at once")
    func cancelledBeforeStartNeverRuns() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTcan"))
        defer { thread.dispose() }
        let blocker = Latch()
        let blocking = Latch()
        try thread.execute {
            blocking.countDown()
            blocker.wait(timeout: .seconds(20))
        }
        #expect(await onNewThread { blocking.wait(timeout: .seconds(10)) })
        let ran = Counter()
        let outcome = LockedValue<Result<Int, any Error>?>(nil)
        let task = Task {
            do {
                outcome.value = .success(try await thread.run { () -> Int in
                    ran.increment()
                    return 1
                })
            } catch {
                outcome.value = .failure(error)
            }
        }
        #expect(await eventually { thread.pendingCount == 1 })
        task.cancel()
        // The thread is still busy: only the cancellation can end the await now.
        let ended = await eventually(timeout: .seconds(5)) { outcome.value != nil }
        blocker.countDown()
        await task.value
        #expect(ended, "the await did not end while the work was queued")
        #expect(throws: CancellationError.self) { try outcome.value?.get() }
        try await thread.run {}  // everything queued before has had its turn
        #expect(ran.value == 0)
    }

    @Test("Cancelled before the call: nothing is queued, and the await throws CancellationError")
    func alreadyCancelledSubmitsNothing() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTcan0"))
        defer { thread.dispose() }
        let ran = Counter()
        let gate = Latch()
        let task = Task {
            gate.wait(timeout: .seconds(10))
            return try await thread.run { ran.increment() }
        }
        task.cancel()
        gate.countDown()
        await #expect(throws: CancellationError.self) { try await task.value }
        try await thread.run {}
        #expect(ran.value == 0)
    }

    @Test("Cancelled once started: the work runs to its end and the await returns its result")
    func cancelledAfterStartReturnsTheResult() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTcan1"))
        defer { thread.dispose() }
        let started = Latch()
        let proceed = Latch()
        let finished = Counter()
        let task = Task {
            try await thread.run { () -> Int in
                started.countDown()
                proceed.wait(timeout: .seconds(10))
                finished.increment()
                return 42
            }
        }
        #expect(await onNewThread { started.wait(timeout: .seconds(10)) })
        task.cancel()
        proceed.countDown()
        #expect(try await task.value == 42)
        #expect(finished.value == 1)
    }
}

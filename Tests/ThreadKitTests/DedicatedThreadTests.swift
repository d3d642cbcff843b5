import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// A counter whose invariant (`value == increments`, never two callers inside at once) breaks if
/// two threads ever run its methods at the same time.
actor PinnedCounter {
    let thread: DedicatedThread
    private var value = 0
    private var inside = 0
    private(set) var offThreadRuns = 0
    private(set) var overlaps = 0

    init(thread: DedicatedThread) {
        self.thread = thread
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    func increment() -> Int {
        if !thread.isCurrent { offThreadRuns += 1 }
        inside += 1
        if inside != 1 { overlaps += 1 }
        let before = value
        value = before + 1
        inside -= 1
        return value
    }

    func incrementAcrossASuspension() async -> Int {
        let start = value
        await Task.yield()
        if !thread.isCurrent { offThreadRuns += 1 }
        value += 1
        return value - start
    }

    var current: Int { value }
}

@Suite("DedicatedThread", .timeLimit(.minutes(1)))
struct DedicatedThreadTests {
    /// Disposes `thread` and waits for it to end.
    private func finish(_ thread: DedicatedThread) {
        thread.dispose()
        #expect(thread.awaitTermination(timeout: .seconds(10)))
    }

    @Test("200,000 closures from 4 producers run exactly once, in each producer's order, all on the one thread")
    func fifoFromFourProducers() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTfifo"))
        let perProducer = 50_000
        let producers = 4
        // Only the dedicated thread writes these, one closure at a time: plain memory, on purpose.
        final class Seen: @unchecked Sendable {
            var last = [Int](repeating: -1, count: 4)
            var outOfOrder = 0
            var runs = 0
            var threadIDs = Set<Int32>()
        }
        let seen = Seen()
        await onThreads(producers) { producer in
            for index in 0..<perProducer {
                try? thread.execute {
                    if seen.last[producer] != index - 1 { seen.outOfOrder += 1 }
                    seen.last[producer] = index
                    seen.runs += 1
                    if index % 1000 == 0 { seen.threadIDs.insert(KernelThreads.currentID()) }
                }
            }
        }
        let done = try await thread.run { (seen.runs, seen.outOfOrder, seen.last, seen.threadIDs) }
        #expect(done.0 == producers * perProducer)
        #expect(done.1 == 0)
        #expect(done.2 == [Int](repeating: perProducer - 1, count: producers))
        #expect(done.3.count == 1)
        finish(thread)
    }

    @Test("An actor on a DedicatedThread under 8 concurrent callers keeps its invariants and never runs off the thread")
    func actorOnDedicatedThread() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTactor"))
        let counter = PinnedCounter(thread: thread)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<500 { _ = await counter.increment() }
                    for _ in 0..<50 { _ = await counter.incrementAcrossASuspension() }
                }
            }
        }
        #expect(await counter.current == 8 * 550)
        #expect(await counter.offThreadRuns == 0)
        #expect(await counter.overlaps == 0)
        finish(thread)
    }

    @Test("As a task executor, child tasks that prefer it run on the thread")
    func taskExecutorPreference() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTexec"))
        let onThread = await withTaskExecutorPreference(thread) {
            await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<4 { group.addTask { thread.isCurrent } }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
        }
        #expect(onThread == [true, true, true, true])
        finish(thread)
    }

    @Test("The thread carries its name, in Foundation and in the kernel")
    func names() async throws {
        let name = KernelThreads.uniqueName("DTname")
        let thread = DedicatedThread(name: name)
        let seen = try await thread.run { (KernelThreads.currentName(), Thread.current.name, NamedThread.currentName()) }
        #expect(seen.0 == name)
        #expect(seen.1 == name)
        #expect(seen.2 == name)
        #expect(thread.name == name)
        finish(thread)
    }

    @Test("sync runs on the thread and returns its value; on the thread itself it runs inline")
    func syncFromOutsideAndInside() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTsync"))
        let result = await onNewThread { () -> (Bool, Bool, Int) in
            let outside = thread.isCurrent
            let (onThread, nested) = thread.sync { (thread.isCurrent, thread.sync { 41 } + 1) }
            return (outside, onThread, nested)
        }
        #expect(result == (false, true, 42))
        struct Failure: Error {}
        let threw = await onNewThread { () -> Bool in
            do {
                try thread.sync { throw Failure() }
                return false
            } catch {
                return error is Failure
            }
        }
        #expect(threw)
        finish(thread)
    }

    @Test("sync hands back the object its work made, once: it is freed when the caller lets go, and a throw makes none")
    func syncResultIsOwnedOnce() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTsyncO"))
        final class Tracked: Sendable {
            static let freed = Atomic<Int>(0)
            deinit { Self.freed.add(1, ordering: .relaxed) }
        }
        let freedWhileHeld = await onNewThread { () -> [Int] in
            var seen: [Int] = []
            for _ in 0..<1_000 {
                let made = thread.sync { Tracked() }
                withExtendedLifetime(made) { seen.append(Tracked.freed.load(ordering: .relaxed)) }
            }
            struct Failure: Error {}
            for _ in 0..<1_000 {
                _ = try? thread.sync { () throws -> Tracked in throw Failure() }
            }
            return seen
        }
        // Alive while held (as many freed as made before it), freed exactly once after.
        #expect(freedWhileHeld == Array(0..<1_000))
        #expect(Tracked.freed.load(ordering: .relaxed) == 1_000)
        finish(thread)
    }

    @Test("sync from outside waits for what was queued before it (FIFO with execute)")
    func syncIsFifo() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTsyncF"))
        let order = Recorder<Int>()
        let gate = Latch()
        try thread.execute { gate.wait() }
        try thread.execute { order.append(1) }
        let result = await onNewThread { () -> [Int] in
            Thread { usleep(50_000); gate.countDown() }.start()
            return thread.sync {
                order.append(2)
                return order.values
            }
        }
        #expect(result == [1, 2])
        finish(thread)
    }

    @Test("run returns the value or rethrows the error; it does not block a thread")
    func runValueAndError() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTrun"))
        #expect(try await thread.run { thread.isCurrent })
        struct Failure: Error {}
        await #expect(throws: Failure.self) { try await thread.run { throw Failure() } }
        finish(thread)
    }

    @Test("Paused with work queued: nothing runs and the thread makes no context switch for a second")
    func pauseIsIdle() async throws {
        let name = KernelThreads.uniqueName("DTpause")
        let thread = DedicatedThread(name: name)
        let ran = Counter()
        // Let the thread settle into its wait first.
        _ = try await thread.run {}
        thread.pause()
        #expect(thread.isPaused)
        for _ in 0..<10 { try thread.execute { _ = ran.increment() } }
        #expect(thread.pendingCount == 10)
        let id = try #require(KernelThreads.ids(named: name).first)
        try await Task.sleep(for: .milliseconds(50))
        let before = try #require(KernelThreads.contextSwitches(ofThread: id))
        try await Task.sleep(for: .seconds(1))
        let after = try #require(KernelThreads.contextSwitches(ofThread: id))
        #expect(after.voluntary - before.voluntary == 0)
        #expect(after.involuntary - before.involuntary == 0)
        #expect(ran.value == 0)
        thread.resume()
        #expect(!thread.isPaused)
        #expect(try await thread.run { ran.value } == 10)
        #expect(thread.pendingCount == 0)
        finish(thread)
    }

    @Test("pause waits for the item running now and starts nothing after it")
    func pauseAfterRunningItem() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTpause2"))
        let gate = Latch()
        let started = Latch()
        let order = Recorder<String>()
        try thread.execute {
            started.countDown()
            gate.wait()
            order.append("running")
        }
        try thread.execute { order.append("queued") }
        #expect(await onNewThread { started.wait(timeout: .seconds(10)) })
        thread.pause()
        gate.countDown()
        try await Task.sleep(for: .milliseconds(100))
        #expect(order.values == ["running"])
        #expect(thread.pendingCount == 1)
        thread.resume()
        #expect(await eventually { order.values == ["running", "queued"] })
        finish(thread)
    }

    @Test("Items the thread took from the queue together still count as queued: pause between them, pendingCount and disposeNow see them")
    func takenTogether() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTbatch"))
        let ran = Counter()
        let tracker = LifetimeTracker()
        // Queued while paused, the ten are taken out of the queue at once when the thread resumes.
        thread.pause()
        try thread.execute { [thread] in
            _ = ran.increment()
            thread.pause()
        }
        for _ in 0..<9 { try thread.execute(trackedWork(tracker, ran)) }
        thread.resume()
        #expect(await eventually { ran.value == 1 && thread.isPaused })
        try await Task.sleep(for: .milliseconds(50))
        #expect(ran.value == 1)
        #expect(thread.pendingCount == 9)
        try thread.execute(trackedWork(tracker, ran))  // queued behind the nine
        #expect(thread.pendingCount == 10)
        #expect(thread.disposeNow() == 10)
        #expect(thread.pendingCount == 0)
        #expect(tracker.liveCount == 0)
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 1)
    }

    @Test("A resume between items of a taken batch keeps FIFO order with work queued meanwhile")
    func batchOrderAcrossPause() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTbatch2"))
        let order = Recorder<Int>()
        thread.pause()
        try thread.execute { [thread] in
            order.append(0)
            thread.pause()
        }
        for index in 1...4 { try thread.execute { order.append(index) } }
        thread.resume()
        #expect(await eventually { order.values == [0] && thread.isPaused })
        for index in 5...8 { try thread.execute { order.append(index) } }
        thread.resume()
        #expect(try await thread.run { order.values } == Array(0...8))
        finish(thread)
    }

    @Test("dispose runs what is queued, refuses more, and the thread exits; awaitTermination is false before")
    func disposeDrains() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTdisp"))
        #expect(await onNewThread { !thread.awaitTermination(timeout: .milliseconds(20)) })
        let ran = Counter()
        let gate = Latch()
        try thread.execute { gate.wait() }
        for _ in 0..<5 { try thread.execute { _ = ran.increment() } }
        thread.dispose()
        thread.dispose()  // idempotent
        #expect(throws: DedicatedThreadError.disposed(name: thread.name)) { try thread.execute {} }
        await #expect(throws: DedicatedThreadError.disposed(name: thread.name)) { try await thread.run {} }
        #expect(await onNewThread { !thread.awaitTermination(timeout: .milliseconds(20)) })
        gate.countDown()
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 5)
        #expect("\(DedicatedThreadError.disposed(name: "db"))" == "DedicatedThread 'db' is disposed and accepts no more work")
    }

    @Test("A paused thread that is disposed resumes, runs its queue, and exits")
    func disposeWhilePaused() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTdispP"))
        let ran = Counter()
        thread.pause()
        for _ in 0..<3 { try thread.execute { _ = ran.increment() } }
        thread.dispose()
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 3)
    }

    @Test("pause() after dispose() is ignored: the queue still drains and the thread exits")
    func pauseAfterDispose() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTpd"))
        let gate = Latch()
        let ran = Counter()
        try thread.execute { gate.wait() }
        try thread.execute { _ = ran.increment() }
        thread.dispose()
        thread.pause()
        #expect(!thread.isPaused)
        gate.countDown()
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 1)
    }

    @Test("disposeNow drops queued closures (counted, released), fails queued run callers, still runs sync and jobs")
    func disposeNowDrops() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTdispN"))
        let gate = Latch()
        let started = Latch()
        let ran = Counter()
        let tracker = LifetimeTracker()
        try thread.execute {
            started.countDown()
            gate.wait()
        }
        #expect(await onNewThread { started.wait(timeout: .seconds(10)) })
        for _ in 0..<4 { try thread.execute(trackedWork(tracker, ran)) }
        let runCaller = Task.detached { try await thread.run { _ = ran.increment() } }
        #expect(await eventually { thread.pendingCount == 5 })
        let syncDone = Latch()
        let syncResult = LockedValue<Int?>(nil)
        Thread {
            syncResult.value = thread.sync { 7 }
            syncDone.countDown()
        }.start()
        #expect(await eventually { thread.pendingCount == 6 })
        #expect(thread.disposeNow() == 5)
        #expect(thread.disposeNow() == 0)
        #expect(tracker.liveCount == 0)
        await #expect(throws: DedicatedThreadError.disposed(name: thread.name)) { try await runCaller.value }
        gate.countDown()
        #expect(await onNewThread { syncDone.wait(timeout: .seconds(10)) })
        #expect(syncResult.value == 7)
        #expect(await thread.awaitTermination(within: .seconds(10)))
        #expect(ran.value == 0)
    }

    @Test("A closure's captures are released after it ran, outside the thread's lock: a deinit may use the thread")
    func releasesOutsideTheLock() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTrel"))
        final class ReadsPendingCountOnDeinit: Sendable {
            let thread: DedicatedThread
            let reads: Counter
            init(_ thread: DedicatedThread, _ reads: Counter) {
                self.thread = thread
                self.reads = reads
            }
            deinit {
                _ = thread.pendingCount
                _ = reads.increment()
            }
        }
        let reads = Counter()
        do {
            let probe = ReadsPendingCountOnDeinit(thread, reads)
            try thread.execute { withExtendedLifetime(probe) {} }
        }
        #expect(await eventually { reads.value == 1 })
        #expect(try await thread.run { 1 } == 1)  // the thread is not wedged
        finish(thread)
    }

    @Test("isCurrent is true only on the thread")
    func isCurrent() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DTcur"))
        let other = DedicatedThread(name: KernelThreads.uniqueName("DTcur2"))
        #expect(!thread.isCurrent)
        #expect(try await thread.run { thread.isCurrent && !other.isCurrent })
        #expect(try await thread.run { thread.preconditionIsCurrent(); return true })
        finish(thread)
        finish(other)
    }
}

/// A dedicated thread the system will not start (`ProcessExitTests` runs it in a process of its own).
extension ChildScenario {
    #if os(Linux)
    static func dedicatedThreadStartFailure() async {
        let thread = ThreadStarts.refused { DedicatedThread(name: "db") }
        do {
            try thread.execute {}
            fatalError("execute was accepted by a thread that does not exist")
        } catch let error as DedicatedThreadError {
            guard case .threadStartFailed(name: "db", _) = error else { fatalError("\(error)") }
        } catch {
            fatalError("\(error)")
        }
        do {
            _ = try await thread.run { 1 }
            fatalError("run was accepted by a thread that does not exist")
        } catch let error as DedicatedThreadError {
            guard case .threadStartFailed = error else { fatalError("\(error)") }
        } catch {
            fatalError("\(error)")
        }
        precondition(thread.awaitTermination(timeout: .zero))
    }
    #endif
}

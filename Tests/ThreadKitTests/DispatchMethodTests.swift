import Dispatch
import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// A counter that is deliberately not thread-safe: only exclusion keeps its count exact.
final class UnguardedCounter: @unchecked Sendable {
    // Sendable: on purpose not guarded; the tests prove that a serial target keeps it exact.
    var value = 0
}

@Suite("DispatchMethod", .timeLimit(.minutes(1)))
struct DispatchMethodTests {
    @Test(".inline runs on the caller at once; .sync has run when execute returns")
    func inlineAndSync() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DMsync"))
        defer { thread.dispose() }
        let result = await onNewThread { () -> (Bool, Int, Bool) in
            let caller = KernelThreads.currentID()
            let inline = DispatchMethod.inline.execute { KernelThreads.currentID() == caller }
            let ran = Counter()
            DispatchMethod.sync(on: .thread(thread)).execute { _ = ran.increment() }
            let onThread = (try? DispatchMethod.sync(on: .thread(thread)).execute { thread.isCurrent }.wait()) ?? false
            return ((try? inline.wait()) ?? false, ran.value, onThread)
        }
        #expect(result == (true, 1, true))
    }

    @Test(".sync(on: .serialQueue(q)) from outside q serialises 2 × 10,000 unguarded increments, none lost")
    func syncOnSerialQueueExcludes() async {
        let queue = DispatchQueue(label: "DMserial")
        let counter = UnguardedCounter()
        let method = DispatchMethod.sync(on: .serialQueue(queue))
        await onThreads(2) { _ in
            for _ in 0..<10_000 { method.execute { counter.value += 1 } }
        }
        #expect(queue.sync { counter.value } == 20_000)
    }

    @Test(".sync(on: .serialQueue(q)) from work running on q (through DispatchMethod) runs inline, not into DispatchQueue.sync's trap")
    func syncOnSerialQueueFromInside() async throws {
        let queue = DispatchQueue(label: "DMinside")
        let method = DispatchMethod.sync(on: .serialQueue(queue))
        let value = try await DispatchMethod.async(on: .serialQueue(queue)).execute {
            try method.execute { try method.execute { 42 }.wait() }.wait()
        }.value
        #expect(value == 42)
    }

    @Test("Every target kind runs async work where it says", arguments: 0..<6)
    func asyncOnEveryTarget(kind: Int) async throws {
        let pool = ThreadPool(name: KernelThreads.uniqueName("DMp"), size: 2)
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DMt"))
        let throttled = ThrottledQueue(label: KernelThreads.uniqueName("DMq"), interval: .zero)
        defer {
            pool.dispose()
            thread.dispose()
        }
        let target: DispatchTarget = switch kind {
        case 0: .global()
        case 1: .serialQueue(DispatchQueue(label: "DMs"))
        case 2: .concurrentQueue(DispatchQueue(label: "DMc", attributes: .concurrent))
        case 3: .pool(pool)
        case 4: .thread(thread)
        default: .throttled(throttled)
        }
        let whereItRan = try await DispatchMethod.async(on: target).execute { () -> Bool in
            switch kind {
            case 3: pool.isCurrentThreadMember
            case 4: thread.isCurrent
            case 5: KernelThreads.currentName().hasPrefix(throttled.label)
            default: !Thread.isMainThread
            }
        }.value
        #expect(whereItRan)
        #expect(try await DispatchMethod.sync(on: target).run { 7 } == 7)
        #expect(try await DispatchMethod.after(.milliseconds(1), on: target).run { 8 } == 8)
    }

    @Test(".after never runs early and runs on its target")
    func afterNeverEarly() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("DMafter"))
        defer { thread.dispose() }
        let delays: [Duration] = [.milliseconds(5), .milliseconds(20), .milliseconds(50)]
        for delay in delays {
            let start = ContinuousClock.now
            let (ranAt, onThread) = try await DispatchMethod.after(delay, on: .thread(thread)).execute {
                (ContinuousClock.now, thread.isCurrent)
            }.value
            #expect(ranAt - start >= delay)
            #expect(ranAt - start < delay + .milliseconds(250))
            #expect(onThread)
        }
    }

    @Test("A refused submission fails the chain with the refusal; nothing hangs")
    func refusedSubmission() async throws {
        let pool = ThreadPool(name: "DMgone", size: 1)
        pool.dispose()
        let thread = DedicatedThread(name: "DMgoneT")
        thread.dispose()
        await #expect(throws: ThreadPoolError.disposed(pool: "DMgone")) {
            try await DispatchMethod.async(on: .pool(pool)).execute { 1 }.value
        }
        await #expect(throws: DedicatedThreadError.disposed(name: "DMgoneT")) {
            try await DispatchMethod.after(.milliseconds(1), on: .thread(thread)).execute { 1 }.value
        }
        let chain = DispatchMethod.inline.execute { 1 }.then(.async(on: .pool(pool))) { $0 + 1 }
        #expect(throws: ThreadPoolError.disposed(pool: "DMgone")) { try chain.wait() }
    }

    @Test("Nested sync chains of depth 1 to 5 over mixed target kinds complete, holding every context on the way",
          arguments: 1...5)
    func nestedSyncChains(depth: Int) async throws {
        let first = DedicatedThread(name: KernelThreads.uniqueName("DMn1"))
        let second = DedicatedThread(name: KernelThreads.uniqueName("DMn2"))
        let queue = DispatchQueue(label: "DMnq")
        let pool = ThreadPool(name: KernelThreads.uniqueName("DMnp"), size: 1)
        let throttled = ThrottledQueue(label: KernelThreads.uniqueName("DMnt"), interval: .zero)
        defer {
            first.dispose()
            second.dispose()
            pool.dispose()
        }
        let targets: [DispatchTarget] = [.thread(first), .throttled(throttled), .serialQueue(queue), .pool(pool), .thread(second)]
        /// A → B → … → (depth targets), then back to A, and back to every other one on the way.
        @Sendable func descend(_ level: Int) throws -> Int {
            if level == depth {
                // Back onto every context held so far: each runs inline.
                var sum = 0
                for target in targets.prefix(depth) {
                    sum += try DispatchMethod.sync(on: target).execute { 1 }.wait()
                }
                return sum
            }
            return try DispatchMethod.sync(on: targets[level]).execute { try descend(level + 1) }.wait()
        }
        let result = await onNewThread { () -> Int? in
            let done = Latch()
            let value = LockedValue<Int?>(nil)
            Thread {
                value.value = try? descend(0)
                done.countDown()
            }.start()
            return done.wait(timeout: .seconds(20)) ? value.value : nil
        }
        #expect(result == depth, "the nested chain hung or failed")
    }
}

@Suite("ExecutionChain", .timeLimit(.minutes(1)))
struct ExecutionChainTests {
    @Test("Steps pass values on, in order, each on its own target")
    func passesValues() async throws {
        try await withPoolAndThread(pool: "ECpool", size: 2, thread: "ECthr") { (pool, thread) async throws in
            let chain = DispatchMethod.async(on: .pool(pool)).execute { (2, pool.isCurrentThreadMember) }
                .then(.async(on: .thread(thread))) { ($0.0 * 3, $0.1 && thread.isCurrent) }
                .then(.async(on: .global())) { "\($0.0) \($0.1)" }
            #expect(try await chain.value == "6 true")
            #expect(await onNewThread { try? chain.wait() } == "6 true")
        }
    }

    @Test("A thrown error skips the remaining steps and comes out of wait() and value")
    func errorsSkipSteps() async throws {
        struct Failure: Error, Equatable {}
        let ran = Counter()
        let chain = DispatchMethod.async(on: .global()).execute { () throws -> Int in throw Failure() }
            .then(.inline) { value -> Int in
                _ = ran.increment()
                return value
            }
            .then(.async(on: .global())) { value -> Int in
                _ = ran.increment()
                return value
            }
        await #expect(throws: Failure.self) { try await chain.value }
        #expect(throws: Failure.self) { try chain.wait() }
        #expect(ran.value == 0)
    }

    @Test("Fan-out: several then on one link all run, once each")
    func fanOut() async throws {
        let root = DispatchMethod.async(on: .global()).execute { 10 }
        let branches = (0..<8).map { index in root.then(.async(on: .global())) { $0 + index } }
        var values: [Int] = []
        for branch in branches { values.append(try await branch.value) }
        #expect(values == Array(10..<18))
    }

    @Test("10,000 chains with then racing completion from other threads: every step runs exactly once")
    func thenRacesCompletion() async {
        let chains = 10_000
        let counts = AtomicCounters(count: chains)
        let finals = AtomicCounters(count: chains)
        await onThreads(4) { producer in
            for index in stride(from: producer, to: chains, by: 4) {
                let root = DispatchMethod.async(on: .global()).execute {
                    counts.increment(index)
                    return index
                }
                // Sometimes attach at once, sometimes after the step may have finished.
                if index % 3 == 0 { sched_yield() }
                root.then(.inline) { value in
                    if value == index { finals.increment(index) }
                }
                root.then(.async(on: .global())) { value in
                    if value == index { finals.increment(index) }
                }
            }
        }
        #expect(await eventually(timeout: .seconds(30)) { finals.indices(notEqualTo: 2).isEmpty })
        #expect(counts.indices(notEqualTo: 1).isEmpty)
    }

    @Test("cancel: steps not started never run; waiters get CancellationError at once")
    func cancel() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("ECcan"))
        defer { thread.dispose() }
        let gate = Latch()
        let ran = Counter()
        try thread.execute { gate.wait() }
        let chain = DispatchMethod.async(on: .thread(thread)).execute { _ = ran.increment() }
            .then(.async(on: .thread(thread))) { _ = ran.increment() }
        let waiter = await onNewThread { () -> Bool in
            Thread {
                usleep(50_000)
                chain.cancel()
            }.start()
            do {
                try chain.wait()
                return false
            } catch {
                return error is CancellationError
            }
        }
        #expect(waiter)
        gate.countDown()
        _ = try await thread.run {}
        #expect(ran.value == 0)
        await #expect(throws: CancellationError.self) { try await chain.value }
    }

    @Test("wait() from work a serial target runs, for a step queued on that same target, runs the step inline", arguments: 0..<4)
    func waitReentersHeldContext(kind: Int) async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("ECre"))
        let pool = ThreadPool(name: KernelThreads.uniqueName("ECrp"), size: 1)
        defer {
            thread.dispose()
            pool.dispose()
        }
        let target: DispatchTarget = switch kind {
        case 0: .thread(thread)
        case 1: .pool(pool)
        case 2: .serialQueue(DispatchQueue(label: "ECreq"))
        default: .thread(thread)
        }
        let method: DispatchMethod = kind == 3 ? .after(.milliseconds(20), on: target) : .async(on: target)
        let outcome = await onNewThread { () -> Int? in
            let done = Latch()
            let value = LockedValue<Int?>(nil)
            DispatchMethod.async(on: target).execute {
                let start = ContinuousClock.now
                let inner = method.execute { 5 }.then(.async(on: target)) { $0 + 1 }
                let result = try? inner.wait()
                if kind == 3, ContinuousClock.now - start < .milliseconds(20) { return }  // never early
                value.value = result
                done.countDown()
            }
            return done.wait(timeout: .seconds(10)) ? value.value : nil
        }
        #expect(outcome == 6)
    }

    @Test("A step its target drops unrun (disposeNow) fails with CancellationError; nothing waits for ever", arguments: 0..<2)
    func droppedStepFails(kind: Int) async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("ECdrop"))
        let pool = ThreadPool(name: KernelThreads.uniqueName("ECdropP"), size: 1)
        let gate = Latch()
        let started = Latch()
        let target: DispatchTarget = kind == 0 ? .thread(thread) : .pool(pool)
        try target.submit {
            started.countDown()
            gate.wait()
        }
        #expect(await onNewThread { started.wait(timeout: .seconds(10)) })
        let ran = Counter()
        let chain = DispatchMethod.async(on: target).execute { _ = ran.increment() }
            .then(.inline) { _ = ran.increment() }
        if kind == 0 { #expect(thread.disposeNow() == 1) } else { #expect(pool.disposeNow().count == 1) }
        gate.countDown()
        await #expect(throws: CancellationError.self) { try await chain.value }
        #expect(ran.value == 0)
        thread.dispose()
        pool.dispose()
    }

    @Test(".sync on a disposed dedicated thread fails the chain with the refusal instead of stopping the process")
    func syncOnDisposedThread() {
        let thread = DedicatedThread(name: "ECsyncGone")
        thread.dispose()
        #expect(throws: DedicatedThreadError.disposed(name: "ECsyncGone")) {
            try DispatchMethod.sync(on: .thread(thread)).execute { 1 }.wait()
        }
    }

    @Test("A .sync step after another, waited for on its own target's thread, runs inline there")
    func syncFollowerWaitedForOnItsTarget() async throws {
        let thread = DedicatedThread(name: KernelThreads.uniqueName("ECsf"))
        let pool = ThreadPool(name: KernelThreads.uniqueName("ECsfp"), size: 2)
        defer {
            thread.dispose()
            pool.dispose()
        }
        let gate = Latch()
        let chain = DispatchMethod.async(on: .pool(pool)).execute { gate.wait(); return 1 }
            .then(.sync(on: .thread(thread))) { $0 + 1 }
        let value = try await thread.run { () -> Int? in
            gate.countDown()
            return try? chain.wait()
        }
        #expect(value == 2)
    }

    @Test("wait() that runs a throttled step inline waits out the queue's gap first")
    func inlineThrottledStepKeepsTheGap() async throws {
        let queue = ThrottledQueue(label: KernelThreads.uniqueName("ECgap"), interval: .milliseconds(80))
        let starts = Recorder<ContinuousClock.Instant>()
        let done = Latch()
        try queue.async {
            starts.append(.now)
            let inner = DispatchMethod.async(on: .throttled(queue)).execute { starts.append(.now) }
            _ = try? inner.wait()
            done.countDown()
        }
        #expect(await onNewThread { done.wait(timeout: .seconds(10)) })
        let times = starts.values
        #expect(times.count == 2)
        if times.count == 2 { #expect(times[1] - times[0] >= .milliseconds(80)) }
    }

    @Test("The last link keeps no finished earlier link alive: their values are released")
    func noFinishedHistoryKept() async throws {
        let tracker = LifetimeTracker()
        func lastLink() -> ExecutionChain<Int> {
            DispatchMethod.async(on: .global()).execute { tracker.make() }
                .then(.async(on: .global())) { _ in 1 }
        }
        let last = lastLink()
        #expect(try await last.value == 1)
        #expect(await eventually { tracker.liveCount == 0 })
        withExtendedLifetime(last) {}
    }

    @Test("then on a cancelled chain fails at once with CancellationError")
    func thenAfterCancel() throws {
        let chain = DispatchMethod.inline.execute { 1 }
        chain.cancel()
        #expect(try chain.wait() == 1)  // it had finished before the cancel
        let next = chain.then(.inline) { $0 + 1 }
        #expect(throws: CancellationError.self) { try next.wait() }
    }
}

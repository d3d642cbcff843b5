import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// `minimumThreads`: threads started with the pool, never collected while no more exist, ended by
/// a dispose like any other. The decisions first (made-up instants, no threads), then real threads.
@Suite("ThreadPool minimumThreads", .timeLimit(.minutes(1)))
struct ThreadPoolMinimumThreadsTests {
    typealias Machine = ThreadPool.StateMachine<String, ThreadPoolStateMachineTests.Call>
    static let created = ThreadPoolStateMachineTests.created

    static func machine(size: Int, minimumThreads: Int) -> Machine {
        Machine(
            ThreadPool.Configuration(
                name: "P", size: size, minimumThreads: minimumThreads, keepAlive: .seconds(10),
                collectionInterval: .seconds(15), queueLimit: nil, overflowPolicy: .block),
            createdAt: created)
    }

    /// Registers the started thread `name` and puts it to sleep at `instant`; what its last look decided.
    static func sleep(_ machine: inout Machine, _ id: ThreadPool.WorkerID, at instant: MonotonicInstant) -> Machine.BeforeSleep {
        machine.workerFallsAsleep(id)
        return machine.lookedBeforeSleeping(id, .nothing, .empty, now: instant).0
    }

    // MARK: - Decisions

    @Test("the pool's creation counts and numbers the kept threads; with 0, none")
    func startsCounted() {
        var none = Self.machine(size: 4, minimumThreads: 0)
        #expect(none.startMinimumThreads() == [])
        #expect(none.threads == 0)
        var kept = Self.machine(size: 4, minimumThreads: 3)
        #expect(kept.startMinimumThreads() == [1, 2, 3])
        #expect(kept.threads == 3)
        #expect(kept.peakThreads == 3)
        // A first task finds no sleeper yet (they are still starting) and starts the fourth.
        #expect(kept.submit(from: .thread(mayWait: true), .empty) == .startThread(4))
    }

    @Test("a kept thread sleeps with no end; one beyond the minimum sleeps until its collector tick")
    func keptThreadsSleepWithoutEnd() {
        var machine = Self.machine(size: 3, minimumThreads: 1)
        let numbers = machine.startMinimumThreads()
        #expect(numbers == [1])
        let first = machine.threadStarted("w1")
        // Two threads: the first to sleep is beyond the minimum, and retires at its tick.
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(2))
        let second = machine.threadStarted("w2")
        #expect(Self.sleep(&machine, second, at: Self.created) == .sleep(until: Self.created.advanced(by: .seconds(15))))
        let timedOut = machine.sleepEnded(second, .timedOut, slept: .seconds(15))
        #expect(timedOut == .leave(.collected(idle: .seconds(15))))
        #expect(machine.lookedBeforeLeaving(second, .nothing, .empty).0 == .exit)
        #expect(machine.threads == 1)
        // The one left is the minimum: it sleeps with no end.
        #expect(Self.sleep(&machine, first, at: Self.created.advanced(by: .seconds(16))) == .sleep(until: .distantFuture))
    }

    @Test("a timeout while no more than the minimum exist looks again instead of retiring; above it, retires")
    func timeoutAtTheMinimumLooksAgain() {
        var machine = Self.machine(size: 2, minimumThreads: 1)
        _ = machine.startMinimumThreads()
        let first = machine.threadStarted("w1")
        #expect(machine.submit(from: .thread(mayWait: true), .empty) == .startThread(2))
        let second = machine.threadStarted("w2")
        _ = Self.sleep(&machine, first, at: Self.created)
        _ = Self.sleep(&machine, second, at: Self.created)
        #expect(machine.sleepEnded(first, .timedOut, slept: .seconds(15)) == .leave(.collected(idle: .seconds(15))))
        #expect(machine.lookedBeforeLeaving(first, .nothing, .empty).0 == .exit)
        // The second timed out at the same tick, but the first has left: it is the one kept.
        #expect(machine.sleepEnded(second, .timedOut, slept: .seconds(15)) == .lookAgain)
        #expect(machine.threads == 1)
        #expect(machine.workers.sleeperCount == 0)
        #expect(Self.sleep(&machine, second, at: Self.created.advanced(by: .seconds(15))) == .sleep(until: .distantFuture))
    }

    @Test("a dispose tells the kept sleepers, and they leave")
    func disposeEndsKeptThreads() {
        var machine = Self.machine(size: 2, minimumThreads: 2)
        _ = machine.startMinimumThreads()
        let ids = [machine.threadStarted("w1"), machine.threadStarted("w2")]
        for id in ids { #expect(Self.sleep(&machine, id, at: Self.created) == .sleep(until: .distantFuture)) }
        let shutdown = machine.dispose(.empty)
        #expect(shutdown?.sleepers == ["w1", "w2"])
        for id in ids {
            #expect(machine.sleepEnd(of: id) == .poolShutDown)
            #expect(machine.sleepEnded(id, .poolShutDown, slept: .seconds(1)) == .leave(.shutDown))
            #expect(machine.lookedBeforeLeaving(id, .nothing, .empty).0 == .exit)
        }
        #expect(machine.threads == 0)
    }

    // MARK: - Threads

    @Test("the kept threads exist once the pool is made, before any task, and are counted")
    func threadsExistAfterInit() async {
        let pool = ThreadPool(name: "MinInit", size: 4, minimumThreads: 3)
        #expect(pool.minimumThreads == 3)
        #expect(pool.statistics.threads == 3)
        #expect(await eventually { KernelThreads.count(ofPool: "MinInit") == 3 })
        #expect(await eventually { pool.statistics.idleThreads == 3 })
        // The first task runs on one of them: no fourth thread.
        let ran = Latch(count: 1)
        try? pool.execute { ran.countDown() }
        #expect(await onNewThread { ran.wait(timeout: .seconds(10)) })
        #expect(pool.statistics.peakThreads == 3)
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
    }

    @Test("the collector retires idle threads down to the minimum and never below it")
    func neverCollectedBelowMinimum() async {
        let pool = ThreadPool(
            name: "MinKeep", size: 4, minimumThreads: 2, keepAlive: .zero, collectionInterval: .milliseconds(10))
        // Four tasks that hold their threads at once make four threads.
        let release = Latch(count: 1)
        let started = Counter()
        for _ in 0..<4 {
            try? pool.execute {
                started.increment()
                _ = release.wait(timeout: .seconds(10))
            }
        }
        #expect(await eventually { started.value == 4 })
        #expect(pool.statistics.threads == 4)
        release.countDown()
        #expect(await eventually { pool.statistics.threads == 2 }, "the idle threads beyond the minimum were not collected")
        // Many collector ticks later, still two, asleep.
        try? await Task.sleep(for: .milliseconds(300))
        #expect(pool.statistics.threads == 2)
        #expect(KernelThreads.count(ofPool: "MinKeep") == 2)
        #expect(await eventually { KernelThreads.ids(withPrefix: "MinKeep").allSatisfy(KernelThreads.isSleeping) })
        // They still serve work.
        let ran = Latch(count: 1)
        try? pool.execute { ran.countDown() }
        #expect(await onNewThread { ran.wait(timeout: .seconds(10)) })
        pool.dispose()
        #expect(await pool.awaitTermination(within: .seconds(10)))
        #expect(await eventually { KernelThreads.count(ofPool: "MinKeep") == 0 })
    }

    @Test("dispose and disposeNow end every kept thread", arguments: [false, true])
    func disposeEndsThemAll(now: Bool) async {
        let name = now ? "MinNow" : "MinDisp"
        let pool = ThreadPool(name: name, size: 3, minimumThreads: 3)
        #expect(await eventually { KernelThreads.count(ofPool: name) == 3 })
        if now { _ = pool.disposeNow() } else { pool.dispose() }
        #expect(await pool.awaitTermination(within: .seconds(10)))
        #expect(pool.statistics.threads == 0)
        #expect(await eventually { KernelThreads.count(ofPool: name) == 0 })
    }
}

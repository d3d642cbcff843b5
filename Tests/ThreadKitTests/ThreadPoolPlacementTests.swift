import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// Every task that enters a pool's queue finds a thread: whichever path moved it there, and
/// whether the pool's threads are busy, asleep, retiring or gone.
@Suite("ThreadPool: every queued task finds a thread", .timeLimit(.minutes(3)))
struct ThreadPoolPlacementTests {
    /// A `run(_:)` call's task, submitted as `run(_:)` submits it: a full queue makes it wait,
    /// suspended, in the pool's list of calls waiting for room. Returns once it is placed.
    private static func submitLikeRun(_ pool: ThreadPool, _ work: @escaping @Sendable () -> Void) throws {
        let task = ScheduledTask(pool: pool, work: work, onAbandon: work)
        try pool.submit(.task(task), waiting: .suspend)
    }

    @Test("the idle word keeps sleepers and spinners apart")
    func idleWordParts() {
        typealias Word = ThreadPool.IdleWord
        #expect(Word(rawValue: 0).sleepers == 0)
        #expect(Word(rawValue: 0).spinners == 0)
        let word = Word(rawValue: 3 * Word.oneSleeper + 2 * Word.oneSpinner)
        #expect(word.sleepers == 3)
        #expect(word.spinners == 2)
        let many = Word(rawValue: 10_000 * Word.oneSleeper + 1)
        #expect(many.sleepers == 10_000)
        #expect(many.spinners == 1)
        #expect(Word.oneSleeper > 65_535)
    }

    @Test("a run() call waiting for room runs when a cancelled task frees it, as the pool's thread goes idle")
    func runCallWaitingForRoomRunsWhenCancellationFreesIt() async {
        let outcome = await onNewThread { () -> String? in
            // keepAlive long: a caller moved into the queue with no thread to take it would wait
            // for a retirement a minute away.
            let pool = ThreadPool(name: "RoomCancel", size: 1, keepAlive: .seconds(60), queueLimit: 1)
            defer { pool.dispose() }
            for round in 0..<2_000 {
                let gate = Latch()
                let finishing = Atomic<Bool>(false)
                let ran = Latch()
                do {
                    try pool.execute {
                        gate.wait()
                        finishing.store(true, ordering: .sequentiallyConsistent)
                    }
                    let queued = try pool.schedule {}  // fills the queue
                    try Self.submitLikeRun(pool) { ran.countDown() }  // waits for room
                    let cancelled = Latch()
                    // The cancel races the pool's thread, which finishes its task and looks in the
                    // queue: it may skip the cancelled task and sleep before the canceller frees its place.
                    Thread {
                        while !finishing.load(ordering: .sequentiallyConsistent) {}
                        for _ in 0..<(round % 64) { _ = finishing.load(ordering: .relaxed) }
                        queued.cancel()
                        cancelled.countDown()
                    }.start()
                    gate.countDown()
                    _ = cancelled.wait(timeout: .seconds(10))
                } catch {
                    return "round \(round): \(error)"
                }
                if !ran.wait(timeout: .seconds(5)) {
                    return "round \(round): the run() call waited past 5 s; \(pool.statistics)"
                }
            }
            return nil
        }
        #expect(outcome == nil, "\(outcome ?? "")")
    }
}

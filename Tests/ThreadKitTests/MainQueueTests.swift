import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// The main queue as a serial context: one fixed identity, however often `DispatchQueue.main` is
/// read, and "on the main queue" told by the queue's own specific, not by the thread.
///
/// The test process drains the main queue (its async entry point runs under `dispatchMain()`), so
/// work sent to `.main` runs here, on whichever thread libdispatch picks.
@Suite("The main queue as a serial context", .timeLimit(.minutes(1)))
struct MainQueueTests {
    @Test("A context for the main queue never equals one for a serial queue made after it")
    func mainContextNeverEqualsALaterQueue() {
        var equal = 0
        for _ in 0..<200 {
            let main = SerialContext(.main)
            let queue = DispatchQueue(label: "MQid")
            if main == SerialContext(.queue(queue)) { equal += 1 }
        }
        #expect(equal == 0)
        #expect(SerialContext(.main) == SerialContext(.main))
    }

    @Test("Work sent to .main, then a serial queue made at once on the same thread: a sync onto that queue from the work runs inside it, 100 times of 100")
    func queueMadeRightAfterMainWorkIsNotTheMainQueue() async throws {
        let inside = Counter()
        let finished = await onNewThread { () -> Int in
            var finished = 0
            for _ in 0..<100 {
                let made = LockedValue<(queue: DispatchQueue, key: DispatchSpecificKey<Int>)?>(nil)
                let ready = Latch()
                let done = Latch()
                _ = DispatchMethod.async(on: .main).execute {
                    ready.wait(timeout: .seconds(10))
                    guard let (queue, key) = made.value else { return }
                    let ran = try? DispatchMethod.sync(on: .serialQueue(queue)).execute { DispatchQueue.getSpecific(key: key) == 1 }.wait()
                    if ran == true { inside.increment() }
                    done.countDown()
                }
                // Made right after the main queue's context, by the same thread.
                let queue = DispatchQueue(label: "MQnext")
                let key = DispatchSpecificKey<Int>()
                queue.setSpecific(key: key, value: 1)
                made.value = (queue, key)
                ready.countDown()
                if done.wait(timeout: .seconds(10)) { finished += 1 }
            }
            return finished
        }
        #expect(finished == 100, "the main queue did not run the work")
        #expect(inside.value == 100)
    }

    @Test("Serial exclusion holds between the main queue and a queue made later: a sync onto it waits for its running work")
    func exclusionBetweenMainAndALaterQueue() async throws {
        let overlaps = Counter()
        let rounds = Counter()
        DispatchMethod.async(on: .main).execute {
            for _ in 0..<50 {
                let queue = DispatchQueue(label: "MQexcl")
                let busy = Latch()
                let release = Latch()
                let inside = Counter()
                DispatchMethod.async(on: .serialQueue(queue)).execute {
                    inside.increment()
                    busy.countDown()
                    release.wait(timeout: .seconds(10))
                    inside.increment(by: -1)
                }
                busy.wait(timeout: .seconds(10))
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(2)) { release.countDown() }
                // The queue is running the work above: this waits for it instead of running beside it.
                _ = try? DispatchMethod.sync(on: .serialQueue(queue)).execute {
                    if inside.value != 0 { overlaps.increment() }
                }.wait()
                rounds.increment()
            }
        }
        #expect(await eventually { rounds.value == 50 }, "the rounds did not finish: \(rounds.value) of 50")
        #expect(overlaps.value == 0)
    }
}

/// What needs the main queue of a process of its own (`ProcessExitTests` runs each in one): under
/// `dispatchMain()`, which the test process's async entry point has called already, main-queue
/// work runs on threads other than the main thread.
extension ChildScenario {
    static func syncOnMainFromMainQueueUnderDispatchMain() {
        DispatchQueue.main.async {
            let direct = try? DispatchMethod.sync(on: .main).execute { 1 }.wait()
            let viaExecute = DispatchMethod.sync(on: .main).execute { 2 }
            let nested = try? DispatchMethod.sync(on: .main).execute {
                try? DispatchMethod.sync(on: .main).execute { 3 }.wait()
            }.wait()
            exit(direct == 1 && (try? viaExecute.wait()) == 2 && nested == 3 ? EXIT_SUCCESS : EXIT_FAILURE)
        }
        DeadlockScenario.sleepForever()
    }

    static func mainThroughADedicatedThreadBackToMain() {
        let thread = DedicatedThread(name: "db")
        let key = DispatchSpecificKey<Int>()
        DispatchQueue.main.setSpecific(key: key, value: 1)
        DispatchQueue.main.async {
            let seen = thread.sync { () -> [Bool] in
                let nested = try? DispatchMethod.sync(on: .main).execute {
                    [DispatchQueue.getSpecific(key: key) == 1, thread.isCurrent]
                }.wait()
                return [thread.isCurrent] + (nested ?? [])
            }
            exit(seen == [true, true, false] ? EXIT_SUCCESS : EXIT_FAILURE)
        }
        DeadlockScenario.sleepForever()
    }
}

extension ChildScenario {
    static func mainQueueDedicatedThreadCycle() {
        let db = DedicatedThread(name: "db")
        crossWaits({ DispatchQueue.main.async(execute: $0) }, then: { _ = try? DispatchMethod.sync(on: .thread(db)).execute {}.wait() },
                   { try! db.execute($0) }, then: { _ = try? DispatchMethod.sync(on: .main).execute {}.wait() })
    }

    static func mainQueueSerialQueueCycle() {
        let queue = DispatchQueue(label: "serial")
        crossWaits({ DispatchMethod.async(on: .serialQueue(queue)).execute($0) },
                   then: { _ = try? DispatchMethod.sync(on: .main).execute {}.wait() },
                   { DispatchMethod.async(on: .main).execute($0) },
                   then: { _ = try? DispatchMethod.sync(on: .serialQueue(queue)).execute {}.wait() })
    }
}

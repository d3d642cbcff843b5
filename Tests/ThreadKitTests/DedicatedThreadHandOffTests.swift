import Foundation
import Synchronization
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// A `sync` caller's work handed straight to the spinning thread, without the lock, under real
/// threads: it keeps the queue's order, runs exactly once, and meets pause and dispose as queued
/// work does.
@Suite("DedicatedThread hand-over", .timeLimit(.minutes(1)))
struct DedicatedThreadHandOffTests {
    /// Only the dedicated thread touches these, one item at a time: plain memory, on purpose.
    private final class Seen: @unchecked Sendable {
        var last: [Int]
        var outOfOrder = 0
        var runs = 0

        init(producers: Int) {
            last = [Int](repeating: -1, count: producers)
        }

        func saw(_ producer: Int, _ index: Int) {
            if last[producer] != index - 1 { outOfOrder += 1 }
            last[producer] = index
            runs += 1
        }
    }

    /// Runs `body(index)` on `count` new threads at once; whether all returned within `timeout`.
    private func onThreads(_ count: Int, timeout: Duration, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
        let start = Latch(), done = Latch(count: count)
        for index in 0..<count {
            Thread {
                start.wait()
                body(index)
                done.countDown()
            }.start()
        }
        start.countDown()
        return done.wait(timeout: timeout)
    }

    // Each test blocks on a thread of its own (`onNewThread`), never on one of Swift
    // concurrency's few threads, which other tests' awaits need meanwhile.

    @Test("syncs and closures from 4 threads, interleaved, run exactly once each and in each thread's order")
    func syncAndExecuteKeepOrder() async {
        // 8,000 syncs among 24,000 items: on a loaded machine a round trip can take a scheduler tick.
        let producers = 4, perProducer = 6_000
        let outcome = await onNewThread { () -> (completed: Bool, runs: Int, outOfOrder: Int, last: [Int], offThread: Int, exited: Bool) in
            let thread = DedicatedThread(name: KernelThreads.uniqueName("DThand"))
            let seen = Seen(producers: producers)
            let offThread = Atomic<Int>(0)
            let completed = onThreads(producers, timeout: .seconds(50)) { producer in
                for index in 0..<perProducer {
                    // Every third item a sync: it may be handed over while closures queue behind it.
                    if index % 3 == 0 {
                        thread.sync {
                            if !thread.isCurrent { offThread.add(1, ordering: .relaxed) }
                            seen.saw(producer, index)
                        }
                    } else {
                        try? thread.execute { seen.saw(producer, index) }
                    }
                }
            }
            // Producers still running would stop the process with their next sync once it is disposed.
            guard completed else { return (false, 0, 0, [], 0, false) }
            let done = thread.sync { (seen.runs, seen.outOfOrder, seen.last) }
            thread.dispose()
            let exited = thread.awaitTermination(timeout: .seconds(10))
            return (completed, done.0, done.1, done.2, offThread.load(ordering: .relaxed), exited)
        }
        #expect(outcome.completed)
        #expect(outcome.runs == producers * perProducer)
        #expect(outcome.outOfOrder == 0)
        #expect(outcome.last == [Int](repeating: perProducer - 1, count: producers))
        #expect(outcome.offThread == 0)
        #expect(outcome.exited)
    }

    @Test("Pauses among a stream of syncs: at most the item taken already starts after pause returns, and every sync runs once after the resume")
    func pauseAmongSyncs() async {
        let calls = 20_000
        let outcome = await onNewThread { () -> (finished: Bool, startsAfterPause: [Int], issued: Int, starts: Int, returned: Int, exited: Bool) in
            let thread = DedicatedThread(name: KernelThreads.uniqueName("DThandP"))
            let starts = Atomic<Int>(0)
            let returned = Atomic<Int>(0)
            let issued = Atomic<Int>(0)
            let stop = Atomic<Bool>(false)
            let finished = Latch()
            // The stream ends after the pauses (or `calls` syncs): on a loaded machine a round trip
            // can take a scheduler tick, and a fixed count would take minutes.
            Thread {
                while issued.load(ordering: .relaxed) < calls, !stop.load(ordering: .relaxed) {
                    issued.add(1, ordering: .relaxed)
                    guard (try? thread.syncOrThrow({ _ = starts.add(1, ordering: .relaxed) })) != nil else { break }
                    returned.add(1, ordering: .relaxed)
                }
                finished.countDown()
            }.start()
            // Up to 25 pauses: how many items started after each returned, in the 20 ms before the resume.
            var startsAfterPause: [Int] = []
            while startsAfterPause.count < 25, returned.load(ordering: .relaxed) < calls {
                thread.pause()
                let atPause = starts.load(ordering: .relaxed)
                Thread.sleep(forTimeInterval: 0.02)
                startsAfterPause.append(starts.load(ordering: .relaxed) - atPause)
                thread.resume()
                Thread.sleep(forTimeInterval: 0.002)
            }
            stop.store(true, ordering: .relaxed)
            let ended = finished.wait(timeout: .seconds(50))
            thread.dispose()
            let exited = thread.awaitTermination(timeout: .seconds(10))
            return (ended, startsAfterPause, issued.load(ordering: .relaxed), starts.load(ordering: .relaxed),
                    returned.load(ordering: .relaxed), exited)
        }
        #expect(outcome.finished)
        #expect(!outcome.startsAfterPause.isEmpty)
        #expect(outcome.startsAfterPause.allSatisfy { $0 <= 1 }, "starts after a pause returned: \(outcome.startsAfterPause.filter { $0 > 1 })")
        #expect(outcome.issued > 0)
        #expect(outcome.starts == outcome.issued)
        #expect(outcome.returned == outcome.issued)
        #expect(outcome.exited)
    }

    @Test("syncs racing a dispose from 4 threads: each runs once or is refused, none after the first refusal, and the thread exits")
    func syncsRacingDispose() async {
        let rounds = await onNewThread { () -> [(finished: Bool, ran: Int, succeeded: Int, ranAfterRefusal: Int, exited: Bool)] in
            (0..<20).map { _ in
                let thread = DedicatedThread(name: KernelThreads.uniqueName("DThandD"))
                let ran = Atomic<Int>(0)
                let succeeded = Atomic<Int>(0)
                let ranAfterRefusal = Atomic<Int>(0)
                let finished = onThreads(5, timeout: .seconds(20)) { index in
                    if index == 4 {
                        Thread.sleep(forTimeInterval: 0.002)
                        thread.dispose()
                        return
                    }
                    // A refused caller tries once more: that one must be refused too.
                    var refusals = 0
                    while refusals < 2 {
                        do {
                            try thread.syncOrThrow { _ = ran.add(1, ordering: .relaxed) }
                            if refusals > 0 { ranAfterRefusal.add(1, ordering: .relaxed) }
                            succeeded.add(1, ordering: .relaxed)
                        } catch {
                            refusals += 1
                        }
                    }
                }
                let exited = thread.awaitTermination(timeout: .seconds(10))
                return (finished, ran.load(ordering: .relaxed), succeeded.load(ordering: .relaxed), ranAfterRefusal.load(ordering: .relaxed), exited)
            }
        }
        for (round, outcome) in rounds.enumerated() {
            #expect(outcome.finished, "round \(round)")
            #expect(outcome.ran == outcome.succeeded, "round \(round)")
            #expect(outcome.ranAfterRefusal == 0, "round \(round)")
            #expect(outcome.exited, "round \(round)")
        }
    }
}

import Foundation
import Synchronization
import Testing
@testable import ThreadKit

/// The pool's lock-free intake: order, counts, lifetimes and `close`, on one thread and under races.
@Suite("IntakeQueue", .timeLimit(.minutes(1)))
struct IntakeQueueTests {
    @Test("Pops in push order across many blocks, and is empty after")
    func fifoAcrossBlocks() {
        let queue = IntakeQueue<Int>()
        #expect(queue.pop() == nil)
        let total = IntakeQueue<Int>.blockCapacity * 7 + 5
        for value in 0..<total {
            #expect(queue.push(value) == nil)
            #expect(queue.count == value + 1)
        }
        #expect(!queue.isEmpty)
        var popped: [Int] = []
        while let value = queue.pop() { popped.append(value) }
        #expect(popped == Array(0..<total))
        #expect(queue.count == 0)
        #expect(queue.isEmpty)
        // Refilling after a drain starts a new block where the old ones ended.
        for value in 0..<40 { _ = queue.push(value) }
        #expect((0..<40).map { _ in queue.pop() } == (0..<40).map { $0 })
    }

    @Test("An element is released when popped, and what is left when the queue goes")
    func lifetimes() {
        let tracker = LifetimeTracker()
        var queue: IntakeQueue<LifetimeTracked>? = IntakeQueue()
        for _ in 0..<100 { _ = queue!.push(tracker.make()) }
        #expect(tracker.liveCount == 100)
        for _ in 0..<40 { _ = queue!.pop() }
        #expect(tracker.liveCount == 60)
        queue = nil
        #expect(tracker.liveCount == 0)
    }

    @Test("After close, a push hands its element back; what was pushed before still pops")
    func close() {
        let queue = IntakeQueue<Int>()
        for value in 0..<50 { _ = queue.push(value) }
        #expect(!queue.isClosed)
        queue.close()
        #expect(queue.isClosed)
        #expect(queue.push(99) == 99)
        var popped: [Int] = []
        while let value = queue.pop() { popped.append(value) }
        #expect(popped == Array(0..<50))
        #expect(queue.push(100) == 100)
        #expect(queue.pop() == nil)
    }

    /// `producers` threads push `perProducer` values each, tagged with the producer, while
    /// `consumers` threads pop until every value is out. Every value must pop exactly once, and each
    /// consumer must see each producer's values in the order they were pushed.
    @Test(
        "Every value from 1, 2, 4 and 8 producers pops exactly once, in each producer's order",
        arguments: [(1, 1), (1, 3), (2, 2), (4, 2), (8, 3)])
    func producersAndConsumers(producers: Int, consumers: Int) async {
        let perProducer = 20_000
        let total = producers * perProducer
        let queue = IntakeQueue<Int>()
        let popped = AtomicCounters(count: total)
        let outOfOrder = Counter()
        let remaining = Counter()
        remaining.increment(by: total)
        await onThreads(producers + consumers) { thread in
            if thread < producers {
                for sequence in 0..<perProducer {
                    #expect(queue.push(thread * perProducer + sequence) == nil)
                }
                return
            }
            var lastSeen = [Int](repeating: -1, count: producers)
            while remaining.value > 0 {
                guard let value = queue.pop() else { continue }
                let (producer, sequence) = value.quotientAndRemainder(dividingBy: perProducer)
                if sequence <= lastSeen[producer] { outOfOrder.increment() }
                lastSeen[producer] = sequence
                popped.increment(value)
                remaining.increment(by: -1)
            }
        }
        #expect(popped.indices(notEqualTo: 1) == [])
        #expect(outOfOrder.value == 0)
        #expect(queue.pop() == nil)
    }

    @Test("Pushes racing a close: each is either popped once or handed back, never both or neither")
    func pushesRacingClose() async {
        let producers = 4
        let perProducer = 50_000
        let queue = IntakeQueue<Int>()
        let popped = AtomicCounters(count: producers * perProducer)
        let refused = AtomicCounters(count: producers * perProducer)
        let pushed = Counter()
        let done = Counter()
        await onThreads(producers + 2) { thread in
            switch thread {
            case 0..<producers:
                for sequence in 0..<perProducer {
                    // Past four fifths, wait for the close: every producer then meets it, however
                    // the threads are scheduled, while the others may still be racing it.
                    if sequence == perProducer * 4 / 5 { while !queue.isClosed { sched_yield() } }
                    let value = thread * perProducer + sequence
                    if queue.push(value) != nil { refused.increment(value) }
                    if sequence % 1_000 == 999 { pushed.increment(by: 1_000) }
                }
                done.increment()
            case producers:
                // Close once the producers are well under way (they reach this before they wait).
                while pushed.value < producers * perProducer / 10 { sched_yield() }
                queue.close()
            default:
                while true {
                    if let value = queue.pop() {
                        popped.increment(value)
                    } else if done.value == producers {
                        guard let value = queue.pop() else { return }
                        popped.increment(value)
                    }
                }
            }
        }
        let outcomes = (0..<popped.count).map { popped[$0] + refused[$0] }
        #expect(outcomes.allSatisfy { $0 == 1 })
        // Each producer was refused (its last pushes came after the close), and once refused it
        // stayed refused.
        for producer in 0..<producers {
            let range = (producer * perProducer)..<((producer + 1) * perProducer)
            let firstRefused = range.first { refused[$0] == 1 }
            #expect(firstRefused != nil, "producer \(producer) was never refused")
            #expect(range[(firstRefused ?? range.upperBound)...].allSatisfy { refused[$0] == 1 })
        }
    }
}

import Testing
@testable import ThreadKit
import SeededRandom

private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

/// The timer heap against a trivially correct model: an array kept sorted by deadline, then by
/// insertion order. Cancelled elements stay in the heap, dead, until the heap meets them. No
/// threads, no clock.
@Suite struct TimerHeapTests {
    /// Inserts `count` new items (ids 0 up) into `heap`, each due at a random instant before
    /// `bound`, and returns them in id order.
    static func insert(_ count: Int, into heap: inout TimerHeap<Item>, dueBefore bound: UInt64, using random: inout SplitMix64) -> [Item] {
        let items = (0..<count).map(Item.init)
        for item in items { heap.insert(item, deadline: at(UInt64.random(in: 0..<bound, using: &random))) }
        return items
    }

    final class Item: TimerHeapElement, CustomStringConvertible {
        var isCancelled = false
        let id: Int
        init(_ id: Int) { self.id = id }
        var description: String { "Item(\(id))" }
    }

    /// The model: entries in the order the heap must hand them out.
    struct Model {
        private(set) var entries: [(deadline: MonotonicInstant, item: Item)] = []

        var count: Int { entries.count }
        var first: (deadline: MonotonicInstant, item: Item)? { entries.first }

        /// Inserts after every entry with a deadline at or before `deadline`: ties keep insertion order.
        mutating func insert(_ item: Item, deadline: MonotonicInstant) {
            let index = entries.firstIndex { $0.deadline > deadline } ?? entries.count
            entries.insert((deadline, item), at: index)
        }

        mutating func remove(_ item: Item) {
            entries.removeAll { $0.item === item }
        }

        func contains(_ item: Item) -> Bool {
            entries.contains { $0.item === item }
        }

        mutating func popFirst(dueAt now: MonotonicInstant) -> Item? {
            guard let first = entries.first, first.deadline <= now else { return nil }
            entries.removeFirst()
            return first.item
        }
    }

    /// A heap as its owner sees it: the live entries first, after dropping dead ones from the top,
    /// as the timer thread does before it looks at the first entry.
    static func liveFirst(_ heap: inout TimerHeap<Item>) -> (deadline: MonotonicInstant, element: Item)? {
        _ = heap.dropCancelledFromTop()
        return heap.first
    }

    /// What differs between `heap` and `model`, in words: the live count (stored entries less the
    /// dead ones, given as `cancelled`), emptiness and the first live entry, and the storage bound
    /// when the owner sweeps as ``TimerHeap/needsSweep(cancelled:stored:)`` says.
    static func differences(_ heap: inout TimerHeap<Item>, _ model: Model, cancelled: inout Int) -> [String] {
        var found: [String] = []
        cancelled -= heap.dropCancelledFromTop()
        if heap.count - cancelled != model.count { found.append("live count \(heap.count - cancelled), model \(model.count)") }
        if heap.isEmpty != (model.count == 0) { found.append("isEmpty \(heap.isEmpty) with \(model.count) in the model") }
        if heap.first?.element !== model.first?.item || heap.first?.deadline != model.first?.deadline {
            found.append("first \(String(describing: heap.first)), model \(String(describing: model.first))")
        }
        if heap.count > 2 * model.count + 1 {
            found.append("\(heap.count) entries stored for \(model.count) live ones")
        }
        return found
    }

    /// Cancels `item` as a `TimerCore` does: marks it and sweeps when the rule says so.
    static func cancel(_ item: Item, in heap: inout TimerHeap<Item>, cancelled: inout Int) {
        item.isCancelled = true
        cancelled += 1
        if TimerHeap<Item>.needsSweep(cancelled: cancelled, stored: heap.count) {
            let dropped = heap.removeCancelled()
            #expect(dropped == cancelled, "a sweep drops every dead entry")
            cancelled -= dropped
        }
    }

    static func check(_ heap: inout TimerHeap<Item>, _ model: Model, cancelled: inout Int,
                      sourceLocation: SourceLocation = #_sourceLocation) {
        let found = differences(&heap, model, cancelled: &cancelled)
        #expect(found.isEmpty, "\(found)", sourceLocation: sourceLocation)
    }

    /// Pops as the timer thread does: dead entries off the top first, then the first entry if due,
    /// then a sweep if the rule says so.
    static func pop(_ heap: inout TimerHeap<Item>, dueAt now: MonotonicInstant, cancelled: inout Int) -> Item? {
        cancelled -= heap.dropCancelledFromTop()
        let item = heap.popFirst(dueAt: now)
        if TimerHeap<Item>.needsSweep(cancelled: cancelled, stored: heap.count) { cancelled -= heap.removeCancelled() }
        return item
    }

    @Test("random inserts, cancels and pops match a sorted-array model", arguments: 0..<8)
    func randomOperationsMatchModel(seed: UInt64) {
        var random = SplitMix64(seed: 0x7131_4EA9 &+ seed)
        var heap = TimerHeap<Item>()
        var model = Model()
        var cancelled = 0
        var nextID = 0
        var popped: [Item] = []  // out of the heap, live: may go back in, as a repeating call does
        var failures: [String] = []
        // Deadlines from a small range so that ties are common, a few from the far ends of the time line.
        func randomDeadline() -> MonotonicInstant {
            switch Int.random(in: 0..<20, using: &random) {
            case 0: at(0)
            case 1: at(.max)
            default: at(UInt64.random(in: 0..<64, using: &random))
            }
        }

        for step in 0..<4000 {
            let dice = Int.random(in: 0..<100, using: &random)
            // Grow early, shrink late, so both a large heap and an empty one are exercised.
            let insertShare = step < 2000 ? 55 : 30
            if dice < insertShare {
                let item = Item(nextID)
                nextID += 1
                let deadline = randomDeadline()
                let isFirst = heap.insert(item, deadline: deadline)
                model.insert(item, deadline: deadline)
                if isFirst != (model.first?.item === item) {
                    failures.append("step \(step): insert said first \(isFirst), model first \(String(describing: model.first))")
                }
            } else if dice < insertShare + 25, model.count > 0 {
                let item = model.entries[Int.random(in: 0..<model.count, using: &random)].item
                Self.cancel(item, in: &heap, cancelled: &cancelled)
                model.remove(item)
            } else if dice < insertShare + 30, let item = popped.randomElement(using: &random) {
                // An element popped live goes back in, as a repeating call does.
                popped.removeAll { $0 === item }
                let deadline = randomDeadline()
                heap.insert(item, deadline: deadline)
                model.insert(item, deadline: deadline)
            } else {
                let now = Int.random(in: 0..<10, using: &random) == 0
                    ? at(.max) : at(UInt64.random(in: 0..<70, using: &random))
                let expected = model.popFirst(dueAt: now)
                let item = Self.pop(&heap, dueAt: now, cancelled: &cancelled)
                if item !== expected {
                    failures.append("step \(step): popFirst(dueAt: \(now)) gave \(String(describing: item)), model \(String(describing: expected))")
                }
                if let item { popped.append(item) }
            }
            failures += Self.differences(&heap, model, cancelled: &cancelled).map { "step \(step): \($0)" }
        }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.prefix(5))")
        Self.check(&heap, model, cancelled: &cancelled)

        // Draining hands out exactly the model's order.
        while let expected = model.popFirst(dueAt: at(.max)) {
            let item = Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled)
            #expect(item === expected)
        }
        let last = Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled)
        #expect(last == nil)
        #expect(heap.isEmpty && cancelled == 0)
    }

    @Test("the sweep rule: due once dead entries are more than half of those stored")
    func sweepRule() {
        #expect(!TimerHeap<Item>.needsSweep(cancelled: 0, stored: 0))
        #expect(!TimerHeap<Item>.needsSweep(cancelled: 0, stored: 1))
        #expect(TimerHeap<Item>.needsSweep(cancelled: 1, stored: 1))
        #expect(!TimerHeap<Item>.needsSweep(cancelled: 1, stored: 2))
        #expect(TimerHeap<Item>.needsSweep(cancelled: 2, stored: 3))
        #expect(!TimerHeap<Item>.needsSweep(cancelled: 500, stored: 1_000))
        #expect(TimerHeap<Item>.needsSweep(cancelled: 501, stored: 1_000))
        #expect(!TimerHeap<Item>.needsSweep(cancelled: 500, stored: 1_001))
        #expect(TimerHeap<Item>.needsSweep(cancelled: 501, stored: 1_001))
        // Below the threshold, the live entries are at least half: stored ≤ 2 × live + 1.
        for stored in 0...200 {
            for cancelled in 0...stored where !TimerHeap<Item>.needsSweep(cancelled: cancelled, stored: stored) {
                #expect(stored <= 2 * (stored - cancelled) + 1, "stored \(stored), cancelled \(cancelled)")
            }
        }
    }

    @Test("removal is lazy but bounded: cancelling most of 100,000 elements in random order keeps storage within twice the live count")
    func lazyRemovalIsBounded() {
        var random = SplitMix64(seed: 0x5EED)
        var heap = TimerHeap<Item>()
        let items = Self.insert(100_000, into: &heap, dueBefore: 1_000_000, using: &random)
        var worstRatio = 0.0
        var cancelled = 0
        var sweptEntries = 0
        var order = items
        order.shuffle(using: &random)
        let survivors = order.suffix(1_000)
        for item in order.dropLast(1_000) {
            let before = heap.count
            Self.cancel(item, in: &heap, cancelled: &cancelled)
            if heap.count < before { sweptEntries += before }
            worstRatio = max(worstRatio, Double(heap.count) / Double(heap.count - cancelled + 1))
        }
        #expect(heap.count - cancelled == 1_000)
        #expect(worstRatio <= 2.0)
        #expect(heap.count <= 2 * 1_000 + 1)
        // Sweeps look at about two entries per cancel, all told (a geometric series: 100,000 entries,
        // then 50,000, 25,000, …).
        #expect(sweptEntries <= 2 * 100_000, "\(sweptEntries) entries swept for 99,000 cancels")
        // The survivors come out in deadline order, each once, and nothing else does.
        var popped: [Item] = []
        while let item = Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled) { popped.append(item) }
        #expect(Set(popped.map(ObjectIdentifier.init)) == Set(survivors.map(ObjectIdentifier.init)))
        #expect(popped.count == 1_000)
        #expect(heap.isEmpty && cancelled == 0)
    }

    @Test("dead entries at the top are dropped, so the first entry the owner sees is live")
    func deadEntriesLeaveFromTheTop() {
        var heap = TimerHeap<Item>()
        let items = (0..<10).map(Item.init)
        for (index, item) in items.enumerated() { heap.insert(item, deadline: at(UInt64(index))) }
        for item in items.prefix(4) { item.isCancelled = true }
        items[6].isCancelled = true
        #expect(heap.first?.element === items[0], "the heap does not look on its own")
        #expect(heap.dropCancelledFromTop() == 4)
        #expect(heap.first?.element === items[4])
        #expect(heap.count == 6)
        #expect(heap.dropCancelledFromTop() == 0)
        // earliest(_:) passes through the dead entry in the middle.
        #expect(heap.earliest(3).map(\.element.id) == [4, 5, 7])
        #expect(heap.removeCancelled() == 1)
        #expect(heap.count == 5)
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item.id) }
        #expect(popped == [4, 5, 7, 8, 9])
    }

    @Test("the storage bound holds when calls fire after later ones were cancelled")
    func boundHoldsAcrossPops() {
        var heap = TimerHeap<Item>()
        var cancelled = 0
        let early = (0..<100).map(Item.init), late = (100..<200).map(Item.init), far = Item(200)
        for (index, item) in early.enumerated() { heap.insert(item, deadline: at(UInt64(index))) }
        for (index, item) in late.enumerated() { heap.insert(item, deadline: at(1_000 + UInt64(index))) }
        heap.insert(far, deadline: at(1_000_000))
        // Cancel the late calls (fewer than the live ones: no sweep), then let the early ones fire,
        // sweeping after each pop as the timer thread does.
        for item in late { Self.cancel(item, in: &heap, cancelled: &cancelled) }
        #expect(heap.count == 201)
        var fired = 0
        while Self.pop(&heap, dueAt: at(999), cancelled: &cancelled) != nil {
            fired += 1
            #expect(heap.count <= 2 * (heap.count - cancelled) + 1, "\(heap.count) stored, \(cancelled) dead after \(fired) pops")
        }
        #expect(fired == 100)
        #expect(heap.count - cancelled == 1 && heap.count <= 3)
        #expect(Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled) === far)
    }

    @Test("equal deadlines come out in insertion order, also after cancels")
    func equalDeadlinesKeepInsertionOrder() {
        var random = SplitMix64(seed: 42)
        var heap = TimerHeap<Item>()
        var cancelled = 0
        let items = (0..<1000).map(Item.init)
        for item in items { heap.insert(item, deadline: at(500)) }
        var kept: [Item] = []
        for item in items {
            if Bool.random(using: &random) {
                Self.cancel(item, in: &heap, cancelled: &cancelled)
            } else {
                kept.append(item)
            }
        }
        // One earlier and one later deadline around the ties.
        let early = Item(-1), late = Item(-2)
        heap.insert(late, deadline: at(501))
        let earlyIsFirst = heap.insert(early, deadline: at(499))
        #expect(earlyIsFirst)
        var popped: [Item] = []
        while let item = Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled) { popped.append(item) }
        #expect(popped.map(\.id) == [early.id] + kept.map(\.id) + [late.id])
    }

    @Test("sorted order for random deadlines, ties by insertion")
    func drainsInDeadlineOrder() {
        var random = SplitMix64(seed: 7)
        var heap = TimerHeap<Item>()
        let items = (0..<5000).map(Item.init)
        var deadlines: [UInt64] = []
        for item in items {
            let deadline = UInt64.random(in: 0..<1000, using: &random)
            deadlines.append(deadline)
            heap.insert(item, deadline: at(deadline))
        }
        #expect(heap.count == items.count)
        // The model: ids sorted by deadline, then by id (the insertion order).
        let expected = items.map(\.id).sorted { (deadlines[$0], $0) < (deadlines[$1], $1) }
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item.id) }
        #expect(popped == expected)
    }

    @Test("popFirst(dueAt:) hands out an element exactly from its deadline on")
    func popFirstRespectsDeadline() {
        var heap = TimerHeap<Item>()
        let a = Item(1), b = Item(2)
        let bIsFirst = heap.insert(b, deadline: at(200)), aIsFirst = heap.insert(a, deadline: at(100))
        #expect(bIsFirst && aIsFirst)
        let pops = [0, 99, 100, 199, 1000, .max].map { heap.popFirst(dueAt: at($0)) }
        #expect(pops[0] == nil)
        #expect(pops[1] == nil)
        #expect(pops[2] === a)
        #expect(pops[3] == nil)
        #expect(pops[4] === b)
        #expect(pops[5] == nil)
        #expect(heap.isEmpty == true)
        #expect(heap.first == nil)
    }

    @Test("cancelling the last, the first and a middle element keeps the order")
    func cancelAtEveryPosition() {
        for cancelledDeadline: UInt64 in [10, 50, 90] {
            var heap = TimerHeap<Item>()
            var cancelled = 0
            let items = (0..<9).map(Item.init)
            for (offset, item) in items.enumerated() { heap.insert(item, deadline: at(UInt64(offset + 1) * 10)) }
            let gone = items[Int(cancelledDeadline / 10) - 1]
            Self.cancel(gone, in: &heap, cancelled: &cancelled)
            var popped: [Int] = []
            while let item = Self.pop(&heap, dueAt: at(.max), cancelled: &cancelled) { popped.append(item.id) }
            #expect(popped == items.map(\.id).filter { $0 != gone.id })
            #expect(cancelled == 0)
        }
    }

    @Test("removeAll returns every entry, dead ones too, and leaves a usable heap")
    func removeAllEmptiesTheHeap() {
        var random = SplitMix64(seed: 99)
        var heap = TimerHeap<Item>()
        let items = Self.insert(300, into: &heap, dueBefore: 50, using: &random)
        for item in items where Int.random(in: 0..<3, using: &random) == 0 { item.isCancelled = true }
        let removed = heap.removeAll()
        #expect(removed.count == items.count)
        #expect(Set(removed.map(ObjectIdentifier.init)) == Set(items.map(ObjectIdentifier.init)))
        #expect(heap.count == 0)
        #expect(heap.isEmpty == true)
        #expect(heap.first == nil)
        let poppedWhenEmpty = heap.popFirst(dueAt: at(.max))
        #expect(poppedWhenEmpty == nil)
        let removedAgain = heap.removeAll()
        #expect(removedAgain.isEmpty)

        // Elements go back in after removeAll, and ties still come out in insertion order.
        let again = Array(items.filter { !$0.isCancelled }.prefix(20).reversed())
        for item in again { heap.insert(item, deadline: at(7)) }
        #expect(heap.count == 20)
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(7)) { popped.append(item.id) }
        #expect(popped == again.map(\.id))
    }

    @Test("removeAll(where:) removes exactly the matching live elements and the dead ones, and keeps the rest in order, ties included",
          arguments: 0..<4)
    func removeAllWhereKeepsTheRestInOrder(seed: UInt64) {
        var random = SplitMix64(seed: 0x5EED &+ seed)
        var heap = TimerHeap<Item>()
        var model = Model()
        let items = (0..<500).map(Item.init)
        // Few distinct deadlines, so that many ties must keep their insertion order.
        for item in items {
            let deadline = at(UInt64.random(in: 0..<40, using: &random))
            heap.insert(item, deadline: deadline)
            model.insert(item, deadline: deadline)
        }
        let dead = model.entries.filter { $0.item.id % 11 == 5 }
        for entry in dead {
            entry.item.isCancelled = true
            model.remove(entry.item)
        }
        let divisor = Int.random(in: 2...5, using: &random)
        var asked: [Int] = []
        let (removed, cancelled) = heap.removeAll { item, deadline in
            asked.append(item.id)
            return item.id % divisor == 0 || deadline == at(13)
        }
        #expect(cancelled == dead.count)
        #expect(!asked.contains { $0 % 11 == 5 }, "a dead entry is never offered")
        let expected = model.entries.filter { $0.item.id % divisor == 0 || $0.deadline == at(13) }
        for entry in expected { model.remove(entry.item) }
        #expect(Set(removed.map(ObjectIdentifier.init)) == Set(expected.map { ObjectIdentifier($0.item) }))
        #expect(heap.count == model.count)
        // The heap still works: inserts and cancels after it, then everything out in model order.
        var deadCount = 0
        for item in removed.prefix(30) {
            let deadline = at(UInt64.random(in: 0..<40, using: &random))
            heap.insert(item, deadline: deadline)
            model.insert(item, deadline: deadline)
        }
        for entry in model.entries.filter({ $0.item.id % 7 == 3 }) {
            Self.cancel(entry.item, in: &heap, cancelled: &deadCount)
            model.remove(entry.item)
        }
        var popped: [Int] = []
        while let item = Self.pop(&heap, dueAt: at(.max), cancelled: &deadCount) { popped.append(item.id) }
        #expect(popped == model.entries.map(\.item.id))
        #expect(heap.removeAll { _, _ in true }.removed.isEmpty)
    }
}

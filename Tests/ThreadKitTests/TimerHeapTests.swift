import Testing
@testable import ThreadKit
import SeededRandom

private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

/// The indexed timer heap against a trivially correct model: an array kept sorted by deadline, then
/// by insertion order. No threads, no clock.
@Suite struct TimerHeapTests {
    /// Inserts `count` new items (ids 0 up) into `heap`, each due at a random instant before
    /// `bound`, and returns them in id order.
    static func insert(_ count: Int, into heap: inout TimerHeap<Item>, dueBefore bound: UInt64, using random: inout SplitMix64) -> [Item] {
        let items = (0..<count).map(Item.init)
        for item in items { heap.insert(item, deadline: at(UInt64.random(in: 0..<bound, using: &random))) }
        return items
    }

    final class Item: TimerHeapElement, CustomStringConvertible {
        var heapIndex: Int?
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

        mutating func popFirst(dueAt now: MonotonicInstant) -> Item? {
            guard let first = entries.first, first.deadline <= now else { return nil }
            entries.removeFirst()
            return first.item
        }
    }

    /// What differs between `heap` and `model`, in words: count, emptiness and the first entry, and
    /// with `bookkeeping`, the index of every item ever made (items in the heap hold distinct indices
    /// within the heap's storage, the others hold `nil`) and the storage bound.
    static func differences(_ heap: TimerHeap<Item>, _ model: Model, allItems: [Item], bookkeeping: Bool) -> [String] {
        var found: [String] = []
        if heap.count != model.count { found.append("count \(heap.count), model \(model.count)") }
        if heap.isEmpty != (model.count == 0) { found.append("isEmpty \(heap.isEmpty) with \(model.count) in the model") }
        if heap.first?.element !== model.first?.item || heap.first?.deadline != model.first?.deadline {
            found.append("first \(String(describing: heap.first)), model \(String(describing: model.first))")
        }
        guard bookkeeping else { return found }
        let inHeap = Set(model.entries.map { ObjectIdentifier($0.item) })
        var indices: [Int] = []
        for item in allItems {
            if inHeap.contains(ObjectIdentifier(item)) {
                if let index = item.heapIndex { indices.append(index) } else { found.append("\(item) in the heap has no heapIndex") }
            } else if let index = item.heapIndex {
                found.append("\(item) out of the heap has heapIndex \(index)")
            }
        }
        // Removed elements may leave marked entries behind: the live ones hold distinct indices
        // within the storage, which never exceeds twice the live count (plus one).
        if Set(indices).count != indices.count || indices.contains(where: { $0 >= heap.storedCount }) {
            found.append("heap indices \(indices.sorted()) are not distinct within 0..<\(heap.storedCount)")
        }
        if heap.storedCount > 2 * heap.count + 1 {
            found.append("\(heap.storedCount) entries stored for \(heap.count) elements")
        }
        return found
    }

    static func check(_ heap: TimerHeap<Item>, _ model: Model, allItems: [Item],
                      sourceLocation: SourceLocation = #_sourceLocation) {
        let found = differences(heap, model, allItems: allItems, bookkeeping: true)
        #expect(found.isEmpty, "\(found)", sourceLocation: sourceLocation)
    }

    @Test("random inserts, removes and pops match a sorted-array model", arguments: 0..<8)
    func randomOperationsMatchModel(seed: UInt64) {
        var random = SplitMix64(seed: 0x7131_4EA9 &+ seed)
        var heap = TimerHeap<Item>()
        var model = Model()
        var allItems: [Item] = []
        var outside: [Item] = []  // removed or popped: no longer in the heap
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
                let item = Item(allItems.count)
                allItems.append(item)
                let deadline = randomDeadline()
                heap.insert(item, deadline: deadline)
                model.insert(item, deadline: deadline)
            } else if dice < insertShare + 20, model.count > 0 {
                let item = model.entries[Int.random(in: 0..<model.count, using: &random)].item
                if !heap.remove(item) { failures.append("step \(step): remove(\(item)) returned false") }
                if item.heapIndex != nil { failures.append("step \(step): \(item) keeps its heapIndex") }
                model.remove(item)
                outside.append(item)
            } else if dice < insertShare + 25, let item = outside.randomElement(using: &random) {
                if heap.remove(item) { failures.append("step \(step): remove(\(item)) of an element not in the heap") }
            } else if dice < insertShare + 30, let item = outside.randomElement(using: &random) {
                // An element may go back in once it is out.
                outside.removeAll { $0 === item }
                let deadline = randomDeadline()
                heap.insert(item, deadline: deadline)
                model.insert(item, deadline: deadline)
            } else {
                let now = Int.random(in: 0..<10, using: &random) == 0
                    ? at(.max) : at(UInt64.random(in: 0..<70, using: &random))
                let expected = model.popFirst(dueAt: now)
                let popped = heap.popFirst(dueAt: now)
                if popped !== expected {
                    failures.append("step \(step): popFirst(dueAt: \(now)) gave \(String(describing: popped)), model \(String(describing: expected))")
                }
                if let popped {
                    if popped.heapIndex != nil { failures.append("step \(step): popped \(popped) keeps its heapIndex") }
                    outside.append(popped)
                }
            }
            failures += Self.differences(heap, model, allItems: allItems, bookkeeping: step % 20 == 0)
                .map { "step \(step): \($0)" }
        }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.prefix(5))")
        Self.check(heap, model, allItems: allItems)

        // Draining hands out exactly the model's order.
        while let expected = model.popFirst(dueAt: at(.max)) {
            let popped = heap.popFirst(dueAt: at(.max))
            #expect(popped === expected)
        }
        let last = heap.popFirst(dueAt: at(.max))
        #expect(last == nil)
        Self.check(heap, model, allItems: allItems)
    }

    @Test("removal is lazy but bounded: cancelling most of 100,000 elements in random order keeps storage within twice the live count")
    func lazyRemovalIsBounded() {
        var random = SplitMix64(seed: 0x5EED)
        var heap = TimerHeap<Item>()
        let items = Self.insert(100_000, into: &heap, dueBefore: 1_000_000, using: &random)
        var worstRatio = 0.0
        var order = items
        order.shuffle(using: &random)
        let survivors = order.suffix(1_000)
        for item in order.dropLast(1_000) {
            let removed = heap.remove(item)
            #expect(removed)
            worstRatio = max(worstRatio, Double(heap.storedCount) / Double(heap.count + 1))
        }
        #expect(heap.count == 1_000)
        #expect(worstRatio <= 2.0)
        #expect(heap.storedCount <= 2 * heap.count + 1)
        // The survivors come out in deadline order, each once, and nothing else does.
        var popped: [Item] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item) }
        #expect(Set(popped.map(ObjectIdentifier.init)) == Set(survivors.map(ObjectIdentifier.init)))
        #expect(popped.count == 1_000)
        #expect(heap.isEmpty && heap.storedCount == 0)
    }

    @Test("the storage bound holds when calls fire after later ones were cancelled")
    func boundHoldsAcrossPops() {
        var heap = TimerHeap<Item>()
        let early = (0..<100).map(Item.init), late = (100..<200).map(Item.init), far = Item(200)
        for (index, item) in early.enumerated() { heap.insert(item, deadline: at(UInt64(index))) }
        for (index, item) in late.enumerated() { heap.insert(item, deadline: at(1_000 + UInt64(index))) }
        heap.insert(far, deadline: at(1_000_000))
        // Cancel the late calls (marked, fewer than the live ones), then let the early ones fire.
        for item in late { heap.remove(item) }
        var fired = 0
        while heap.popFirst(dueAt: at(999)) != nil {
            fired += 1
            #expect(heap.storedCount <= 2 * heap.count + 1, "\(heap.storedCount) stored for \(heap.count) live after \(fired) pops")
        }
        #expect(fired == 100)
        #expect(heap.count == 1 && heap.storedCount <= 3)
        #expect(heap.popFirst(dueAt: at(.max)) === far)
    }

    @Test("equal deadlines come out in insertion order, also after removals")
    func equalDeadlinesKeepInsertionOrder() {
        var random = SplitMix64(seed: 42)
        var heap = TimerHeap<Item>()
        let items = (0..<1000).map(Item.init)
        for item in items { heap.insert(item, deadline: at(500)) }
        var kept: [Item] = []
        for item in items {
            if Bool.random(using: &random) {
                let removed = heap.remove(item)
                #expect(removed)
            } else {
                kept.append(item)
            }
        }
        // One earlier and one later deadline around the ties.
        let early = Item(-1), late = Item(-2)
        heap.insert(late, deadline: at(501))
        heap.insert(early, deadline: at(499))
        var popped: [Item] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item) }
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
        #expect(Set(items.compactMap(\.heapIndex)) == Set(0..<items.count))
        // The model: ids sorted by deadline, then by id (the insertion order).
        let expected = items.map(\.id).sorted { (deadlines[$0], $0) < (deadlines[$1], $1) }
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item.id) }
        #expect(popped == expected)
        #expect(items.allSatisfy { $0.heapIndex == nil })
    }

    @Test("popFirst(dueAt:) hands out an element exactly from its deadline on")
    func popFirstRespectsDeadline() {
        var heap = TimerHeap<Item>()
        let a = Item(1), b = Item(2)
        heap.insert(b, deadline: at(200))
        heap.insert(a, deadline: at(100))
        let pops = [0, 99, 100, 199, 1000, .max].map { heap.popFirst(dueAt: at($0)) }
        #expect(pops[0] == nil)
        #expect(pops[1] == nil)
        #expect(pops[2] === a)
        #expect(pops[3] == nil)
        #expect(pops[4] === b)
        #expect(pops[5] == nil)
        #expect(heap.isEmpty)
        #expect(heap.first == nil)
    }

    @Test("removing the last, the first and a middle element keeps the order")
    func removeAtEveryPosition() {
        for removedDeadline: UInt64 in [10, 50, 90] {
            var heap = TimerHeap<Item>()
            let items = (0..<9).map(Item.init)
            for (offset, item) in items.enumerated() { heap.insert(item, deadline: at(UInt64(offset + 1) * 10)) }
            let removed = items[Int(removedDeadline / 10) - 1]
            let first = heap.remove(removed)
            let second = heap.remove(removed)
            #expect(first)
            #expect(!second)
            #expect(removed.heapIndex == nil)
            var popped: [Int] = []
            while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item.id) }
            #expect(popped == items.map(\.id).filter { $0 != removed.id })
        }
    }

    @Test("removeAll returns every element, clears their indices and leaves a usable heap")
    func removeAllEmptiesTheHeap() {
        var random = SplitMix64(seed: 99)
        var heap = TimerHeap<Item>()
        let items = Self.insert(300, into: &heap, dueBefore: 50, using: &random)
        var inHeap = Set(items.map(ObjectIdentifier.init))
        for item in items where Int.random(in: 0..<3, using: &random) == 0 {
            heap.remove(item)
            inHeap.remove(ObjectIdentifier(item))
        }
        let removed = heap.removeAll()
        #expect(removed.count == inHeap.count)
        #expect(Set(removed.map(ObjectIdentifier.init)) == inHeap)
        #expect(items.allSatisfy { $0.heapIndex == nil })
        #expect(heap.count == 0)
        #expect(heap.isEmpty)
        #expect(heap.first == nil)
        let poppedWhenEmpty = heap.popFirst(dueAt: at(.max))
        #expect(poppedWhenEmpty == nil)
        let removedAgain = heap.removeAll()
        #expect(removedAgain.isEmpty)

        // Elements go back in after removeAll, and ties still come out in insertion order.
        let again = Array(items.prefix(20).reversed())
        for item in again { heap.insert(item, deadline: at(7)) }
        #expect(heap.count == 20)
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(7)) { popped.append(item.id) }
        #expect(popped == again.map(\.id))
    }

    @Test("removeAll(where:) removes exactly the matching elements and keeps the rest in order, ties included",
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
        let divisor = Int.random(in: 2...5, using: &random)
        let removed = heap.removeAll { item, deadline in item.id % divisor == 0 || deadline == at(13) }
        let expected = model.entries.filter { $0.item.id % divisor == 0 || $0.deadline == at(13) }
        for entry in expected { model.remove(entry.item) }
        #expect(Set(removed.map(ObjectIdentifier.init)) == Set(expected.map { ObjectIdentifier($0.item) }))
        #expect(removed.allSatisfy { $0.heapIndex == nil })
        #expect(Self.differences(heap, model, allItems: items, bookkeeping: true).isEmpty)
        // The heap still works: inserts and removals after it, then everything out in model order.
        for item in removed.prefix(30) {
            let deadline = at(UInt64.random(in: 0..<40, using: &random))
            heap.insert(item, deadline: deadline)
            model.insert(item, deadline: deadline)
        }
        for entry in model.entries.filter({ $0.item.id % 7 == 3 }) {
            heap.remove(entry.item)
            model.remove(entry.item)
        }
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: at(.max)) { popped.append(item.id) }
        #expect(popped == model.entries.map(\.item.id))
        #expect(heap.removeAll { _, _ in true }.isEmpty)
    }
}

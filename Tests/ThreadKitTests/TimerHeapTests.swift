import Testing
@testable import ThreadKit

/// The indexed timer heap against a trivially correct model: an array kept sorted by deadline, then
/// by insertion order. No threads, no clock.
@Suite struct TimerHeapTests {
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

        func contains(_ item: Item) -> Bool { entries.contains { $0.item === item } }
    }

    static func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

    /// Checks everything observable about `heap` against `model`, and the index bookkeeping of every
    /// item ever made: items in the heap hold distinct indices `0..<count`, the others hold `nil`.
    static func check(_ heap: TimerHeap<Item>, _ model: Model, allItems: [Item],
                      sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(heap.count == model.count, sourceLocation: sourceLocation)
        #expect(heap.isEmpty == (model.count == 0), sourceLocation: sourceLocation)
        #expect(heap.first?.element === model.first?.item, sourceLocation: sourceLocation)
        #expect(heap.first?.deadline == model.first?.deadline, sourceLocation: sourceLocation)
        var indices: [Int] = []
        for item in allItems {
            if model.contains(item) {
                if let index = item.heapIndex {
                    indices.append(index)
                } else {
                    Issue.record("\(item) is in the heap but its heapIndex is nil", sourceLocation: sourceLocation)
                }
            } else {
                #expect(item.heapIndex == nil, "\(item) is not in the heap", sourceLocation: sourceLocation)
            }
        }
        #expect(indices.sorted() == Array(0..<model.count), sourceLocation: sourceLocation)
    }

    @Test("random inserts, removes and pops match a sorted-array model", arguments: 0..<12)
    func randomOperationsMatchModel(seed: UInt64) {
        var random = TimerTestRandom(seed: 0x7131_4EA9 &+ seed)
        var heap = TimerHeap<Item>()
        var model = Model()
        var allItems: [Item] = []
        var outside: [Item] = []  // removed or popped: no longer in the heap
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
                #expect(heap.remove(item), "removing \(item), which is in the heap")
                #expect(item.heapIndex == nil)
                model.remove(item)
                outside.append(item)
            } else if dice < insertShare + 25, let item = outside.randomElement(using: &random) {
                #expect(!heap.remove(item), "removing \(item), which is not in the heap")
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
                #expect(popped === expected, "popFirst(dueAt: \(now)) at step \(step)")
                if let popped {
                    #expect(popped.heapIndex == nil)
                    outside.append(popped)
                }
            }
            Self.check(heap, model, allItems: allItems)
        }

        // Draining hands out exactly the model's order.
        while let expected = model.popFirst(dueAt: at(.max)) {
            #expect(heap.popFirst(dueAt: at(.max)) === expected)
        }
        #expect(heap.popFirst(dueAt: at(.max)) == nil)
        Self.check(heap, model, allItems: allItems)
    }

    @Test("equal deadlines come out in insertion order, also after removals")
    func equalDeadlinesKeepInsertionOrder() {
        var random = TimerTestRandom(seed: 42)
        var heap = TimerHeap<Item>()
        let items = (0..<1000).map(Item.init)
        for item in items { heap.insert(item, deadline: Self.at(500)) }
        var kept: [Item] = []
        for item in items {
            if Bool.random(using: &random) {
                #expect(heap.remove(item))
            } else {
                kept.append(item)
            }
        }
        // One earlier and one later deadline around the ties.
        let early = Item(-1), late = Item(-2)
        heap.insert(late, deadline: Self.at(501))
        heap.insert(early, deadline: Self.at(499))
        var popped: [Item] = []
        while let item = heap.popFirst(dueAt: Self.at(.max)) { popped.append(item) }
        #expect(popped.map(\.id) == [early.id] + kept.map(\.id) + [late.id])
    }

    @Test("sorted order for random deadlines, ties by insertion")
    func drainsInDeadlineOrder() {
        var random = TimerTestRandom(seed: 7)
        var heap = TimerHeap<Item>()
        var model = Model()
        let items = (0..<5000).map(Item.init)
        for item in items {
            let deadline = Self.at(UInt64.random(in: 0..<1000, using: &random))
            heap.insert(item, deadline: deadline)
            model.insert(item, deadline: deadline)
        }
        Self.check(heap, model, allItems: items)
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: Self.at(.max)) { popped.append(item.id) }
        #expect(popped == model.entries.map(\.item.id))
        #expect(items.allSatisfy { $0.heapIndex == nil })
    }

    @Test("popFirst(dueAt:) hands out an element exactly from its deadline on")
    func popFirstRespectsDeadline() {
        var heap = TimerHeap<Item>()
        let a = Item(1), b = Item(2)
        heap.insert(b, deadline: Self.at(200))
        heap.insert(a, deadline: Self.at(100))
        #expect(heap.popFirst(dueAt: Self.at(0)) == nil)
        #expect(heap.popFirst(dueAt: Self.at(99)) == nil)
        #expect(heap.count == 2)
        #expect(heap.popFirst(dueAt: Self.at(100)) === a)
        #expect(heap.popFirst(dueAt: Self.at(199)) == nil)
        #expect(heap.popFirst(dueAt: Self.at(1000)) === b)
        #expect(heap.popFirst(dueAt: Self.at(.max)) == nil)
        #expect(heap.isEmpty)
        #expect(heap.first == nil)
    }

    @Test("removing the last, the first and a middle element keeps the order")
    func removeAtEveryPosition() {
        for removedDeadline: UInt64 in [10, 50, 90] {
            var heap = TimerHeap<Item>()
            let items = (0..<9).map(Item.init)
            for (offset, item) in items.enumerated() { heap.insert(item, deadline: Self.at(UInt64(offset + 1) * 10)) }
            let removed = items[Int(removedDeadline / 10) - 1]
            #expect(heap.remove(removed))
            #expect(!heap.remove(removed))
            #expect(removed.heapIndex == nil)
            var popped: [Int] = []
            while let item = heap.popFirst(dueAt: Self.at(.max)) { popped.append(item.id) }
            #expect(popped == items.map(\.id).filter { $0 != removed.id })
        }
    }

    @Test("removeAll returns every element, clears their indices and leaves a usable heap")
    func removeAllEmptiesTheHeap() {
        var random = TimerTestRandom(seed: 99)
        var heap = TimerHeap<Item>()
        let items = (0..<300).map(Item.init)
        for item in items { heap.insert(item, deadline: Self.at(UInt64.random(in: 0..<50, using: &random))) }
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
        #expect(heap.popFirst(dueAt: Self.at(.max)) == nil)
        #expect(heap.removeAll().isEmpty)

        // Elements go back in after removeAll, and ties still come out in insertion order.
        let again = Array(items.prefix(20).reversed())
        for item in again { heap.insert(item, deadline: Self.at(7)) }
        #expect(heap.count == 20)
        var popped: [Int] = []
        while let item = heap.popFirst(dueAt: Self.at(7)) { popped.append(item.id) }
        #expect(popped == again.map(\.id))
    }
}

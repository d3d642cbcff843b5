/// An element that remembers where it stands in a ``TimerHeap``, so it can be removed in O(log n).
protocol TimerHeapElement: AnyObject {
    /// The element's slot in the heap, or `nil` when it is not in one. Only the heap writes it.
    var heapIndex: Int? { get set }
}

/// A binary min-heap of elements ordered by deadline, then by insertion order.
///
/// Each element records its own index, so removing any element (a cancelled timer) costs O(log n)
/// rather than a search. Entries keep their deadline and sequence number inline, so sifting compares
/// without following a pointer. A pure value type: no clock, no lock, no threads.
struct TimerHeap<Element: TimerHeapElement> {
    private struct Entry {
        var deadline: MonotonicInstant
        var sequence: UInt64
        var element: Element

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : sequence < other.sequence
        }
    }

    private var entries: ContiguousArray<Entry> = []
    private var nextSequence: UInt64 = 0

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    /// The earliest entry: the one to run next.
    var first: (deadline: MonotonicInstant, element: Element)? {
        entries.first.map { ($0.deadline, $0.element) }
    }

    /// The earliest deadline, without handing out a reference to its element.
    var firstDeadline: MonotonicInstant? {
        entries.first?.deadline
    }

    /// Adds `element` to run at `deadline`, after every element already due at the same instant.
    mutating func insert(_ element: Element, deadline: MonotonicInstant) {
        precondition(element.heapIndex == nil, "an element is in at most one heap, once")
        entries.append(Entry(deadline: deadline, sequence: nextSequence, element: element))
        nextSequence &+= 1
        element.heapIndex = entries.count - 1
        siftUp(entries.count - 1)
    }

    /// Removes and returns the earliest element if its deadline is at or before `now`.
    mutating func popFirst(dueAt now: MonotonicInstant) -> Element? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        return remove(at: 0)
    }

    /// Removes `element` if it is in the heap.
    ///
    /// - Returns: `true` if it was there.
    @discardableResult
    mutating func remove(_ element: Element) -> Bool {
        guard let index = element.heapIndex else { return false }
        precondition(entries[index].element === element, "the element belongs to another heap")
        _ = remove(at: index)
        return true
    }

    /// Removes every element, in no particular order.
    mutating func removeAll() -> [Element] {
        let elements = entries.map(\.element)
        for element in elements { element.heapIndex = nil }
        entries.removeAll()
        return elements
    }

    /// Removes the elements for which `shouldRemove` returns `true`, in O(n).
    ///
    /// The rest keep their deadlines and their order, ties included.
    ///
    /// - Returns: The removed elements, in no particular order.
    mutating func removeAll(where shouldRemove: (_ element: Element, _ deadline: MonotonicInstant) -> Bool) -> [Element] {
        var removed: [Element] = []
        var kept = ContiguousArray<Entry>()
        kept.reserveCapacity(entries.count)
        for entry in entries {
            if shouldRemove(entry.element, entry.deadline) {
                entry.element.heapIndex = nil
                removed.append(entry.element)
            } else {
                entry.element.heapIndex = kept.count
                kept.append(entry)
            }
        }
        entries = kept
        // Floyd's heap construction: sift every parent down, the last one first.
        for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) {
            siftDown(index)
        }
        return removed
    }

    private mutating func remove(at index: Int) -> Element {
        let removed = entries[index].element
        removed.heapIndex = nil
        let last = entries.removeLast()
        if index < entries.count {
            entries[index] = last
            last.element.heapIndex = index
            if index > 0, last.precedes(entries[(index - 1) / 2]) {
                siftUp(index)
            } else {
                siftDown(index)
            }
        }
        return removed
    }

    private mutating func siftUp(_ start: Int) {
        var index = start
        let moving = entries[index]
        while index > 0 {
            let parent = (index - 1) / 2
            guard moving.precedes(entries[parent]) else { break }
            entries[index] = entries[parent]
            entries[index].element.heapIndex = index
            index = parent
        }
        if index != start {
            entries[index] = moving
            moving.element.heapIndex = index
        }
    }

    private mutating func siftDown(_ start: Int) {
        var index = start
        let moving = entries[index]
        let count = entries.count
        while true {
            let left = 2 * index + 1
            guard left < count else { break }
            let right = left + 1
            let child = right < count && entries[right].precedes(entries[left]) ? right : left
            guard entries[child].precedes(moving) else { break }
            entries[index] = entries[child]
            entries[index].element.heapIndex = index
            index = child
        }
        if index != start {
            entries[index] = moving
            moving.element.heapIndex = index
        }
    }
}

/// An element that remembers where it stands in a ``TimerHeap``, so it can be removed without a search.
protocol TimerHeapElement: AnyObject {
    /// The element's slot in the heap, or `nil` when it is not in one. Only the heap writes it.
    var heapIndex: Int? { get set }
}

/// A binary min-heap of elements ordered by deadline, then by insertion order.
///
/// Removing an element (a cancelled timer) costs O(1) amortized: its entry is only marked, and
/// leaves the heap when it reaches the top or when marked entries outnumber the live ones, at which
/// point one O(n) pass rebuilds the heap from the live entries. So the entries never number more
/// than twice the live elements (plus one), the earliest entry is always live, and a rebuild's cost
/// is spread over at least as many removals as it drops. Entries keep their deadline and sequence
/// number inline, so sifting compares without following a pointer. A pure value type: no clock,
/// no lock, no threads.
struct TimerHeap<Element: TimerHeapElement> {
    private struct Entry {
        var deadline: MonotonicInstant
        /// The insertion order, with ``Entry/removedFlag`` set once the element was removed.
        var sequenceAndFlag: UInt64
        var element: Element

        /// Set in `sequenceAndFlag` for a removed element; sequences never reach it.
        static var removedFlag: UInt64 { 1 << 63 }

        var sequence: UInt64 { sequenceAndFlag & ~Self.removedFlag }
        var isRemoved: Bool { sequenceAndFlag & Self.removedFlag != 0 }

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : sequence < other.sequence
        }

        /// Tells a live element where it now stands; a removed one no longer has a place.
        func recordIndex(_ index: Int) {
            if !isRemoved { element.heapIndex = index }
        }
    }

    private var entries: ContiguousArray<Entry> = []
    private var nextSequence: UInt64 = 0
    /// How many entries are marked removed.
    private var removedCount = 0

    /// How many elements are in the heap (marked entries not counted).
    var count: Int { entries.count - removedCount }
    var isEmpty: Bool { entries.isEmpty }
    /// How many entries the heap stores, marked ones included: at most `2 * count + 1`.
    var storedCount: Int { entries.count }

    /// The earliest entry: the one to run next.
    var first: (deadline: MonotonicInstant, element: Element)? {
        entries.first.map { ($0.deadline, $0.element) }
    }

    /// The earliest deadline, without handing out a reference to its element.
    var firstDeadline: MonotonicInstant? {
        entries.first?.deadline
    }

    /// The `limit` earliest elements with their deadlines, earliest first, the heap untouched.
    ///
    /// A best-first walk down from the root: it looks at the entries that precede the last one it
    /// returns and their children (marked entries are passed through), never at the whole heap, so
    /// showing the next few of a million pending calls costs a few dozen comparisons.
    func earliest(_ limit: Int) -> [(deadline: MonotonicInstant, element: Element)] {
        var found: [(deadline: MonotonicInstant, element: Element)] = []
        var frontier = entries.isEmpty ? [] : [0]
        while found.count < limit, !frontier.isEmpty {
            var best = 0
            for candidate in frontier.indices.dropFirst() where entries[frontier[candidate]].precedes(entries[frontier[best]]) {
                best = candidate
            }
            let index = frontier[best]
            frontier.swapAt(best, frontier.count - 1)
            frontier.removeLast()
            if !entries[index].isRemoved { found.append((entries[index].deadline, entries[index].element)) }
            for child in [2 * index + 1, 2 * index + 2] where child < entries.count {
                frontier.append(child)
            }
        }
        return found
    }

    /// Adds `element` to run at `deadline`, after every element already due at the same instant.
    mutating func insert(_ element: Element, deadline: MonotonicInstant) {
        precondition(element.heapIndex == nil, "an element is in at most one heap, once")
        entries.append(Entry(deadline: deadline, sequenceAndFlag: nextSequence, element: element))
        nextSequence &+= 1
        element.heapIndex = entries.count - 1
        siftUp(entries.count - 1)
    }

    /// Removes and returns the earliest element if its deadline is at or before `now`.
    mutating func popFirst(dueAt now: MonotonicInstant) -> Element? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        let element = remove(at: 0)
        dropRemovedFromTop()
        if removedCount > count { compact() }  // a pop leaves fewer live entries beside the marked ones
        return element
    }

    /// Removes `element` if it is in the heap, in O(1) amortized: its entry is marked, and leaves
    /// the heap later (see the type's description). The element's `heapIndex` goes back to `nil`.
    ///
    /// - Returns: `true` if it was there.
    @discardableResult
    mutating func remove(_ element: Element) -> Bool {
        guard let index = element.heapIndex else { return false }
        precondition(entries[index].element === element, "the element belongs to another heap")
        entries[index].sequenceAndFlag |= Entry.removedFlag
        element.heapIndex = nil
        removedCount += 1
        dropRemovedFromTop()
        if removedCount > count { compact() }
        return true
    }

    /// Removes every element, in no particular order.
    mutating func removeAll() -> [Element] {
        let elements = entries.filter { !$0.isRemoved }.map(\.element)
        for element in elements { element.heapIndex = nil }
        entries.removeAll()
        removedCount = 0
        return elements
    }

    /// Removes the elements for which `shouldRemove` returns `true`, in O(n), and drops the marked
    /// entries on the way.
    ///
    /// The rest keep their deadlines and their order, ties included.
    ///
    /// - Returns: The removed elements, in no particular order.
    mutating func removeAll(where shouldRemove: (_ element: Element, _ deadline: MonotonicInstant) -> Bool) -> [Element] {
        var removed: [Element] = []
        rebuild { entry in
            guard shouldRemove(entry.element, entry.deadline) else { return true }
            entry.element.heapIndex = nil
            removed.append(entry.element)
            return false
        }
        return removed
    }

    /// Drops every marked entry and restores the heap order, in O(n).
    private mutating func compact() {
        rebuild { _ in true }
    }

    /// Keeps the live entries for which `keep` returns `true`, then restores the heap order.
    private mutating func rebuild(keeping keep: (Entry) -> Bool) {
        var kept = ContiguousArray<Entry>()
        kept.reserveCapacity(entries.count - removedCount)
        for entry in entries where !entry.isRemoved && keep(entry) {
            kept.append(entry)
        }
        // Moved, not copied: a second reference would make the first sift copy the whole array.
        entries = consume kept
        removedCount = 0
        // Floyd's heap construction: sift every parent down, the last one first. Elements learn
        // their places once, at the end, rather than at every step: each is a write to another object.
        for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) {
            siftDown(index, recordingIndices: false)
        }
        for index in entries.indices {
            entries[index].element.heapIndex = index
        }
    }

    /// Pops marked entries off the top, so that the earliest entry is always live.
    private mutating func dropRemovedFromTop() {
        while let first = entries.first, first.isRemoved {
            _ = remove(at: 0)
            removedCount -= 1
        }
    }

    private mutating func remove(at index: Int) -> Element {
        let removed = entries[index].element
        if !entries[index].isRemoved { removed.heapIndex = nil }
        let last = entries.removeLast()
        if index < entries.count {
            entries[index] = last
            if !last.isRemoved { last.element.heapIndex = index }
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
            entries[index].recordIndex(index)
            index = parent
        }
        if index != start {
            entries[index] = moving
            moving.recordIndex(index)
        }
    }

    private mutating func siftDown(_ start: Int, recordingIndices: Bool = true) {
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
            if recordingIndices { entries[index].recordIndex(index) }
            index = child
        }
        if index != start {
            entries[index] = moving
            if recordingIndices { moving.recordIndex(index) }
        }
    }
}

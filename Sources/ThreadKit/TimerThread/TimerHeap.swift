/// An element of a ``TimerHeap``: it says itself whether it was cancelled while waiting.
protocol TimerHeapElement: AnyObject {
    /// Whether the element was cancelled: its entry is dead and leaves the heap when the heap meets
    /// it (at the top, or in ``TimerHeap/removeCancelled()``). Once `true`, it stays `true`.
    var isCancelled: Bool { get }
}

/// A 4-ary min-heap of elements ordered by deadline, then by insertion order.
///
/// Four children a node, not two: a pop, which the timer thread makes before each call, sifts down
/// half as many levels, and a node's four children lie side by side (96 bytes, a cache line or two),
/// so the extra comparisons cost less than the levels they save.
///
/// The heap never looks for an element: a cancelled one stays where it is, and its entry leaves
/// when it reaches the top (``dropCancelledFromTop()``) or when its owner sweeps the heap
/// (``removeCancelled()``), which it does when ``needsSweep(cancelled:stored:)`` says so. Nothing
/// is written to an element while entries move, so an insert or a pop touches only the heap's own
/// array: entries keep their deadline and sequence number inline, so sifting compares without
/// following a pointer, and hold their element unmanaged (the heap holds one reference to each,
/// taken at insert and handed on or let go when the entry leaves), so moving an entry is a copy of
/// 24 bytes, with no reference counting on the element. Not copyable, as it owns those references.
/// A pure value type: no clock, no lock, no threads.
struct TimerHeap<Element: TimerHeapElement>: ~Copyable {
    private struct Entry {
        var deadline: MonotonicInstant
        /// The insertion order.
        var sequence: UInt64
        /// Retained by the heap: one reference, released or handed on when the entry leaves.
        var reference: Unmanaged<Element>

        var element: Element { reference.takeUnretainedValue() }

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : sequence < other.sequence
        }
    }

    private var entries: ContiguousArray<Entry> = []
    private var nextSequence: UInt64 = 0

    init() {}

    deinit {
        for entry in entries { entry.reference.release() }
    }

    /// How many entries the heap stores, cancelled ones included.
    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    /// The earliest entry, cancelled or not.
    var first: (deadline: MonotonicInstant, element: Element)? {
        entries.first.map { ($0.deadline, $0.element) }
    }

    /// The earliest deadline, without handing out a reference to its element.
    var firstDeadline: MonotonicInstant? {
        entries.first?.deadline
    }

    /// Whether `cancelled` dead entries among `stored` are more than half of them: then a sweep
    /// (O(stored)) is due. It leaves at most `stored - cancelled` entries, and the next one is due
    /// only after as many cancels again as half of those, so each cancel pays for two entries of
    /// sweeping, and the heap never stores more than twice its live entries plus one.
    static func needsSweep(cancelled: Int, stored: Int) -> Bool {
        cancelled > stored / 2
    }

    /// The `limit` earliest live elements with their deadlines, earliest first, the heap untouched.
    ///
    /// A best-first walk down from the root: it looks at the entries that precede the last one it
    /// returns and their children (cancelled entries are passed through), never at the whole heap,
    /// so showing the next few of a million pending calls costs a few dozen comparisons.
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
            if !entries[index].element.isCancelled { found.append((entries[index].deadline, entries[index].element)) }
            for child in Self.children(of: index, count: entries.count) {
                frontier.append(child)
            }
        }
        return found
    }

    /// Adds `element` to run at `deadline`, after every element already due at the same instant.
    ///
    /// - Returns: Whether it is now the earliest entry.
    @discardableResult
    mutating func insert(_ element: Element, deadline: MonotonicInstant) -> Bool {
        entries.append(Entry(deadline: deadline, sequence: nextSequence, reference: .passRetained(element)))
        nextSequence &+= 1
        return siftUp(entries.count - 1) == 0
    }

    /// Removes and returns the earliest element, cancelled or not, if its deadline is at or before `now`.
    mutating func popFirst(dueAt now: MonotonicInstant) -> Element? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        removeFirst()
        return first.reference.takeRetainedValue()
    }

    /// Pops cancelled entries off the top, so that the earliest entry, if any, is live.
    ///
    /// - Returns: How many it dropped.
    mutating func dropCancelledFromTop() -> Int {
        var dropped = 0
        while let first = entries.first, first.element.isCancelled {
            removeFirst()
            first.reference.release()
            dropped += 1
        }
        return dropped
    }

    /// Drops every cancelled entry and restores the heap order, in O(n).
    ///
    /// - Returns: How many it dropped.
    mutating func removeCancelled() -> Int {
        removeAll { _, _ in false }.cancelled
    }

    /// Removes every entry, in no particular order.
    ///
    /// - Returns: Every element, cancelled ones included.
    mutating func removeAll() -> [Element] {
        let elements = entries.map { $0.reference.takeRetainedValue() }
        entries.removeAll()
        return elements
    }

    /// Removes the live elements for which `shouldRemove` returns `true`, and the cancelled ones, in O(n).
    ///
    /// The rest keep their deadlines and their order, ties included.
    ///
    /// - Returns: The removed live elements, in no particular order, and how many cancelled entries went.
    mutating func removeAll(
        where shouldRemove: (_ element: Element, _ deadline: MonotonicInstant) -> Bool
    ) -> (removed: [Element], cancelled: Int) {
        var removed: [Element] = []
        var cancelled = 0
        var kept = ContiguousArray<Entry>()
        kept.reserveCapacity(entries.count)
        for entry in entries {
            if entry.element.isCancelled {
                cancelled += 1
                entry.reference.release()
            } else if shouldRemove(entry.element, entry.deadline) {
                removed.append(entry.reference.takeRetainedValue())
            } else {
                kept.append(entry)
            }
        }
        // Moved, not copied: a second reference would make the first sift copy the whole array.
        entries = consume kept
        // Floyd's heap construction: sift every parent down, the last one first.
        if entries.count > 1 {
            for index in stride(from: (entries.count - 2) / Self.arity, through: 0, by: -1) {
                siftDown(index)
            }
        }
        return (removed, cancelled)
    }

    /// Children per node.
    private static var arity: Int { 4 }

    /// The slots of `index`'s children in a heap of `count` entries.
    private static func children(of index: Int, count: Int) -> Range<Int> {
        let first = arity * index + 1
        return min(first, count)..<min(first + arity, count)
    }

    private mutating func removeFirst() {
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
    }

    /// Moves the entry at `start` up to its place.
    ///
    /// - Returns: Where it ends.
    private mutating func siftUp(_ start: Int) -> Int {
        var index = start
        let moving = entries[index]
        while index > 0 {
            let parent = (index - 1) / Self.arity
            guard moving.precedes(entries[parent]) else { break }
            entries[index] = entries[parent]
            index = parent
        }
        if index != start { entries[index] = moving }
        return index
    }

    private mutating func siftDown(_ start: Int) {
        var index = start
        let moving = entries[index]
        let count = entries.count
        while true {
            let first = Self.arity * index + 1
            guard first < count else { break }
            var child = first
            for other in first + 1..<min(first + Self.arity, count) where entries[other].precedes(entries[child]) {
                child = other
            }
            guard entries[child].precedes(moving) else { break }
            entries[index] = entries[child]
            index = child
        }
        if index != start { entries[index] = moving }
    }
}

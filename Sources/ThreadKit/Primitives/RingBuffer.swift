/// A first-in, first-out queue in one growable circular buffer.
///
/// Appending and removing at either end is O(1) amortised and allocates only when the buffer grows
/// (it doubles) or shrinks (it halves once no more than a quarter of it is used, down to its
/// minimum capacity): a queue that drained after a burst gives the burst's memory back. Removed
/// slots are cleared at once, so the buffer never keeps an element alive.
struct RingBuffer<Element> {
    private var storage: ContiguousArray<Element?>
    private var head = 0
    private(set) var count = 0
    /// The capacity it never shrinks below.
    private let minimumCapacity: Int

    init(minimumCapacity: Int = 16) {
        var capacity = 1
        while capacity < max(minimumCapacity, 1) { capacity <<= 1 }
        storage = ContiguousArray(repeating: nil, count: capacity)
        self.minimumCapacity = capacity
    }

    var isEmpty: Bool { count == 0 }

    /// The number of elements the buffer holds before it grows.
    var capacity: Int { storage.count }

    /// Adds `element` at the back.
    mutating func append(_ element: Element) {
        if count == storage.count { resize(to: storage.count * 2) }
        storage[(head &+ count) & (storage.count &- 1)] = element
        count &+= 1
    }

    /// Removes and returns the front element, or `nil` when empty.
    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        head = (head &+ 1) & (storage.count &- 1)
        count &-= 1
        if count <= storage.count / 4, storage.count > minimumCapacity { resize(to: storage.count / 2) }
        return element
    }

    /// The front element, without removing it.
    var first: Element? {
        count > 0 ? storage[head] : nil
    }

    /// The back element, without removing it.
    var last: Element? {
        count > 0 ? storage[(head &+ count &- 1) & (storage.count &- 1)] : nil
    }

    /// Replaces the back element, which must exist.
    mutating func replaceLast(with element: Element) {
        precondition(count > 0, "RingBuffer.replaceLast(with:) on an empty buffer")
        storage[(head &+ count &- 1) & (storage.count &- 1)] = element
    }

    /// Removes every element and returns them in order.
    mutating func removeAll() -> [Element] {
        var result: [Element] = []
        result.reserveCapacity(count)
        while let element = popFirst() { result.append(element) }
        return result
    }

    /// Removes the elements that match `shouldRemove`, keeping the order of the rest.
    ///
    /// - Returns: The removed elements, in order.
    mutating func removeAll(where shouldRemove: (Element) -> Bool) -> [Element] {
        var kept = RingBuffer(minimumCapacity: minimumCapacity)
        var removed: [Element] = []
        while let element = popFirst() {
            if shouldRemove(element) { removed.append(element) } else { kept.append(element) }
        }
        self = kept
        return removed
    }

    /// Lets `body` change every element in place, front to back.
    mutating func updateEach(_ body: (inout Element) -> Void) {
        for offset in 0..<count {
            let index = (head &+ offset) & (storage.count &- 1)
            body(&storage[index]!)
        }
    }

    /// Moves the elements, in order, to a buffer of `capacity` slots (a power of two, at least `count`).
    private mutating func resize(to capacity: Int) {
        var resized = ContiguousArray<Element?>(repeating: nil, count: capacity)
        for offset in 0..<count {
            resized[offset] = storage[(head + offset) & (storage.count - 1)].take()
        }
        storage = resized
        head = 0
    }
}

extension RingBuffer: Sendable where Element: Sendable {}

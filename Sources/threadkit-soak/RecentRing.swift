// A bounded memory of recent handles, so drivers can cancel at random without keeping every
// handle they ever made.

import SeededRandom

/// The last `capacity` elements appended, oldest first; appending to a full ring evicts the oldest.
///
/// Owned by one driver thread. Rings are small (tens of elements), so a plain array is enough.
struct RecentRing<Element> {
    private var elements: [Element] = []
    let capacity: Int

    init(capacity: Int) {
        precondition(capacity >= 1, "a ring needs room for at least one element, got \(capacity)")
        self.capacity = capacity
        elements.reserveCapacity(capacity)
    }

    var count: Int { elements.count }
    var isEmpty: Bool { elements.isEmpty }

    /// Appends `element`; returns the element it evicted, if the ring was full.
    @discardableResult
    mutating func append(_ element: Element) -> Element? {
        let evicted = elements.count == capacity ? elements.removeFirst() : nil
        elements.append(element)
        return evicted
    }

    /// Removes and returns an element chosen at random.
    mutating func removeRandom(using random: inout SplitMix64) -> Element? {
        guard !elements.isEmpty else { return nil }
        return elements.remove(at: Int.random(in: 0..<elements.count, using: &random))
    }

    /// An element chosen at random, left in place.
    func randomElement(using random: inout SplitMix64) -> Element? {
        elements.randomElement(using: &random)
    }

    /// Removes and returns every element, oldest first.
    mutating func removeAll() -> [Element] {
        defer { elements.removeAll(keepingCapacity: true) }
        return elements
    }
}

import Testing
@testable import ThreadKit
import SeededRandom

@Suite("RingBuffer")
struct RingBufferTests {
    @Test("Elements come out in the order they went in")
    func fifo() {
        var buffer = RingBuffer<Int>()
        #expect(buffer.isEmpty)
        #expect(buffer.popFirst() == nil)
        #expect(buffer.first == nil)
        for value in 0..<100 { buffer.append(value) }
        #expect(buffer.count == 100)
        #expect(!buffer.isEmpty)
        for value in 0..<100 {
            #expect(buffer.first == value)
            #expect(buffer.popFirst() == value)
            #expect(buffer.count == 99 - value)
        }
        #expect(buffer.isEmpty)
        #expect(buffer.popFirst() == nil)
    }

    @Test("Capacity is the next power of two, at least 1")
    func capacity() {
        #expect(RingBuffer<Int>().capacity == 16)
        #expect(RingBuffer<Int>(minimumCapacity: 0).capacity == 1)
        #expect(RingBuffer<Int>(minimumCapacity: -3).capacity == 1)
        #expect(RingBuffer<Int>(minimumCapacity: 1).capacity == 1)
        #expect(RingBuffer<Int>(minimumCapacity: 5).capacity == 8)
        #expect(RingBuffer<Int>(minimumCapacity: 64).capacity == 64)
    }

    @Test("A drained buffer shrinks back to its minimum capacity, halving once a quarter is used, and keeps its order meanwhile")
    func shrinksAfterABurst() {
        var buffer = RingBuffer<Int>(minimumCapacity: 16)
        // Wrap the contents first, so that shrinking starts from a wrapped state.
        for value in 0..<10 { buffer.append(value) }
        for value in 0..<10 { #expect(buffer.popFirst() == value) }
        for value in 0..<100_000 { buffer.append(value) }
        #expect(buffer.capacity == 131_072)
        var next = 0
        var capacities: [Int] = []
        while let value = buffer.popFirst() {
            #expect(value == next)
            next += 1
            if capacities.last != buffer.capacity { capacities.append(buffer.capacity) }
            // Never more than a quarter used before it halves, never less than an eighth after.
            if buffer.capacity > 16 { #expect(buffer.count > buffer.capacity / 8) }
        }
        #expect(next == 100_000)
        #expect(buffer.capacity == 16)
        #expect(capacities.first == 131_072)
        #expect(zip(capacities, capacities.dropFirst()).allSatisfy { $0 == 2 * $1 })
        // It grows again as before.
        for value in 0..<40 { buffer.append(value) }
        #expect(buffer.capacity == 64)
        #expect((0..<40).allSatisfy { buffer.popFirst() == $0 })
    }

    @Test("Growing while the contents wrap around the end keeps their order")
    func growthWithWrapAround() {
        var buffer = RingBuffer<Int>(minimumCapacity: 4)
        for value in 0..<3 { buffer.append(value) }
        #expect(buffer.popFirst() == 0)
        #expect(buffer.popFirst() == 1)
        // Head is at slot 2; these wrap to slots 3, 0, 1 and then force a grow from a wrapped state.
        for value in 3..<6 { buffer.append(value) }
        #expect(buffer.capacity == 4)
        #expect(buffer.count == 4)
        buffer.append(6)
        #expect(buffer.capacity == 8)
        for value in 7..<20 { buffer.append(value) }
        #expect(buffer.capacity == 32)
        #expect(buffer.count == 18)
        var out: [Int] = []
        while let value = buffer.popFirst() { out.append(value) }
        #expect(out == Array(2..<20))
    }

    @Test("Growing at every head position keeps the order")
    func growthAtEveryOffset() {
        for offset in 0..<8 {
            var buffer = RingBuffer<Int>(minimumCapacity: 8)
            for value in 0..<offset { buffer.append(value) }
            for _ in 0..<offset { _ = buffer.popFirst() }
            for value in 0..<9 { buffer.append(value) }  // the ninth grows it
            #expect(buffer.capacity == 16)
            #expect(buffer.removeAll() == Array(0..<9), "head offset \(offset)")
        }
    }

    @Test("removeAll() returns everything in order and leaves a usable, empty buffer")
    func removeAllOrder() {
        var buffer = RingBuffer<String>(minimumCapacity: 4)
        for value in ["a", "b", "c"] { buffer.append(value) }
        _ = buffer.popFirst()
        for value in ["d", "e", "f", "g"] { buffer.append(value) }
        #expect(buffer.removeAll() == ["b", "c", "d", "e", "f", "g"])
        #expect(buffer.isEmpty)
        #expect(buffer.count == 0)
        #expect(buffer.removeAll() == [])
        buffer.append("h")
        #expect(buffer.first == "h")
        #expect(buffer.popFirst() == "h")
        #expect(buffer.popFirst() == nil)
    }

    @Test("Random operations match an Array model", arguments: [1, 2, 3, 42, 2024] as [UInt64])
    func randomizedAgainstArray(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var buffer = RingBuffer<Int>(minimumCapacity: 2)
        var model: [Int] = []
        var next = 0
        for step in 0..<20_000 {
            let roll = Int.random(in: 0..<100, using: &random)
            switch roll {
            case 0..<55:
                buffer.append(next)
                model.append(next)
                next += 1
            case 55..<95:
                let expected = model.isEmpty ? nil : model.removeFirst()
                #expect(buffer.popFirst() == expected, "seed \(seed) step \(step)")
            case 95..<97:
                let divisor = Int.random(in: 2...5, using: &random)
                let removed = buffer.removeAll { $0.isMultiple(of: divisor) }
                #expect(removed == model.filter { $0.isMultiple(of: divisor) }, "seed \(seed) step \(step)")
                model.removeAll { $0.isMultiple(of: divisor) }
            case 97..<98:
                buffer.updateEach { $0 += 7 }
                model = model.map { $0 + 7 }
                next += 7
            default:
                #expect(buffer.removeAll() == model, "seed \(seed) step \(step)")
                model.removeAll()
            }
            #expect(buffer.count == model.count)
            #expect(buffer.first == model.first)
            #expect(buffer.isEmpty == model.isEmpty)
            #expect(buffer.capacity >= buffer.count)
        }
        #expect(buffer.removeAll() == model)
    }

    @Test("removeAll(where:) takes out the matches in order and keeps the rest in order")
    func removeAllWhere() {
        var buffer = RingBuffer<Int>(minimumCapacity: 4)
        for value in 0..<3 { buffer.append(value) }
        _ = buffer.popFirst()
        for value in 3..<10 { buffer.append(value) }  // wrapped, then grown
        #expect(buffer.removeAll { $0.isMultiple(of: 3) } == [3, 6, 9])
        #expect(buffer.count == 6)
        #expect(buffer.removeAll { $0 > 100 } == [])
        buffer.append(10)
        #expect(buffer.removeAll() == [1, 2, 4, 5, 7, 8, 10])
        #expect(buffer.removeAll { _ in true } == [])
    }

    @Test("updateEach changes every element in place, front to back, across the wrap")
    func updateEach() {
        var buffer = RingBuffer<Int>(minimumCapacity: 4)
        for value in 0..<4 { buffer.append(value) }
        _ = buffer.popFirst()
        _ = buffer.popFirst()
        buffer.append(4)
        buffer.append(5)  // slots 2, 3, 0, 1
        var visited: [Int] = []
        buffer.updateEach { value in
            visited.append(value)
            value *= 10
        }
        #expect(visited == [2, 3, 4, 5])
        #expect(buffer.capacity == 4)
        #expect(buffer.removeAll() == [20, 30, 40, 50])
    }

    @Test("A removed element is released at once; the buffer keeps nothing alive")
    func removedElementsAreReleased() {
        let tracker = LifetimeTracker()
        var buffer = RingBuffer<LifetimeTracked>(minimumCapacity: 4)
        for _ in 0..<3 { buffer.append(tracker.make()) }
        #expect(tracker.liveCount == 3)
        _ = buffer.popFirst()
        #expect(tracker.liveCount == 2)

        // Through a grow (which moves every element) and a wrap-around.
        for _ in 0..<10 { buffer.append(tracker.make()) }
        #expect(tracker.liveCount == 12)
        for expected in (0..<12).reversed() {
            _ = buffer.popFirst()
            #expect(tracker.liveCount == expected)
        }

        for _ in 0..<5 { buffer.append(tracker.make()) }
        #expect(buffer.removeAll().count == 5)
        #expect(tracker.liveCount == 0)

        for _ in 0..<6 { buffer.append(tracker.make()) }
        var index = 0
        #expect(buffer.removeAll { _ in defer { index += 1 }; return index.isMultiple(of: 2) }.count == 3)
        #expect(tracker.liveCount == 3)
        #expect(buffer.removeAll().count == 3)
        #expect(tracker.liveCount == 0)
    }

    @Test("Dropping a buffer releases what it still holds")
    func droppedBufferReleasesElements() {
        let tracker = LifetimeTracker()
        do {
            var buffer = RingBuffer<LifetimeTracked>(minimumCapacity: 2)
            for _ in 0..<5 { buffer.append(tracker.make()) }
            #expect(tracker.liveCount == 5)
        }
        #expect(tracker.liveCount == 0)
    }

    @Test("RingBuffer.last and replaceLast(with:) work across wrap-around")
    func ringBufferLast() {
        var buffer = RingBuffer<Int>(minimumCapacity: 4)
        #expect(buffer.last == nil)
        for value in 1...3 { buffer.append(value) }
        _ = buffer.popFirst()
        _ = buffer.popFirst()
        buffer.append(4)
        buffer.append(5)  // wraps around the 4-slot storage
        #expect(buffer.last == 5)
        buffer.replaceLast(with: 50)
        #expect(buffer.removeAll() == [3, 4, 50])
    }
}

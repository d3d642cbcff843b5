// Counting, recording and waiting across threads, for tests that must check counts exactly and
// must fail rather than hang.

import Foundation
import Synchronization

/// A thread-safe counter.
public final class Counter: Sendable {
    private let storage = Atomic<Int>(0)

    public init() {}

    /// Adds one (or `amount`) and returns the new value.
    /// Ordered (acquire and release), so that whoever sees the count also sees what came before it.
    @discardableResult
    public func increment(by amount: Int = 1) -> Int {
        storage.wrappingAdd(amount, ordering: .acquiringAndReleasing).newValue
    }

    /// The count now.
    public var value: Int { storage.load(ordering: .acquiring) }
}

/// One thread-safe counter per index, for "every task ran exactly once" checks.
public final class AtomicCounters: @unchecked Sendable {
    // Sendable: the pointer never changes and every element is an atomic.
    private let base: UnsafeMutablePointer<Atomic<Int>>
    /// How many counters there are.
    public let count: Int

    public init(count: Int) {
        self.count = count
        base = .allocate(capacity: count)
        for index in 0..<count { (base + index).initialize(to: Atomic(0)) }
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }

    /// Adds one to counter `index`.
    public func increment(_ index: Int) {
        base[index].wrappingAdd(1, ordering: .relaxed)
    }

    /// Counter `index`'s value.
    public subscript(index: Int) -> Int {
        base[index].load(ordering: .relaxed)
    }

    /// Every counter's value, in index order.
    public var values: [Int] { (0..<count).map { self[$0] } }

    /// The indices whose counter is not `expected`, for a readable failure message.
    public func indices(notEqualTo expected: Int) -> [Int] {
        (0..<count).filter { self[$0] != expected }
    }
}

/// A value shared between threads, guarded by a lock.
///
/// Locked with `NSLock` (a pthread mutex) rather than `Synchronization.Mutex`, whose futex-based
/// lock the thread sanitizer cannot see on Linux: it would report races that are not there.
public final class LockedValue<Value: Sendable>: @unchecked Sendable {
    // Sendable: `storage` is only touched under `lock`.
    private let lock = NSLock()
    private var storage: Value

    public init(_ value: Value) {
        storage = value
    }

    /// Runs `body` on the value under the lock; read, change and write back in one step with this.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&storage) }
    }

    /// The value now; setting it replaces it (not a read-modify-write: use ``withLock(_:)`` for that).
    public var value: Value {
        get { withLock { $0 } }
        set { withLock { $0 = newValue } }
    }
}

/// A thread-safe, append-only list of values, kept in the order they were appended.
///
/// Locked with `NSLock` (a pthread mutex), like ``LockedValue``.
public final class Recorder<Element: Sendable>: @unchecked Sendable {
    // Sendable: `storage` is only touched under `lock`.
    private let lock = NSLock()
    private var storage: [Element] = []

    public init() {}

    /// Appends `element`.
    public func append(_ element: Element) {
        lock.withLock { storage.append(element) }
    }

    /// Every value so far, in order.
    public var values: [Element] { lock.withLock { storage } }
    /// How many values so far.
    public var count: Int { lock.withLock { storage.count } }
}

/// A countdown latch: ``wait(timeout:)`` returns once ``countDown()`` was called `count` times.
///
/// Every wait has a timeout so that a broken component fails its test instead of hanging it.
public final class Latch: @unchecked Sendable {
    // Sendable: `remaining` is only touched under `condition`'s lock.
    private let condition = NSCondition()
    private var remaining: Int

    public init(count: Int = 1) {
        remaining = count
    }

    /// Counts down by one (never below zero), waking the waiters when it reaches zero.
    public func countDown() {
        condition.withLock {
            remaining = max(0, remaining - 1)
            condition.broadcast()
        }
    }

    /// Whether the count has reached zero.
    public var isOpen: Bool { condition.withLock { remaining == 0 } }

    /// Blocks until the count reaches zero or `timeout` passes; `true` if it reached zero.
    @discardableResult
    public func wait(timeout: Duration = .seconds(30)) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout.seconds)
        return condition.withLock {
            while remaining > 0 {
                if !condition.wait(until: deadline) { return remaining == 0 }
            }
            return true
        }
    }
}

extension Duration {
    /// The duration in seconds as a `Double`, for Foundation's sleeps.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

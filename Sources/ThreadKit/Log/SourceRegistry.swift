import Synchronization

/// The on/off switch shared by every `Log.Source` of one name.
///
/// Switches are never freed: the registry keeps each one for the life of the process, which is
/// what lets a `Log.Source` hold its switch without reference counting.
@usableFromInline
final class SourceFlag: Sendable {
    /// The name of the sources this switch belongs to.
    let name: String

    @usableFromInline
    let isOn: Atomic<Bool>

    init(name: String, isOn: Bool) {
        self.name = name
        self.isOn = Atomic(isOn)
    }
}

/// The switches of every source ever named, and whether sources named later start enabled.
///
/// `Log.Source("Billing")` looks its name up on every call, so a name already known is found
/// without a lock: in an open-addressing hash table whose slots are atomics. Slots are filled
/// (once each) and tables replaced only under `mutex`; a reader sees a slot either empty or
/// pointing at a complete switch. A table is never freed once published, because a reader may
/// still be probing it, and it never shrinks: each replacement doubles, so all the tables together
/// take at most twice the memory of the last one.
final class SourceRegistry: @unchecked Sendable {
    // Sendable: `flags`, `newSourcesEnabled` and the slots written by `insert` are only changed under
    // `mutex`; `table` is an atomic, and the tables it points to are read through atomic slots.
    static let shared = SourceRegistry()

    private let mutex = PThreadMutex()
    /// Every switch, by name; holds each for the life of the process. Guarded by `mutex`.
    private var flags: [String: SourceFlag] = [:]
    /// Whether a source named from now on starts enabled. Guarded by `mutex`.
    private var newSourcesEnabled = false
    /// The table readers probe; replaced (never freed) under `mutex` when it is half full.
    private let table = Atomic<UnsafeMutablePointer<SourceTable>>(SourceTable.make(capacity: 64))

    init() {}

    /// The switch of the sources called `name`, made (on, if ``setAll(_:)`` last turned all on) on first use.
    func flag(for name: String) -> SourceFlag {
        let hash = SourceTable.hash(name)
        if let flag = table.load(ordering: .acquiring).pointee.find(name, hash: hash) { return flag }
        return mutex.withLock {
            if let flag = flags[name] { return flag }
            let flag = SourceFlag(name: name, isOn: newSourcesEnabled)
            flags[name] = flag
            insert(flag, hash: hash)
            return flag
        }
    }

    /// Turns every switch, and those of sources named later, on or off.
    func setAll(_ isOn: Bool) {
        mutex.withLock {
            newSourcesEnabled = isOn
            for flag in flags.values { flag.isOn.store(isOn, ordering: .relaxed) }
        }
    }

    /// Runs `body` while holding the registry's lock, so a test can prove which calls never take it.
    func withLockHeld<Result>(_ body: () throws -> Result) rethrows -> Result {
        try mutex.withLock(body)
    }

    /// Adds `flag` to the lock-free table, doubling it first when it would be more than half full.
    /// The caller holds `mutex`, and `flags` already holds `flag`.
    private func insert(_ flag: SourceFlag, hash: Int) {
        let current = table.load(ordering: .relaxed)
        if flags.count * 2 <= current.pointee.capacity {
            current.pointee.insert(flag, hash: hash)
            return
        }
        let larger = SourceTable.make(capacity: current.pointee.capacity * 2)
        for existing in flags.values {
            larger.pointee.insert(existing, hash: SourceTable.hash(existing.name))
        }
        table.store(larger, ordering: .releasing)
    }
}

/// A fixed-size, insert-only open-addressing hash table from source names to switches.
///
/// Its slots hold unretained references: the registry's `flags` keeps every switch alive forever.
struct SourceTable {
    /// Slots minus one; the capacity is a power of two.
    private let mask: Int
    private let slots: UnsafeMutablePointer<Atomic<Unmanaged<SourceFlag>?>>

    var capacity: Int { mask + 1 }

    /// A new, empty table of `capacity` (a power of two) slots, in memory that is never freed.
    static func make(capacity: Int) -> UnsafeMutablePointer<SourceTable> {
        precondition(capacity > 0 && capacity & (capacity - 1) == 0, "capacity \(capacity) is not a power of two")
        let slots = UnsafeMutablePointer<Atomic<Unmanaged<SourceFlag>?>>.allocate(capacity: capacity)
        for index in 0..<capacity { (slots + index).initialize(to: Atomic(nil)) }
        let table = UnsafeMutablePointer<SourceTable>.allocate(capacity: 1)
        table.initialize(to: SourceTable(mask: capacity - 1, slots: slots))
        return table
    }

    /// FNV-1a over the name's UTF-8 bytes: cheaper than `Hasher` for the short names sources have,
    /// and good enough for a table whose keys the program chooses.
    static func hash(_ name: String) -> Int {
        func fnv1a<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> Int {
            var hash: UInt64 = 0xCBF2_9CE4_8422_2325
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
            return Int(truncatingIfNeeded: hash ^ (hash >> 32))
        }
        return name.utf8.withContiguousStorageIfAvailable(fnv1a) ?? fnv1a(name.utf8)
    }

    /// The switch for `name`, or `nil` if the table does not hold it (yet). Lock-free.
    func find(_ name: String, hash: Int) -> SourceFlag? {
        var index = hash & mask
        while let slot = slots[index].load(ordering: .acquiring) {
            if slot._withUnsafeGuaranteedRef({ $0.name == name }) { return slot.takeUnretainedValue() }
            index = (index &+ 1) & mask
        }
        return nil
    }

    /// Puts `flag` in the first free slot of its probe sequence. The registry's lock is held, and at
    /// least one slot is free.
    func insert(_ flag: SourceFlag, hash: Int) {
        var index = hash & mask
        while slots[index].load(ordering: .relaxed) != nil { index = (index &+ 1) & mask }
        slots[index].store(Unmanaged.passUnretained(flag), ordering: .releasing)
    }
}

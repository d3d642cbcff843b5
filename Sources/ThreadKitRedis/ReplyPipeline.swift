/// The commands in flight on one connection, in the order they were written, and what each reply,
/// timeout or loss of the connection means for them.
///
/// A pure value: it owns no socket and reads no clock. The client keeps it under its lock and does
/// what its answers say (completes waiters, shuts the socket). Redis answers the commands of one
/// connection in the order it received them, so the oldest command in flight owns the next reply.
/// A command is "sent" once its bytes start to go out; a timeout or loss reports that, since the
/// server may have run a sent command.
///
/// `Waiter` is what the client completes (a reply slot); tests use plain values.
struct ReplyPipeline<Waiter: Sendable>: Sendable {
    struct Entry: Sendable {
        let id: UInt64
        let waiter: Waiter
        var sent = false
    }

    /// The connection the entries were written on; a reply or a loss from an older one is stale.
    private(set) var generation: UInt64 = 0
    private(set) var isConnected = false
    private var entries: [Entry] = []
    /// The first entry still in flight (entries before it are answered; dropped from time to time).
    private var head = 0
    private var nextID: UInt64 = 0

    /// How many commands are in flight.
    var count: Int { entries.count - head }

    /// A new connection is up; returns its generation. Nothing may be in flight.
    mutating func connected() -> UInt64 {
        precondition(count == 0, "ReplyPipeline: connected with \(count) commands in flight")
        generation += 1
        isConnected = true
        return generation
    }

    /// Adds a command about to be written on connection `generation`; returns its id, or `nil` when
    /// that connection is gone.
    mutating func enqueue(_ waiter: Waiter, on generation: UInt64) -> UInt64? {
        guard isConnected, generation == self.generation else { return nil }
        nextID += 1
        entries.append(Entry(id: nextID, waiter: waiter))
        return nextID
    }

    /// Command `id`'s bytes are about to be written: from now on the server may run it, and a
    /// timeout or loss says it was sent (erring safe: a rate limit counts it). Returns `false` when
    /// the command already failed (its deadline passed first): then it must not be written.
    mutating func markSent(_ id: UInt64) -> Bool {
        guard let index = index(of: id) else { return false }
        entries[index].sent = true
        return true
    }

    /// Takes back command `id`, whose bytes were never written (the client could not arm its timeout):
    /// it must be the newest.
    mutating func withdraw(_ id: UInt64) -> Entry? {
        guard count > 0, entries[entries.count - 1].id == id else { return nil }
        return entries.removeLast()
    }

    /// What a reply on connection `generation` answers.
    enum ReplyOutcome: Sendable {
        /// The oldest command in flight: complete it.
        case answers(Entry)
        /// The reply came from a connection that is gone: ignore it.
        case stale
        /// Nothing was in flight: the stream can no longer be matched, so the connection must go.
        case unexpected
    }

    /// A reply came on connection `generation`.
    mutating func reply(on generation: UInt64) -> ReplyOutcome {
        guard isConnected, generation == self.generation else { return .stale }
        guard count > 0 else { return .unexpected }
        let entry = entries[head]
        head += 1
        if head > 64, head * 2 > entries.count {
            entries.removeSubrange(0..<head)
            head = 0
        }
        return .answers(entry)
    }

    /// Command `id` has had no reply by its deadline. The connection must go, since a later reply
    /// could no longer be matched: returns that command and the others in flight, oldest first, and
    /// forgets the connection; `nil` when `id` was already answered or failed.
    mutating func timedOut(_ id: UInt64) -> (command: Entry, others: [Entry])? {
        guard let index = index(of: id) else { return nil }
        let entry = entries[index]
        var others = takeAll()
        others.removeAll { $0.id == id }
        return (entry, others)
    }

    /// Connection `generation` ended (closed, reset, bad bytes, write failed): returns the commands
    /// in flight, oldest first, and forgets the connection; nothing when it was already forgotten.
    mutating func lost(_ generation: UInt64) -> [Entry] {
        guard isConnected, generation == self.generation else { return [] }
        return takeAll()
    }

    private mutating func takeAll() -> [Entry] {
        defer {
            entries = []
            head = 0
            isConnected = false
        }
        return Array(entries[head...])
    }

    private func index(of id: UInt64) -> Int? {
        // Ids grow along the array, so the entry, if in flight, is found by binary search.
        var low = head
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].id < id { low = middle + 1 } else { high = middle }
        }
        return low < entries.count && entries[low].id == id ? low : nil
    }
}

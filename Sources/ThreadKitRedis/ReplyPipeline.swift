/// The commands of one client in flight, in the order they were enqueued, with their bytes until
/// they are written, their deadlines, and what each reply, deadline or loss of the connection means
/// for them.
///
/// A pure value: it owns no socket and reads no clock (every instant is an offset from an origin the
/// client picks). The client keeps it under its lock and does what its answers say. Redis answers
/// the commands of one connection in the order it received them, so the oldest command written owns
/// the next reply.
///
/// - **Sent.** A command is "sent" once the connection's thread takes its bytes to write; from then
///   on the server may run it, and a timeout or a loss says so (erring safe: a rate limit counts it).
/// - **Deadlines.** Every command of a client has the same timeout, so deadlines come in the order
///   of the commands: the earliest one still pending is the first live command's, and one timer per
///   connection suffices (``nextDeadline``).
/// - **Abandoned.** A command past its deadline fails at once. If it was sent, it stays in line,
///   abandoned: its reply, when it comes, is discarded, and the connection stays up. If it was not
///   sent, its bytes are taken back and never written. The connection must go (``dropReason(at:)``)
///   only when more than ``maxAbandoned`` replies are overdue, or when nothing has been read for
///   ``connectionTimeout`` while replies are due.
///
/// `Waiter` is what the client completes (a reply slot); tests use plain values.
struct ReplyPipeline<Waiter: Sendable>: Sendable {
    struct Entry: Sendable {
        let id: UInt64
        let waiter: Waiter
        let deadline: Duration
        /// The encoded command, until it is taken to be written.
        fileprivate(set) var bytes: [UInt8]
        fileprivate(set) var sent = false
        fileprivate(set) var abandoned = false
    }

    /// How many abandoned commands may wait for their replies before the connection must go.
    let maxAbandoned: Int
    /// How long replies may be due with nothing read before the connection must go.
    let connectionTimeout: Duration

    private var entries: [Entry] = []
    /// The first entry in flight (entries before it are answered; dropped from time to time).
    private var head = 0
    /// Entries in flight whose bytes are not taken yet: the last ones.
    private var unsentCount = 0
    /// Abandoned entries still in flight.
    private(set) var abandonedCount = 0
    /// When a reply last came, or when a command was written with nothing due before it.
    private var lastProgress = Duration.zero
    private var nextID: UInt64 = 0

    init(maxAbandoned: Int = 64, connectionTimeout: Duration = .seconds(2)) {
        precondition(maxAbandoned >= 0, "ReplyPipeline: maxAbandoned must not be negative, got \(maxAbandoned)")
        precondition(connectionTimeout > .zero, "ReplyPipeline: connectionTimeout must be more than zero, got \(connectionTimeout)")
        self.maxAbandoned = maxAbandoned
        self.connectionTimeout = connectionTimeout
    }

    /// How many commands are in flight, abandoned ones included.
    var count: Int { entries.count - head }
    /// How many written commands wait for their replies, abandoned ones included.
    var dueCount: Int { count - unsentCount }

    /// Adds a command (`bytes`, due by `deadline`) to write; returns its id.
    mutating func enqueue(_ waiter: Waiter, bytes: [UInt8], deadline: Duration) -> UInt64 {
        nextID += 1
        entries.append(Entry(id: nextID, waiter: waiter, deadline: deadline, bytes: bytes))
        unsentCount += 1
        return nextID
    }

    /// Takes the bytes of every command not written yet, in order, and marks those commands sent.
    mutating func takeUnsent(at now: Duration) -> [UInt8] {
        guard unsentCount > 0 else { return [] }
        if dueCount == 0 { lastProgress = now }
        var bytes: [UInt8] = []
        for index in (entries.count - unsentCount)..<entries.count {
            bytes += entries[index].bytes
            entries[index].bytes = []
            entries[index].sent = true
        }
        unsentCount = 0
        return bytes
    }

    /// What a reply means.
    enum ReplyOutcome: Sendable {
        /// It answers this command: complete it.
        case answers(Entry)
        /// It answers a command that was abandoned: drop it.
        case discarded
        /// No command was due: the stream can no longer be matched, so the connection must go.
        case unexpected
    }

    /// A reply came at `now`.
    mutating func reply(at now: Duration) -> ReplyOutcome {
        guard dueCount > 0 else { return .unexpected }
        let entry = entries[head]
        head += 1
        if head > 64, head * 2 > entries.count {
            entries.removeSubrange(0..<head)
            head = 0
        }
        lastProgress = now
        guard !entry.abandoned else {
            abandonedCount -= 1
            return .discarded
        }
        return .answers(entry)
    }

    /// Fails the commands whose deadline is `now` or earlier: returns them, oldest first. The sent
    /// ones stay in line, abandoned; the others are taken out, never to be written.
    mutating func expire(at now: Duration) -> [Entry] {
        var expired: [Entry] = []
        let firstUnsent = entries.count - unsentCount
        var index = head
        while index < entries.count, entries[index].abandoned { index += 1 }
        while index < entries.count, entries[index].deadline <= now {
            if index < firstUnsent {
                entries[index].abandoned = true
                abandonedCount += 1
            }
            expired.append(entries[index])
            index += 1
        }
        if index > firstUnsent {
            entries.removeSubrange(firstUnsent..<index)
            unsentCount -= index - firstUnsent
        }
        return expired
    }

    /// Why the connection must go at `now`, or `nil` while it may stay.
    func dropReason(at now: Duration) -> String? {
        if abandonedCount > maxAbandoned {
            return "\(abandonedCount) commands timed out with their replies still due"
        }
        if dueCount > 0, now - lastProgress >= connectionTimeout {
            return "nothing was read for \(connectionTimeout) with \(dueCount) replies due"
        }
        return nil
    }

    /// The next instant at which ``expire(at:)`` or ``dropReason(at:)`` may have something to say;
    /// `nil` when nothing is in flight.
    var nextDeadline: Duration? {
        let live = entries[head...].first { !$0.abandoned }?.deadline
        let stalled = dueCount > 0 ? lastProgress + connectionTimeout : nil
        switch (live, stalled) {
        case (let live?, let stalled?): return min(live, stalled)
        case (let live, let stalled): return live ?? stalled
        }
    }

    /// The connection ended (closed, reset, bad bytes, a write failed, dropped): returns the live
    /// commands in flight, oldest first, and forgets every command.
    mutating func takeAll() -> [Entry] {
        defer {
            entries = []
            head = 0
            unsentCount = 0
            abandonedCount = 0
        }
        return entries[head...].filter { !$0.abandoned }
    }
}

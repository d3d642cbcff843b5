/// The commands a ``RedisClient`` still owes a reply to nobody waits for: forget-style script
/// runs until their reply (or their `EVAL` fallback's) is in, and resends a caller keeps queued
/// until they are handed to the client. What ``RedisClient/flush(timeout:)`` waits for besides its
/// `PING`.
///
/// A pure value: each follow-up has an id (increasing, so "begun before the flush" is "id at most
/// the flush's mark") and a count of holders; it is done once every holder has let it go.
struct FollowUps: Sendable {
    private var lastID: UInt64 = 0
    private var holders: [UInt64: Int] = [:]

    /// The id of the last follow-up begun: a flush waits for those up to it.
    var mark: UInt64 { lastID }

    /// How many follow-ups are not done.
    var openCount: Int { holders.count }

    /// Begins a follow-up, held once; returns its id.
    mutating func begin() -> UInt64 {
        lastID += 1
        holders[lastID] = 1
        return lastID
    }

    /// One more holder of `id`, which must not be done.
    mutating func hold(_ id: UInt64) {
        precondition(holders[id] != nil, "FollowUps.hold: follow-up \(id) is already done")
        holders[id, default: 0] += 1
    }

    /// One holder of `id` lets it go; the last one ends it. Letting go of a follow-up that is done
    /// does nothing.
    mutating func release(_ id: UInt64) {
        guard let count = holders[id] else { return }
        holders[id] = count > 1 ? count - 1 : nil
    }

    /// Whether a follow-up begun at or before `mark` is not done.
    func isOpen(through mark: UInt64) -> Bool {
        holders.keys.contains { $0 <= mark }
    }
}

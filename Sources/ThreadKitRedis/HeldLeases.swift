/// The `.serial` leases a coordinator's process holds, by token: how many of its reservations hold
/// each (nested ones too), how many starts it may have taken under each, and how many ends it has
/// numbered. A pure value type, under ``RedisStartCoordinator``'s lock.
///
/// The script ends a lease once its highest end number reaches the starts reserved under it (see
/// `SharedThrottle.finished(token:number:now:)`), so each end is numbered 1, 2, 3… and can be sent
/// until acknowledged. The last end (no reservation holds the lease any more) carries the number of
/// starts this process may have taken, reserves whose outcome it never learned included: whether
/// Redis ran them or not, that end hands the lease back, while every earlier one stays below the
/// starts reserved and keeps it.
struct HeldLeases: Equatable {
    struct Lease: Equatable {
        /// How many reservations hold it: the ends still to come.
        var holders: Int
        /// How many starts Redis may have reserved under it: the known ones and the unknown.
        var taken: Int64
        /// How many ends have been numbered.
        var ended: Int64
    }

    private(set) var leases: [UInt64: Lease] = [:]

    /// A reserve was answered with the lease `token` (a new one, or the one it was nested in).
    ///
    /// - Returns: Whether the lease is new to this process (its renewal starts).
    mutating func reserved(_ token: UInt64) -> Bool {
        guard var lease = leases[token] else {
            leases[token] = Lease(holders: 1, taken: 1, ended: 0)
            return true
        }
        lease.holders += 1
        lease.taken += 1
        leases[token] = lease
        return false
    }

    /// A reserve nested in the lease `holding` may or may not have run (its reply was lost): it may
    /// have counted one more start under that lease, which the lease's last end then covers.
    mutating func unknownOutcome(holding: UInt64?) {
        guard let holding, leases[holding] != nil else { return }
        leases[holding]?.taken += 1
    }

    /// One reservation holding `token` ended, or was given up.
    ///
    /// - Returns: The end's number, and whether it was the lease's last here (its renewal stops);
    ///   `nil` for a token this process does not hold.
    mutating func ended(_ token: UInt64) -> (number: Int64, last: Bool)? {
        guard var lease = leases[token] else { return nil }
        lease.holders -= 1
        lease.ended += 1
        guard lease.holders == 0 else {
            leases[token] = lease
            return (lease.ended, false)
        }
        leases[token] = nil
        return (max(lease.ended, lease.taken), true)
    }
}

/// The `.serial` leases a coordinator's process holds, by token: how many of its reservations hold
/// each (nested ones too), how many starts it may have taken under each, how many ends it has
/// numbered, and how many nested reserves under each are still unanswered. A pure value type, under
/// ``RedisStartCoordinator``'s lock.
///
/// The script ends a lease once its highest end number reaches the starts reserved under it (see
/// `SharedThrottle.finished(token:number:now:)`), so each end is numbered 1, 2, 3… and can be sent
/// until acknowledged. The last end (no reservation holds the lease any more) carries the number of
/// starts this process may have taken: a nested reserve counts on its lease *before* it is sent
/// (``asking(holding:)``), so whether Redis ran it or not, answered or not, that end hands the lease
/// back, while every earlier one stays below the starts reserved and keeps it. A lease whose last end
/// went while a nested reserve under it was in flight stays here (no renewal, no holder) until that
/// reserve's outcome is known (``answered(holding:reserved:)``): its late answer gets the same last
/// end again, never a fresh entry and a renewal.
struct HeldLeases: Equatable {
    struct Lease: Equatable {
        /// How many reservations hold it: the ends still to come.
        var holders: Int
        /// How many starts Redis may have reserved under it: the known ones and those in flight or unknown.
        var taken: Int64
        /// How many ends have been numbered.
        var ended: Int64
        /// How many nested reserves under it are sent and not yet answered.
        var inFlight: Int = 0
        /// The number of its last end, once sent: no reservation here holds it any more.
        var lastSent: Int64? = nil
    }

    /// What a reserve's outcome asks of the coordinator.
    enum Outcome: Equatable {
        /// Nothing.
        case none
        /// A lease new to this process: its renewal starts.
        case renew
        /// The lease's last end went while this reserve was in flight: send it again (it is
        /// idempotent), and start no renewal.
        case endAgain(number: Int64)
    }

    private(set) var leases: [UInt64: Lease] = [:]

    /// A reserve nested in the lease `holding` is about to be sent: it may count one more start under
    /// that lease, which the lease's last end then covers, whatever its outcome.
    ///
    /// - Returns: Whether it was counted (the lease is held here): pass `holding` to
    ///   ``answered(holding:reserved:)`` only then.
    mutating func asking(holding: UInt64?) -> Bool {
        guard let holding, var lease = leases[holding], lease.lastSent == nil else { return false }
        lease.taken += 1
        lease.inFlight += 1
        leases[holding] = lease
        return true
    }

    /// A reserve's outcome: `reserved` the lease it was answered with, `nil` for a decline or an
    /// unknown or failed outcome; `holding` the lease it was counted on by ``asking(holding:)``.
    mutating func answered(holding: UInt64?, reserved token: UInt64?) -> Outcome {
        if let holding, var lease = leases[holding] {
            lease.inFlight -= 1
            if let last = lease.lastSent {
                leases[holding] = lease.inFlight == 0 ? nil : lease
                return token == holding ? .endAgain(number: last) : newLease(token)
            }
            if token == holding {
                // Counted in `taken` when asked.
                lease.holders += 1
                leases[holding] = lease
                return .none
            }
            leases[holding] = lease
        }
        return newLease(token)
    }

    private mutating func newLease(_ token: UInt64?) -> Outcome {
        guard let token else { return .none }
        guard var lease = leases[token] else {
            leases[token] = Lease(holders: 1, taken: 1, ended: 0)
            return .renew
        }
        if let last = lease.lastSent { return .endAgain(number: last) }
        lease.holders += 1
        lease.taken += 1
        leases[token] = lease
        return .none
    }

    /// One reservation holding `token` ended, or was given up.
    ///
    /// - Returns: The end's number, and whether it was the lease's last here (its renewal stops);
    ///   `nil` for a token this process does not hold.
    mutating func ended(_ token: UInt64) -> (number: Int64, last: Bool)? {
        guard var lease = leases[token], lease.lastSent == nil else { return nil }
        lease.holders -= 1
        lease.ended += 1
        guard lease.holders == 0 else {
            leases[token] = lease
            return (lease.ended, false)
        }
        let number = max(lease.ended, lease.taken)
        lease.lastSent = number
        leases[token] = lease.inFlight == 0 ? nil : lease
        return (number, true)
    }
}

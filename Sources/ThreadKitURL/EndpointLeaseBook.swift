@_spi(ThreadKitURL) import ThreadKit

/// The shared leases of one endpoint's ``EndpointSlots``: the ask on its way, the lease each
/// running request holds, and the requests a fallback started without one. A pure value, part of
/// the slots' state machine: it reads no clock and calls no coordinator; the slots carry out what
/// it answers.
///
/// The rules:
/// - one ask at a time; a lease granted goes to the first request that may start (or back);
/// - "full" asks again at the time it says, or at once when a lease of this process goes back;
///   "paused" pauses the endpoint; "unavailable" applies the ``Fallback`` until the time it says;
/// - **adoption.** A request the fallback started holds no lease and is counted nowhere in the
///   fleet. Once the coordinator may be asked again, such requests are *adopted* first: one ask
///   each, with ``EndpointLeaseRequest/adopt``, granted whatever the limit, so that the fleet's
///   count includes them; until they all hold a lease no new request starts (their asks come
///   first), and after that new ones start only when the fleet is back under the limit.
struct EndpointLeaseBook<ID: Hashable & Sendable>: Sendable {
    /// Where the asking for a shared lease stands.
    enum Ask: Equatable, Sendable {
        /// Nothing asked: the next request that may start asks.
        case idle
        /// An ask with this serial is on its way.
        case asking(serial: Int)
        /// A lease came and waits for the first request that may start.
        case granted(EndpointLease)
        /// Every lease was taken: ask again at this time (or when a lease of this process goes back).
        case retryAt(Duration)
        /// The coordinator cannot decide: the fallback applies until this time, then ask again.
        case unavailable(until: Duration)
    }

    /// What the request that may start does.
    enum Step: Equatable, Sendable {
        /// Start, holding this lease (none: the fallback lets it start alone).
        case start(EndpointLease?)
        /// Not now; look again at this time, if any (an ask on its way answers sooner).
        case wait(until: Duration?)
        /// Ask the coordinator, with this serial; wait for the answer.
        case ask(serial: Int)
    }

    /// What an answer changed.
    struct Answered: Equatable, Sendable {
        /// Leases to give back: granted for a request that is gone.
        var release: [EndpointLease] = []
        /// The running request that now holds an adopted lease.
        var adopted: ID?
        /// The endpoint is paused until this time.
        var pauseUntil: Duration?
    }

    /// The coordinator and fallback; `nil` for slots of this process alone.
    private(set) var sharing: EndpointSharing?
    private(set) var ask = Ask.idle
    /// Whether the coordinator's latest answer was "unavailable": its fallback applies.
    private(set) var isCoordinatorUnavailable = false
    private var lastSerial = 0
    /// The lease each running request holds.
    private var leases: [ID: EndpointLease] = [:]
    /// The running requests the fallback started without a lease, in the order they started.
    private var unleased: [ID] = []
    /// The request the ask on its way adopts, if it is an adoption.
    private var adopting: ID?

    init(sharing: EndpointSharing?) {
        self.sharing = sharing
    }

    /// The lease `id` holds while it runs, if any.
    func lease(of id: ID) -> EndpointLease? { leases[id] }

    /// How many running requests wait to be adopted (for tests).
    var unleasedCount: Int { unleased.count }

    /// What the first request that may start does, with `running` requests running of at most
    /// `maxRequests`, at `now`.
    mutating func step(running: Int, maxRequests: Int, now: Duration) -> Step {
        guard let sharing else { return .start(nil) }
        switch ask {
        case .granted(let lease):
            ask = .idle
            return .start(lease)
        case .asking:
            return .wait(until: nil)
        case .retryAt(let time) where time > now:
            return .wait(until: time)
        case .unavailable(let until) where until > now:
            switch sharing.fallback {
            case .failOpen:
                return .start(nil)
            case .localFallback(let share) where running < max(1, Int((Double(maxRequests) * share).rounded(.down))):
                return .start(nil)
            case .localFallback, .failClosed:
                return .wait(until: until)
            }
        case .idle, .retryAt, .unavailable:
            return .ask(serial: newAsk(adopting: nil))
        }
    }

    /// Before any start: the serial of an ask that adopts a request the fallback started, if one
    /// runs and the coordinator may be asked now.
    mutating func adoptionAsk(now: Duration) -> Int? {
        guard sharing != nil, let id = unleased.first else { return nil }
        switch ask {
        case .idle, .retryAt(...now), .unavailable(until: ...now):
            return newAsk(adopting: id)
        case .asking, .granted, .retryAt, .unavailable:
            return nil
        }
    }

    /// After the starts: when to ask for the adoptions (the fallback's end), if requests the
    /// fallback started run, so that they are adopted even if no other request comes.
    func adoptionWake(now: Duration) -> Duration? {
        guard !unleased.isEmpty, case .unavailable(let until) = ask, until > now else { return nil }
        return until
    }

    /// Request `id` started, holding `lease` (none: started alone by the fallback, while shared).
    mutating func started(_ id: ID, holding lease: EndpointLease?) {
        if let lease {
            leases[id] = lease
        } else if sharing != nil {
            unleased.append(id)
        }
    }

    /// Request `id`, which ran, ended: returns its lease, to give back. A lease of this process
    /// that goes back makes a full endpoint ask again at once.
    mutating func ended(_ id: ID) -> EndpointLease? {
        removeUnleased(id)
        let lease = leases.removeValue(forKey: id)
        if lease != nil, case .retryAt = ask { ask = .idle }
        return lease
    }

    /// The coordinator answered the ask with `serial` at `now`; `isRunning` tells whether a request
    /// runs. An answer to an ask no longer awaited gives its lease back.
    mutating func answered(_ answer: EndpointLeaseAnswer, serial: Int, now: Duration, isRunning: (ID) -> Bool) -> Answered {
        var result = Answered()
        guard ask == .asking(serial: serial) else {
            if case .granted(let lease) = answer { result.release.append(lease) }
            return result
        }
        isCoordinatorUnavailable = answer.isUnavailable
        let adopted = adopting
        adopting = nil
        switch answer {
        case .granted(let lease):
            ask = .idle
            guard let adopted else {
                ask = .granted(lease)
                return result
            }
            if isRunning(adopted), removeUnleased(adopted) {
                leases[adopted] = lease
                result.adopted = adopted
            } else {
                result.release.append(lease)
            }
        case .full(let retryIn):
            ask = .retryAt(now + retryIn)
            // An adoption is granted whatever the limit; a coordinator that declines it anyway is
            // not asked again for that request.
            if let adopted { removeUnleased(adopted) }
        case .unavailable(let retryIn):
            ask = .unavailable(until: now + retryIn)
        case .paused(let remaining):
            ask = .idle
            result.pauseUntil = now + remaining
            if let adopted { removeUnleased(adopted) }
        }
        return result
    }

    /// The lease granted that no request took, to give back.
    mutating func takeUnused() -> EndpointLease? {
        guard case .granted(let lease) = ask else { return nil }
        ask = .idle
        return lease
    }

    /// A change of `sharing` (another coordinator, or another fallback) forgets the ask on its way
    /// (its lease, if one is granted, goes back when it comes, as an answer no longer awaited);
    /// running requests keep their leases until they end. The requests to adopt stay, and the new
    /// coordinator adopts them: its limit is the one they now count against (often the same
    /// limit: a new `Coordination` value for the same client and key is another coordinator). It
    /// is safe for a truly different limit too, since the requests do run against the endpoint.
    /// Only a change to no sharing forgets them: nothing counts them then.
    mutating func setSharing(_ sharing: EndpointSharing?) {
        guard sharing != self.sharing else { return }
        self.sharing = sharing
        ask = .idle   // a lease is `.granted` only inside the slots' grant, which hands it on or back
        adopting = nil
        if sharing == nil { unleased = [] }
    }

    /// Takes `id` out of the requests to adopt; returns whether it was one.
    @discardableResult
    private mutating func removeUnleased(_ id: ID) -> Bool {
        guard let place = unleased.firstIndex(of: id) else { return false }
        unleased.remove(at: place)
        return true
    }

    private mutating func newAsk(adopting id: ID?) -> Int {
        lastSerial += 1
        ask = .asking(serial: lastSerial)
        adopting = id
        return lastSerial
    }
}

extension EndpointLeaseAnswer {
    var isUnavailable: Bool {
        if case .unavailable = self { return true }
        return false
    }
}

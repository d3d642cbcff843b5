/// Who decides a ``ThrottledQueue``'s starts: the queue alone, or the queue together with every
/// process of a fleet that shares a limit.
///
/// ``local`` is the queue of its own, as ``ThrottledQueue/init(label:interval:monitor:mutability:limit:pool:)``
/// makes it. Module ThreadKitRedis adds `.redis(client, key: "api.example.com", whenUnavailable:)`,
/// a static constructor in an extension of this type: every queue created with the same key, in
/// any process, takes each start decision in one Lua script on Redis's clock, and applies its
/// ``Fallback`` while Redis does not answer. ThreadKit itself depends on no client: a value of
/// this type carries the package's start coordinator, which a module of the package provides.
///
/// The guarantee across processes holds on the reservations the decider hands out, on its clock:
/// no two reserved starts closer than the gap, never more than `count` in a window. A process
/// starts a reservation no earlier than its time and gives it up (counted as consumed) if it
/// reaches it more than its allowance late: a millisecond or a tenth of the gap, whichever is
/// longer, doubled for each reservation given up late in a row before it (up to 64 times), and
/// back to one after a start on time. Every
/// queue sharing a key must be made with the same monitor and limit: a queue with other ones is
/// told so, logs it and applies its ``Fallback``, instead of weakening the shared rules.
///
/// The same value given to a `URLDispatcher`'s `EndpointLimits` shares each endpoint's
/// `maxRequests` across the fleet: a request runs while it holds one of the endpoint's leases.
///
/// Two values are equal when they carry the same coordinators (the same objects, or none) and the
/// same ``Fallback``: two `.redis(…)` values made from one client and key are two coordinators, so
/// they differ; ``local`` equals ``local``.
public struct Coordination: Sendable, Equatable {
    /// The coordinator that decides with other processes; `nil` for the queue alone.
    package let coordinator: (any StartCoordinator)?
    /// What each start does while the coordinator cannot decide.
    package let whenUnavailable: Fallback
    /// The coordinator that shares a `URLDispatcher` endpoint's concurrency; `nil` for this process alone.
    package let endpoints: (any EndpointCoordinator)?

    /// The queue decides its starts alone: its rules hold in this process only.
    public static let local = Coordination(coordinator: nil, whenUnavailable: .standard)

    /// Starts decided by `coordinator`, with `whenUnavailable` applied while it cannot decide: what
    /// a module's public constructor (ThreadKitRedis's `.redis(_:key:whenUnavailable:)`) returns.
    package init(coordinator: (any StartCoordinator)?, endpoints: (any EndpointCoordinator)? = nil, whenUnavailable: Fallback) {
        self.coordinator = coordinator
        self.endpoints = endpoints
        self.whenUnavailable = whenUnavailable
    }

    /// Whether `lhs` and `rhs` carry the same coordinators (by identity) and the same fallback.
    public static func == (lhs: Coordination, rhs: Coordination) -> Bool {
        lhs.coordinator.map { ObjectIdentifier($0) } == rhs.coordinator.map { ObjectIdentifier($0) }
            && lhs.endpoints.map { ObjectIdentifier($0) } == rhs.endpoints.map { ObjectIdentifier($0) }
            && lhs.whenUnavailable == rhs.whenUnavailable
    }
}

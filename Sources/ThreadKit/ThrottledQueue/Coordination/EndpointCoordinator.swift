/// Who shares a `URLDispatcher` endpoint's concurrency with other processes: a set of leases, one
/// per request in flight across the fleet, each with an expiry, and a pause every process honours.
///
/// A later module implements it on Redis (ThreadKitRedis's lease script); ThreadKitURL asks it
/// without depending on that module. Every method returns at once: the dispatcher has no thread per
/// endpoint, calls it after its lock, and may call it on a cooperative thread.
///
/// - ``acquire(_:answer:)`` sends the request and calls `answer` exactly once, later, on another
///   thread (the client's), or at once on the caller's thread when it can tell at once (a breaker
///   that refuses). `answer` is the dispatcher's own code, which never blocks.
/// - ``release(_:)``, ``renew(_:)`` and ``pause(endpoint:for:)`` send their command and do not wait
///   for its reply. A release that fails, before it is sent or after (its reply lost), is kept and
///   sent again until the coordinator answers it, or until the lease has expired anyway:
///   ``leaseTTL`` after the release at the earliest. The release of an acquire whose outcome is
///   unknown (sent, its answer lost) is kept longer, since the coordinator may run that acquire
///   late: an implementation bounds how long (see it for the bound, and how many it keeps).
package protocol EndpointCoordinator: AnyObject, Sendable {
    /// How long a lease lives unless renewed; the dispatcher renews a running request's lease every
    /// third of it.
    var leaseTTL: Duration { get }
    /// Asks for one lease of `request.endpoint`, granted if fewer than `request.limit` unexpired
    /// leases are held across the fleet and no pause is in force (and, for a coordinator that serves
    /// the processes in turn, no process that waited longer is to take it); with
    /// ``EndpointLeaseRequest/adopt``, granted whatever the limit and the pause, or "unavailable".
    /// `answer` is called exactly once.
    func acquire(_ request: EndpointLeaseRequest, answer: @escaping @Sendable (EndpointLeaseAnswer) -> Void)
    /// Gives `lease` back; giving back one that is gone (expired, given back) does nothing.
    func release(_ lease: EndpointLease)
    /// Moves `lease`'s expiry to ``leaseTTL`` from now, if it is still held.
    func renew(_ lease: EndpointLease)
    /// No lease of `endpoint` is granted, in any process, for `duration` from now; a longer pause in
    /// force stays (a pause is never shortened).
    func pause(endpoint: String, for duration: Duration)
}

/// What a dispatcher asks its ``EndpointCoordinator`` for.
package struct EndpointLeaseRequest: Sendable, Equatable {
    /// The endpoint (`http://api.example.com:80`), the coordinator's key for its leases.
    package var endpoint: String
    /// The most leases held at once across the fleet (the endpoint's `maxRequests`).
    package var limit: Int
    /// Whether the lease is for a request that already runs (the fallback started it while the
    /// coordinator could not decide): granted whatever the limit, so that the fleet counts it, and
    /// new requests wait until the count is back under the limit.
    package var adopt: Bool

    package init(endpoint: String, limit: Int, adopt: Bool = false) {
        self.endpoint = endpoint
        self.limit = limit
        self.adopt = adopt
    }
}

/// One lease held: the endpoint and the token that names it (unique across the fleet).
package struct EndpointLease: Sendable, Hashable {
    /// The endpoint, as in its ``EndpointLeaseRequest``.
    package let endpoint: String
    /// The lease's name among the endpoint's leases: the coordinator's, unique across the fleet.
    package let token: String

    package init(endpoint: String, token: String) {
        (self.endpoint, self.token) = (endpoint, token)
    }
}

/// A coordinator's answer to an ``EndpointLeaseRequest``.
package enum EndpointLeaseAnswer: Sendable, Equatable {
    /// The lease is held until it is released or expires (``EndpointCoordinator/leaseTTL``).
    case granted(EndpointLease)
    /// Every lease is taken: ask again `retryIn` from now (when the earliest one expires, or sooner).
    case full(retryIn: Duration)
    /// A pause is in force (a `Retry-After` seen by some process) for `remaining` from now.
    case paused(remaining: Duration)
    /// The coordinator cannot decide now (Redis down, slow, or refusing): the endpoint's
    /// ``Fallback`` applies; it may be asked again `retryIn` from now.
    case unavailable(retryIn: Duration)
}

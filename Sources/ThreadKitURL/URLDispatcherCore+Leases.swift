import Foundation
@_spi(ThreadKitURL) import ThreadKit

/// The shared leases of endpoints whose limits are shared by a fleet (``URLDispatcher/EndpointLimits/coordination``):
/// asking for them, giving them back, renewing them while their requests run, sharing a pause.
/// The coordinator is called after the lock and returns at once; its answers come back through
/// ``leaseAnswered(_:serial:at:from:)`` like any other event of the endpoint's slots.
extension URLDispatcherCore {
    /// Gives leases back, shares a pause, arms renewals, and asks for leases: each call returns at once.
    func performSharing(_ effects: Effects) {
        for (coordinator, lease) in effects.releases { coordinator.release(lease) }
        if let (coordinator, endpoint, duration) = effects.sharedPause { coordinator.pause(endpoint: endpoint.description, for: duration) }
        for (record, coordinator) in effects.renewals { armRenewal(record, coordinator) }
        for (endpoint, serial, request, coordinator) in effects.acquires {
            coordinator.acquire(request) { [self] answer in leaseAnswered(answer, serial: serial, at: endpoint, from: coordinator) }
        }
    }

    /// `coordinator` answered an ask: on its client's thread, or at once on the asker's. A lease it
    /// grants is its to take back, whoever coordinates the endpoint by then.
    private func leaseAnswered(_ answer: EndpointLeaseAnswer, serial: Int, at endpoint: URLDispatcher.Endpoint,
                               from coordinator: any EndpointCoordinator) {
        let now = now()
        let (effects, change) = state.withLock { state -> (Effects, String?) in
            var effects = Effects()
            // Read, not copied: a copy of the slots held across their change would copy their queue.
            guard let wasUnavailable = state.endpoints[endpoint]?.slots.isCoordinatorUnavailable else { return (effects, nil) }
            if case .granted(let lease) = answer { state.leaseOwners[lease] = coordinator }
            let decision = state.endpoints[endpoint]!.slots.leaseAnswered(answer, serial: serial, now: now)
            state.grant(decision, at: endpoint, now: now, into: &effects)
            let isUnavailable = state.endpoints[endpoint]!.slots.isCoordinatorUnavailable
            guard isUnavailable != wasUnavailable else { return (effects, nil) }
            return (effects, isUnavailable ? "the shared leases cannot be asked for; \(state.endpoints[endpoint]!.limits.coordination.whenUnavailable) applies"
                                           : "the shared leases answer again")
        }
        if let change { logSoon("\(endpoint): \(change)") }
        perform(effects, onTimer: true)
    }

    /// Renews the lease of `record` every third of its TTL (every millisecond at least) while it runs.
    private func armRenewal(_ record: RequestRecord, _ coordinator: any EndpointCoordinator) {
        let interval = max(coordinator.leaseTTL / 3, .milliseconds(1))
        guard let handle = try? TimerThread.shared.schedule(every: interval, { [self] in
            let lease = state.withLock { state -> EndpointLease? in
                guard state.requests[record.id] != nil else { return nil }
                return state.endpoints[record.endpoint]?.slots.lease(of: record.id)
            }
            if let lease { coordinator.renew(lease) }
        }) else { return }
        let unneeded = state.withLock { state -> TimerHandle? in
            guard state.requests[record.id] != nil else { return handle }
            defer { state.requests[record.id]!.renewal = handle }
            return state.requests[record.id]!.renewal
        }
        unneeded?.cancel()
    }
}

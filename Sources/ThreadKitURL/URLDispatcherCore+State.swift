import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_spi(ThreadKitURL) import ThreadKit

extension URLDispatcherCore {
    /// One endpoint: its limits and its slots.
    struct EndpointEntry: Sendable {
        var limits: URLDispatcher.EndpointLimits
        var slots: EndpointSlots<Int>
        /// How its requests ended, for the diagnostics' `requests_total`.
        var outcomes = RequestOutcomes()

        init(limits: URLDispatcher.EndpointLimits) {
            self.limits = limits
            slots = EndpointSlots(maxRequests: limits.maxRequests, maxLongRequests: limits.maxLongRequests, rate: limits.rate,
                                  sharing: limits.sharing)
        }
    }

    /// One request the dispatcher knows: from its registration until it is over.
    struct Request: Sendable {
        let record: RequestRecord
        var life: Life
        /// Its session task's identifier, once the task is made.
        var transferID: Int?
        /// The repeating call that renews its shared lease while it runs.
        var renewal: TimerHandle?
    }

    /// The books the core keeps under its lock. Its methods join the two machines: a request's
    /// ending gives its slot (or queue place) back to its endpoint's slots, and the slots' grants
    /// start the requests that get one. They read no clock and touch no session or timer: what is
    /// left to do goes into ``Effects``.
    struct State: Sendable {
        var disposed = false
        var nextID = 0
        var endpoints: [URLDispatcher.Endpoint: EndpointEntry] = [:]
        /// The limits set for endpoints, used from their first request on.
        var limits: [URLDispatcher.Endpoint: URLDispatcher.EndpointLimits] = [:]
        var requests: [Int: Request] = [:]
        /// The request of each session task, by the task's identifier.
        var transfers: [Int: Int] = [:]
        /// The coordinator that granted each shared lease the slots hold or hand on: the one it goes
        /// back to and is renewed with, even after ``URLDispatcher/setLimits(_:for:)`` changed (or
        /// turned off) the endpoint's coordination.
        var leaseOwners: [EndpointLease: any EndpointCoordinator] = [:]

        /// The entry of `endpoint`, made with its limits (or `defaultLimits`) on first use.
        mutating func addEndpoint(_ endpoint: URLDispatcher.Endpoint, defaultLimits: URLDispatcher.EndpointLimits) {
            if endpoints[endpoint] == nil { endpoints[endpoint] = EndpointEntry(limits: limits[endpoint] ?? defaultLimits) }
        }

        /// Carries out on the books what request `id`'s machine answered; collects the rest.
        mutating func settle(_ action: Life.EndAction, of id: Int, now: Duration, into effects: inout Effects) {
            guard let request = requests[id] else { return }
            switch action {
            case .none:
                return
            case .end(let ending, let timer):
                effects.cancelTimers += [timer, request.renewal].compactMap { $0 }
                forget(request)
                endpoints[request.record.endpoint]?.outcomes.count(ending)
                release(request.record, outcome: ending.outcome, now: now, into: &effects)
                effects.completions.append((request.record, ending))
            case .cancelTransfer(let transfer, _, let timer):
                effects.cancelTimers += [timer].compactMap { $0 }
                effects.cancelTransfers.append((request.record, transfer))
            case .releaseSlot(let ending, let deliver):
                effects.cancelTimers += [request.renewal].compactMap { $0 }
                forget(request)
                endpoints[request.record.endpoint]?.outcomes.count(ending)
                release(request.record, outcome: ending.outcome, now: now, into: &effects)
                if deliver { effects.completions.append((request.record, ending)) }
            case .deliverCompletion(let ending):
                effects.completions.append((request.record, ending))
            }
        }

        /// Forgets `record`, which its machine refused at once (`ending`), counting it failed with
        /// its endpoint's slots if `countAsFailed`: returns the error its owner gets thrown.
        mutating func refuse(_ record: RequestRecord, _ ending: RequestEnding, countAsFailed: Bool) -> any Error {
            requests[record.id] = nil
            endpoints[record.endpoint]?.outcomes.count(ending)
            if countAsFailed { endpoints[record.endpoint]!.slots.countUnsubmittedFailure() }
            return URLDispatcherCore.error(ending, of: record)!   // a refusal is never `.completed`
        }

        /// Marks the requests `decision` starts as starting, and collects them, the wake-up, and
        /// the shared leases to ask for, give back and renew (those of requests that start, and
        /// of running ones adopted). A lease goes back to, and is renewed
        /// with, the coordinator that granted it (``leaseOwners``), whatever the limits say now;
        /// a new ask goes to the endpoint's coordinator now.
        mutating func grant(_ decision: EndpointSlots<Int>.Decision, at endpoint: URLDispatcher.Endpoint,
                            now: Duration, into effects: inout Effects) {
            for id in decision.start {
                guard let request = requests[id] else { continue }
                switch requests[id]!.life.slotGranted(now: now) {
                case .startTransfer(let queueTimer):
                    effects.cancelTimers += [queueTimer].compactMap { $0 }
                    effects.start.append(request.record)
                }
                if let lease = endpoints[endpoint]?.slots.lease(of: id), let owner = leaseOwners[lease] {
                    effects.renewals.append((request.record, owner))
                }
            }
            for id in decision.adopted {
                if let request = requests[id], let lease = endpoints[endpoint]?.slots.lease(of: id), let owner = leaseOwners[lease] {
                    effects.renewals.append((request.record, owner))
                }
            }
            if let wake = decision.wakeAt { effects.wakes.append((endpoint, wake)) }
            effects.releases += decision.releaseLeases.compactMap { lease in leaseOwners.removeValue(forKey: lease).map { ($0, lease) } }
            guard let serial = decision.acquireLease, let limits = endpoints[endpoint]?.limits,
                  let coordinator = limits.coordination.endpoints else { return }
            let request = EndpointLeaseRequest(endpoint: endpoint.description, limit: limits.maxRequests, adopt: decision.adoptsLease)
            effects.acquires.append((endpoint, serial, request, coordinator))
        }

        /// Gives `record`'s slot (or queue place) back to its endpoint, and grants the freed slot.
        private mutating func release(_ record: RequestRecord, outcome: EndpointSlots<Int>.Outcome,
                                      now: Duration, into effects: inout Effects) {
            guard case .released(let decision)? = endpoints[record.endpoint]?.slots.end(record.id, outcome: outcome, now: now) else { return }
            grant(decision, at: record.endpoint, now: now, into: &effects)
        }

        /// Drops a request that is over.
        private mutating func forget(_ request: Request) {
            requests[request.record.id] = nil
            if let transferID = request.transferID { transfers[transferID] = nil }
        }
    }

    /// What to do after the lock, in this order: cancel timers, arm wake-ups, start transfers, arm a
    /// queue timeout, cancel transfers (arming their graces), tell owners how their requests ended.
    struct Effects {
        var cancelTimers: [TimerHandle] = []
        var wakes: [(endpoint: URLDispatcher.Endpoint, at: Duration)] = []
        var start: [RequestRecord] = []
        var armQueueTimer: (record: RequestRecord, deadline: Duration)?
        var cancelTransfers: [(record: RequestRecord, transfer: URLSessionDataTask)] = []
        var completions: [(record: RequestRecord, ending: RequestEnding)] = []
        /// Shared leases to ask for: the endpoint, the ask's serial, the request, and whom to ask.
        var acquires: [(endpoint: URLDispatcher.Endpoint, serial: Int, request: EndpointLeaseRequest, coordinator: any EndpointCoordinator)] = []
        /// Shared leases to give back.
        var releases: [(coordinator: any EndpointCoordinator, lease: EndpointLease)] = []
        /// Requests that started holding a shared lease: their renewal to arm.
        var renewals: [(record: RequestRecord, coordinator: any EndpointCoordinator)] = []
        /// A `Retry-After` pause to share with the fleet.
        var sharedPause: (coordinator: any EndpointCoordinator, endpoint: URLDispatcher.Endpoint, duration: Duration)?
    }
}

extension URLDispatcher.Kind {
    /// The kind as the slots see it.
    var slotKind: EndpointSlots<Int>.Kind {
        switch self {
        case .short: .short
        case .long(let policy): .long(waits: policy == .wait)
        }
    }
}

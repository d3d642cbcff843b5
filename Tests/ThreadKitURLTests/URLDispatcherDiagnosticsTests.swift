import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitURL
import LoopbackHTTPServer

/// A handler that holds `/hold<n>` requests until gate n opens (10 s at most), and routes the rest.
private func holding(_ gates: [Latch]) -> @Sendable (LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply {
    { request in
        if request.path.hasPrefix("/hold"), let index = Int(request.path.dropFirst(5)), gates.indices.contains(index) {
            gates[index].wait(timeout: .seconds(10))
        }
        return LoopbackHTTPServer.Reply.route(request)
    }
}

/// The dispatcher's entry in a fresh snapshot (other tests' components are there too).
private func entry(of dispatcher: URLDispatcher) -> Snapshot.Component? {
    Diagnostics.snapshot().components.first { $0.kind == "URLDispatcher" && $0.name == dispatcher.diagnosticsName }
}

private func requestsTotal(_ component: Snapshot.Component?, _ endpoint: String) -> [String: Double] {
    var totals: [String: Double] = [:]
    for metric in component?.metrics ?? [] where metric.name == "requests_total" && metric.labels.first?.value == endpoint {
        if let outcome = metric.labels.first(where: { $0.name == "outcome" }) { totals[outcome.value] = metric.value }
    }
    return totals
}

private func gauge(_ component: Snapshot.Component?, _ name: String, _ endpoint: String) -> Double? {
    component?.metrics.first { $0.name == name && $0.labels == [Snapshot.Field("endpoint", endpoint)] }?.value
}

extension URLIntegrationTests {
@Suite struct URLDispatcherDiagnosticsTests {
    @Test func listsEachEndpointsRunningAndQueuedRequestsThenCountsTheirOutcomes() async throws {
        let gate = Latch()
        try await withServerAndDispatcher(.init(maxRequests: 2), handler: holding([gate])) { server, dispatcher in
            let endpoint = server.endpoint.description
            #expect(dispatcher.diagnosticsName.hasPrefix("URLDispatcher#"))
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 {
                    group.addTask { try await dispatcher.data(for: server.request("/hold0"), timeout: .seconds(20)).1.statusCode }
                }
                #expect(await eventually(pollingEvery: .milliseconds(50)) { dispatcher.statistics(for: server.endpoint).queued == 2 })
                let component = entry(of: dispatcher)
                #expect(component?.endpoints == [Snapshot.Endpoint(endpoint: endpoint, running: 2, queued: 2)])
                #expect(component?.pendingCount == 2)
                #expect(component?.threads.isEmpty == true)
                #expect(gauge(component, "requests_running", endpoint) == 2)
                #expect(gauge(component, "requests_queued", endpoint) == 2)
                #expect(component?.configuration.first { $0.name == "maxRequests" }?.value == "2")
                #expect(component?.configuration.first { $0.name == "maxLongRequests" }?.value == "1")
                #expect(requestsTotal(component, endpoint).values.allSatisfy { $0 == 0 })
                gate.countDown()
                for try await status in group { #expect(status == 200) }
            }
            let after = entry(of: dispatcher)
            #expect(requestsTotal(after, endpoint) == [
                "success": 4, "failure": 0, "cancelled": 0, "timeout": 0, "rejected": 0, "disposed": 0,
            ])
            #expect(after?.endpoints == [Snapshot.Endpoint(endpoint: endpoint, running: 0, queued: 0)])
            #expect(after?.pendingCount == 0)
            let families = try PrometheusParser.parse(Diagnostics.prometheusText())
            let labels = ["dispatcher": dispatcher.diagnosticsName, "endpoint": endpoint]
            #expect(PrometheusParser.value(families, "threadkit_url_requests_total", labels.merging(["outcome": "success"]) { $1 }) == 4)
            #expect(PrometheusParser.value(families, "threadkit_url_requests_total", labels.merging(["outcome": "cancelled"]) { $1 }) == 0)
            #expect(PrometheusParser.value(families, "threadkit_url_requests_running", labels) == 0)
            #expect(families.first { $0.name == "threadkit_url_requests_total" }?.type == "counter")
            #expect(families.first { $0.name == "threadkit_url_requests_queued" }?.type == "gauge")
        }
    }

    @Test func countsACancelledRequestAsCancelledAndAQueueTimeoutAsTimeout() async throws {
        let gate = Latch()
        try await withServerAndDispatcher(.init(maxRequests: 1), handler: holding([gate])) { server, dispatcher in
            let endpoint = server.endpoint.description
            let holder = Task { try await dispatcher.data(for: server.request("/hold0"), timeout: .seconds(20)) }
            #expect(await eventually(pollingEvery: .milliseconds(50)) { dispatcher.statistics(for: server.endpoint).running == 1 })
            let queued = Task { try await dispatcher.data(for: server.request("/"), timeout: .seconds(20)) }
            #expect(await eventually(pollingEvery: .milliseconds(50)) { dispatcher.statistics(for: server.endpoint).queued == 1 })
            queued.cancel()
            await #expect(throws: CancellationError.self) { try await queued.value }
            await #expect(throws: URLDispatcherError.self) {
                try await dispatcher.data(for: server.request("/"), timeout: .seconds(20), queueTimeout: .milliseconds(10))
            }
            gate.countDown()
            _ = try await holder.value
            #expect(requestsTotal(entry(of: dispatcher), endpoint) == [
                "success": 1, "failure": 0, "cancelled": 1, "timeout": 1, "rejected": 0, "disposed": 0,
            ])
        }
    }

    @Test func showsARetryAfterPauseAndHowLongIsLeft() async throws {
        try await withServerAndDispatcher { server, dispatcher in
            let endpoint = server.endpoint.description
            let (_, response) = try await dispatcher.data(for: server.request("/?status=429&retry-after=30"))
            #expect(response.statusCode == 429)
            let component = entry(of: dispatcher)
            let paused = component?.endpoints.first?.pausedFor ?? 0
            #expect(paused > 25 && paused <= 30)
            #expect((gauge(component, "pause_remaining_seconds", endpoint) ?? 0) > 25)
            #expect(Diagnostics.snapshot().description.contains("endpoint \(endpoint): running 0, queued 0, paused for"))
        }
    }

    @Test func aBlockedDataSyncWaitsForASlotThenForTheResponse() async throws {
        let gates = [Latch(), Latch()]
        try await withServerAndDispatcher(.init(maxRequests: 1), handler: holding(gates)) { server, dispatcher in
            let endpoint = server.endpoint.description
            let holder = Task { try await dispatcher.data(for: server.request("/hold0"), timeout: .seconds(20)) }
            #expect(await eventually(pollingEvery: .milliseconds(50)) { dispatcher.statistics(for: server.endpoint).running == 1 })
            let done = Latch()
            let status = LockedValue(0)
            Thread {
                let reply = try? dispatcher.dataSync(for: server.request("/hold1"), timeout: .seconds(20))
                status.withLock { $0 = reply?.1.statusCode ?? -1 }
                done.countDown()
            }.start()
            func waitOf(_ kind: String) -> Snapshot.Wait? {
                Diagnostics.snapshot().waits.first { $0.kind == kind && $0.waitsFor.hasSuffix(endpoint) }
            }
            #expect(await eventually(pollingEvery: .milliseconds(50)) { waitOf("slot") != nil })
            let slot = try #require(waitOf("slot"))
            #expect(slot.waitsFor == "a slot of endpoint \(endpoint)")
            #expect(slot.holder == nil)
            gates[0].countDown()
            #expect(await eventually(pollingEvery: .milliseconds(50)) { waitOf("response") != nil })
            let response = try #require(waitOf("response"))
            #expect(response.waitsFor == "the response of endpoint \(endpoint)")
            #expect(response.thread == slot.thread)
            #expect(waitOf("slot") == nil)
            gates[1].countDown()
            _ = try await holder.value
            #expect(await eventually(pollingEvery: .milliseconds(50)) { done.isOpen })
            #expect(status.withLock { $0 } == 200)
            #expect(waitOf("response") == nil)
        }
    }

    @Test func aReleasedDispatcherLeavesTheInventory() async throws {
        var dispatcher: URLDispatcher? = URLDispatcher()
        let name = dispatcher!.diagnosticsName
        #expect(Diagnostics.snapshot().components.contains { $0.name == name })
        dispatcher?.dispose()
        dispatcher = nil
        #expect(await eventually(pollingEvery: .milliseconds(50)) { !Diagnostics.snapshot().components.contains { $0.name == name } })
        let never = URLDispatcher(limits: .init(maxRetryAfter: .seconds(Int64.max)))
        defer { never.dispose() }
        let setting = entry(of: never)?.configuration.first { $0.name == "maxRetryAfter" }?.value
        #expect(setting?.hasPrefix("92233720368547758") == true && setting?.hasSuffix("s") == true)
        #expect(URLDispatcher.shared.diagnosticsName == "shared")
        #expect(Diagnostics.snapshot().components.contains { $0.kind == "URLDispatcher" && $0.name == "shared" })
    }
}
}

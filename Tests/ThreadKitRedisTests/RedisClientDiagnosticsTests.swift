import Foundation
import Testing
@testable import ThreadKitRedis
@_spi(ThreadKitURL) import ThreadKit
import ThreadKitTestSupport

/// The client's entry in a fresh snapshot, found by its server's address (each test has its own server).
private func entry(_ address: RedisClient.Address) -> Snapshot.Component? {
    Diagnostics.snapshot().components.first { $0.kind == "RedisClient" && $0.name == address.description }
}

private func metric(_ component: Snapshot.Component?, _ name: String, _ labels: [Snapshot.Field] = []) -> Double? {
    component?.metrics.first { $0.name == name && $0.labels == labels }?.value
}

private func failure(of client: RedisClient) async -> RedisError? {
    do {
        _ = try await client.send("PING")
        return nil
    } catch {
        return error
    }
}

@Suite("RedisClient in the diagnostics", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisClientDiagnosticsTests {
    @Test("counts its commands exactly, lists its connection's thread, sleeping in poll between replies")
    func countsCommandsAndListsItsThread() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            for _ in 0..<7 { #expect(try await client.send("PING") == .simpleString("PONG")) }
            let name = "Redis connection \(server.address)"
            #expect(await eventually(pollingEvery: .milliseconds(50)) { entry(server.address)?.threads.first?.state == .sleeping })
            let component = try #require(entry(server.address))
            #expect(component.configuration == [Snapshot.Field("address", server.address.description),
                                                 Snapshot.Field("commandTimeout", "5s")])
            #expect(metric(component, "commands_total") == 7)
            #expect(metric(component, "commands_pending") == 0)
            #expect(metric(component, "reconnects_total") == 0)
            #expect(metric(component, "connected") == 1)
            #expect(metric(component, "breaker_open") == 0)
            for reason in ["timeout", "connection_lost", "connect_failed", "refused"] {
                #expect(metric(component, "command_errors_total", [Snapshot.Field("reason", reason)]) == 0)
            }
            #expect(component.pendingCount == 0)
            #expect(component.threads.count == 1)
            let thread = try #require(component.threads.first)
            #expect(thread.name == name)
            #expect(thread.kernelName == "Redis conn")
            #expect(thread.kernelThreadID > 0)
            let families = try PrometheusParser.parse(Diagnostics.prometheusText())
            let labels = ["client": server.address.description]
            #expect(PrometheusParser.value(families, "threadkit_redis_commands_total", labels) == 7)
            #expect(PrometheusParser.value(families, "threadkit_redis_command_errors_total", labels.merging(["reason": "timeout"]) { $1 }) == 0)
            #expect(PrometheusParser.value(families, "threadkit_redis_breaker_open", labels) == 0)
            #expect(Diagnostics.snapshot().description.contains("RedisClient \"\(server.address)\": address=\(server.address) commandTimeout=5s"))
        }
    }

    @Test("a caller blocked in sendSync waits for a reply, held by the connection's thread")
    func aBlockedSendSyncWaitsForTheConnectionsThread() async throws {
        try await withRedisServer { server in
            let client = makeClient(server.address)
            let pusher = makeClient(server.address)
            #expect(try await client.send("PING") == .simpleString("PONG"))
            let reply = Task {
                try await onNewThread(limit: .seconds(10)) { () -> Result<RESPValue, RedisError> in
                    Result { () throws(RedisError) -> RESPValue in try client.sendSync("BLPOP", "diagnostics-list", "4") }
                }
            }
            let description = "a reply of RedisClient \"\(server.address)\""
            func waitOfClient() -> Snapshot.Wait? {
                Diagnostics.snapshot().waits.first { $0.kind == "reply" && $0.waitsFor == description }
            }
            #expect(await eventually(pollingEvery: .milliseconds(50)) { waitOfClient() != nil })
            let wait = try #require(waitOfClient())
            let ioThread = try #require(entry(server.address)?.threads.first)
            #expect(wait.holder == Snapshot.ThreadReference(name: ioThread.name, kernelThreadID: ioThread.kernelThreadID))
            #expect(metric(entry(server.address), "commands_pending") == 1)
            _ = try await pusher.send("LPUSH", "diagnostics-list", "x")
            let value = try await reply.value.get()
            #expect(value == .array([.bulkString(Array("diagnostics-list".utf8)), .bulkString(Array("x".utf8))]))
            #expect(waitOfClient() == nil)
        }
    }

    @Test("a released client leaves the inventory; a refused command is counted")
    func aReleasedClientLeaves() async throws {
        try await withRedisServer { server in
            var client: RedisClient? = makeClient(server.address, breaker: longBackoff)
            let first = try await client!.send("PING")
            #expect(first == .simpleString("PONG"))
            #expect(entry(server.address) != nil)
            await server.killed()
            // Each command either goes to the connection (which fails it) or is refused by the
            // breaker, which the first failure opens for a minute.
            var attempts = 1
            while attempts < 20 {
                attempts += 1
                if case .unavailable? = await failure(of: client!) { break }
            }
            let component = entry(server.address)
            #expect(metric(component, "breaker_open") == 1)
            let refused = metric(component, "command_errors_total", [Snapshot.Field("reason", "refused")]) ?? 0
            #expect(refused == 1)
            #expect((metric(component, "commands_total") ?? 0) + refused == Double(attempts))
            let failed = ["timeout", "connection_lost", "connect_failed"].map {
                metric(component, "command_errors_total", [Snapshot.Field("reason", $0)]) ?? 0
            }
            #expect(failed.reduce(0, +) == Double(attempts - 2))
            client = nil
            #expect(await eventually(pollingEvery: .milliseconds(50)) { entry(server.address) == nil })
        }
    }
}

import Foundation
import Testing
import ThreadKit
import ThreadKitTestSupport
@testable import ThreadKitRedis

/// Where a `Log` delegate runs for what a Redis client logs: never on its connection thread, whose
/// commands a slow delegate would hold up. In a child process: the delegate is process-wide.
@Suite("Redis client logging", .needsRedisServer)
struct RedisLogThreadTests {
    @Test("a Log delegate never runs on a Redis connection thread: the delivery thread delivers what it logs", .exitTestOnOwnThreads)
    func delegateNotOnTheConnectionThread() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            /// Records the threads that delivered "connected to" records.
            final class Deliverers: LogDelegate {
                let threads = Recorder<String>()
                func log(_ record: Log.Record) {
                    if record.message.hasPrefix("connected to") { threads.append(Thread.current.name ?? "") }
                }
            }
            let deliverers = Deliverers()
            Log.delegate = deliverers
            Log.enable(.redis)
            guard let server = try? RedisServer() else { preconditionFailure("no redis-server") }
            let client = makeClient(server.address)
            let pong = try? await client.send("PING")
            precondition(pong?.string == "PONG", "no PONG: \(String(describing: pong))")
            let delivered = await eventually(timeout: .seconds(10)) { !deliverers.threads.values.isEmpty }
            let threads = deliverers.threads.values
            precondition(delivered && threads.count == 1, "delivered \(threads.count) \"connected to\" records")
            FileHandle.standardError.write(Data("delivered on: \(threads[0])\n".utf8))
            server.stop()
        }
        let output = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
        #expect(output.contains("delivered on: ThreadKit Log\n"), "\(output)")
    }
}

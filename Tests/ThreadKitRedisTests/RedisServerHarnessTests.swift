import Foundation
import Testing
import ThreadKitTestSupport

@Suite("The tests' redis-server harness", .needsRedisServer, .timeLimit(.minutes(1)))
struct RedisServerHarnessTests {
    @Test("a test process that dies without stopping its server takes the server with it (the watchdog kills it)", .exitTestOnOwnThreads)
    func serverDiesWithTheTestProcess() async throws {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let server = try RedisServer()
            FileHandle.standardError.write(Data("server-pid=\(server.pid)\n".utf8))
            // Dies at once: no deinit, no stop().
            abort()
        }
        let output = standardError(of: result) ?? ""
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("server-pid=") }),
              let pid = pid_t(line.dropFirst("server-pid=".count)), pid > 0 else {
            Issue.record("the child did not say its server's pid: \(output)")
            return
        }
        #expect(await eventually(timeout: .seconds(10)) { kill(pid, 0) != 0 && errno == ESRCH }, "redis-server \(pid) outlived its test process")
    }

    @Test("stop() ends the server and its watchdog; the server's socket stops answering")
    func stopEndsServer() async throws {
        let server = try await RedisServer.started()
        let pid = server.pid
        #expect(server.answersPing())
        await server.stopped()
        #expect(server.pid == 0 && !server.answersPing())
        #expect(kill(pid, 0) != 0 && errno == ESRCH)
    }
}

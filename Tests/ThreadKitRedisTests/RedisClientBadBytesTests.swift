import Foundation
import Testing
@testable import ThreadKitRedis
import ThreadKitTestSupport
import ThreadKit

/// A server that is not Redis: on a Unix socket in a temporary folder, it accepts one connection,
/// reads a command and answers with `reply`, whatever the command was.
final class ScriptedServer: Sendable {
    let path: String
    private let listener: Int32

    init(reply: String) throws {
        path = NSTemporaryDirectory() + "threadkit-scripted-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 4) == 0 else { throw RedisServer.ServerError("bind or listen failed: errno \(errno)") }
        let bytes = Array(reply.utf8)
        Thread {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = recv(connection, &buffer, buffer.count, 0)
            _ = send(connection, bytes, bytes.count, Int32(MSG_NOSIGNAL))
            // Keeps the connection open until the client ends it.
            while recv(connection, &buffer, buffer.count, 0) > 0 {}
            close(connection)
        }.start()
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        unlink(path)
    }
}

@Suite("RedisClient given bytes that are not RESP2", .timeLimit(.minutes(1)))
struct RedisClientBadBytesTests {
    @Test("bytes that are not RESP2 fail the command with the parser's reason; the connection is dropped, not trapped on")
    func notRESP() async throws {
        let server = try ScriptedServer(reply: "?what\r\n")
        let lines = LogLines()
        let client = makeClient(.unixSocket(path: server.path), lines: lines)
        do {
            _ = try await client.send("PING")
            Issue.record("a reply that is not RESP2 cannot be a value")
        } catch {
            #expect(error == .connectionLost("not RESP2: a value starts with '?', not one of + - : $ *", sent: true))
        }
        #expect(await eventually { lines.count(containing: "lost the connection to unix:\(server.path): not RESP2") == 1 })
    }

    @Test("a reply with no command waiting for it drops the connection, since replies can no longer be matched")
    func unexpectedReply() async throws {
        let server = try ScriptedServer(reply: "+PONG\r\n+EXTRA\r\n")
        let lines = LogLines()
        let client = makeClient(.unixSocket(path: server.path), lines: lines, breaker: longBackoff)
        #expect(try await client.send("PING") == .simpleString("PONG"))
        #expect(await eventually(timeout: .seconds(10)) { lines.count(containing: "a reply came with no command waiting for it: \"EXTRA\"") == 1 })
        // The connection is gone, and a stray reply counts as a failure: the breaker refuses the
        // next command at once, which never reads the stray reply.
        await #expect {
            _ = try await client.send("PING")
        } throws: { error in
            if case .unavailable(_, let lastFailure) = error as? RedisError { lastFailure.contains("no command waiting") } else { false }
        }
    }
}

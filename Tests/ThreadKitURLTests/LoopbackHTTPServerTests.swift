import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import LoopbackHTTPServer

/// The test server itself: loopback only, counts, and a clean shutdown.
@Suite struct LoopbackHTTPServerTests {
    /// A new connection to `server` that has sent `GET <target>`, its answer not read yet.
    static func connection(to server: LoopbackHTTPServer, asking target: String,
                           sourceLocation: SourceLocation = #_sourceLocation) throws -> RawHTTPClient {
        let client = try #require(RawHTTPClient(port: server.port), sourceLocation: sourceLocation)
        client.send("GET \(target) HTTP/1.1\n\n")
        return client
    }

    @Test func refusesAddressesOutsideLoopback() {
        #expect(throws: LoopbackHTTPServerError.self) { try LoopbackHTTPServer(address: "10.0.0.1") }
        #expect(throws: LoopbackHTTPServerError.self) { try LoopbackHTTPServer(address: "localhost") }
    }

    @Test func bindsOtherLoopbackAddressesAndShutsDownCleanly() async throws {
        let server = try LoopbackHTTPServer(address: "127.0.0.2")
        #expect(server.baseURL.absoluteString == "http://127.0.0.2:\(server.port)")
        #expect(LoopbackSocket.connects(to: "127.0.0.2", port: server.port))
        let listeners = LoopbackSocket.listeners(on: "127.0.0.2", port: server.port)
        #expect(listeners.count == 1)
        // A connection stuck in a hung request is closed by the shutdown.
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        #expect(LoopbackSocket.connect(client, to: "127.0.0.2", port: server.port))
        let request = Array("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(send(client, request, request.count, 0) == request.count)
        #expect(await eventually { server.current == 1 })
        #expect(server.peak == 1 && server.total == 1)
        #expect(server.arrivals.map(\.target) == ["/hang"])
        let start = ContinuousClock.now
        server.shutdown()
        #expect(start.duration(to: .now) < .seconds(2))
        #expect(server.connectionCount == 0)
        var byte: UInt8 = 0
        #expect(recv(client, &byte, 1, 0) <= 0)   // closed by the server
        // The listener is gone, as the kernel lists sockets: not "a connection is refused" or "the
        // port can be bound again", which a loaded machine broke twice (another socket on the
        // freed port number, or a connection attempt that met itself there), and by its inode:
        // another test's server may listen on the freed port number since.
        #expect(LoopbackSocket.listeners(on: "127.0.0.2", port: server.port).isDisjoint(with: listeners))
        server.shutdown()   // again: nothing
    }

    // MARK: - Reading requests

    /// A server whose answer is the request's method, body length and body.
    static func echo() throws -> LoopbackHTTPServer {
        try LoopbackHTTPServer { request in
            .respond(status: 200, body: Array("\(request.method) \(request.body.count): ".utf8) + request.body)
        }
    }

    @Test func aChunkedBodyIsReadAndTheConnectionGoesOn() throws {
        let server = try Self.echo()
        defer { server.shutdown() }
        let client = try #require(RawHTTPClient(port: server.port))
        client.send("POST /upload HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n\n5;ext=1\nhello\n6\n world\n0\nX-Trailer: t\n\n")
        #expect(client.readResponse()?.text == "POST 11: hello world")
        client.send("GET /after HTTP/1.1\nHost: x\n\n")
        #expect(client.readResponse()?.text == "GET 0: ")
        #expect(server.arrivals.map(\.target) == ["/upload", "/after"])
    }

    @Test func aRequestAfterEmptyLinesIsAnswered() throws {
        let server = try LoopbackHTTPServer()
        defer { server.shutdown() }
        let client = try #require(RawHTTPClient(port: server.port))
        client.send("\nGET /?bytes=3 HTTP/1.1\nHost: x\n\n")
        #expect(client.readResponse()?.text == "xxx")
        client.send("\n\nGET /?bytes=1 HTTP/1.1\nHost: x\n\n")
        #expect(client.readResponse()?.text == "x")
    }

    @Test func anOverLongHeaderBlockGets431AndTheServerKeepsServing() throws {
        let server = try LoopbackHTTPServer()
        defer { server.shutdown() }
        for size in [HTTPRequestParser.defaultMaxHeadBytes + 1_000, 200_000] {
            let client = try #require(RawHTTPClient(port: server.port))
            client.send("GET / HTTP/1.1\nHost: x\nX-Big: \(String(repeating: "b", count: size))\n\n")
            let response = client.readResponse()
            #expect(response?.status == 431, "\(size) bytes: \(String(describing: response))")
            #expect(response?.headers["connection"] == "close")
            #expect(client.closedByServer())
        }
        let client = try #require(RawHTTPClient(port: server.port))
        client.send("GET /?bytes=2 HTTP/1.1\nHost: x\n" + String(repeating: "X-Filler: 0123456789012345678901234567890123456789\n", count: 500) + "\n")
        #expect(client.readResponse()?.text == "xx")   // 26 KB of header fields: within the limit
        #expect(server.total == 1)
    }

    @Test func aHeaderBlockSentOneByteAtATimeParses() throws {
        let server = try Self.echo()
        defer { server.shutdown() }
        let client = try #require(RawHTTPClient(port: server.port))
        var head = Array("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n".utf8)
        for index in 0..<300 { head += Array("X-Filler-\(index): 0123456789012345678901234567890123456789\r\n".utf8) }
        head += Array("\r\nbody".utf8)
        for byte in head { #expect(client.send([byte])) }
        let response = client.readResponse()
        #expect(response?.text == "POST 4: body", "\(String(describing: response))")
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        let server = try LoopbackHTTPServer()
        defer { server.shutdown() }
        let client = try #require(RawHTTPClient(port: server.port))
        client.send("GET /?bytes=1 HTTP/1.1\n\nGET /?bytes=2&delay=20 HTTP/1.1\n\nGET /?bytes=3 HTTP/1.1\nConnection: close\n\n")
        #expect(client.readResponse()?.text == "x")
        #expect(client.readResponse()?.text == "xx")
        let last = client.readResponse()
        #expect(last?.text == "xxx" && last?.headers["connection"] == "close")
        #expect(client.closedByServer())
    }

    @Test func aClientThatExpects100ContinueGetsItBeforeSendingTheBody() throws {
        let server = try Self.echo()
        defer { server.shutdown() }
        let client = try #require(RawHTTPClient(port: server.port))
        client.send("POST / HTTP/1.1\nHost: x\nExpect: 100-continue\nContent-Length: 3\n\n")
        #expect(!client.silent(for: .seconds(10)))   // the 100 Continue, without the body
        client.send("abc")
        #expect(client.readResponse()?.text == "POST 3: abc")
    }

    @Test func aHandlersReplyThatCannotBeSentGets500() throws {
        let server = try LoopbackHTTPServer { request in
            request.path == "/stream" ? .stream(chunks: 2, chunkSize: 0, interval: .zero)
                : .respond(status: 200, headers: ["X-Bad": "a\r\nb"])
        }
        defer { server.shutdown() }
        let client = try Self.connection(to: server, asking: "/stream")
        let stream = client.readResponse()
        #expect(stream?.status == 500 && stream?.text == "the handler's reply cannot be sent: chunkSize must be at least 1, got 0\n")
        client.send("GET / HTTP/1.1\n\n")
        #expect(client.readResponse()?.status == 500)
    }

    // MARK: - Threads

    @Test func anIdleKeepAliveConnectionMakesRoomForAWaitingOne() throws {
        let server = try LoopbackHTTPServer(maxConnections: 2)
        defer { server.shutdown() }
        var idle: [RawHTTPClient] = []
        for _ in 0..<2 {
            let client = try Self.connection(to: server, asking: "/?bytes=1")
            #expect(client.readResponse()?.text == "x")
            idle.append(client)   // kept alive, between requests
        }
        let waiting = try Self.connection(to: server, asking: "/?bytes=2")
        #expect(waiting.readResponse()?.text == "xx")
        // Exactly one idle connection was closed for it.
        let deadline = ContinuousClock.now + .seconds(10)
        var closed: [Bool] = []
        repeat {
            closed = idle.map { !$0.silent(for: .milliseconds(10)) }
        } while !closed.contains(true) && ContinuousClock.now < deadline
        #expect(closed.filter { $0 }.count == 1)
        #expect(server.connectionCount == 2 && server.total == 3)
    }

    @Test func aConnectionThatGoesIdleWhileAnotherWaitsMakesRoomForIt() throws {
        // The waiting connection arrives while the one served is still answering: the accept
        // thread waits for room before the answered connection goes idle, and must be woken then.
        let server = try LoopbackHTTPServer(maxConnections: 1)
        defer { server.shutdown() }
        var clients: [RawHTTPClient] = []
        for round in 0..<300 {
            let first = try Self.connection(to: server, asking: "/?bytes=1")
            #expect(first.readResponse()?.text == "x")
            let next = try Self.connection(to: server, asking: "/?bytes=2")
            let answer = next.readResponse(timeout: .seconds(5))?.text
            #expect(answer == "xx", "round \(round): the waiting connection was never served")
            clients = [first, next]   // keeps both open until the next round's are made
            guard answer == "xx" else { break }
        }
        _ = clients
    }

    @Test func connectionsBeyondTheBoundWaitToBeAcceptedUntilOneCloses() async throws {
        let server = try LoopbackHTTPServer(maxConnections: 2)
        defer { server.shutdown() }
        var hung: [RawHTTPClient] = []
        for _ in 0..<2 {
            let client = try Self.connection(to: server, asking: "/hang")
            hung.append(client)
        }
        #expect(await eventually { server.current == 2 })
        let waiting = try Self.connection(to: server, asking: "/?bytes=2")   // the kernel completes the handshake
        // Nothing signals "not accepted"; a while without an answer is the evidence.
        #expect(waiting.silent(for: .milliseconds(300)))
        #expect(server.connectionCount == 2 && server.total == 2)
        hung.removeFirst()   // closes one connection: its thread ends and the waiting one is accepted
        #expect(waiting.readResponse()?.text == "xx")
        #expect(server.connectionCount == 2)
    }
}

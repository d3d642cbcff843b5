import Testing
import LoopbackHTTPServer

/// The bytes the test server writes, as pure values: status lines, header blocks, chunks, and the
/// replies the server makes itself.
@Suite struct HTTPResponseBytesTests {
    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func aResponseHasItsStatusLineItsLengthAndItsFieldsInTheOrderOfTheirNames() {
        let bytes = HTTPResponseBytes.response(status: 200, headers: ["X-B": "2", "A": "1"], body: Array("ok".utf8), keepAlive: true)
        #expect(Self.text(bytes) == "HTTP/1.1 200 OK\r\nA: 1\r\nContent-Length: 2\r\nX-B: 2\r\n\r\nok")
    }

    @Test func aResponseOnAClosingConnectionSaysSoUnlessItsOwnFieldsSayHowTheConnectionEnds() {
        let closing = HTTPResponseBytes.response(status: 204, body: [], keepAlive: false)
        #expect(Self.text(closing) == "HTTP/1.1 204 No Content\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        let own = HTTPResponseBytes.response(status: 204, headers: ["connection": "keep-alive"], body: [], keepAlive: false)
        #expect(Self.text(own) == "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nconnection: keep-alive\r\n\r\n")
    }

    @Test func aStreamIsAChunkedHeadThenChunksOfOneLetterEachThenTheLastChunk() {
        #expect(Self.text(HTTPResponseBytes.streamHead(keepAlive: true))
            == "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        #expect(Self.text(HTTPResponseBytes.streamHead(keepAlive: false))
            == "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        #expect(Self.text(HTTPResponseBytes.chunk(0, size: 3)) == "3\r\naaa\r\n")
        #expect(Self.text(HTTPResponseBytes.chunk(27, size: 17)) == "11\r\n" + String(repeating: "b", count: 17) + "\r\n")
        #expect(Self.text(HTTPResponseBytes.lastChunk) == "0\r\n\r\n")
    }

    @Test(arguments: [(400, "Bad Request"), (413, "Content Too Large"), (414, "URI Too Long"),
                      (431, "Request Header Fields Too Large"), (500, "Internal Server Error"),
                      (501, "Not Implemented"), (505, "HTTP Version Not Supported")])
    func anErrorReplyCarriesItsStatusAndItsReasonAsAPlainTextBody(_ status: Int, _ phrase: String) {
        let error = HTTPRequestError(status: status, reason: "what is wrong")
        #expect(Self.text(HTTPResponseBytes.errorReply(error, keepAlive: false))
            == "HTTP/1.1 \(status) \(phrase)\r\nConnection: close\r\nContent-Length: 14\r\n"
            + "Content-Type: text/plain; charset=utf-8\r\n\r\nwhat is wrong\n")
    }

    @Test func theServersOwnRepliesAreTheirFixedBytes() {
        #expect(Self.text(HTTPResponseBytes.continueHead) == "HTTP/1.1 100 Continue\r\n\r\n")
        #expect(Self.text(HTTPResponseBytes.partialResponse) == "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial")
        #expect(!Self.text(HTTPResponseBytes.notHTTP).hasPrefix("HTTP/"))
        #expect(HTTPResponseBytes.reason(299) == "Status")
    }

    @Test func aConnectionFieldWithTheCloseOptionClosesTheConnection() {
        #expect(HTTPResponseBytes.closesConnection(["Connection": "Keep-Alive, Close"]))
        #expect(HTTPResponseBytes.closesConnection(["connection": "close"]))
        #expect(!HTTPResponseBytes.closesConnection(["Connection": "keep-alive"]))
        #expect(!HTTPResponseBytes.closesConnection(["X-Note": "close"]))
    }

    @Test(arguments: [
        (LoopbackHTTPServer.Reply.respond(status: 99), "status must be in 100...999, got 99"),
        (.respond(status: 1000), "status must be in 100...999, got 1000"),
        (.respond(status: 200, headers: ["": "x"]), "header name \"\" is not a token"),
        (.respond(status: 200, headers: ["a b": "x"]), "header name \"a b\" is not a token"),
        (.respond(status: 200, headers: ["a": "x\ny"]), "header a's value has a control character"),
        (.respond(status: 200, headers: ["a": "x\u{7F}"]), "header a's value has a control character"),
        (.respond(status: 200, headers: ["Content-Length": "5"]), "header Content-Length is the server's own: it frames the body itself"),
        (.respond(status: 200, headers: ["content-length": "5"]), "header content-length is the server's own: it frames the body itself"),
        (.respond(status: 200, headers: ["Transfer-Encoding": "chunked"]),
         "header Transfer-Encoding is the server's own: it frames the body itself"),
        (.respond(status: 200, headers: ["TRANSFER-encoding": "gzip"]), "header TRANSFER-encoding is the server's own: it frames the body itself"),
        (.stream(chunks: -1, interval: .zero), "chunks must not be negative, got -1"),
        (.stream(chunks: 1, chunkSize: 0, interval: .zero), "chunkSize must be at least 1, got 0"),
        (.respond(status: 200, delay: .milliseconds(-1)), "delay must not be negative, got -0.001 seconds"),
        (.stream(chunks: 1, interval: .seconds(-2)), "interval must not be negative, got -2.0 seconds"),
    ])
    func aReplyThatCannotBeSentAsHTTPIsNamed(_ reply: LoopbackHTTPServer.Reply, _ problem: String) {
        #expect(HTTPResponseBytes.problem(with: reply) == problem)
    }

    @Test(arguments: [
        LoopbackHTTPServer.Reply.respond(status: 100), .respond(status: 999, headers: ["A-b_c": "tab\tok"]),
        .respond(status: 200, delay: .zero), .stream(chunks: nil, interval: .zero), .stream(chunks: 0, chunkSize: 1, interval: .zero),
        .hang, .closeMidResponse, .malformed,
    ])
    func aReplyThatCanBeSentHasNoProblem(_ reply: LoopbackHTTPServer.Reply) {
        #expect(HTTPResponseBytes.problem(with: reply) == nil)
    }

    @Test(.exitTestOnOwnThreads) func aHeadGivenAFramingFieldStops() async {
        await #expect(processExitsWith: .failure) {
            _ = HTTPResponseBytes.head(status: 200, headers: ["content-length": "3"], contentLength: 3, keepAlive: true)
        }
    }

    @Test func theFramingFieldsAreKnownInAnyCase() {
        for name in ["Content-Length", "content-length", "CONTENT-LENGTH", "Transfer-Encoding", "transfer-encoding"] {
            #expect(HTTPResponseBytes.isFramingField(name), "\(name)")
        }
        for name in ["Content-Type", "Content-Length-X", "Connection", "TE"] {
            #expect(!HTTPResponseBytes.isFramingField(name), "\(name)")
        }
    }
}

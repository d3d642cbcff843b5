import Testing
@testable import LoopbackHTTPServer
import SeededRandom

/// The test server's request parser, target splitter and default routes, as pure values: every
/// request fed at every split point, a seeded fuzz loop, and the parser's work on slow clients.
@Suite struct HTTPRequestParserTests {
    typealias Message = HTTPRequestParser.Message

    /// What a parser made of some input: the requests it framed, then the error it stopped with
    /// (`nil`: the input ended between requests).
    struct Outcome: Equatable, CustomStringConvertible {
        var messages: [Message] = []
        var error: HTTPRequestError?
        var work = 0

        static func == (lhs: Outcome, rhs: Outcome) -> Bool { lhs.messages == rhs.messages && lhs.error == rhs.error }

        var description: String {
            "\(messages.map { "\($0.method) \($0.target) \($0.headers) \($0.body.count) bytes" }) then \(error.map(String.init(describing:)) ?? "end")"
        }
    }

    /// Feeds `bytes` in the pieces that `splits` (increasing offsets) cut, taking every request
    /// after each piece, then ends the input.
    static func parse(_ bytes: [UInt8], splits: [Int] = [], maxHeadBytes: Int = 256, maxBodyBytes: Int = 64) -> Outcome {
        var parser = HTTPRequestParser(maxHeadBytes: maxHeadBytes, maxBodyBytes: maxBodyBytes)
        var outcome = Outcome()
        var start = 0
        do {
            for end in splits + [bytes.count] {
                parser.append(bytes[start..<end])
                start = end
                while let message = try parser.next() { outcome.messages.append(message) }
            }
            try parser.finish()
        } catch {
            outcome.error = error
        }
        outcome.work = parser.work
        return outcome
    }

    /// `text` with `\n` as CR LF (write `\u{0A}` for a bare LF).
    static func crlf(_ text: String) -> [UInt8] { Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8) }

    struct Case: CustomStringConvertible, Sendable {
        let name: String
        let bytes: [UInt8]
        let expected: [Message]
        /// The status of the error the input ends with, `nil` if none.
        let status: Int?
        var description: String { name }
    }

    static let valid: [Case] = [
        Case(name: "a GET", bytes: crlf("GET / HTTP/1.1\nHost: x\n\n"),
             expected: [Message(method: "GET", target: "/", headers: ["host": "x"])], status: nil),
        Case(name: "a query and repeated fields",
             bytes: crlf("GET /stream?chunks=3&interval=5 HTTP/1.1\nHost: a\nAccept:  x \naccept:y\nX-Empty:\n\n"),
             expected: [Message(method: "GET", target: "/stream?chunks=3&interval=5",
                                headers: ["host": "a", "accept": "x, y", "x-empty": ""])], status: nil),
        Case(name: "a Content-Length body", bytes: crlf("POST /up HTTP/1.1\nContent-Length: 11\n\n") + Array("hello world".utf8),
             expected: [Message(method: "POST", target: "/up", headers: ["content-length": "11"], body: Array("hello world".utf8))],
             status: nil),
        Case(name: "a chunked body with extensions and trailers",
             bytes: crlf("POST /c HTTP/1.1\nTransfer-Encoding: chunked\n\n5;name=value\nhello\n6 ; x\n world\nA\n0123456789\n0\nX-Trailer: t\n\n"),
             expected: [Message(method: "POST", target: "/c", headers: ["transfer-encoding": "chunked"],
                                body: Array("hello world0123456789".utf8))], status: nil),
        Case(name: "three pipelined requests",
             bytes: crlf("GET /a HTTP/1.1\n\nPOST /b HTTP/1.1\nTransfer-Encoding: chunked\n\n2\nhi\n0\n\nGET /c HTTP/1.1\nConnection: close\n\n"),
             expected: [Message(method: "GET", target: "/a"),
                        Message(method: "POST", target: "/b", headers: ["transfer-encoding": "chunked"], body: Array("hi".utf8)),
                        Message(method: "GET", target: "/c", headers: ["connection": "close"], keepAlive: false)], status: nil),
        Case(name: "empty lines before the request line", bytes: crlf("\n\nGET / HTTP/1.1\n\n"),
             expected: [Message(method: "GET", target: "/")], status: nil),
        Case(name: "bare LF line ends and HTTP/1.0 keep-alive",
             bytes: Array("GET / HTTP/1.0\u{0A}Connection: Keep-Alive\u{0A}\u{0A}GET /x HTTP/1.0\u{0A}\u{0A}".utf8),
             expected: [Message(method: "GET", target: "/", version: "HTTP/1.0", headers: ["connection": "Keep-Alive"]),
                        Message(method: "GET", target: "/x", version: "HTTP/1.0", keepAlive: false)], status: nil),
        Case(name: "an absolute-form target and agreeing Content-Lengths",
             bytes: crlf("PUT http://127.0.0.1:8080/p?q=1 HTTP/1.1\nContent-Length: 2\nContent-Length: 2\n\nok"),
             expected: [Message(method: "PUT", target: "http://127.0.0.1:8080/p?q=1", headers: ["content-length": "2, 2"],
                                body: Array("ok".utf8))], status: nil),
        Case(name: "a request then one cut short", bytes: crlf("GET / HTTP/1.1\n\nGET /next HTTP/1.1\nHo"),
             expected: [Message(method: "GET", target: "/")], status: 400),
    ]

    static func bad(_ name: String, _ text: String, _ status: Int) -> Case {
        Case(name: name, bytes: crlf(text), expected: [], status: status)
    }

    static let invalid: [Case] = [
        bad("a negative Content-Length", "GET / HTTP/1.1\nContent-Length: -1\n\n", 400),
        bad("a Content-Length that is not a number", "POST / HTTP/1.1\nContent-Length: abc\n\n", 400),
        bad("a Content-Length with a sign", "POST / HTTP/1.1\nContent-Length: +5\n\nhello", 400),
        bad("disagreeing Content-Lengths", "POST / HTTP/1.1\nContent-Length: 1\nContent-Length: 2\n\nab", 400),
        bad("an empty Content-Length", "POST / HTTP/1.1\nContent-Length:\n\n", 400),
        bad("a Content-Length past any limit", "POST / HTTP/1.1\nContent-Length: 99999999999999999999999999\n\n", 413),
        bad("a Content-Length past the body limit", "POST / HTTP/1.1\nContent-Length: 65\n\n", 413),
        bad("Content-Length and Transfer-Encoding", "POST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\n\n", 400),
        bad("a coding before chunked", "POST / HTTP/1.1\nTransfer-Encoding: gzip, chunked\n\n0\n\n", 501),
        bad("a coding after chunked", "POST / HTTP/1.1\nTransfer-Encoding: chunked, gzip\n\n0\n\n", 400),
        bad("Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\nTransfer-Encoding: chunked\n\n0\n\n", 400),
        bad("a chunk size that is not hexadecimal", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\nzz\n\n", 400),
        bad("a negative chunk size", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n-1\n\n", 400),
        bad("a chunk size past any limit", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\nffffffffffffffffffffffff\n\n", 413),
        bad("chunks past the body limit", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n20\n\(String(repeating: "a", count: 32))\n21\n", 413),
        bad("chunk data too long for its size", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n5\nhelloX\n0\n\n", 400),
        bad("garbage after a chunk size", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n5 x\nhello\n0\n\n", 400),
        bad("a control character in a chunk extension", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n5;a=\u{01}\nhello\n0\n\n", 400),
        bad("a bad trailer field", "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n0\nno colon here\n\n", 400),
        bad("a request line without a version", "GET /\n\n", 400),
        bad("a request line with two spaces", "GET  / HTTP/1.1\n\n", 400),
        bad("a request line with a trailing space", "GET / HTTP/1.1 \n\n", 400),
        bad("a method that is not a token", "G(T / HTTP/1.1\n\n", 400),
        bad("an unknown protocol", "GET / HTTX/1.1\n\n", 400),
        bad("HTTP/2.0", "GET / HTTP/2.0\n\n", 505),
        bad("a tab in the request line", "GET /\t HTTP/1.1\n\n", 400),
        bad("a byte past ASCII in the target", "GET /caf\u{E9} HTTP/1.1\n\n", 400),
        bad("a bare CR in the request line", "GET /\r HTTP/1.1\n\n", 400),
        bad("a header line without a colon", "GET / HTTP/1.1\nHost x\n\n", 400),
        bad("a space before a header's colon", "GET / HTTP/1.1\nHost : x\n\n", 400),
        bad("an empty header name", "GET / HTTP/1.1\n: x\n\n", 400),
        bad("obsolete line folding", "GET / HTTP/1.1\nX-A: 1\n  2\n\n", 400),
        bad("a NUL in a header value", "GET / HTTP/1.1\nX-A: 1\u{00}2\n\n", 400),
        bad("a bare CR in a header value", "GET / HTTP/1.1\nX-A: 1\r2\n\n", 400),
        bad("a header block past its limit", "GET / HTTP/1.1\n" + String(repeating: "X-Filler: 0123456789\n", count: 12) + "\n", 431),
        bad("a request line past the head limit", "GET /\(String(repeating: "a", count: 300)) HTTP/1.1\n\n", 414),
        bad("a trailer section past its limit",
            "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n0\n" + String(repeating: "X-Filler: 0123456789\n", count: 13) + "\n", 431),
        bad("the input ending inside the head", "GET / HTTP/1.1\nHost: x\n", 400),
        bad("the input ending inside a body", "POST / HTTP/1.1\nContent-Length: 5\n\nhel", 400),
    ]

    @Test(arguments: valid + invalid)
    func everySplitGivesTheSameRequestsOrError(_ test: Case) {
        let whole = Self.parse(test.bytes)
        #expect(whole.messages == test.expected, "\(test.name): \(whole)")
        #expect(whole.error?.status == test.status, "\(test.name): \(whole)")
        for split in 0...test.bytes.count {
            let outcome = Self.parse(test.bytes, splits: [split])
            #expect(outcome == whole, "\(test.name), split at \(split): \(outcome), whole: \(whole)")
        }
        let byteByByte = Self.parse(test.bytes, splits: Array(0..<test.bytes.count))
        #expect(byteByByte == whole, "\(test.name), one byte at a time: \(byteByByte)")
        #expect(byteByByte.work <= 3 * test.bytes.count, "\(test.name): \(byteByByte.work) steps for \(test.bytes.count) bytes")
    }

    @Test func aFailedParserKeepsFailingWithTheSameError() {
        var parser = HTTPRequestParser()
        parser.append(Self.crlf("GET / HTTP/1.1\nContent-Length: -1\n\n"))
        #expect(throws: HTTPRequestError(status: 400, reason: "Content-Length is not a number of digits: -1")) { try parser.next() }
        parser.append(Self.crlf("GET / HTTP/1.1\n\n"))
        #expect(throws: HTTPRequestError(status: 400, reason: "Content-Length is not a number of digits: -1")) { try parser.next() }
        #expect(throws: HTTPRequestError.self) { try parser.finish() }
    }

    @Test func reportsAHeadReadWhileItsBodyIsPendingAsksToContinueAndWhenItIsBetweenRequests() throws {
        var parser = HTTPRequestParser()
        #expect(parser.isBetweenRequests)
        parser.append(Self.crlf("POST / HTTP/1.1\nExpect: 100-continue\nContent-Length: 3\n\n"))
        #expect(!parser.isReadingBody && !parser.isBetweenRequests)   // nothing is parsed before next()
        #expect(try parser.next() == nil)
        #expect(parser.isReadingBody && parser.expectsContinue && !parser.isBetweenRequests)
        parser.append(Array("abc\r\n".utf8))
        #expect(try parser.next()?.body == Array("abc".utf8))
        #expect(!parser.isReadingBody && !parser.expectsContinue && !parser.isBetweenRequests)   // an empty line not yet read
        #expect(try parser.next() == nil)
        #expect(parser.isBetweenRequests)
    }

    @Test func aHeaderBlockFedOneByteAtATimeCostsLinearWork() throws {
        var head = Self.crlf("GET /slow HTTP/1.1\nHost: x\n")
        while head.count < HTTPRequestParser.defaultMaxHeadBytes - 100 {
            head += Self.crlf("X-Filler-\(head.count): \(String(repeating: "v", count: 40))\n")
        }
        head += Self.crlf("\n")
        var parser = HTTPRequestParser()
        var messages: [Message] = []
        for byte in head {
            parser.append(CollectionOfOne(byte))
            if let message = try parser.next() { messages.append(message) }
        }
        #expect(messages.count == 1)
        #expect(messages.first?.headers.count ?? 0 > 500)
        // Rescanning the head after every byte would take about head.count² / 2 (about 5e8) steps.
        #expect(parser.work <= 3 * head.count, "\(parser.work) steps for \(head.count) bytes")
    }

    @Test func aHeaderBlockOverTheDefaultLimitGets431() {
        var parser = HTTPRequestParser()
        parser.append(Self.crlf("GET / HTTP/1.1\n"))
        parser.append(Self.crlf("X-Big: \(String(repeating: "b", count: HTTPRequestParser.defaultMaxHeadBytes))\n\n"))
        #expect(throws: HTTPRequestError(status: 431, reason: "the header block is longer than 32768 bytes")) { try parser.next() }
    }

    // MARK: - Fuzzing

    /// Bytes that matter to the parser, drawn more often than the rest.
    static let interesting = Array("\r\n:; -+0123456789abcdefABCDEF%?=&/GETPOSTHTTP/1.1chunkedContent-LengthTransfer-Encoding\t\u{0}\u{7F}".utf8) + [0xFF, 0xC3]

    static func mutate(_ input: [UInt8], using random: inout SplitMix64) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let at = Int.random(in: 0...bytes.count, using: &random)
            switch Int.random(in: 0..<7, using: &random) {
            case 0 where at < bytes.count: bytes[at] = UInt8.random(in: 0...255, using: &random)
            case 1: bytes.insert(interesting.randomElement(using: &random)!, at: at)
            case 2 where at < bytes.count: bytes.remove(at: at)
            case 3: bytes = Array(bytes[..<at])
            case 4: bytes.insert(contentsOf: Array(["-1", "\r\n", "%", "=", "99999999999999999999", "\r\n\r\n", "ff"]
                .randomElement(using: &random)!.utf8), at: at)
            case 5:
                let end = Int.random(in: at...bytes.count, using: &random)
                bytes.insert(contentsOf: bytes[at..<end], at: end)
            default: bytes[at...].reverse()
            }
        }
        return bytes
    }

    @Test func fuzzedInputAlwaysYieldsRequestsOrAnErrorTheSameWayWhateverTheSplit() {
        var random = SplitMix64(seed: 0x5EED_0019)
        let seeds = (Self.valid + Self.invalid).map(\.bytes) + [
            Self.crlf("GET /?a=1&b=%41&c HTTP/1.1\nHost: x\n\n"), Self.crlf("GET /?= HTTP/1.1\n\n"),
        ]
        var requests = 0, errors = 0
        for round in 0..<4_000 {
            let bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int.random(in: 0...120, using: &random)).map { _ in
                    Bool.random(using: &random) ? Self.interesting.randomElement(using: &random)! : UInt8.random(in: 0...255, using: &random)
                }
            } else {
                bytes = Self.mutate(seeds.randomElement(using: &random)!, using: &random)
            }
            let whole = Self.parse(bytes)
            let splits = (0..<2).map { _ in Int.random(in: 0...bytes.count, using: &random) }.sorted()
            let split = Self.parse(bytes, splits: splits)
            #expect(split == whole, "round \(round), splits \(splits): \(split) vs \(whole) for \(bytes)")
            let onlyLineEnds = bytes.allSatisfy { $0 == 0x0D || $0 == 0x0A }   // empty lines: nothing to answer
            #expect(!whole.messages.isEmpty || whole.error != nil || onlyLineEnds, "round \(round): nothing from \(bytes)")
            if let error = whole.error {
                #expect([400, 413, 414, 431, 501, 505].contains(error.status), "round \(round): \(error)")
            }
            #expect(whole.work <= 3 * bytes.count, "round \(round): \(whole.work) steps for \(bytes.count) bytes")
            for message in whole.messages {
                // The target splitter never traps either: a target or a 400.
                do {
                    _ = try HTTPRequestTarget(message.target)
                } catch {
                    #expect(error.status == 400)
                }
                _ = LoopbackHTTPServer.Reply.route(LoopbackHTTPServer.Request(path: "/", query: ["bytes": message.target]))
            }
            requests += whole.messages.count
            errors += whole.error == nil ? 0 : 1
        }
        // Both outcomes are exercised (exact for this seed).
        #expect(requests > 100 && errors > 1_000, "\(requests) requests, \(errors) errors")
    }

    // MARK: - Targets

    @Test func splitsTargetsIntoAPathAndDecodedParameters() throws {
        let target = try HTTPRequestTarget("/stream?chunks=3&name=a%20b%2Bc&flag&&plus=1+2")
        #expect(target.path == "/stream")
        #expect(target.query == ["chunks": "3", "name": "a b+c", "flag": "", "plus": "1+2"])
        #expect(target.pathAndQuery == "/stream?chunks=3&name=a%20b%2Bc&flag&&plus=1+2")
        let absolute = try HTTPRequestTarget("HTTP://127.0.0.1:80/p?q=%C3%A9")
        #expect(absolute.path == "/p" && absolute.query == ["q": "é"] && absolute.pathAndQuery == "/p?q=%C3%A9")
        #expect(try HTTPRequestTarget("https://host").path == "/")
        #expect(try HTTPRequestTarget("http://host?x=1").query == ["x": "1"])
        #expect(try HTTPRequestTarget("*").path == "*")
        #expect(try HTTPRequestTarget("/a%2Fb").path == "/a%2Fb")
    }

    @Test(arguments: ["/?=", "/?=x", "/?a=1&=2", "/?a=%", "/?a=%4", "/?a=%zz", "/%g0", "/?%FF=1", "/?a=%C3", "x", "ftp://h/", "http:/x"])
    func rejectsMalformedTargets(_ target: String) {
        #expect(throws: HTTPRequestError.self) { try HTTPRequestTarget(target) }
        do {
            _ = try HTTPRequestTarget(target)
        } catch {
            #expect(error.status == 400)
        }
    }

    // MARK: - Routes

    static func routeStatus(_ path: String, _ query: [String: String]) -> Int? {
        if case .respond(let status, _, _, _) = LoopbackHTTPServer.Reply.route(LoopbackHTTPServer.Request(path: path, query: query)) {
            return status
        }
        return nil
    }

    @Test(arguments: [
        ("/", ["bytes": "-1"]), ("/", ["bytes": ""]), ("/", ["bytes": "+1"]), ("/", ["bytes": "16777217"]),
        ("/", ["bytes": "99999999999999999999"]), ("/", ["status": "99"]), ("/", ["status": "600"]), ("/", ["delay": "-5"]),
        ("/", ["delay": "3600001"]), ("/", ["retry-after": "1\r\nX: y"]), ("/stream", ["size": "-1"]), ("/stream", ["size": "0"]),
        ("/stream", ["size": "1048577"]), ("/stream", ["chunks": "-1"]), ("/stream", ["interval": "x"]),
        ("/stream", ["interval": "9223372036854775807"]),
    ])
    func routesAnswerOutOfRangeParametersWith400(_ path: String, _ query: [String: String]) {
        #expect(Self.routeStatus(path, query) == 400)
    }

    @Test func routesKeepTheirAnswersForValidParameters() {
        guard case .respond(let status, let headers, let body, let delay) = LoopbackHTTPServer.Reply.route(
            LoopbackHTTPServer.Request(path: "/x", query: ["status": "503", "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT", "bytes": "0", "delay": "007"]))
        else { Issue.record("not a response"); return }
        #expect(status == 503 && headers == ["Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"] && body.isEmpty && delay == .milliseconds(7))
        guard case .stream(let chunks, let size, let interval) = LoopbackHTTPServer.Reply.route(
            LoopbackHTTPServer.Request(path: "/stream", query: ["chunks": "0", "size": "1"]))
        else { Issue.record("not a stream"); return }
        #expect(chunks == 0 && size == 1 && interval == .milliseconds(100))
        guard case .stream(nil, 16, .milliseconds(100)) = LoopbackHTTPServer.Reply.route(LoopbackHTTPServer.Request(path: "/stream"))
        else { Issue.record("not the default stream"); return }
        #expect(Self.routeStatus("/", [:]) == 200)
    }
}

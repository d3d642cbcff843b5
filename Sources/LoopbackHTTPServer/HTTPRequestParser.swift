/// An incremental HTTP/1.1 request parser: a pure value fed bytes in pieces of any size, which
/// frames the requests in them one after another (RFC 9112).
///
/// Feed it what a connection reads with ``append(_:)``, then take the complete requests with
/// ``next()`` until it returns `nil` (it needs more bytes). However the bytes are split between
/// calls, the requests and the error are the same; the parser keeps its place, so every byte is
/// examined a bounded number of times (``work`` counts them) and the cost is linear in the input.
/// At the end of the input, ``finish()`` says whether it ended inside a request.
///
/// What it accepts:
/// - Any number of empty lines before a request line (RFC 9112 §2.2), uncounted.
/// - Lines ended by CR LF or by a bare LF; a CR anywhere else is an error.
/// - A request line `method SP target SP version`, single spaces; the method a token, the target
///   visible ASCII, the version `HTTP/1.1` or `HTTP/1.0` (another `HTTP/d.d` gets 505).
/// - Header fields `name ":" OWS value OWS`: the name a token (no space before the colon, no
///   obsolete line folding), the value without control characters other than tab. Names are
///   lower-cased; repeated fields are joined with `", "`.
/// - A body framed by `Transfer-Encoding: chunked` (chunk extensions ignored, trailer fields
///   checked and dropped) or by `Content-Length` (digits only; repeats must agree); neither means
///   no body. Both at once, a coding list that does not end in `chunked`, or `Transfer-Encoding`
///   in HTTP/1.0 are errors (request smuggling); other codings before `chunked` get 501.
///
/// Its limits: the head (request line and header fields, with their line ends) at most
/// ``maxHeadBytes`` (a longer request line gets 414, a longer header block 431), the body at most
/// ``maxBodyBytes`` (413), a chunk-size line at most ``maxChunkLineBytes``, the trailer section at
/// most ``maxHeadBytes`` (431).
///
/// Once it throws, the parser stays failed: ``next()`` throws the same error again, since the
/// bytes after a framing error cannot be trusted to start a request.
///
/// **Arguments.** ``init(maxHeadBytes:maxBodyBytes:)``'s limits: `maxHeadBytes` at least 64 (the
/// smallest head that holds a request line and a `Host` field), `maxBodyBytes` zero or more (zero:
/// any body gets 413); `Int.max` for either limits nothing in practice. A value below those
/// cannot work: it stops with a precondition failure naming the call, the argument and the value
/// (ThreadKit's rule for every numeric argument).
public struct HTTPRequestParser: Sendable {
    /// A request framed by the parser, its target not yet interpreted (see ``HTTPRequestTarget``).
    public struct Message: Sendable, Equatable {
        /// The method, such as `GET`.
        public var method: String
        /// The request target as sent, such as `/stream?chunks=3`.
        public var target: String
        /// `HTTP/1.1` or `HTTP/1.0`.
        public var version = "HTTP/1.1"
        /// The header fields: names lower-cased, repeated fields joined with `", "`.
        public var headers: [String: String] = [:]
        /// The body, decoded from chunks if it was chunked.
        public var body: [UInt8] = []
        /// Whether the client keeps the connection open after the answer: HTTP/1.1 unless it sent
        /// `Connection: close`, HTTP/1.0 only if it sent `Connection: keep-alive`.
        public var keepAlive = true

        // Only the parser makes messages (the tests, with `@testable`, through the memberwise
        // initializer), so there is no public initializer to keep in step with the fields.

        /// The start of a request being read: nothing read yet.
        static var reading: Message { Message(method: "", target: "", version: "") }
    }

    /// The default bound of ``maxHeadBytes``: 32 KiB.
    public static let defaultMaxHeadBytes = 32 * 1024
    /// The default bound of ``maxBodyBytes``: 16 MiB.
    public static let defaultMaxBodyBytes = 16 * 1024 * 1024
    /// The longest chunk-size line (size, extensions and line end): 4 KiB.
    public static let maxChunkLineBytes = 4 * 1024

    /// The most bytes a request line and its header fields may take, line ends included.
    public let maxHeadBytes: Int
    /// The most bytes a body may take (decoded, if chunked).
    public let maxBodyBytes: Int

    /// How many times the parser has examined or copied a byte so far: a measure of its work,
    /// which stays within a small multiple of the bytes fed, however they were split.
    public internal(set) var work = 0

    enum Phase: Sendable {
        case requestLine
        case headers
        case body(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkEnd
        case trailers
        case failed(HTTPRequestError)
    }

    private enum Line {
        case line(Range<Int>)
        case needMore
        case tooLong
    }

    /// The bytes fed and not yet dropped; `buffer[position...]` is still to be consumed.
    private(set) var buffer: [UInt8] = []
    /// The first byte not yet consumed.
    private var position = 0
    /// Where the search for the current line's end goes on: `buffer[position..<scanned]` holds no LF.
    private var scanned = 0
    var phase = Phase.requestLine
    /// Bytes of the current head (or trailer section) consumed so far.
    private var sectionBytes = 0
    /// The request being read: its parts as far as they have been read.
    var request = Message.reading

    /// A parser with these limits.
    ///
    /// - Parameters:
    ///   - maxHeadBytes: The most bytes a request line and its header fields may take; at least 64.
    ///   - maxBodyBytes: The most bytes a body may take; zero or more.
    public init(maxHeadBytes: Int = defaultMaxHeadBytes, maxBodyBytes: Int = defaultMaxBodyBytes) {
        precondition(maxHeadBytes >= 64, "HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxHeadBytes must be at least 64, got \(maxHeadBytes)")
        precondition(maxBodyBytes >= 0, "HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxBodyBytes must not be negative, got \(maxBodyBytes)")
        self.maxHeadBytes = maxHeadBytes
        self.maxBodyBytes = maxBodyBytes
    }

    /// Adds bytes read from the connection.
    public mutating func append(_ bytes: some Sequence<UInt8>) {
        // Drop the consumed prefix once it is at least half the buffer: each byte is moved a
        // bounded number of times on average.
        if position > 0, position * 2 >= buffer.count {
            buffer.removeSubrange(0..<position)
            scanned -= position
            position = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Whether the bytes fed so far end between requests: after a whole request (or none) and at
    /// most empty lines, nothing of a next request.
    public var isBetweenRequests: Bool {
        guard case .requestLine = phase else { return false }
        return position == buffer.count
    }

    /// Whether the current request's head has been read and its body has not been read in full.
    public var isReadingBody: Bool {
        switch phase {
        case .body, .chunkSize, .chunkData, .chunkEnd, .trailers: true
        case .requestLine, .headers, .failed: false
        }
    }

    /// Whether the current request's head has been read, it asks for `Expect: 100-continue`
    /// (HTTP/1.1 only) and its body has not been read in full: the client waits for a
    /// `100 Continue` before it sends the body.
    public var expectsContinue: Bool {
        isReadingBody && request.version == "HTTP/1.1"
            && request.headers["expect"].map { $0.lowercased() == "100-continue" } == true
    }

    /// The next complete request in the bytes fed so far, or `nil` if it needs more bytes.
    ///
    /// - Throws: ``HTTPRequestError`` once the bytes cannot be a request; then on every call.
    public mutating func next() throws(HTTPRequestError) -> Message? {
        do {
            return try step()
        } catch {
            phase = .failed(error)
            throw error
        }
    }

    /// The input ended (the client closed the connection).
    ///
    /// - Throws: ``HTTPRequestError`` (400) if it ended inside a request, or the error the parser
    ///   failed with; nothing if it ended between requests.
    public mutating func finish() throws(HTTPRequestError) {
        if case .failed(let error) = phase { throw error }
        guard isBetweenRequests else {
            let error = HTTPRequestError.badRequest("the input ended inside a request")
            phase = .failed(error)
            throw error
        }
    }

    // MARK: - Steps

    private mutating func step() throws(HTTPRequestError) -> Message? {
        while true {
            switch phase {
            case .failed(let error):
                throw error
            case .requestLine:
                switch nextLine(limit: maxHeadBytes) {
                case .needMore: return nil
                case .tooLong:
                    throw HTTPRequestError(status: 414, reason: "the request line is longer than \(maxHeadBytes) bytes")
                case .line(let range):
                    if range.isEmpty { continue }   // an empty line before the request line
                    sectionBytes = position - range.lowerBound
                    try readRequestLine(range)
                    phase = .headers
                }
            case .headers:
                switch nextLine(limit: maxHeadBytes - sectionBytes) {
                case .needMore: return nil
                case .tooLong: throw headTooLarge
                case .line(let range):
                    sectionBytes += position - range.lowerBound
                    if range.isEmpty {
                        if let message = try startBody() { return message }
                    } else {
                        let (name, value) = try readField(range)
                        if request.headers[name] == nil {
                            request.headers[name] = value
                        } else {
                            request.headers[name, default: ""].append(", ")
                            request.headers[name, default: ""].append(value)
                        }
                    }
                }
            case .body(let remaining):
                let left = take(remaining)
                guard left == 0 else {
                    phase = .body(remaining: left)
                    return nil
                }
                return complete()
            case .chunkSize:
                switch nextLine(limit: Self.maxChunkLineBytes) {
                case .needMore: return nil
                case .tooLong: throw HTTPRequestError.badRequest("a chunk-size line is longer than \(Self.maxChunkLineBytes) bytes")
                case .line(let range):
                    let size = try readChunkSize(range)
                    if size == 0 {
                        sectionBytes = 0
                        phase = .trailers
                    } else {
                        phase = .chunkData(remaining: size)
                    }
                }
            case .chunkData(let remaining):
                let left = take(remaining)
                guard left == 0 else {
                    phase = .chunkData(remaining: left)
                    return nil
                }
                phase = .chunkEnd
            case .chunkEnd:
                switch nextLine(limit: 2) {
                case .needMore: return nil
                case .tooLong: throw HTTPRequestError.badRequest("a chunk's data is not followed by CR LF")
                case .line(let range):
                    guard range.isEmpty else { throw HTTPRequestError.badRequest("a chunk's data is not followed by CR LF") }
                    phase = .chunkSize
                }
            case .trailers:
                switch nextLine(limit: maxHeadBytes - sectionBytes) {
                case .needMore: return nil
                case .tooLong:
                    throw HTTPRequestError(status: 431, reason: "the trailer section is longer than \(maxHeadBytes) bytes")
                case .line(let range):
                    sectionBytes += position - range.lowerBound
                    if range.isEmpty { return complete() }
                    _ = try readField(range)   // trailer fields are checked, then dropped
                }
            }
        }
    }

    private var headTooLarge: HTTPRequestError {
        HTTPRequestError(status: 431, reason: "the header block is longer than \(maxHeadBytes) bytes")
    }

    /// The next line, without its line end; `limit` bounds its length with the line end.
    private mutating func nextLine(limit: Int) -> Line {
        // `limit` may be as large as the parser's own limits (`Int.max`): never add it to a position.
        let end = buffer.count - position > limit ? position + max(0, limit) : buffer.count
        var index = scanned
        while index < end {
            work += 1
            if buffer[index] == 0x0A {
                var lineEnd = index
                if lineEnd > position, buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                let line = position..<lineEnd
                position = index + 1
                scanned = position
                return .line(line)
            }
            index += 1
        }
        scanned = index
        return buffer.count - position > limit ? .tooLong : .needMore
    }

    /// Moves up to `count` body bytes into the body; returns how many are still to come.
    private mutating func take(_ count: Int) -> Int {
        let taken = min(count, buffer.count - position)
        request.body.append(contentsOf: buffer[position..<position + taken])
        work += taken
        position += taken
        scanned = position
        return count - taken
    }

    /// The request read in full; the parser goes on to the next.
    mutating func complete() -> Message {
        var message = Message.reading
        swap(&message, &request)
        let connection = message.headers["connection"].map(HTTPCharacters.tokens) ?? []
        message.keepAlive = message.version == "HTTP/1.1" ? !connection.contains("close") : connection.contains("keep-alive")
        phase = .requestLine
        sectionBytes = 0
        return message
    }
}

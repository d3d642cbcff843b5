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
public struct HTTPRequestParser: Sendable {
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
    public private(set) var work = 0

    private enum Phase: Sendable {
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

    private var buffer: [UInt8] = []
    /// The first byte not yet consumed.
    private var position = 0
    /// Where the search for the current line's end goes on: `buffer[position..<scanned]` holds no LF.
    private var scanned = 0
    private var phase = Phase.requestLine
    /// Bytes of the current head (or trailer section) consumed so far.
    private var sectionBytes = 0
    /// The request being read: its parts as far as they have been read.
    private var request = Message.reading

    /// A parser with these limits.
    ///
    /// - Parameters:
    ///   - maxHeadBytes: The most bytes a request line and its header fields may take; at least 64.
    ///   - maxBodyBytes: The most bytes a body may take; at least 0.
    public init(maxHeadBytes: Int = defaultMaxHeadBytes, maxBodyBytes: Int = defaultMaxBodyBytes) {
        precondition(maxHeadBytes >= 64, "HTTPRequestParser: maxHeadBytes must be at least 64, got \(maxHeadBytes)")
        precondition(maxBodyBytes >= 0, "HTTPRequestParser: maxBodyBytes must not be negative, got \(maxBodyBytes)")
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
    private mutating func complete() -> Message {
        var message = Message.reading
        swap(&message, &request)
        let connection = message.headers["connection"].map(HTTPCharacters.tokens) ?? []
        message.keepAlive = message.version == "HTTP/1.1" ? !connection.contains("close") : connection.contains("keep-alive")
        phase = .requestLine
        sectionBytes = 0
        return message
    }

    // MARK: - Reading the parts

    private mutating func readRequestLine(_ range: Range<Int>) throws(HTTPRequestError) {
        var spaces: [Int] = []
        for index in range {
            work += 1
            let byte = buffer[index]
            if byte == 0x20 {
                spaces.append(index)
                if spaces.count > 2 { break }
            } else if !(0x21...0x7E).contains(byte) {
                throw .badRequest("the request line has a byte that is not visible ASCII (\(byte))")
            }
        }
        guard spaces.count == 2 else {
            throw .badRequest("the request line is not `method SP target SP version`")
        }
        let methodBytes = buffer[range.lowerBound..<spaces[0]]
        let targetBytes = buffer[spaces[0] + 1..<spaces[1]]
        let versionBytes = buffer[spaces[1] + 1..<range.upperBound]
        guard !methodBytes.isEmpty, methodBytes.allSatisfy(HTTPCharacters.isTokenByte) else {
            throw .badRequest("the method is not a token")
        }
        guard !targetBytes.isEmpty else { throw .badRequest("the request target is empty") }
        let version = String(decoding: versionBytes, as: UTF8.self)
        switch version {
        case "HTTP/1.1", "HTTP/1.0":
            break
        default:
            let bytes = Array(versionBytes)
            let isDigit = { (byte: UInt8) in (0x30...0x39).contains(byte) }
            if bytes.count == 8, bytes[0..<5].elementsEqual("HTTP/".utf8), isDigit(bytes[5]), bytes[6] == 0x2E, isDigit(bytes[7]) {
                throw HTTPRequestError(status: 505, reason: "HTTP version \(version) is not supported")
            }
            throw .badRequest("the request line does not end in an HTTP version")
        }
        request.method = String(decoding: methodBytes, as: UTF8.self)
        request.target = String(decoding: targetBytes, as: UTF8.self)
        request.version = version
    }

    /// A header (or trailer) field's lower-cased name and value.
    private mutating func readField(_ range: Range<Int>) throws(HTTPRequestError) -> (String, String) {
        let first = buffer[range.lowerBound]
        if first == 0x20 || first == 0x09 {
            throw .badRequest("a header line starts with white space (obsolete line folding)")
        }
        var colon: Int?
        for index in range {
            work += 1
            let byte = buffer[index]
            if byte == 0x3A {
                colon = index
                break
            }
            guard HTTPCharacters.isTokenByte(byte) else {
                throw .badRequest("a header field name has a byte that is not a token character (\(byte))")
            }
        }
        guard let colon else { throw .badRequest("a header line has no colon") }
        guard colon > range.lowerBound else { throw .badRequest("a header field name is empty") }
        var start = colon + 1
        var end = range.upperBound
        for index in start..<end {
            work += 1
            let byte = buffer[index]
            guard HTTPCharacters.isFieldValueByte(byte) else {
                throw .badRequest("a header field value has a control character (\(byte))")
            }
        }
        while start < end, buffer[start] == 0x20 || buffer[start] == 0x09 { start += 1 }
        while end > start, buffer[end - 1] == 0x20 || buffer[end - 1] == 0x09 { end -= 1 }
        let name = String(decoding: buffer[range.lowerBound..<colon], as: UTF8.self).lowercased()
        return (name, String(decoding: buffer[start..<end], as: UTF8.self))
    }

    /// Decides the body's framing once the head is read; the message if it has no body.
    private mutating func startBody() throws(HTTPRequestError) -> Message? {
        if let codings = request.headers["transfer-encoding"] {
            guard request.version == "HTTP/1.1" else { throw .badRequest("Transfer-Encoding in an HTTP/1.0 request") }
            guard request.headers["content-length"] == nil else {
                throw .badRequest("both Transfer-Encoding and Content-Length")
            }
            let list = HTTPCharacters.tokens(codings)
            guard list.last == "chunked" else { throw .badRequest("Transfer-Encoding does not end in chunked: \(codings)") }
            guard list.count == 1 else {
                throw HTTPRequestError(status: 501, reason: "transfer coding not implemented: \(codings)")
            }
            phase = .chunkSize
            return nil
        }
        if let lengths = request.headers["content-length"] {
            var length: Int?
            for element in lengths.split(separator: ",", omittingEmptySubsequences: false) {
                let text = element.trimmingWhitespace
                let value = try Self.contentLength(text, limit: maxBodyBytes)
                guard length == nil || length == value else { throw .badRequest("Content-Length values disagree: \(lengths)") }
                length = value
            }
            if let length, length > 0 {
                phase = .body(remaining: length)
                return nil
            }
        }
        return complete()
    }

    private static func contentLength(_ text: Substring, limit: Int) throws(HTTPRequestError) -> Int {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw .badRequest("Content-Length is not a number of digits: \(text)")
        }
        var value = 0
        for byte in text.utf8 {
            value = try accumulate(value, digit: Int(byte - 0x30), base: 10, limit: limit)
        }
        return value
    }

    /// `value` with `digit` appended in `base`; a 413 once it exceeds `limit` (the body's room left,
    /// at most `bodyLimit`). Never overflows, however large the limits and however many digits.
    private static func accumulate(_ value: Int, digit: Int, base: Int, limit: Int,
                                   bodyLimit: Int? = nil) throws(HTTPRequestError) -> Int {
        let (shifted, overflowed) = value.multipliedReportingOverflow(by: base)
        guard !overflowed, shifted <= limit - digit else {
            throw HTTPRequestError(status: 413, reason: "the body is longer than \(bodyLimit ?? limit) bytes")
        }
        return shifted + digit
    }

    /// A chunk-size line's size, its extensions ignored.
    private mutating func readChunkSize(_ range: Range<Int>) throws(HTTPRequestError) -> Int {
        var size = 0
        var index = range.lowerBound
        while index < range.upperBound, let digit = HTTPCharacters.hexValue(buffer[index]) {
            work += 1
            size = try Self.accumulate(size, digit: digit, base: 16, limit: maxBodyBytes - request.body.count, bodyLimit: maxBodyBytes)
            index += 1
        }
        guard index > range.lowerBound else { throw .badRequest("a chunk size is not a hexadecimal number") }
        while index < range.upperBound, buffer[index] == 0x20 || buffer[index] == 0x09 {
            work += 1
            index += 1
        }
        guard index == range.upperBound || buffer[index] == 0x3B else {
            throw .badRequest("a chunk size is followed by something other than an extension")
        }
        while index < range.upperBound {
            work += 1
            let byte = buffer[index]
            guard HTTPCharacters.isFieldValueByte(byte) else {
                throw .badRequest("a chunk extension has a control character (\(byte))")
            }
            index += 1
        }
        return size
    }
}

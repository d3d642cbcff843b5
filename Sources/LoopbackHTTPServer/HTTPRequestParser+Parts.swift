extension HTTPRequestParser {
    // Reading the parts of a request, each found by the parser's steps as a range of its buffer:
    // the request line, a header or trailer field, the body's framing, a chunk-size line.

    /// The request line, `method SP request-target SP HTTP-version`: sets the request's method,
    /// target and version. A 400 for anything else, a 505 for a well-formed version other than 1.0 or 1.1.
    mutating func readRequestLine(_ range: Range<Int>) throws(HTTPRequestError) {
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
    mutating func readField(_ range: Range<Int>) throws(HTTPRequestError) -> (String, String) {
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
    mutating func startBody() throws(HTTPRequestError) -> Message? {
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
    mutating func readChunkSize(_ range: Range<Int>) throws(HTTPRequestError) -> Int {
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

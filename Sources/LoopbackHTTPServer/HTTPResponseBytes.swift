/// The bytes the server writes: status lines, header blocks, chunks, and the replies it makes
/// itself (`100 Continue`, the error replies to bad input, the 500 for a reply that cannot be sent).
///
/// Pure functions of their arguments: the connection thread decides when to write, this decides
/// what. Header fields are written in the order of their names, so equal replies are equal bytes.
package enum HTTPResponseBytes {
    /// The interim response to `Expect: 100-continue`.
    package static let continueHead = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    /// A response head: the status line, `Content-Length` (if the body has a length), the fields
    /// of `headers` by name, and `Connection: close` if the connection closes after it and
    /// `headers` does not say so itself.
    ///
    /// - Parameters:
    ///   - headers: No framing field (``framingFields``, in any case): the head writes its own.
    ///   - contentLength: The body's length; `nil` for a chunked body (`Transfer-Encoding: chunked`).
    ///   - keepAlive: Whether the client keeps the connection open after this response.
    package static func head(status: Int, headers: [String: String] = [:], contentLength: Int?, keepAlive: Bool) -> [UInt8] {
        if let framing = headers.keys.first(where: isFramingField) {
            preconditionFailure("HTTPResponseBytes.head: headers must not hold the framing field \(framing); the head writes its own")
        }
        var fields = headers
        if let contentLength {
            fields["Content-Length"] = String(contentLength)
        } else {
            fields["Transfer-Encoding"] = "chunked"
        }
        if !keepAlive, !fields.keys.contains(where: { $0.lowercased() == "connection" }) { fields["Connection"] = "close" }
        var text = "HTTP/1.1 \(status) \(reason(status))\r\n"
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// A whole response with `body`.
    package static func response(status: Int, headers: [String: String] = [:], body: [UInt8], keepAlive: Bool) -> [UInt8] {
        head(status: status, headers: headers, contentLength: body.count, keepAlive: keepAlive) + body
    }

    /// Whether a response with `headers` closes the connection after it (its `Connection` field
    /// has the `close` option).
    package static func closesConnection(_ headers: [String: String]) -> Bool {
        headers.contains { $0.key.lowercased() == "connection" && HTTPCharacters.tokens($0.value).contains("close") }
    }

    /// The head of a streamed (chunked) 200 response.
    package static func streamHead(keepAlive: Bool) -> [UInt8] {
        head(status: 200, headers: ["Content-Type": "application/octet-stream"], contentLength: nil, keepAlive: keepAlive)
    }

    /// The `index`th chunk of a stream (counting from 0): `size` bytes of one letter, `a` to `z`
    /// in turn.
    package static func chunk(_ index: Int, size: Int) -> [UInt8] {
        let payload = [UInt8](repeating: UInt8(ascii: "a") + UInt8(index % 26), count: size)
        return Array("\(String(size, radix: 16))\r\n".utf8) + payload + Array("\r\n".utf8)
    }

    /// The last chunk of a stream, with no trailer fields.
    package static let lastChunk = Array("0\r\n\r\n".utf8)

    /// A head that announces 1,000 bytes of body, and 7 of them (``LoopbackHTTPServer/Reply/closeMidResponse``).
    package static let partialResponse = Array("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial".utf8)

    /// Bytes that are not an HTTP response (``LoopbackHTTPServer/Reply/malformed``).
    package static let notHTTP = Array("THIS IS NOT HTTP AT ALL\r\n\r\n".utf8)

    /// The error reply for `error`: its status, and its reason as a plain-text body.
    package static func errorReply(_ error: HTTPRequestError, keepAlive: Bool) -> [UInt8] {
        response(status: error.status, headers: ["Content-Type": "text/plain; charset=utf-8"],
                 body: Array("\(error.reason)\n".utf8), keepAlive: keepAlive)
    }

    /// The fields that say where a body ends, in lower case: the server writes them itself, from
    /// the body it sends.
    package static let framingFields: Set<String> = ["content-length", "transfer-encoding"]

    /// Whether `name` is one of the ``framingFields``, in any case.
    package static func isFramingField(_ name: String) -> Bool { framingFields.contains(name.lowercased()) }

    /// Why a handler's `reply` cannot be sent as HTTP, or `nil` if it can.
    package static func problem(with reply: LoopbackHTTPServer.Reply) -> String? {
        switch reply {
        case .respond(let status, let headers, _, let delay):
            guard (100...999).contains(status) else { return "status must be in 100...999, got \(status)" }
            guard delay >= .zero else { return "delay must not be negative, got \(delay)" }
            for (name, value) in headers {
                guard !name.isEmpty, name.utf8.allSatisfy(HTTPCharacters.isTokenByte) else {
                    return "header name \"\(name)\" is not a token"
                }
                guard value.utf8.allSatisfy(HTTPCharacters.isFieldValueByte) else {
                    return "header \(name)'s value has a control character"
                }
                guard !isFramingField(name) else {
                    return "header \(name) is the server's own: it frames the body itself"
                }
            }
            return nil
        case .stream(let chunks, let chunkSize, let interval):
            if let chunks, chunks < 0 { return "chunks must not be negative, got \(chunks)" }
            guard chunkSize >= 1 else { return "chunkSize must be at least 1, got \(chunkSize)" }
            guard interval >= .zero else { return "interval must not be negative, got \(interval)" }
            return nil
        case .hang, .closeMidResponse, .malformed:
            return nil
        }
    }

    /// The reason phrase of `status`: the standard one for the statuses the server and its routes
    /// use, `Status` for any other (clients ignore it).
    package static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 204: "No Content"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status"
        }
    }
}

extension LoopbackHTTPServer.Reply {
    /// The most bytes `bytes=` may ask for: 16 MiB.
    public static let maxRouteBodyBytes = 16 * 1024 * 1024
    /// The largest chunk `size=` may ask for: 1 MiB.
    public static let maxRouteChunkSize = 1024 * 1024
    /// The longest `delay=` or `interval=`, in milliseconds: one hour.
    public static let maxRouteMilliseconds = 3_600_000

    /// The default answers, from the path and the query:
    ///
    /// - `/hang`: ``hang``;
    /// - `/stream?chunks=N&interval=MS&size=B`: ``stream(chunks:chunkSize:interval:)``
    ///   (no `chunks`: until the client closes; `interval` 100, `size` 16 by default);
    /// - `/close`: ``closeMidResponse``; `/malformed`: ``malformed``;
    /// - any other path: ``respond(status:headers:body:delay:)`` with `status` (200), after
    ///   `delay` milliseconds (0), a body of `bytes` bytes (2: "ok"), and a `Retry-After` header of
    ///   `retry-after` if given.
    ///
    /// Numbers are decimal digits only (no sign), within: `status` 100...599, `bytes`
    /// 0...``maxRouteBodyBytes``, `size` 1...``maxRouteChunkSize``, `chunks` 0 or more, `delay` and
    /// `interval` 0...``maxRouteMilliseconds``; `retry-after` has no control characters. A parameter
    /// outside its range or not a number (`/?bytes=-1`, `/stream?size=x`, an empty `delay=`) gets a
    /// 400 whose body names it, with `Connection: close`: the server closes the connection after it,
    /// as it does after every 400 for bad input.
    public static func route(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Reply {
        do {
            return try routeOrThrow(request)
        } catch {
            return .respond(status: error.status, headers: ["Content-Type": "text/plain; charset=utf-8", "Connection": "close"],
                            body: Array("\(error.reason)\n".utf8))
        }
    }

    private static func routeOrThrow(_ request: LoopbackHTTPServer.Request) throws(HTTPRequestError) -> LoopbackHTTPServer.Reply {
        func number(_ name: String, in range: ClosedRange<Int>) throws(HTTPRequestError) -> Int? {
            guard let text = request.query[name] else { return nil }
            guard let value = decimal(text), range.contains(value) else {
                throw .badRequest("query parameter \(name) must be a number in \(range.lowerBound)...\(range.upperBound), got \"\(text)\"")
            }
            return value
        }
        switch request.path {
        case "/hang":
            return .hang
        case "/stream":
            return .stream(chunks: try number("chunks", in: 0...Int.max),
                           chunkSize: try number("size", in: 1...maxRouteChunkSize) ?? 16,
                           interval: .milliseconds(try number("interval", in: 0...maxRouteMilliseconds) ?? 100))
        case "/close":
            return .closeMidResponse
        case "/malformed":
            return .malformed
        default:
            var headers: [String: String] = [:]
            if let retryAfter = request.query["retry-after"] {
                guard !retryAfter.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                    throw .badRequest("query parameter retry-after has a control character")
                }
                headers["Retry-After"] = retryAfter
            }
            let status = try number("status", in: 100...599) ?? 200
            let body = try number("bytes", in: 0...maxRouteBodyBytes).map { [UInt8](repeating: UInt8(ascii: "x"), count: $0) }
                ?? Array("ok".utf8)
            let delay = try number("delay", in: 0...maxRouteMilliseconds) ?? 0
            return .respond(status: status, headers: headers, body: body, delay: .milliseconds(delay))
        }
    }

    /// `text` as a decimal number of digits only, or `nil` (also when it does not fit an `Int`).
    static func decimal(_ text: String) -> Int? {
        guard !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard (0x30...0x39).contains(byte) else { return nil }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int(byte - 0x30))
            guard !overflow1, !overflow2 else { return nil }
            value = sum
        }
        return value
    }
}

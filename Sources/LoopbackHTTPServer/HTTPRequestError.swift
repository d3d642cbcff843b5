/// Why bytes from a client are not a request the server can serve, with the status of the error
/// reply that says so.
///
/// ``HTTPRequestParser`` throws it when the bytes cannot be framed as a request,
/// ``HTTPRequestTarget`` when a framed request's target is malformed, and
/// ``LoopbackHTTPServer/Reply/route(_:)`` answers with it when a query parameter is out of range.
/// ``LoopbackHTTPServer`` closes the connection after each of these error replies.
public struct HTTPRequestError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The status of the error reply: 400 (malformed), 413 (body too large), 414 (request line too
    /// long), 431 (header block too large), 501 (transfer coding not implemented) or 505 (HTTP
    /// version not supported).
    public let status: Int
    /// What is wrong, in a sentence; the error reply's body.
    public let reason: String

    /// An error with `status` and `reason`.
    public init(status: Int, reason: String) {
        self.status = status
        self.reason = reason
    }

    /// `"<status>: <reason>"`.
    public var description: String { "\(status): \(reason)" }

    static func badRequest(_ reason: String) -> HTTPRequestError { HTTPRequestError(status: 400, reason: reason) }
}

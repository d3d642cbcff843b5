extension HTTPRequestParser {
    /// A request framed by the parser, its target not yet interpreted (see ``HTTPRequestTarget``).
    public struct Message: Sendable, Equatable {
        /// The method, such as `GET`.
        public var method: String
        /// The request target as sent, such as `/stream?chunks=3`.
        public var target: String
        /// `HTTP/1.1` or `HTTP/1.0`.
        public var version: String
        /// The header fields: names lower-cased, repeated fields joined with `", "`.
        public var headers: [String: String]
        /// The body, decoded from chunks if it was chunked.
        public var body: [UInt8]
        /// Whether the client keeps the connection open after the answer: HTTP/1.1 unless it sent
        /// `Connection: close`, HTTP/1.0 only if it sent `Connection: keep-alive`.
        public var keepAlive: Bool

        /// A message with these parts.
        public init(method: String, target: String, version: String = "HTTP/1.1", headers: [String: String] = [:],
                    body: [UInt8] = [], keepAlive: Bool = true) {
            self.method = method
            self.target = target
            self.version = version
            self.headers = headers
            self.body = body
            self.keepAlive = keepAlive
        }

        /// The start of a request being read: nothing read yet.
        static var reading: Message { Message(method: "", target: "", version: "") }
    }
}

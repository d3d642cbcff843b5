import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A small HTTP/1.1 server on a loopback address, for ThreadKit's tests, demo and benchmark.
///
/// It binds an address of 127.0.0.0/8 on a free port, serves persistent (keep-alive) connections
/// with one thread each, and answers each request as its `handler` says: at once or after a delay,
/// never (hang), with a body streamed in chunks, with a 429/503 and `Retry-After`, by closing the
/// connection mid-response, or with bytes that are not HTTP. It counts the requests it is handling
/// at once (``current``, ``peak``) and records when each arrived (``arrivals``). ``shutdown()``
/// closes every socket and returns once every one of its threads has exited; until then its
/// threads keep the server alive, so call it when done.
///
/// Without a handler, ``Reply/route(_:)`` answers from the request's path and query; see there.
public final class LoopbackHTTPServer: @unchecked Sendable {
    // Sendable: `state` is only touched under `condition`'s lock; the rest is immutable.

    /// A request as the server received it.
    public struct Request: Sendable {
        /// `GET`, `POST`, …
        public let method: String
        /// The path, without the query.
        public let path: String
        /// The query's parameters.
        public let query: [String: String]
        /// The header fields, with lower-cased names.
        public let headers: [String: String]
        /// The body, if the request had one.
        public let body: [UInt8]
        /// When its head had been read.
        public let arrival: ContinuousClock.Instant
        /// How many requests the server was handling once this one arrived, this one included.
        public var concurrent: Int = 1
    }

    /// How the server answers one request.
    public enum Reply: Sendable {
        /// A whole response, after `delay`.
        case respond(status: Int, headers: [String: String] = [:], body: [UInt8] = [], delay: Duration = .zero)
        /// Never answer; the request counts as handled until the client closes the connection.
        case hang
        /// Status 200, then `chunks` chunks of `chunkSize` bytes with `interval` before each
        /// (chunked transfer encoding); `nil` chunks: stream until the client closes.
        case stream(chunks: Int?, chunkSize: Int = 16, interval: Duration)
        /// Send the head and part of the body that it announces, then close the connection.
        case closeMidResponse
        /// Send bytes that are not an HTTP response, then close the connection.
        case malformed

        /// The default answers, from the path and the query:
        ///
        /// - `/hang`: ``hang``;
        /// - `/stream?chunks=N&interval=MS&size=B`: ``stream(chunks:chunkSize:interval:)``
        ///   (no `chunks`: until the client closes);
        /// - `/close`: ``closeMidResponse``; `/malformed`: ``malformed``;
        /// - any other path: ``respond(status:headers:body:delay:)`` with `status` (200), after
        ///   `delay` milliseconds (0), a body of `bytes` bytes (2: "ok"), and a `Retry-After` header of
        ///   `retry-after` if given.
        public static func route(_ request: Request) -> Reply {
            func number(_ name: String) -> Int? { request.query[name].flatMap { Int($0) } }
            switch request.path {
            case "/hang":
                return .hang
            case "/stream":
                return .stream(chunks: number("chunks"), chunkSize: number("size") ?? 16,
                               interval: .milliseconds(number("interval") ?? 100))
            case "/close":
                return .closeMidResponse
            case "/malformed":
                return .malformed
            default:
                var headers: [String: String] = [:]
                if let retryAfter = request.query["retry-after"] { headers["Retry-After"] = retryAfter }
                let body = number("bytes").map { [UInt8](repeating: UInt8(ascii: "x"), count: $0) } ?? Array("ok".utf8)
                return .respond(status: number("status") ?? 200, headers: headers, body: body,
                                delay: .milliseconds(number("delay") ?? 0))
            }
        }
    }

    /// One request's arrival, as recorded.
    public struct Arrival: Sendable {
        /// When its head had been read.
        public let time: ContinuousClock.Instant
        /// Its path and query, as sent.
        public let target: String
    }

    private struct State {
        var stopping = false
        var threads = 0
        var connections: Set<Int32> = []
        var current = 0
        /// The connections whose request is counted in `current`.
        var counted: Set<Int32> = []
        var peak = 0
        var total = 0
        var arrivals: [Arrival] = []
    }

    /// The address it listens on, such as `127.0.0.1`.
    public let address: String
    /// The port it listens on, picked by the system.
    public let port: Int
    private let listener: Int32
    private let wakePipe: (read: Int32, write: Int32)
    private let handler: @Sendable (Request) -> Reply
    private let condition = NSCondition()
    private var state = State()

    /// Starts a server on `address` (in 127.0.0.0/8) and a free port.
    ///
    /// - Parameters:
    ///   - address: A loopback IPv4 address.
    ///   - handler: How to answer each request; by default ``Reply/route(_:)``.
    /// - Throws: ``LoopbackHTTPServerError`` if the address is not loopback or a socket call fails.
    public init(address: String = "127.0.0.1", handler: @escaping @Sendable (Request) -> Reply = Reply.route) throws {
        var inAddress = in_addr()
        guard inet_pton(AF_INET, address, &inAddress) == 1, address.hasPrefix("127.") else {
            throw LoopbackHTTPServerError.notLoopback(address)
        }
        signal(SIGPIPE, SIG_IGN)
        // Close-on-exec everywhere: a child process (an exit test, say) must not inherit the
        // listener, or the port would stay open after shutdown().
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)
        #endif
        guard fd >= 0 else { throw LoopbackHTTPServerError.socket("socket", errno) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_addr = inAddress
        socketAddress.sin_port = 0
        let bound = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 1024) == 0 else {
            let error = errno
            close(fd)
            throw LoopbackHTTPServerError.socket("bind/listen", error)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else {
            let error = errno
            close(fd)
            throw LoopbackHTTPServerError.socket("pipe", error)
        }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        self.address = address
        self.port = Int(UInt16(bigEndian: socketAddress.sin_port))
        self.listener = fd
        self.wakePipe = (pipeEnds[0], pipeEnds[1])
        self.handler = handler
        state.threads = 1
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "Loopback accept"
        thread.start()
    }

    /// `http://<address>:<port>`.
    public var baseURL: URL { URL(string: "http://\(address):\(port)")! }

    /// The URL of `pathAndQuery` (starting with `/`) on this server.
    public func url(_ pathAndQuery: String) -> URL { URL(string: "http://\(address):\(port)\(pathAndQuery)")! }

    /// Requests being handled now: head read, answer not yet sent in full (a hung one until the client closes).
    public var current: Int { withState { $0.current } }
    /// The most requests handled at once since the start or the last ``resetCounts()``.
    public var peak: Int { withState { $0.peak } }
    /// Requests received since the start or the last ``resetCounts()``.
    public var total: Int { withState { $0.total } }
    /// Open connections.
    public var connectionCount: Int { withState { $0.connections.count } }
    /// Every request's arrival since the start or the last ``resetCounts()``, in order.
    public var arrivals: [Arrival] { withState { $0.arrivals } }

    /// Sets ``peak`` to ``current``, ``total`` to 0 and forgets the arrivals.
    public func resetCounts() {
        withState {
            $0.peak = $0.current
            $0.total = 0
            $0.arrivals = []
        }
    }

    /// Stops accepting, closes every connection, and returns once every thread of the server has
    /// exited (or after 5 s, if a handler does not return). Calling it again does nothing.
    public func shutdown() {
        condition.lock()
        let first = !state.stopping
        state.stopping = true
        for connection in state.connections { _ = Glibc.shutdown(connection, Int32(SHUT_RDWR)) }
        condition.unlock()
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(wakePipe.write, &byte, 1)
        condition.lock()
        let deadline = Date().addingTimeInterval(5)
        while state.threads > 0, condition.wait(until: deadline) {}
        condition.unlock()
        close(listener)
        close(wakePipe.read)
        close(wakePipe.write)
    }

    private func withState<T>(_ body: (inout State) -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body(&state)
    }

    private func threadExited() {
        condition.lock()
        state.threads -= 1
        condition.broadcast()
        condition.unlock()
    }

    // MARK: - Accepting

    private func acceptLoop() {
        defer { threadExited() }
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 2, -1)
            if ready < 0, errno == EINTR { continue }
            if fds[1].revents != 0 || withState({ $0.stopping }) { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            var yes: Int32 = 1
            setsockopt(connection, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            let admitted = withState { state -> Bool in
                guard !state.stopping else { return false }
                state.connections.insert(connection)
                state.threads += 1
                return true
            }
            guard admitted else {
                close(connection)
                return
            }
            let thread = Thread { [self] in serve(connection) }
            thread.name = "Loopback conn"
            thread.start()
        }
    }

    // MARK: - Serving a connection

    private func serve(_ connection: Int32) {
        var reader = Reader(fd: connection)
        defer {
            withState {
                _ = $0.connections.remove(connection)
                if $0.counted.remove(connection) != nil { $0.current -= 1 }
            }
            close(connection)
            threadExited()
        }
        while var request = reader.readRequest() {
            request.concurrent = withState {
                Self.uncountClosed(&$0, except: connection)
                $0.current += 1
                $0.counted.insert(connection)
                $0.peak = max($0.peak, $0.current)
                $0.total += 1
                $0.arrivals.append(Arrival(time: request.arrival, target: request.path + reader.lastQuery))
                return $0.current
            }
            let reply = handler(request)
            // A request stops counting just before the last bytes of its answer go out: once the
            // client has them it may send its next request, which must not find this one counted.
            let finished = {
                self.withState { state in
                    if state.counted.remove(connection) != nil { state.current -= 1 }
                }
            }
            let keepOpen = answer(reply, on: connection, finished: finished)
            finished()
            if !keepOpen || withState({ $0.stopping }) { return }
        }
    }

    /// Stops counting the requests whose client has closed its connection, before a new request is
    /// counted: a client that gave up on a request (a timeout, a cancel) closes its connection before
    /// it sends the next one, but the thread serving the old one may not have noticed yet.
    private static func uncountClosed(_ state: inout State, except connection: Int32) {
        for other in state.counted where other != connection {
            var fds = [pollfd(fd: other, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, 0) > 0 else { continue }
            var closed = fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
            if !closed {
                var byte: UInt8 = 0
                closed = recv(other, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 0
            }
            if closed {
                state.counted.remove(other)
                state.current -= 1
            }
        }
    }

    /// Sends `reply`; returns whether the connection stays open for another request.
    private func answer(_ reply: Reply, on connection: Int32, finished: () -> Void) -> Bool {
        switch reply {
        case .respond(let status, let headers, let body, let delay):
            if delay > .zero, !sleep(delay, watching: connection) { return false }
            var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\nContent-Length: \(body.count)\r\n"
            for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
            head += "\r\n"
            finished()
            return send(Array(head.utf8) + body, on: connection)
        case .hang:
            while sleep(.milliseconds(100), watching: connection) {}
            return false
        case .stream(let chunks, let chunkSize, let interval):
            guard send(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\n\r\n".utf8), on: connection) else { return false }
            var sent = 0
            while chunks.map({ sent < $0 }) ?? true {
                guard sleep(interval, watching: connection) else { return false }
                let payload = [UInt8](repeating: UInt8(ascii: "a") + UInt8(sent % 26), count: chunkSize)
                guard send(Array("\(String(chunkSize, radix: 16))\r\n".utf8) + payload + Array("\r\n".utf8), on: connection) else { return false }
                sent += 1
            }
            finished()
            return send(Array("0\r\n\r\n".utf8), on: connection)
        case .closeMidResponse:
            finished()
            _ = send(Array("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial".utf8), on: connection)
            return false
        case .malformed:
            finished()   // the client may give up as soon as it reads these bytes
            _ = send(Array("THIS IS NOT HTTP AT ALL\r\n\r\n".utf8), on: connection)
            return false
        }
    }

    /// Waits `duration`; returns `false` early if the client closed the connection or the server stops.
    private func sleep(_ duration: Duration, watching connection: Int32) -> Bool {
        let end = ContinuousClock.now + duration
        while true {
            if withState({ $0.stopping }) { return false }
            let left = ContinuousClock.now.duration(to: end)
            if left <= .zero { return true }
            let slice = min(left, .milliseconds(50))
            let milliseconds = Int32(max(1, (slice.components.attoseconds / 1_000_000_000_000_000) + slice.components.seconds * 1000))
            var fds = [pollfd(fd: connection, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 1, milliseconds)
            if ready > 0 {
                if fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return false }
                var byte: UInt8 = 0
                let peeked = recv(connection, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
                if peeked == 0 { return false }
                if peeked > 0 { usleep(UInt32(milliseconds) * 1000) }
            }
        }
    }

    private func send(_ bytes: [UInt8], on connection: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0, errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 204: "No Content"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

/// Why a ``LoopbackHTTPServer`` could not start.
public enum LoopbackHTTPServerError: Error, CustomStringConvertible {
    /// The address is not an IPv4 address in 127.0.0.0/8.
    case notLoopback(String)
    /// A socket call failed with this `errno`.
    case socket(String, Int32)

    /// A readable description.
    public var description: String {
        switch self {
        case .notLoopback(let address): "LoopbackHTTPServer: \(address) is not an IPv4 address in 127.0.0.0/8"
        case .socket(let call, let error): "LoopbackHTTPServer: \(call) failed: \(String(cString: strerror(error)))"
        }
    }
}

/// Reads HTTP/1.1 requests from a connection, keeping what was read past the current one.
private struct Reader {
    let fd: Int32
    var buffer: [UInt8] = []
    var lastQuery = ""

    init(fd: Int32) { self.fd = fd }

    /// The next request, or `nil` once the connection is closed or sends something unreadable.
    mutating func readRequest() -> LoopbackHTTPServer.Request? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while true {
            if let found = Self.find(separator, in: buffer) {
                headEnd = found
                break
            }
            guard buffer.count < 65_536, fill() else { return nil }
        }
        guard let headEnd else { return nil }
        let arrival = ContinuousClock.now
        let head = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + separator.count)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = headers["content-length"].flatMap { Int($0) } ?? 0
        while buffer.count < length {
            guard fill() else { return nil }
        }
        let body = Array(buffer[..<length])
        buffer.removeFirst(length)
        let target = String(requestLine[1])
        let parts = target.split(separator: "?", maxSplits: 1)
        var query: [String: String] = [:]
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let keyValue = pair.split(separator: "=", maxSplits: 1)
                query[String(keyValue[0])] = keyValue.count == 2 ? String(keyValue[1]) : ""
            }
        }
        lastQuery = parts.count == 2 ? "?" + parts[1] : ""
        return LoopbackHTTPServer.Request(method: String(requestLine[0]), path: String(parts.first ?? "/"), query: query,
                                          headers: headers, body: body, arrival: arrival)
    }

    private mutating func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            buffer += chunk[..<count]
            return true
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<start + needle.count]) == needle { return start }
        }
        return nil
    }
}

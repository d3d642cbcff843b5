import Foundation
internal import ThreadLaunch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A small HTTP/1.1 server on a loopback address, for ThreadKit's tests, demo and benchmark.
///
/// It binds an address of 127.0.0.0/8 on a free port, serves persistent (keep-alive) connections,
/// and answers each request as its `handler` says: at once or after a delay, never (hang), with a
/// body streamed in chunks, with a 429/503 and `Retry-After`, by closing the connection
/// mid-response, or with bytes that are not HTTP. It counts the requests it is handling at once
/// (``current``, ``peak``) and records when each arrived (``arrivals``). ``shutdown()`` closes
/// every socket and returns once every one of its threads has exited; until then its threads keep
/// the server alive, so call it when done.
///
/// Without a handler, ``Reply/route(_:)`` answers from the request's path and query; see there.
///
/// **Reading requests.** Each connection's bytes go through an ``HTTPRequestParser`` (see there
/// for what it accepts and its limits: a 32 KiB head, a 16 MiB body), so requests may come in
/// pieces of any size, pipelined, after empty lines, with a `Content-Length` or a chunked body.
/// A client that sends `Expect: 100-continue` gets `100 Continue` once the head is read.
/// Bytes that cannot be a request get an error reply from the server itself (400, 413, 414, 431,
/// 501 or 505, with `Connection: close` and the reason as the body); the server then closes that
/// connection, after reading what the client still sends until it goes quiet for 250 ms (2 s at
/// most), so that the reply is not lost to a reset. A framed request whose target is malformed (see ``HTTPRequestTarget``)
/// gets a 400 with `Connection: close` too. Neither reaches the handler or the counts. Nothing a
/// client sends can stop the server or the process; every other connection is served as before.
/// A request with `Connection: close` (or an HTTP/1.0 one without `Connection: keep-alive`) is
/// answered with `Connection: close`, and the server closes the connection after the answer; so
/// it does after a reply whose own headers say `Connection: close` (as ``Reply/route(_:)``'s 400s do).
///
/// **Threads.** One thread accepts; each open connection is served by a thread of its own, at
/// most ``maxConnections`` at once (256 by default). When that many are open and another one
/// waits, the server closes an idle keep-alive connection (one that waits for a next request the
/// client has not begun; a client reopens it when it needs it) to make room. If none is idle, it
/// accepts nothing until a connection closes: a new connection waits in the listening socket's
/// backlog (1,024), its request unanswered but not refused. If `accept` fails for want of resources (`EMFILE`,
/// `ENFILE`, `ENOBUFS`, `ENOMEM`, or any error that is not transient), the accept thread writes
/// one line to standard error and tries again every 100 ms, instead of spinning; the waiting
/// connection is accepted once a descriptor is free. Likewise, if the system refuses a
/// connection's thread (`pthread_create` fails), the accept thread writes one line and tries again
/// every 100 ms, the connection held open: its request is answered once a thread can start.
///
/// **Arguments.** A `maxConnections` below 1 cannot work: it stops with a precondition failure naming
/// it and the value. Any larger one works; `Int.max` is no limit in practice.
public final class LoopbackHTTPServer: @unchecked Sendable {
    // Sendable: `state` is only touched under `condition`'s lock; the rest is immutable.

    /// A request as the server received it.
    public struct Request: Sendable {
        /// `GET`, `POST`, …
        public let method: String
        /// The path, without the query, as sent (percent-escapes kept).
        public let path: String
        /// The query's parameters, percent-decoded.
        public let query: [String: String]
        /// The header fields, with lower-cased names (repeated fields joined with `", "`).
        public let headers: [String: String]
        /// The body, if the request had one (decoded, if it was chunked).
        public let body: [UInt8]
        /// When its head had been read.
        public let arrival: ContinuousClock.Instant
        /// How many requests the server was handling once this one arrived, this one included.
        public var concurrent: Int = 1

        /// A request with these parts, as the server would pass it to a handler (for testing one).
        public init(method: String = "GET", path: String, query: [String: String] = [:], headers: [String: String] = [:],
                    body: [UInt8] = [], arrival: ContinuousClock.Instant = .now, concurrent: Int = 1) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
            self.body = body
            self.arrival = arrival
            self.concurrent = concurrent
        }
    }

    /// How the server answers one request.
    ///
    /// A reply that cannot be sent as HTTP (a status outside 100...999, a header name that is not
    /// a token or a header value with a control character, a `Content-Length` or
    /// `Transfer-Encoding` header in any case, which the server writes itself from the body, a
    /// chunk size below 1, a negative chunk count, a negative delay or interval) is answered with
    /// a 500 naming the problem and its value instead: a handler's mistake fails its request, not
    /// the process, as a thrown error would (ThreadKit's rule for a value that cannot work; a
    /// negative duration means "now" only for a pause or a `Retry-After` date). A zero delay or
    /// interval sends at once; one beyond a year counts as a year.
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
    }

    /// One request's arrival, as recorded.
    public struct Arrival: Sendable {
        /// When its head had been read.
        public let time: ContinuousClock.Instant
        /// Its path and query, as sent.
        public let target: String
    }

    struct State {
        var stopping = false
        /// The accept thread and the connection threads alive.
        var threads = 0
        /// The connections being served, one thread each.
        var connections: Set<Int32> = []
        /// The connections whose thread waits for a next request that the client has not begun.
        var idle: Set<Int32> = []
        /// The idle connections closed to make room, whose thread has not yet left.
        var closingForRoom: Set<Int32> = []
        var current = 0
        /// The connections whose request is counted in `current`.
        var counted: Set<Int32> = []
        var peak = 0
        var total = 0
        var arrivals: [Arrival] = []
    }

    /// The default of ``maxConnections``.
    public static let defaultMaxConnections = 256

    /// The address it listens on, such as `127.0.0.1`.
    public let address: String
    /// The port it listens on, picked by the system.
    public let port: Int
    /// The most connections served at once, one thread each; more wait to be accepted.
    public let maxConnections: Int
    let listener: Int32
    let wakePipe: (read: Int32, write: Int32)
    let handler: @Sendable (Request) -> Reply
    let condition = NSCondition()
    var state = State()

    /// Starts a server on `address` (in 127.0.0.0/8) and a free port.
    ///
    /// - Parameters:
    ///   - address: A loopback IPv4 address.
    ///   - maxConnections: The most connections served at once (one thread each); at least 1.
    ///     Beyond it, new connections wait to be accepted until one closes.
    ///   - handler: How to answer each request; by default ``Reply/route(_:)``.
    /// - Throws: ``LoopbackHTTPServerError`` if the address is not loopback or a socket call fails.
    public init(address: String = "127.0.0.1", maxConnections: Int = defaultMaxConnections,
                handler: @escaping @Sendable (Request) -> Reply = Reply.route) throws {
        precondition(maxConnections >= 1, "LoopbackHTTPServer.init(maxConnections:): maxConnections must be at least 1, got \(maxConnections)")
        var inAddress = in_addr()
        guard inet_pton(AF_INET, address, &inAddress) == 1, address.hasPrefix("127.") else {
            throw LoopbackHTTPServerError.notLoopback(address)
        }
        signal(SIGPIPE, SIG_IGN)
        // Close-on-exec everywhere: a child process (an exit test, say) must not inherit the
        // listener, or the port would stay open after shutdown(). Non-blocking: a connection
        // reset between poll and accept must not block the accept thread.
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)
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
        self.maxConnections = maxConnections
        self.listener = fd
        self.wakePipe = (pipeEnds[0], pipeEnds[1])
        self.handler = handler
        state.threads = 1
        let refused = Self.startThread(named: "Loopback accept") { [self] in acceptLoop() }
        guard refused == 0 else {
            for descriptor in [fd, pipeEnds[0], pipeEnds[1]] { close(descriptor) }
            throw LoopbackHTTPServerError.threadStart(refused)
        }
    }

    /// `http://<address>:<port>`.
    public var baseURL: URL { URL(string: "http://\(address):\(port)")! }

    /// The URL of `pathAndQuery` (starting with `/`) on this server.
    public func url(_ pathAndQuery: String) -> URL { URL(string: "http://\(address):\(port)\(pathAndQuery)")! }

    /// Requests being handled now: head read, answer not yet sent in full (a hung one until the client closes).
    public var current: Int { withState { $0.current } }
    /// The most requests handled at once since the start or the last ``resetCounts()``.
    public var peak: Int { withState { $0.peak } }
    /// Requests received since the start or the last ``resetCounts()`` (those the server rejected
    /// as malformed are not counted).
    public var total: Int { withState { $0.total } }
    /// Open connections being served (not those waiting to be accepted beyond ``maxConnections``).
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
        condition.broadcast()   // the accept thread may wait for a free connection slot
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

    func withState<T>(_ body: (inout State) -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body(&state)
    }

    /// Starts a detached thread that runs `body`, named `name` (at most 15 bytes: the kernel's
    /// limit) so that `top -H`, a debugger or a test reading `/proc` sees it.
    ///
    /// - Returns: 0, or `pthread_create`'s error if the system refused the thread (`body` is then
    ///   released unrun).
    static func startThread(named name: String, _ body: @escaping @Sendable () -> Void) -> Int32 {
        PThread.startDetached {
            PThread.setKernelName(name)
            body()
        }
    }

    func threadExited() {
        condition.lock()
        state.threads -= 1
        condition.broadcast()
        condition.unlock()
    }
}

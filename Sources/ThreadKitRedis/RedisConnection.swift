#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One open, non-blocking socket to a Redis server: connecting with a deadline (resolving the host
/// name first, within the same deadline), writing what the socket takes, reading what has come.
///
/// Only the connection's own thread uses it; the socket is closed when that thread lets it go.
final class RedisConnection: Sendable {
    let descriptor: Int32

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Connects to `address`, giving up at `deadline`: resolving a host name (with `resolver`, or
    /// the system's resolver when it is `nil`) counts against it too.
    ///
    /// - Throws: ``RedisError/connectionRefused(address:reason:)`` when the server cannot be reached,
    ///   ``RedisError/timedOut(after:sent:)`` (not sent) when resolving and connecting take past the deadline.
    static func open(
        _ address: RedisClient.Address, deadline: ContinuousClock.Instant, timeout: Duration, resolver: HostLookup.Resolver? = nil
    ) throws(RedisError) -> RedisConnection {
        switch address {
        case .unixSocket(let path):
            var socketAddress = sockaddr_un()
            socketAddress.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: socketAddress.sun_path)
            let bytes = Array(path.utf8)
            guard bytes.count < capacity else {
                throw .connectionRefused(address: address.description, reason: "the socket path is longer than \(capacity - 1) bytes")
            }
            withUnsafeMutableBytes(of: &socketAddress.sun_path) { $0.copyBytes(from: bytes) }
            return try withUnsafeBytes(of: &socketAddress) { raw throws(RedisError) in
                try connectSocket(family: AF_UNIX, raw, length: socklen_t(MemoryLayout<sockaddr_un>.size), address, deadline, timeout)
            }
        case .tcp(let host, let port):
            let addresses: [HostLookup.Address]
            do {
                let resolver = resolver ?? HostLookup.Resolver(host: host, port: port, lookup: HostLookup.system)
                addresses = try resolver.resolve(until: deadline).get()
            } catch HostLookup.Failure.pastDeadline {
                throw .timedOut(after: timeout, sent: false)
            } catch {
                throw .connectionRefused(address: address.description, reason: error.reason)
            }
            var lastError = RedisError.connectionRefused(address: address.description, reason: "no address for the host")
            for resolved in addresses {
                let connected = resolved.bytes.withUnsafeBytes { raw in
                    Result { () throws(RedisError) in
                        try connectSocket(family: resolved.family, raw, length: socklen_t(raw.count), address, deadline, timeout)
                    }
                }
                switch connected {
                case .success(let connection):
                    var on: Int32 = 1
                    setsockopt(connection.descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
                    return connection
                case .failure(let error):
                    lastError = error
                }
            }
            throw lastError
        }
    }

    /// A non-blocking connect, waited out with `poll` until `deadline`; the socket stays non-blocking
    /// (the connection's thread waits for it with `poll`).
    private static func connectSocket(
        family: Int32, _ socketAddress: UnsafeRawBufferPointer, length: socklen_t,
        _ address: RedisClient.Address, _ deadline: ContinuousClock.Instant, _ timeout: Duration
    ) throws(RedisError) -> RedisConnection {
        #if canImport(Darwin)
        let descriptor = socket(family, SOCK_STREAM, 0)
        #else
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #endif
        guard descriptor >= 0 else { throw .connectionRefused(address: address.description, reason: Self.describe(errno)) }
        let connection = RedisConnection(descriptor: descriptor)
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
        let pointer = socketAddress.baseAddress!.assumingMemoryBound(to: sockaddr.self)
        var result: Int32
        repeat { result = connect(descriptor, pointer, length) } while result != 0 && errno == EINTR
        if result != 0 {
            let error = errno
            // EINPROGRESS: a TCP handshake under way. (A Unix socket whose backlog is full answers
            // EAGAIN instead, and cannot be waited for: refused.)
            guard error == EINPROGRESS else { throw .connectionRefused(address: address.description, reason: Self.describe(error)) }
            try connection.awaitWritable(until: deadline, timeout: timeout, address)
            var pending: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &pending, &size)
            guard pending == 0 else { throw .connectionRefused(address: address.description, reason: Self.describe(pending)) }
        }
        return connection
    }

    private func awaitWritable(until deadline: ContinuousClock.Instant, timeout: Duration, _ address: RedisClient.Address) throws(RedisError) {
        while true {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { throw .timedOut(after: timeout, sent: false) }
            var entry = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
            let ready = poll(&entry, 1, Self.pollMilliseconds(remaining))
            if ready > 0 { return }
            if ready < 0, errno != EINTR { throw .connectionRefused(address: address.description, reason: Self.describe(errno)) }
        }
    }

    /// `remaining` as `poll`'s timeout: whole milliseconds rounded up, saturated to `Int32.max`
    /// (about 24 days: a longer wait is cut there and the caller waits again); `-1` (no limit) for `nil`.
    static func pollMilliseconds(_ remaining: Duration?) -> Int32 {
        guard let remaining else { return -1 }
        guard remaining > .zero else { return 0 }
        let (seconds, attoseconds) = remaining.components
        guard seconds < Int64(Int32.max) / 1000 else { return Int32.max }
        return Int32(seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }

    /// What a write or a read on the non-blocking socket did.
    enum Transfer: Equatable {
        /// This many bytes went (more than zero).
        case done(Int)
        /// Nothing can go now: wait for `poll`.
        case wouldBlock
        /// The connection is over: why.
        case ended(String)
    }

    /// Writes what the socket takes now of `bytes`, never raising `SIGPIPE`.
    func write(_ bytes: ArraySlice<UInt8>) -> Transfer {
        while true {
            let written = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written > 0 { return .done(written) }
            if written < 0, errno == EINTR { continue }
            if written < 0, errno == EAGAIN || errno == EWOULDBLOCK { return .wouldBlock }
            return .ended(written < 0 ? "writing failed: \(Self.describe(errno))" : "writing failed")
        }
    }

    /// Reads what has come into `buffer`.
    func read(into buffer: inout [UInt8]) -> Transfer {
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 { return .done(count) }
            if count == 0 { return .ended("the server closed the connection") }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return .wouldBlock }
            return .ended("reading failed: \(Self.describe(errno))")
        }
    }

    static func describe(_ error: Int32) -> String {
        String(cString: strerror(error))
    }
}

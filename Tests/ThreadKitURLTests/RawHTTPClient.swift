import Foundation
import LoopbackHTTPServer
#if canImport(Glibc)
import Glibc
#endif

/// A client connection to a loopback server that sends raw bytes and reads raw responses, every
/// wait bounded: for testing what the server does with bytes no HTTP client library would send.
final class RawHTTPClient {
    /// A response as read: its status, header fields (lower-cased names) and body.
    struct Response: CustomStringConvertible {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        var description: String { "\(status) \(headers) \(text)" }
    }

    let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to `address:port`; `nil` if the connection is refused.
    init?(port: Int, address: String = "127.0.0.1") {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0, LoopbackSocket.connect(fd, to: address, port: port) else {
            close(fd)
            return nil
        }
        var yes: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close(fd) }

    /// Sends `bytes` in full; returns whether it could.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        Socket.sendAll(bytes, on: fd)
    }

    /// Sends `text` with every `\n` as CR LF.
    @discardableResult
    func send(_ text: String) -> Bool { send(Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)) }

    /// Reads more bytes into the buffer; `false` once the server closed or `deadline` passed.
    private func fill(until deadline: ContinuousClock.Instant) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return false }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            let milliseconds = Int32(max(1, min(1000, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
            guard poll(&fds, 1, milliseconds) > 0 else { continue }
            let count = recv(fd, &chunk, chunk.count, 0)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            buffer += chunk[..<count]
            return true
        }
    }

    /// The next line of the buffer, without its CR LF.
    private func line(until deadline: ContinuousClock.Instant) -> String? {
        while true {
            if let end = buffer.firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 1)
                return line.hasSuffix("\r") ? String(line.dropLast()) : line
            }
            guard fill(until: deadline) else { return nil }
        }
    }

    private func bytes(_ count: Int, until deadline: ContinuousClock.Instant) -> [UInt8]? {
        while buffer.count < count {
            guard fill(until: deadline) else { return nil }
        }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    /// Reads the next final (non-1xx) response, with a Content-Length, chunked or close-delimited
    /// body; `nil` if the server closes first, sends something else, or `timeout` passes.
    func readResponse(timeout: Duration = .seconds(10)) -> Response? {
        let deadline = ContinuousClock.now + timeout
        while true {
            guard let statusLine = line(until: deadline) else { return nil }
            let parts = statusLine.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else { return nil }
            var headers: [String: String] = [:]
            while true {
                guard let field = line(until: deadline) else { return nil }
                if field.isEmpty { break }
                guard let colon = field.firstIndex(of: ":") else { return nil }
                headers[field[..<colon].lowercased()] = field[field.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            if status < 200 { continue }
            var body: [UInt8] = []
            if headers["transfer-encoding"] == "chunked" {
                while true {
                    guard let sizeLine = line(until: deadline), let size = Int(sizeLine, radix: 16),
                          let chunk = bytes(size, until: deadline), line(until: deadline) == "" else { return nil }
                    if size == 0 { break }
                    body += chunk
                }
            } else if let length = headers["content-length"].flatMap({ Int($0) }) {
                guard let read = bytes(length, until: deadline) else { return nil }
                body = read
            } else {
                while fill(until: deadline) {}
                body = buffer
                buffer = []
            }
            return Response(status: status, headers: headers, body: body)
        }
    }

    /// Whether the server closes the connection (after any bytes it still sends) within `timeout`.
    func closedByServer(within timeout: Duration = .seconds(10)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while fill(until: deadline) {}
        return ContinuousClock.now < deadline
    }

    /// Whether the server sends nothing for `duration` (and keeps the connection open).
    func silent(for duration: Duration) -> Bool {
        guard buffer.isEmpty else { return false }
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
        return poll(&fds, 1, Int32(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)) == 0
    }
}

/// Raw TCP sockets on loopback addresses, for tests of what the server does at the socket level.
enum LoopbackSocket {
    /// Calls `body` with `address:port` as a socket address and its length.
    static func withAddress<Result>(_ address: String, port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, address, &socketAddress.sin_addr)
        return withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Connects socket `fd` to `address:port`; whether it could (`errno` says why not).
    static func connect(_ fd: Int32, to address: String, port: Int) -> Bool {
        withAddress(address, port: port) { Glibc.connect(fd, $0, $1) } == 0
    }

    /// The sockets that listen on `address:port`, by inode, as the kernel's `/proc/net/tcp` lists
    /// them (state `0A`): the listeners themselves, where a connection attempt could also reach
    /// another test's socket that took the port since, or the attempt's own socket connected to
    /// itself. Another test's listener on a freed port number has another inode.
    static func listeners(on address: String, port: Int) -> Set<Substring> {
        let table = (try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)) ?? ""
        let local = String(format: "%08X:%04X", inet_addr(address), port)
        return Set(table.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count > 9 && fields[1] == local && fields[3] == "0A" ? fields[9] : nil
        })
    }

    /// Whether a TCP connection to `address:port` is accepted.
    static func connects(to address: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        return connect(fd, to: address, port: port)
    }
}

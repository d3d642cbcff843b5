import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import LoopbackHTTPServer

/// The test server itself: loopback only, counts, and a clean shutdown.
@Suite struct LoopbackHTTPServerTests {
    /// Whether a TCP connection to `address:port` is accepted.
    static func connects(to address: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, address, &socketAddress.sin_addr)
        return withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// Whether a new socket can bind and listen on `address:port` (not while another listens there).
    static func canListen(on address: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, address, &socketAddress.sin_addr)
        let bound = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return bound == 0 && listen(fd, 1) == 0
    }

    @Test func refusesAddressesOutsideLoopback() {
        #expect(throws: LoopbackHTTPServerError.self) { try LoopbackHTTPServer(address: "10.0.0.1") }
        #expect(throws: LoopbackHTTPServerError.self) { try LoopbackHTTPServer(address: "localhost") }
    }

    @Test func bindsOtherLoopbackAddressesAndShutsDownCleanly() async throws {
        let server = try LoopbackHTTPServer(address: "127.0.0.2")
        #expect(server.baseURL.absoluteString == "http://127.0.0.2:\(server.port)")
        #expect(Self.connects(to: "127.0.0.2", port: server.port))
        // A connection stuck in a hung request is closed by the shutdown.
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = in_port_t(UInt16(server.port).bigEndian)
        inet_pton(AF_INET, "127.0.0.2", &socketAddress.sin_addr)
        let connected = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(connected == 0)
        let request = Array("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(send(client, request, request.count, 0) == request.count)
        #expect(await eventually { server.current == 1 })
        #expect(server.peak == 1 && server.total == 1)
        #expect(server.arrivals.map(\.target) == ["/hang"])
        let start = ContinuousClock.now
        server.shutdown()
        #expect(start.duration(to: .now) < .seconds(2))
        #expect(server.connectionCount == 0)
        var byte: UInt8 = 0
        #expect(recv(client, &byte, 1, 0) <= 0)   // closed by the server
        #expect(Self.canListen(on: "127.0.0.2", port: server.port))   // the listener is gone
        server.shutdown()   // again: nothing
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writing to a connected socket, as the server and the package's raw test clients do.
package enum Socket {
    /// Sends all of `bytes` on `socket`, again after an interruption, never raising `SIGPIPE`.
    ///
    /// - Returns: Whether every byte was sent; `false` once the peer closed or reset the connection.
    package static func sendAll(_ bytes: [UInt8], on socket: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0, errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }
}

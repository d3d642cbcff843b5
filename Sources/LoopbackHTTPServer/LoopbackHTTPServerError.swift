import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a ``LoopbackHTTPServer`` could not start.
public enum LoopbackHTTPServerError: Error, CustomStringConvertible {
    /// The address is not an IPv4 address in 127.0.0.0/8.
    case notLoopback(String)
    /// A socket call failed with this `errno`.
    case socket(String, Int32)
    /// The system refused to start the accept thread: `pthread_create`'s error (`EAGAIN` when
    /// memory or a limit on threads ran out).
    case threadStart(Int32)

    /// A readable description.
    public var description: String {
        switch self {
        case .notLoopback(let address): "LoopbackHTTPServer: \(address) is not an IPv4 address in 127.0.0.0/8"
        case .socket(let call, let error): "LoopbackHTTPServer: \(call) failed: \(String(cString: strerror(error)))"
        case .threadStart(let error): "LoopbackHTTPServer: the accept thread could not start: \(String(cString: strerror(error)))"
        }
    }
}

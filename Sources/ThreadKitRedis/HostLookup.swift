#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(ThreadKitURL) import ThreadKit

/// Resolving a Redis server's host name within the deadline of the command that connects.
///
/// `getaddrinfo` cannot be interrupted and may block for as long as the system's resolver retries
/// (seconds per server and attempt), so a name is resolved on a thread of its own while the
/// connection's thread waits for it until the deadline; an answer that comes later is dropped. A
/// numeric address (`127.0.0.1`, `::1`) is converted at once, without a thread.
enum HostLookup {
    /// One address a host resolved to: the socket address's bytes and its family.
    struct Address: Sendable, Equatable {
        let family: Int32
        let bytes: [UInt8]
    }

    /// Why a host has no address.
    enum Failure: Error, Equatable {
        /// The resolver's answer (no such host, no network), or no thread to ask it on.
        case failed(String)
        /// The deadline passed first.
        case pastDeadline

        var reason: String {
            switch self {
            case .failed(let reason): reason
            case .pastDeadline: "resolving the host name took past the deadline"
            }
        }
    }

    /// Resolves a host name and port, blocking as long as that takes.
    typealias Lookup = @Sendable (_ host: String, _ port: Int) -> Result<[Address], Failure>

    /// The system's resolver, `getaddrinfo`.
    static let system: Lookup = { host, port in addresses(host, port, flags: 0) }

    /// `host`'s addresses: at once for a numeric address, else from `lookup` on a new thread,
    /// waited for until `deadline` (``Failure/pastDeadline`` after it).
    static func resolve(_ host: String, _ port: Int, with lookup: @escaping Lookup, until deadline: ContinuousClock.Instant) -> Result<[Address], Failure> {
        if case .success(let numeric) = addresses(host, port, flags: AI_NUMERICHOST) { return .success(numeric) }
        let pending = Pending()
        do {
            try ModuleThreads.start(name: "Redis lookup \(host)", kernelName: "Redis lookup") { pending.finish(lookup(host, port)) }
        } catch {
            return .failure(.failed("no thread could be started to resolve the name: \(error)"))
        }
        return pending.wait(until: deadline)
    }

    /// `getaddrinfo` for a stream socket of any family, with `flags`.
    private static func addresses(_ host: String, _ port: Int, flags: Int32) -> Result<[Address], Failure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = flags
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else { return .failure(.failed(String(cString: gai_strerror(status)))) }
        defer { freeaddrinfo(list) }
        var found: [Address] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            let bytes = UnsafeRawBufferPointer(start: current.pointee.ai_addr, count: Int(current.pointee.ai_addrlen))
            found.append(Address(family: current.pointee.ai_family, bytes: Array(bytes)))
            entry = current.pointee.ai_next
        }
        return .success(found)
    }

    /// A lookup's answer, handed from its thread to the connection's thread if it is still waiting.
    private final class Pending: @unchecked Sendable {
        // Sendable: `answer` is guarded by `condition`'s mutex.
        private let condition = ModuleCondition()
        private var answer: Result<[Address], Failure>?

        func finish(_ answer: Result<[Address], Failure>) {
            condition.lock()
            self.answer = answer
            condition.broadcast()
            condition.unlock()
        }

        func wait(until deadline: ContinuousClock.Instant) -> Result<[Address], Failure> {
            condition.lock()
            defer { condition.unlock() }
            while answer == nil, condition.wait(until: deadline) {}
            return answer ?? .failure(.pastDeadline)
        }
    }
}

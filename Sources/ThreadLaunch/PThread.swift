#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Starting detached threads with `pthread_create`, and naming the calling thread for the kernel:
/// the one way ThreadKit's threads (`NamedThread`) and the loopback test server's threads start.
///
/// `pthread_create` reports a refused thread (no memory for a stack, a pids limit) with an error
/// number; Foundation's `Thread.start()` ignores that failure, and its thread silently never runs.
package enum PThread {
    /// Starts a detached thread that runs `body` and then exits.
    ///
    /// - Returns: 0, or `pthread_create`'s error number if the system refused the thread (`body`
    ///   is then released unrun).
    package static func startDetached(_ body: @escaping @Sendable () -> Void) -> Int32 {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        #if canImport(Glibc) || canImport(Musl)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        let result = pthread_create(&thread, &attributes, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        if result != 0 { Unmanaged<Body>.fromOpaque(context).release() }
        return result
    }

    /// Gives the calling thread `name` in the kernel, where `top -H`, `ps -L`, gdb and `/proc`
    /// see it. The kernel keeps at most 15 bytes: the caller cuts the name to fit.
    package static func setKernelName(_ name: String) {
        #if canImport(Glibc) || canImport(Musl)
        _ = setName?(pthread_self(), name)
        #endif
    }

    /// What a new thread runs, handed to it through `pthread_create`.
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    #if canImport(Glibc) || canImport(Musl)
    // pthread_setname_np is declared only under _GNU_SOURCE, which Swift's Glibc module does not
    // set, so it is looked up by name once.
    private typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
    private static let setName: SetName? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np")
        .map { unsafeBitCast($0, to: SetName.self) }
    #endif
}

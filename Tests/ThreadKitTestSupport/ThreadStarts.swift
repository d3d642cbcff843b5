#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Makes the system refuse new threads for a while, as it does when memory or a limit runs out.
public enum ThreadStarts {
    private typealias SetDefaultAttributes = @convention(c) (UnsafePointer<pthread_attr_t>) -> Int32

    /// Runs `body` while every `pthread_create` that uses default attributes fails with `EAGAIN`:
    /// their stack size is set to 32 TiB, which no machine can map (Linux's address space limit
    /// makes this work under the thread sanitizer too, where a resource limit would stop the
    /// sanitizer's own allocations). Call it only in a process of its own (an exit test), and start
    /// no thread of the test library's inside `body`.
    public static func refused<Result>(_ body: () -> Result) -> Result {
        let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setattr_default_np")!
        let setDefault = unsafeBitCast(symbol, to: SetDefaultAttributes.self)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        var original = 0
        pthread_attr_getstacksize(&attributes, &original)
        pthread_attr_setstacksize(&attributes, 1 << 45)
        precondition(setDefault(&attributes) == 0)
        defer {
            pthread_attr_setstacksize(&attributes, original)
            precondition(setDefault(&attributes) == 0)
        }
        return body()
    }
}

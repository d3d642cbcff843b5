/// A value guarded by a ``PThreadMutex``.
///
/// Used instead of `Synchronization.Mutex` for small shared state: on Linux that `Mutex` hands
/// ownership over in the kernel (priority-inheritance futexes), where the thread sanitizer cannot
/// see it, so every contended hand-over would look like a data race. A pthread mutex is seen.
///
/// SPI (`@_spi(ThreadKitURL)`) for ThreadKit's own modules; not part of the public API.
@_spi(ThreadKitURL)
public final class Locked<Value: Sendable>: @unchecked Sendable {
    // Sendable: `value` is only touched inside `withLock`, under `mutex`.
    private let mutex = PThreadMutex()
    private var value: Value

    /// A lock guarding `value`.
    public init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&value)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One raw pointer per thread, in a pthread key: retains nothing and runs nothing at thread exit.
///
/// For marks such as "this thread belongs to that pool", where the owner outlives every thread
/// that carries its mark.
final class ThreadLocalPointer: Sendable {
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed with error \(result)")
        self.key = key
    }

    deinit {
        pthread_key_delete(key)
    }

    /// The calling thread's value; `nil` until it sets one.
    var current: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        set { pthread_setspecific(key, newValue) }
    }
}

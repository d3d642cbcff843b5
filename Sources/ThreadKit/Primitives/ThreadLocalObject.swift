#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One object per thread, in a pthread key that holds a reference to it: released when its thread
/// exits, or when the thread puts another in its place.
///
/// For per-thread state that lives as long as its thread (the contexts a thread holds, the whole
/// name ThreadKit gave it). Keep one in a `static let`: its key is never deleted.
final class ThreadLocalObject<Object: AnyObject>: Sendable {
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        let result = pthread_key_create(&key) { value in
            Unmanaged<AnyObject>.fromOpaque(value!).release()
        }
        precondition(result == 0, "pthread_key_create failed with error \(result)")
        self.key = key
    }

    /// The calling thread's object; `nil` until it sets one. Setting releases the one before.
    var current: Object? {
        get {
            pthread_getspecific(key).map { Unmanaged<Object>.fromOpaque($0).takeUnretainedValue() }
        }
        set {
            let old = pthread_getspecific(key)
            pthread_setspecific(key, newValue.map { Unmanaged.passRetained($0).toOpaque() })
            if let old { Unmanaged<Object>.fromOpaque(old).release() }
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex that owns its storage.
///
/// The `pthread_mutex_t` is allocated once and never moves, which a pthread mutex requires. Pair it
/// with ``MonotonicCondition`` to wait for state that the mutex guards.
final class PThreadMutex: @unchecked Sendable {
    // Sendable: a pthread mutex is made to be shared between threads; the pointer itself never changes.
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let result = pthread_mutex_init(mutex, nil)
        precondition(result == 0, "pthread_mutex_init failed with error \(result)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    func lock() {
        let result = pthread_mutex_lock(mutex)
        assert(result == 0, "pthread_mutex_lock failed with error \(result)")
    }

    func unlock() {
        let result = pthread_mutex_unlock(mutex)
        assert(result == 0, "pthread_mutex_unlock failed with error \(result)")
    }

    /// Runs `body` while holding the mutex.
    @inline(__always)
    func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A pthread condition variable whose timed waits count on `CLOCK_MONOTONIC`.
///
/// A condition made with default attributes measures timed waits against the wall clock, so setting
/// the system time would make a wait end early or late. This one sets `CLOCK_MONOTONIC` with
/// `pthread_condattr_setclock`, and its deadlines are ``MonotonicInstant``s.
///
/// As with every condition variable, wakeups can be spurious: callers wait in a loop on a predicate
/// that the paired ``PThreadMutex`` guards.
final class MonotonicCondition: @unchecked Sendable {
    // Sendable: a pthread condition is made to be shared between threads; the pointer never changes.
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        #if !canImport(Darwin)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        #endif
        let result = pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        precondition(result == 0, "pthread_cond_init failed with error \(result)")
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
    }

    /// Releases `mutex`, blocks until signalled, and takes `mutex` again. The caller holds `mutex`.
    func wait(_ mutex: PThreadMutex) {
        let result = pthread_cond_wait(condition, mutex.mutex)
        assert(result == 0, "pthread_cond_wait failed with error \(result)")
    }

    /// Like ``wait(_:)`` but gives up at `deadline`.
    ///
    /// - Returns: `false` when the deadline passed, `true` when woken earlier (perhaps spuriously).
    @discardableResult
    func wait(_ mutex: PThreadMutex, until deadline: MonotonicInstant) -> Bool {
        #if canImport(Darwin)
        let now = MonotonicInstant.now().nanoseconds
        // Saturating: a deadline at the end of the time line is more than Int64.max away.
        let remaining = deadline.nanoseconds > now ? Int64(clamping: deadline.nanoseconds - now) : 0
        var relative = timespec(tv_sec: Int(remaining / 1_000_000_000), tv_nsec: Int(remaining % 1_000_000_000))
        let result = pthread_cond_timedwait_relative_np(condition, mutex.mutex, &relative)
        #else
        var absolute = deadline.timespecValue
        let result = pthread_cond_timedwait(condition, mutex.mutex, &absolute)
        #endif
        assert(result == 0 || result == ETIMEDOUT, "pthread_cond_timedwait failed with error \(result)")
        return result != ETIMEDOUT
    }

    /// Wakes one waiting thread.
    func signal() {
        pthread_cond_signal(condition)
    }

    /// Wakes every waiting thread.
    func broadcast() {
        pthread_cond_broadcast(condition)
    }
}

/// Starting a named thread from another of ThreadKit's modules (ThreadKitRedis's connection threads).
///
/// A face over ``NamedThread``, which stays internal: the thread carries its name in Foundation, in
/// the kernel and in log records, asks for exact timed waits, and a refused start is thrown.
///
/// `package`: for ThreadKit's own modules; not part of the public API.
package enum ModuleThreads {
    /// Why a thread could not be started.
    package struct StartError: Error, Equatable, CustomStringConvertible {
        /// `pthread_create`'s error number (`EAGAIN`: no resources, or a limit was reached).
        package let errno: Int32

        /// `"pthread_create failed with error <errno>"`.
        package var description: String { "pthread_create failed with error \(errno)" }
    }

    /// Starts a detached thread named `name` (`kernelName` for the kernel: at most 15 bytes) that
    /// runs `body` and exits.
    ///
    /// The thread is one the package shares (as a timer thread is): what it logs is delivered by
    /// `Log`'s delivery thread, so a slow delegate never holds up the calls it owes to others
    /// (a Redis connection thread's commands).
    ///
    /// - Throws: ``StartError``; `body` is then released unrun.
    package static func start(name: String, kernelName: String, _ body: @escaping @Sendable () -> Void) throws(StartError) {
        do {
            try NamedThread.start(name: name, kernelName: kernelName) {
                LogDelivery.markCurrentThreadShared()
                body()
            }
        } catch {
            throw StartError(errno: error.errno)
        }
    }
}

/// A mutex and a condition whose timed waits count on the monotonic clock, for ThreadKit's other
/// modules: a face over ``PThreadMutex`` and ``MonotonicCondition``, which stay internal.
///
/// Wait in a loop on a predicate the mutex guards (wakeups can be spurious). `package`: for
/// ThreadKit's own modules; not part of the public API.
package final class ModuleCondition: Sendable {
    private let mutex = PThreadMutex()
    private let condition = MonotonicCondition()

    package init() {}

    package func lock() { mutex.lock() }
    package func unlock() { mutex.unlock() }

    /// Releases the mutex, blocks until woken or until `deadline` (on `ContinuousClock`), and takes
    /// the mutex again. The caller holds the mutex.
    ///
    /// - Returns: `false` when the deadline passed.
    @discardableResult
    package func wait(until deadline: ContinuousClock.Instant) -> Bool {
        condition.wait(mutex, until: ContinuousClockConversion.deadline(for: deadline))
    }

    /// Wakes every waiting thread. The caller holds the mutex.
    package func broadcast() { condition.broadcast() }
}

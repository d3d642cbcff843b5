/// Starting a named thread from another of ThreadKit's modules (ThreadKitRedis's connection readers).
///
/// A face over ``NamedThread``, which stays internal: the thread carries its name in Foundation, in
/// the kernel and in log records, asks for exact timed waits, and a refused start is thrown.
///
/// SPI (`@_spi(ThreadKitURL)`) for ThreadKit's own modules; not part of the public API.
@_spi(ThreadKitURL)
public enum ModuleThreads {
    /// Why a thread could not be started.
    public struct StartError: Error, Equatable, CustomStringConvertible {
        /// `pthread_create`'s error number (`EAGAIN`: no resources, or a limit was reached).
        public let errno: Int32

        /// `"pthread_create failed with error <errno>"`.
        public var description: String { "pthread_create failed with error \(errno)" }
    }

    /// Starts a detached thread named `name` (`kernelName` for the kernel: at most 15 bytes) that
    /// runs `body` and exits.
    ///
    /// - Throws: ``StartError``; `body` is then released unrun.
    public static func start(name: String, kernelName: String, _ body: @escaping @Sendable () -> Void) throws(StartError) {
        do {
            try NamedThread.start(name: name, kernelName: kernelName, body)
        } catch {
            throw StartError(errno: error.errno)
        }
    }
}

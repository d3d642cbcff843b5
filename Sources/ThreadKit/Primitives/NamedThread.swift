import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Starting threads that carry their name both in Foundation and in the kernel.
///
/// `Thread.current.name` is what Swift code sees; the kernel's name (`/proc/self/task/*/comm`) is what
/// `top -H`, `ps -L` and gdb show. The kernel keeps at most 15 bytes, so longer names are cut there.
///
/// Threads started here also ask for exact timed waits: Linux may wake a thread's timed wait up to
/// its *timer slack* late, 50 µs by default, to batch wakeups. ThreadKit's deadlines (timer calls,
/// throttle gaps) are meant to the microsecond, so its threads set their slack to 1 ns.
enum NamedThread {
    /// The most bytes a kernel thread name holds, without its terminating zero.
    static let kernelNameLimit = 15

    /// Starts a new thread named `name` that runs `body` and then exits.
    static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            nameCurrentThread(name)
            setExactTimerSlack()
            body()
        }
        thread.name = name
        thread.start()
    }

    #if canImport(Glibc) || canImport(Musl)
    // The C library declares these only under _GNU_SOURCE, which Swift's Glibc module does not set,
    // so they are looked up by name once.
    private typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
    private typealias GetName = @convention(c) (pthread_t, UnsafeMutablePointer<CChar>, Int) -> Int32
    private static let setName: SetName? = symbol("pthread_setname_np")
    private static let getName: GetName? = symbol("pthread_getname_np")

    // prctl is variadic, which Swift cannot call; on the Linux ABIs Swift supports, integer
    // arguments of a variadic call are passed exactly as these five fixed ones.
    private typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
    private static let prctl: Prctl? = symbol("prctl")
    private static let setTimerSlackOption: Int32 = 29  // PR_SET_TIMERSLACK

    private static func symbol<Function>(_ name: String) -> Function? {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(address, to: Function.self)
    }
    #endif

    /// Names the calling thread, in Foundation and in the kernel.
    static func nameCurrentThread(_ name: String) {
        Thread.current.name = name
        #if canImport(Glibc) || canImport(Musl)
        if let setName = Self.setName { _ = setName(pthread_self(), kernelName(for: name)) }
        #endif
    }

    /// Lets the kernel end the calling thread's timed waits as close to their deadline as it can.
    static func setExactTimerSlack() {
        #if canImport(Glibc) || canImport(Musl)
        _ = prctl?(setTimerSlackOption, 1, 0, 0, 0)
        #endif
    }

    /// `name` cut to ``kernelNameLimit`` bytes without splitting a character.
    static func kernelName(for name: String) -> String {
        var result = ""
        var bytes = 0
        for character in name {
            let size = character.utf8.count
            if bytes + size > kernelNameLimit { break }
            result.append(character)
            bytes += size
        }
        return result
    }

    /// The calling thread's name: Foundation's if set, else the kernel's.
    static func currentName() -> String {
        if let name = Thread.current.name, !name.isEmpty { return name }
        #if canImport(Glibc) || canImport(Musl)
        var buffer = [CChar](repeating: 0, count: 64)
        if let getName = Self.getName, getName(pthread_self(), &buffer, buffer.count) == 0 {
            let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !name.isEmpty { return name }
        }
        #endif
        return Thread.isMainThread ? "main" : "thread"
    }
}

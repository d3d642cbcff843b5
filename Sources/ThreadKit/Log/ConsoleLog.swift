#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The default destination of log records: one line each on standard error.
enum ConsoleLog {
    /// The console line for `record`: `<thread name> <source name>: <message>`.
    static func line(for record: Log.Record) -> String {
        "\(record.threadName) \(record.source.name): \(record.message)\n"
    }

    /// Writes `record`'s line to standard error in a single `write`, so lines never mix.
    static func write(_ record: Log.Record) {
        var text = line(for: record)
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = writeToStandardError(bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }
}

/// `write(2)` to standard error. Qualified by module because `ConsoleLog.write` hides the C function.
private func writeToStandardError(_ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
    Glibc.write(STDERR_FILENO, bytes, count)
    #elseif canImport(Musl)
    Musl.write(STDERR_FILENO, bytes, count)
    #elseif canImport(Darwin)
    Darwin.write(STDERR_FILENO, bytes, count)
    #endif
}

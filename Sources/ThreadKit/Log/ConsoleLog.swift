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
                let written = Glibc.write(STDERR_FILENO, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The default destination of log records: one line each on standard error.
enum ConsoleLog {
    /// The console line for `record`: `<thread name> <source name>: <message>`, with control
    /// characters escaped (see ``escaped(_:)``) so that every record is exactly one line.
    static func line(for record: Log.Record) -> String {
        "\(escaped(record.threadName)) \(escaped(record.source.name)): \(escaped(record.message))\n"
    }

    /// `text` with every character that could end, rewrite or colour a terminal line written out as
    /// an escape, so that a message cannot forge a line of its own.
    ///
    /// Newline, carriage return and tab become `\n`, `\r` and `\t`; the other C0 controls, DEL, the
    /// C1 controls (U+0080–U+009F, NEL among them) and the Unicode line and paragraph separators
    /// become `\u{XX}`. Everything else, backslashes included, is kept as it is.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default: result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029: true
        default: false
        }
    }

    /// Writes `record`'s line to `descriptor` (standard error unless a test passes another).
    ///
    /// - Returns: Whether the whole line was written; see ``writeAll(_:to:)``.
    @discardableResult
    static func write(_ record: Log.Record, to descriptor: Int32 = STDERR_FILENO) -> Bool {
        var text = line(for: record)
        return text.withUTF8 { writeAll(UnsafeRawBufferPointer($0), to: descriptor) }
    }

    /// Writes every byte of `bytes` to `descriptor`, as few `write(2)` calls as it takes.
    ///
    /// A line of up to `PIPE_BUF` bytes goes to a pipe in one `write`, so lines of concurrent writers
    /// never mix there. A write interrupted by a signal (`EINTR`) is retried; on a non-blocking
    /// descriptor that is full (`EAGAIN`), the writer waits in `poll(2)` until it takes bytes again,
    /// then writes the rest. Any other error ends the line: there is nowhere left to report it.
    ///
    /// - Returns: `true` when every byte was written.
    @discardableResult
    static func writeAll(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var offset = 0
        while offset < bytes.count {
            let written = systemWrite(descriptor, base + offset, bytes.count - offset)
            if written > 0 {
                offset += written
                continue
            }
            if written == 0 { return false }
            switch errno {
            case EINTR:
                continue
            case EAGAIN, EWOULDBLOCK:
                guard waitUntilWritable(descriptor) else { return false }
            default:
                return false
            }
        }
        return true
    }

    /// Blocks in `poll(2)` until `descriptor` takes bytes again.
    ///
    /// - Returns: `false` when it never will (an error or a closed reader); then the write fails.
    private static func waitUntilWritable(_ descriptor: Int32) -> Bool {
        var request = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
        while true {
            let ready = poll(&request, 1, -1)
            if ready > 0 { return request.revents & Int16(POLLOUT) != 0 }
            if ready < 0 && errno != EINTR && errno != EAGAIN { return false }
        }
    }
}

/// `write(2)`. Qualified by module because `ConsoleLog.write` hides the C function.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
    Glibc.write(descriptor, bytes, count)
    #elseif canImport(Musl)
    Musl.write(descriptor, bytes, count)
    #elseif canImport(Darwin)
    Darwin.write(descriptor, bytes, count)
    #endif
}

/// An incremental RESP2 parser: a pure value fed bytes in pieces of any size, which frames the
/// values in them one after another.
///
/// Feed it what a connection reads with ``append(_:)``, then take the complete values with
/// ``next()`` until it returns `nil` (it needs more bytes). However the bytes are split between
/// calls, the values and the error are the same: every check is made on bytes in the order they
/// come, and a check that needs more bytes waits for them. The parser keeps its place, so each
/// byte is examined a bounded number of times (``work`` counts them) and the cost is linear in the
/// input, even fed one byte at a time.
///
/// What it accepts: the five RESP2 types. Lines end in CR LF; a CR not followed by LF, or a LF
/// alone, is an error. An integer is an optional `-` and digits, within `Int64`;
/// a length or count is `-1` (null) or a whole number up to its limit.
///
/// Its limits: a bulk string of at most ``maxBulkLength`` bytes (8 MiB: a corrupt length header
/// costs at most that much buffering before it fails), arrays nested at most ``maxDepth`` deep, a line (type byte and text,
/// without the CR LF) of at most ``maxLineLength`` bytes, an array of at most ``maxArrayCount``
/// elements.
///
/// Once it throws, the parser stays failed: ``next()`` throws the same error again, since the bytes
/// after a framing error cannot be trusted to start a value.
struct RESPParser: Sendable {
    /// The default of ``maxBulkLength``: 8 MiB. Every reply the package asks for (a script's
    /// answer, `PING`, `TIME`, a count) is a few hundred bytes; a user's `GET` of a value up to
    /// 8 MiB is read too. A longer one fails its command (and ends the connection, whose next bytes
    /// cannot be framed) with a `connectionLost` that names the limit, rather than buffer up to
    /// Redis's own 512 MiB on one corrupt header.
    static let defaultMaxBulkLength = 8 * 1024 * 1024
    /// The default of ``maxDepth``.
    static let defaultMaxDepth = 64
    /// The default of ``maxLineLength``: 64 KiB, Redis's bound on an inline command.
    static let defaultMaxLineLength = 64 * 1024
    /// The most elements an array may announce: 2³¹ − 1.
    static let maxArrayCount = Int(Int32.max)

    /// The longest bulk string accepted, in bytes.
    let maxBulkLength: Int
    /// How deep arrays may nest: 1 allows an array of scalars, not an array in an array.
    let maxDepth: Int
    /// The longest line accepted: its type byte and text, without the CR LF.
    let maxLineLength: Int

    /// How many times the parser has examined or copied a byte so far.
    private(set) var work = 0

    /// The bytes appended and not yet consumed start at `start`; a line being scanned starts there too.
    private var buffer: [UInt8] = []
    private var start = 0
    /// Where the scan of the current line goes on: the bytes before it were checked.
    private var scanned = 0
    /// The length of a bulk string whose header was read and whose bytes have not all come.
    private var pendingBulk: Int?
    /// The arrays being filled, outermost first: each with the elements it still expects.
    private var open: [(remaining: Int, elements: [RESPValue])] = []
    private var failure: RESPProtocolError?

    /// A parser with no bytes yet.
    init(maxBulkLength: Int = defaultMaxBulkLength, maxDepth: Int = defaultMaxDepth, maxLineLength: Int = defaultMaxLineLength) {
        precondition(maxBulkLength >= 0, "RESPParser: maxBulkLength must not be negative, got \(maxBulkLength)")
        precondition(maxDepth >= 1, "RESPParser: maxDepth must be at least 1, got \(maxDepth)")
        precondition(maxLineLength >= 2, "RESPParser: maxLineLength must be at least 2, got \(maxLineLength)")
        self.maxBulkLength = maxBulkLength
        self.maxDepth = maxDepth
        self.maxLineLength = maxLineLength
    }

    /// Adds bytes read from the connection.
    mutating func append(_ bytes: some Sequence<UInt8>) {
        // Consumed bytes are dropped once they are the larger part, so each byte is moved at most once more.
        if start > 4096, start > buffer.count / 2 {
            work += buffer.count - start
            buffer.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Whether bytes of an unfinished value are waiting for the rest.
    var isInsideValue: Bool { start < buffer.count || !open.isEmpty || pendingBulk != nil }

    /// The next complete value, or `nil` when more bytes are needed.
    ///
    /// - Throws: ``RESPProtocolError`` when the bytes are not RESP2 or pass a limit; again on every
    ///   later call.
    mutating func next() throws(RESPProtocolError) -> RESPValue? {
        if let failure { throw failure }
        do {
            while true {
                guard let value = try nextScalarOrOpenArray() else { return nil }
                if let whole = close(with: value) { return whole }
            }
        } catch {
            failure = error
            throw error
        }
    }

    /// Puts a finished value into the array being filled; returns the value once nothing encloses it.
    private mutating func close(with value: RESPValue) -> RESPValue? {
        var value = value
        while let last = open.indices.last {
            open[last].elements.append(value)
            open[last].remaining -= 1
            guard open[last].remaining == 0 else { return nil }
            value = .array(open.removeLast().elements)
        }
        return value
    }

    /// A finished scalar or empty/null array, `nil` when bytes are missing; a non-empty array's
    /// header opens an array and reading goes on.
    private mutating func nextScalarOrOpenArray() throws(RESPProtocolError) -> RESPValue? {
        while true {
            if let length = pendingBulk {
                guard buffer.count - start >= length + 2 else { return nil }
                guard buffer[start + length] == 13, buffer[start + length + 1] == 10 else {
                    throw RESPProtocolError("a bulk string of \(length) bytes is not followed by CR LF")
                }
                let content = Array(buffer[start..<start + length])
                work += length + 2
                consume(length + 2)
                pendingBulk = nil
                return .bulkString(content)
            }
            guard let lineEnd = try scanLine() else { return nil }
            let type = buffer[start]
            let text = buffer[(start + 1)..<lineEnd]
            defer { consume(lineEnd + 2 - start) }
            switch type {
            case UInt8(ascii: "+"):
                return .simpleString(String(decoding: text, as: UTF8.self))
            case UInt8(ascii: "-"):
                return .error(String(decoding: text, as: UTF8.self))
            case UInt8(ascii: ":"):
                return .integer(try Self.integer(text, of: "an integer"))
            case UInt8(ascii: "$"):
                let length = try Self.integer(text, of: "a bulk string's length")
                if length == -1 { return .bulkString(nil) }
                guard length >= 0, length <= maxBulkLength else {
                    throw RESPProtocolError("a bulk string's length must be -1 or 0 to \(maxBulkLength), got \(length)")
                }
                pendingBulk = Int(length)
            case UInt8(ascii: "*"):
                let count = try Self.integer(text, of: "an array's count")
                if count == -1 { return .array(nil) }
                guard count >= 0, count <= Self.maxArrayCount else {
                    throw RESPProtocolError("an array's count must be -1 or 0 to \(Self.maxArrayCount), got \(count)")
                }
                if count == 0 { return .array([]) }
                guard open.count < maxDepth else {
                    throw RESPProtocolError("arrays nest deeper than \(maxDepth)")
                }
                open.append((Int(count), []))
            default:
                preconditionFailure("RESPParser: scanLine lets only a known type byte through")
            }
        }
    }

    /// Scans the line at `start` from where the last scan stopped; returns the index of its CR once
    /// its CR LF has come, `nil` while it has not.
    private mutating func scanLine() throws(RESPProtocolError) -> Int? {
        if scanned < start { scanned = start }
        while scanned < buffer.count {
            let offset = scanned - start
            let byte = buffer[scanned]
            work += 1
            if offset == 0 {
                guard Self.typeBytes.contains(byte) else {
                    throw RESPProtocolError("a value starts with \(Self.describe(byte)), not one of + - : $ *")
                }
            } else if byte == 13 {
                guard scanned + 1 < buffer.count else { return nil }
                guard buffer[scanned + 1] == 10 else {
                    throw RESPProtocolError("a CR inside a line is followed by \(Self.describe(buffer[scanned + 1])), not LF")
                }
                return scanned
            } else if byte == 10 {
                throw RESPProtocolError("a line ends in LF without CR")
            } else if offset >= maxLineLength {
                throw RESPProtocolError("a line is longer than \(maxLineLength) bytes")
            }
            scanned += 1
        }
        return nil
    }

    private mutating func consume(_ count: Int) {
        start += count
        scanned = start
    }

    private static let typeBytes: [UInt8] = [UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: ":"), UInt8(ascii: "$"), UInt8(ascii: "*")]

    /// An optional `-` and 1 to 19 digits, within `Int64`.
    private static func integer(_ text: ArraySlice<UInt8>, of what: String) throws(RESPProtocolError) -> Int64 {
        let negative = text.first == UInt8(ascii: "-")
        let digits = negative ? text.dropFirst() : text
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
            throw RESPProtocolError("\(what) must be digits with an optional '-', got \(quoted(text))")
        }
        var magnitude: UInt64 = 0
        for digit in digits {
            let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(digit - 48))
            guard !overflow1, !overflow2, sum <= UInt64(Int64.max) + (negative ? 1 : 0) else {
                throw RESPProtocolError("\(what) is out of the range of a 64-bit integer: \(quoted(text))")
            }
            magnitude = sum
        }
        return negative ? Int64(bitPattern: 0 &- magnitude) : Int64(magnitude)
    }

    private static func quoted(_ text: ArraySlice<UInt8>) -> String {
        let shown = text.count > 40 ? text.prefix(40) : text
        return "'" + String(decoding: shown, as: UTF8.self) + (text.count > 40 ? "…'" : "'")
    }

    private static func describe(_ byte: UInt8) -> String {
        (32..<127).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte \(byte)"
    }
}

/// Bytes from a Redis server that are not RESP2, or that pass one of the parser's limits.
struct RESPProtocolError: Error, Equatable, CustomStringConvertible {
    /// What is wrong, in a sentence.
    let reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    var description: String { "not RESP2: \(reason)" }
}

import SeededRandom
import Testing
@testable import ThreadKitRedis

/// Feeds `bytes` to a new parser in the pieces `cuts` makes (offsets, ascending) and returns the
/// values it framed, with the error it stopped at, if any.
func parse(_ bytes: [UInt8], cuts: [Int] = [], parser: RESPParser = RESPParser()) -> (values: [RESPValue], error: RESPProtocolError?, inside: Bool) {
    var parser = parser
    var values: [RESPValue] = []
    var from = 0
    for end in cuts + [bytes.count] {
        parser.append(bytes[from..<end])
        from = end
        do {
            while let value = try parser.next() { values.append(value) }
        } catch {
            return (values, error, parser.isInsideValue)
        }
    }
    return (values, nil, parser.isInsideValue)
}

/// One byte at a time.
func parseByteByByte(_ bytes: [UInt8], parser: RESPParser = RESPParser()) -> (values: [RESPValue], error: RESPProtocolError?, inside: Bool) {
    parse(bytes, cuts: bytes.isEmpty ? [] : Array(1..<bytes.count), parser: parser)
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("RESPParser: every RESP2 type, however the bytes are split")
struct RESPParserTests {
    /// One of each type, nested ones among them, with the bytes the server sends for it.
    static let samples: [(String, RESPValue)] = [
        ("+OK\r\n", .simpleString("OK")),
        ("+\r\n", .simpleString("")),
        ("-ERR unknown command 'FOO'\r\n", .error("ERR unknown command 'FOO'")),
        (":0\r\n", .integer(0)),
        (":-42\r\n", .integer(-42)),
        (":9223372036854775807\r\n", .integer(.max)),
        (":-9223372036854775808\r\n", .integer(.min)),
        ("$5\r\nhello\r\n", .bulkString(bytes("hello"))),
        ("$0\r\n\r\n", .bulkString([])),
        ("$4\r\na\r\nb\r\n", .bulkString(bytes("a\r\nb"))),
        ("$-1\r\n", .bulkString(nil)),
        ("*0\r\n", .array([])),
        ("*-1\r\n", .array(nil)),
        ("*3\r\n:1\r\n$1\r\nx\r\n+y\r\n", .array([.integer(1), .bulkString(bytes("x")), .simpleString("y")])),
        ("*2\r\n*2\r\n:1\r\n*0\r\n$-1\r\n", .array([.array([.integer(1), .array([])]), .bulkString(nil)])),
        ("*2\r\n-NOSCRIPT no script\r\n*-1\r\n", .array([.error("NOSCRIPT no script"), .array(nil)])),
    ]

    @Test("each type parses whole and encodes back to the same bytes")
    func eachTypeWhole() {
        for (text, value) in Self.samples {
            let result = parse(bytes(text))
            #expect(result.values == [value], "\(text.debugDescription)")
            #expect(result.error == nil)
            #expect(!result.inside)
            #expect(value.encoded == bytes(text), "\(value)")
        }
    }

    @Test("each type split at every byte, and fed one byte at a time, gives the same value")
    func eachTypeSplitEverywhere() {
        for (text, value) in Self.samples {
            let input = bytes(text)
            for cut in 0...input.count {
                let result = parse(input, cuts: [cut])
                #expect(result.values == [value] && result.error == nil, "\(text.debugDescription) cut at \(cut)")
            }
            #expect(parseByteByByte(input).values == [value])
        }
    }

    @Test("all samples back to back, one byte at a time, come out in order; a prefix is incomplete, not an error")
    func backToBack() {
        let input = Self.samples.flatMap { bytes($0.0) }
        let result = parseByteByByte(input)
        #expect(result.values == Self.samples.map(\.1))
        #expect(result.error == nil)
        for (text, _) in Self.samples {
            let whole = bytes(text)
            for length in 0..<whole.count {
                let partial = parse(Array(whole.prefix(length)))
                #expect(partial.values.isEmpty && partial.error == nil && partial.inside == (length > 0), "\(text.debugDescription) prefix \(length)")
            }
        }
    }

    @Test("malformed input is an error with a readable reason, the same at every split, and the parser stays failed")
    func malformed() {
        let cases: [(String, String)] = [
            ("?x\r\n", "a value starts with '?'"),
            ("\r\n", "a value starts with byte 13"),
            ("+OK\n", "a line ends in LF without CR"),
            ("+O\rK\r\n", "a CR inside a line is followed by 'K', not LF"),
            (":12a\r\n", "an integer must be digits with an optional '-', got '12a'"),
            (":\r\n", "an integer must be digits"),
            (":-\r\n", "an integer must be digits"),
            (":+1\r\n", "an integer must be digits"),
            ("$-2\r\n", "a bulk string's length must be -1 or 0 to 8388608, got -2"),
            ("$3\r\nabcd\r\n", "a bulk string of 3 bytes is not followed by CR LF"),
            ("*-5\r\n", "an array's count must be -1 or 0 to 2147483647, got -5"),
            ("*1\r\n!\r\n", "a value starts with '!'"),
        ]
        for (text, reason) in cases {
            let input = bytes(text)
            var seen: Set<String> = []
            for cut in 0...input.count {
                let result = parse(input, cuts: [cut])
                #expect(result.values.isEmpty, "\(text.debugDescription)")
                if let error = result.error { seen.insert(error.reason) }
            }
            #expect(seen.count == 1, "\(text.debugDescription): \(seen)")
            #expect(seen.first?.hasPrefix(reason) == true, "\(text.debugDescription): \(seen)")
            var parser = RESPParser()
            parser.append(input + bytes("+OK\r\n"))
            #expect(throws: RESPProtocolError.self) { _ = try parser.next() }
            #expect(throws: RESPProtocolError.self) { _ = try parser.next() }
        }
        #expect(RESPProtocolError("x").description == "not RESP2: x")
    }

    @Test("integers and lengths past 64 bits, or past their limits, are errors, never a trap")
    func overflow() {
        let cases: [(String, String)] = [
            (":9223372036854775808\r\n", "an integer is out of the range of a 64-bit integer"),
            (":-9223372036854775809\r\n", "an integer is out of the range"),
            (":99999999999999999999999999\r\n", "an integer is out of the range"),
            ("$9223372036854775807\r\n", "a bulk string's length must be -1 or 0 to 8388608"),
            ("$99999999999999999999\r\n", "a bulk string's length is out of the range"),
            ("$8388609\r\n", "a bulk string's length must be -1 or 0 to 8388608, got 8388609"),
            ("$536870912\r\n", "a bulk string's length must be -1 or 0 to 8388608, got 536870912"),
            ("*2147483648\r\n", "an array's count must be -1 or 0 to 2147483647, got 2147483648"),
            ("*-9223372036854775808\r\n", "an array's count must be -1 or 0"),
        ]
        for (text, reason) in cases {
            let result = parseByteByByte(bytes(text))
            #expect(result.error?.reason.hasPrefix(reason) == true, "\(text.debugDescription): \(String(describing: result.error))")
        }
        // At the limit, a bulk string's header is accepted and the parser waits for its bytes.
        let atLimit = parse(bytes("$8388608\r\n"))
        #expect(atLimit.error == nil && atLimit.values.isEmpty && atLimit.inside)
        // Leading zeros are digits like any other.
        #expect(parse(bytes(":0000000000000000000000042\r\n")).values == [.integer(42)])
    }

    @Test("the limits on bulk length, nesting depth and line length hold at their edges")
    func limits() {
        let small = RESPParser(maxBulkLength: 4, maxDepth: 2, maxLineLength: 8)
        #expect(parse(bytes("$4\r\nabcd\r\n"), parser: small).values == [.bulkString(bytes("abcd"))])
        #expect(parse(bytes("$5\r\n"), parser: small).error?.reason == "a bulk string's length must be -1 or 0 to 4, got 5")
        #expect(parse(bytes("*1\r\n*1\r\n:1\r\n"), parser: small).values == [.array([.array([.integer(1)])])])
        #expect(parse(bytes("*1\r\n*1\r\n*1\r\n:1\r\n"), parser: small).error?.reason == "arrays nest deeper than 2")
        // Empty and null arrays open nothing, so they may sit at the deepest level.
        #expect(parse(bytes("*1\r\n*1\r\n*0\r\n"), parser: small).values == [.array([.array([.array([])])])])
        // A line of 8 bytes (type byte included) is accepted; 9 is not, even before its CR LF comes.
        #expect(parse(bytes("+1234567\r\n"), parser: small).values == [.simpleString("1234567")])
        #expect(parse(bytes("+12345678\r\n"), parser: small).error?.reason == "a line is longer than 8 bytes")
        #expect(parse(bytes("+12345678"), parser: small).error?.reason == "a line is longer than 8 bytes")
        // The default line limit: a line of 64 KiB without an end is refused without waiting for it.
        let endless = parse([UInt8(ascii: "+")] + [UInt8](repeating: UInt8(ascii: "a"), count: 70_000))
        #expect(endless.error?.reason == "a line is longer than 65536 bytes")
    }

    @Test("the work is linear in the input, one byte at a time as well as whole")
    func linearWork() {
        let element = RESPValue.array([.bulkString([UInt8](repeating: 7, count: 300)), .integer(123_456), .simpleString("OK")])
        let input = [UInt8](RESPValue.array(Array(repeating: element, count: 200)).encoded)
        var whole = RESPParser()
        whole.append(input)
        #expect((try? whole.next()) == .array(Array(repeating: element, count: 200)))
        var bytewise = RESPParser()
        var value: RESPValue?
        for byte in input {
            bytewise.append(CollectionOfOne(byte))
            if let next = try? bytewise.next() { value = next }
        }
        #expect(value == .array(Array(repeating: element, count: 200)))
        #expect(whole.work <= 3 * input.count, "work \(whole.work) for \(input.count) bytes")
        #expect(bytewise.work <= 3 * input.count, "work \(bytewise.work) for \(input.count) bytes")
        // A long line fed a byte at a time is scanned once, not again from its start at every byte.
        var line = RESPParser()
        let text = [UInt8(ascii: "+")] + [UInt8](repeating: UInt8(ascii: "a"), count: 60_000) + bytes("\r\n")
        for byte in text {
            line.append(CollectionOfOne(byte))
            _ = try? line.next()
        }
        #expect(line.work <= 2 * text.count, "work \(line.work) for \(text.count) bytes")
    }

    @Test("a command encodes as an array of bulk strings")
    func commandEncoding() {
        #expect(RESPValue.command(["SET", "k", "vé"]).encoded == bytes("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nvé\r\n"))
        #expect(RESPValue.command(["SET", "k", "v"]) == .array([.bulkString(bytes("SET")), .bulkString(bytes("k")), .bulkString(bytes("v"))]))
    }

    @Test("the accessors read what each case holds; the description is readable")
    func accessors() {
        #expect(RESPValue.simpleString("OK").string == "OK")
        #expect(RESPValue.bulkString(bytes("hi")).string == "hi")
        #expect(RESPValue.bulkString(nil).string == nil)
        #expect(RESPValue.integer(3).integer == 3 && RESPValue.simpleString("3").integer == nil)
        #expect(RESPValue.array([.integer(1)]).array == [.integer(1)] && RESPValue.array(nil).array == nil)
        #expect(RESPValue.bulkString(nil).isNull && RESPValue.array(nil).isNull && !RESPValue.array([]).isNull)
        #expect(RESPValue.array([.simpleString("OK"), .error("ERR x"), .integer(1), .bulkString(bytes("a\"b")), .bulkString(nil)]).description
            == "[\"OK\", (error) ERR x, (integer) 1, \"a\\\"b\", (nil)]")
    }
}

@Suite("RESPParser under a seeded fuzz")
struct RESPParserFuzzTests {
    /// A random value, nested at most `depth` deep.
    static func randomValue(_ random: inout SplitMix64, depth: Int) -> RESPValue {
        let text = { (random: inout SplitMix64) -> String in
            String((0..<Int.random(in: 0...12, using: &random)).map { _ in Character(Unicode.Scalar(UInt8.random(in: 32...126, using: &random))) })
        }
        switch Int.random(in: 0..<(depth > 0 ? 7 : 5), using: &random) {
        case 0: return .simpleString(text(&random))
        case 1: return .error(text(&random))
        case 2: return .integer(Int64.random(in: .min ... .max, using: &random))
        case 3: return .bulkString((0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
        case 4: return random.chance(0.5) ? .bulkString(nil) : .array(nil)
        default: return .array((0..<Int.random(in: 0...5, using: &random)).map { _ in randomValue(&random, depth: depth - 1) })
        }
    }

    /// Random cut points of `count` bytes, ascending.
    static func randomCuts(_ count: Int, _ random: inout SplitMix64) -> [Int] {
        guard count > 1 else { return [] }
        return Array(Set((0..<Int.random(in: 0...8, using: &random)).map { _ in Int.random(in: 1..<count, using: &random) })).sorted()
    }

    @Test("random values round-trip through the encoder and the parser, split at random places")
    func roundTrip() {
        var random = SplitMix64(seed: 0x5EED_0024)
        for _ in 0..<2_000 {
            let values = (0..<Int.random(in: 1...4, using: &random)).map { _ in Self.randomValue(&random, depth: 3) }
            let input = values.flatMap(\.encoded)
            let result = parse(input, cuts: Self.randomCuts(input.count, &random))
            #expect(result.values == values && result.error == nil)
        }
    }

    @Test("random and mutated bytes never trap, and give the same values and error however they are split")
    func mutatedInputs() {
        var random = SplitMix64(seed: 0xF022_0024)
        let alphabet = bytes("+-:$*\r\n0123456789-abc")
        for round in 0..<3_000 {
            var input: [UInt8]
            if round % 3 == 0 {
                // Bytes from the protocol's own alphabet, so that headers and lengths come up often.
                input = (0..<Int.random(in: 0...60, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
            } else {
                input = Self.randomValue(&random, depth: 3).encoded
                for _ in 0..<Int.random(in: 1...3, using: &random) where !input.isEmpty {
                    let index = Int.random(in: 0..<input.count, using: &random)
                    switch Int.random(in: 0..<4, using: &random) {
                    case 0: input[index] = alphabet.randomElement(using: &random)!
                    case 1: input.remove(at: index)
                    case 2: input.insert(UInt8.random(in: 0...255, using: &random), at: index)
                    default: input[index] = UInt8.random(in: 0...255, using: &random)
                    }
                }
            }
            let whole = parse(input, parser: RESPParser(maxBulkLength: 1_000, maxDepth: 4, maxLineLength: 64))
            let split = parse(input, cuts: Self.randomCuts(input.count, &random), parser: RESPParser(maxBulkLength: 1_000, maxDepth: 4, maxLineLength: 64))
            let bytewise = parseByteByByte(input, parser: RESPParser(maxBulkLength: 1_000, maxDepth: 4, maxLineLength: 64))
            // Whether bytes wait for the rest of a value is compared only without an error: after one,
            // what was appended beyond it depends on the split, and the parser reads no further.
            #expect(whole.values == split.values && whole.error == split.error, "round \(round)")
            #expect(whole.values == bytewise.values && whole.error == bytewise.error, "round \(round)")
            #expect(whole.error != nil || (whole.inside == split.inside && whole.inside == bytewise.inside), "round \(round)")
        }
    }
}

/// The character classes of HTTP (RFC 9110) that the parser, the target splitter and the replies
/// check bytes against.
enum HTTPCharacters {
    /// `tchar`: a byte of a token (a method, a header field name, a transfer coding).
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case 0x21, 0x23...0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E...0x60, 0x7C, 0x7E:   // ! # $ % & ' * + - . ^ _ ` | ~
            true
        default:
            false
        }
    }

    /// A byte a field value (or a chunk extension) may hold: anything but a control character,
    /// tab excepted.
    static func isFieldValueByte(_ byte: UInt8) -> Bool {
        (byte == 0x09 || byte >= 0x20) && byte != 0x7F
    }

    /// The value of a hexadecimal digit, or `nil` if `byte` is none.
    static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(byte - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(byte - UInt8(ascii: "A")) + 10
        default: nil
        }
    }

    /// The comma-separated elements of a field value, trimmed and lower-cased, empty ones left out.
    static func tokens(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingWhitespace.lowercased() }.filter { !$0.isEmpty }
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs.
    var trimmingWhitespace: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}

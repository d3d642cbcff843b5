// A strict reader of the Prometheus text exposition format, version 0.0.4, for tests: it accepts
// only what the format allows and reports every departure as an error with its line number.
//
// Checked: comment lines (`# HELP name text`, `# TYPE name type`, other comments ignored), metric and
// label names, quoted and escaped label values, sample values (Go's float syntax, `+Inf`, `-Inf`,
// `NaN`), optional integer timestamps; one HELP and one TYPE per family, TYPE before the family's
// samples, each family's samples together; counters named `_total`; histograms with `_bucket` series
// whose `le` bounds ascend to `+Inf` with counts that never fall, `_sum`, and `_count` equal to the
// `+Inf` bucket; no series twice.

/// One sample: the series' name, its labels in order, and its value.
public struct PrometheusSample: Equatable, Sendable {
    public var name: String
    public var labels: [String: String]
    public var labelOrder: [String]
    public var value: Double
}

/// A family: its type, its help text, and its samples.
public struct PrometheusFamily: Sendable {
    public var name: String
    public var type: String
    public var help: String?
    public var samples: [PrometheusSample]
}

/// A departure from the format, and where.
public struct PrometheusFormatError: Error, CustomStringConvertible, Sendable {
    public let line: Int
    public let reason: String
    public var description: String { "line \(line): \(reason)" }
}

public enum PrometheusParser {
    /// The families of `text`, in order; throws at the first departure from the format.
    public static func parse(_ text: String) throws -> [PrometheusFamily] {
        guard text.isEmpty || text.hasSuffix("\n") else { throw PrometheusFormatError(line: 0, reason: "text does not end with a line feed") }
        var families: [PrometheusFamily] = []
        var index: [String: Int] = [:]
        var closed: Set<String> = []
        var series: Set<String> = []
        var current: String?
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        for (offset, raw) in lines.enumerated() {
            let number = offset + 1
            let line = String(raw)
            func fail(_ reason: String) -> PrometheusFormatError { PrometheusFormatError(line: number, reason: reason + ": \(line)") }
            if line.isEmpty { continue }
            if line.hasPrefix("#") {
                let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
                guard parts.count >= 3, parts[0] == "#", parts[1] == "HELP" || parts[1] == "TYPE" else { continue }
                let name = parts[2]
                guard isMetricName(name) else { throw fail("bad metric name") }
                if closed.contains(name) { throw fail("family \(name) appears again after other families") }
                if let open = current, open != name { closed.insert(open) }
                current = name
                if index[name] == nil {
                    index[name] = families.count
                    families.append(PrometheusFamily(name: name, type: "untyped", help: nil, samples: []))
                }
                var family = families[index[name]!]
                if parts[1] == "HELP" {
                    guard family.help == nil else { throw fail("second HELP for \(name)") }
                    let help = parts.count > 3 ? parts[3] : ""
                    family.help = try unescape(help) ?? { throw fail("bad escape in HELP") }()
                } else {
                    guard family.type == "untyped", family.samples.isEmpty else { throw fail("TYPE for \(name) is not before its samples, or comes twice") }
                    guard parts.count == 4, ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[3]) else { throw fail("bad TYPE") }
                    family.type = parts[3]
                    if family.type == "counter" && !name.hasSuffix("_total") { throw fail("counter \(name) does not end with _total") }
                }
                families[index[name]!] = family
                continue
            }
            let sample = try parseSample(line, fail: fail)
            let familyName = family(of: sample.name, among: index, families: families)
            if closed.contains(familyName) { throw fail("samples of \(familyName) are not together") }
            if let open = current, open != familyName { closed.insert(open) }
            current = familyName
            if index[familyName] == nil {
                index[familyName] = families.count
                families.append(PrometheusFamily(name: familyName, type: "untyped", help: nil, samples: []))
            }
            let key = sample.name + "{" + sample.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",") + "}"
            guard series.insert(key).inserted else { throw fail("series \(key) appears twice") }
            families[index[familyName]!].samples.append(sample)
        }
        for family in families where family.type == "histogram" {
            try checkHistogram(family)
        }
        return families
    }

    /// The value of the one sample of `name` whose labels include `labels`.
    public static func value(_ families: [PrometheusFamily], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matches = families.flatMap(\.samples).filter { sample in
            sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value }
        }
        return matches.count == 1 ? matches[0].value : nil
    }

    private static func family(of sample: String, among index: [String: Int], families: [PrometheusFamily]) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where sample.hasSuffix(suffix) {
            let base = String(sample.dropLast(suffix.count))
            if let position = index[base], ["histogram", "summary"].contains(families[position].type) { return base }
        }
        return sample
    }

    private static func checkHistogram(_ family: PrometheusFamily) throws {
        var groups: [String: [PrometheusSample]] = [:]
        for sample in family.samples {
            let key = sample.labels.filter { $0.key != "le" }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            groups[key, default: []].append(sample)
        }
        for (key, samples) in groups {
            let buckets = samples.filter { $0.name == family.name + "_bucket" }
            var last = -Double.infinity
            var lastCount = 0.0
            for bucket in buckets {
                guard let bound = bucket.labels["le"].flatMap(parseValue) else { throw PrometheusFormatError(line: 0, reason: "\(family.name){\(key)}: bucket without a valid le") }
                guard bound > last else { throw PrometheusFormatError(line: 0, reason: "\(family.name){\(key)}: le bounds do not ascend") }
                guard bucket.value >= lastCount else { throw PrometheusFormatError(line: 0, reason: "\(family.name){\(key)}: bucket counts fall") }
                last = bound
                lastCount = bucket.value
            }
            guard last == .infinity else { throw PrometheusFormatError(line: 0, reason: "\(family.name){\(key)}: no +Inf bucket") }
            let counts = samples.filter { $0.name == family.name + "_count" }
            guard samples.contains(where: { $0.name == family.name + "_sum" }), counts.count == 1, counts[0].value == lastCount else {
                throw PrometheusFormatError(line: 0, reason: "\(family.name){\(key)}: _sum missing or _count not the +Inf bucket")
            }
        }
    }

    private static func parseSample(_ line: String, fail: (String) -> PrometheusFormatError) throws -> PrometheusSample {
        let scalars = Array(line.unicodeScalars)
        var position = 0
        var name = ""
        while position < scalars.count, scalars[position] != "{", scalars[position] != " " {
            name.unicodeScalars.append(scalars[position])
            position += 1
        }
        guard isMetricName(name) else { throw fail("bad metric name") }
        var labels: [String: String] = [:]
        var order: [String] = []
        if position < scalars.count, scalars[position] == "{" {
            position += 1
            while true {
                guard position < scalars.count else { throw fail("unterminated labels") }
                if scalars[position] == "}" { position += 1; break }
                var label = ""
                while position < scalars.count, scalars[position] != "=" {
                    label.unicodeScalars.append(scalars[position])
                    position += 1
                }
                guard isLabelName(label), !label.hasPrefix("__") else { throw fail("bad label name '\(label)'") }
                guard labels[label] == nil else { throw fail("label \(label) twice") }
                position += 1
                guard position < scalars.count, scalars[position] == "\"" else { throw fail("label value not quoted") }
                position += 1
                var value = ""
                while true {
                    guard position < scalars.count else { throw fail("unterminated label value") }
                    let scalar = scalars[position]
                    if scalar == "\"" { position += 1; break }
                    if scalar == "\n" { throw fail("raw line feed in label value") }
                    if scalar == "\\" {
                        guard position + 1 < scalars.count else { throw fail("dangling backslash") }
                        switch scalars[position + 1] {
                        case "\\": value += "\\"
                        case "\"": value += "\""
                        case "n": value += "\n"
                        default: throw fail("bad escape in label value")
                        }
                        position += 2
                        continue
                    }
                    value.unicodeScalars.append(scalar)
                    position += 1
                }
                labels[label] = value
                order.append(label)
                guard position < scalars.count else { throw fail("unterminated labels") }
                if scalars[position] == "," { position += 1; continue }
                guard scalars[position] == "}" else { throw fail("expected , or }") }
            }
        }
        guard position < scalars.count, scalars[position] == " " else { throw fail("no space before the value") }
        let rest = String(String.UnicodeScalarView(scalars[(position + 1)...])).split(separator: " ", omittingEmptySubsequences: false)
        guard rest.count == 1 || rest.count == 2 else { throw fail("bad value and timestamp") }
        guard let value = parseValue(String(rest[0])) else { throw fail("bad value '\(rest[0])'") }
        if rest.count == 2 { guard Int64(rest[1]) != nil else { throw fail("bad timestamp") } }
        return PrometheusSample(name: name, labels: labels, labelOrder: order, value: value)
    }

    private static func parseValue(_ text: String) -> Double? {
        switch text {
        case "+Inf", "Inf": return .infinity
        case "-Inf": return -.infinity
        case "NaN": return .nan
        default:
            // Go's ParseFloat: digits, one point, an exponent; no "inf"/"nan" spellings, no hex.
            guard !text.isEmpty, text.allSatisfy({ "0123456789.eE+-".contains($0) }) else { return nil }
            return Double(text)
        }
    }

    private static func unescape(_ text: String) -> String? {
        var result = ""
        var escaping = false
        for scalar in text.unicodeScalars {
            if escaping {
                switch scalar {
                case "\\": result += "\\"
                case "n": result += "\n"
                default: return nil
                }
                escaping = false
            } else if scalar == "\\" {
                escaping = true
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return escaping ? nil : result
    }

    private static func isMetricName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, isLetter(first) || first == ":" else { return false }
        return name.unicodeScalars.allSatisfy { isLetter($0) || $0 == ":" || ("0"..."9").contains($0) }
    }

    private static func isLabelName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, isLetter(first) else { return false }
        return name.unicodeScalars.allSatisfy { isLetter($0) || ("0"..."9").contains($0) }
    }

    private static func isLetter(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || scalar == "_"
    }
}

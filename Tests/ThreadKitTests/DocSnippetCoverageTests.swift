import Foundation
import Testing

// Every ```swift block of README.md, Docs/*.md and the DocC articles (Sources/*/*.docc/*.md; the
// guides there are symlinks to Docs/, counted once) has exactly one copy in a test that runs it,
// marked in the test source as
//
//     // snippet: README.md#3          (the document, and the block's number in it, from 1)
//     ...the block, exactly...
//     // end snippet
//
// The copy equals the block line for line, after the common leading indentation of each is removed
// and trailing spaces are dropped, except the block's leading import lines, which cannot stand in a
// function: the test file imports the same modules instead. The markers must be line comments in
// code (not inside a block comment or a string), and the copy must be in the body of a `@Test`
// function itself, or in a closure or statement inside it, never in a nested function or type that
// may never run. Every marked copy must name a block that exists. .ci/check-snippets compiles each
// block as pasted, with its own imports; this suite makes sure a test also runs it.

/// One ```swift block of a document.
struct DocBlock: Equatable, CustomStringConvertible {
    /// The document, relative to the package root, and the block's number in it (from 1).
    var document: String
    var number: Int
    /// The line of the opening fence.
    var line: Int
    /// The modules its leading import lines import.
    var imports: [String]
    /// The rest, without the leading import lines and the blank lines around them, dedented.
    var body: [String]

    var id: String { "\(document)#\(number)" }
    var description: String { "\(id) (\(document):\(line))" }

    /// The ```swift blocks of `text`.
    static func all(in text: String, document: String) -> [DocBlock] {
        var blocks: [DocBlock] = []
        var open: (line: Int, lines: [String])?
        for (index, raw) in lines(of: text).enumerated() {
            let trimmed = raw.trimmingCharacters(in: .whitespaces)
            if var block = open {
                if trimmed == "```" {
                    blocks.append(DocBlock(document: document, number: blocks.count + 1, line: block.line, lines: block.lines))
                    open = nil
                } else {
                    block.lines.append(raw)
                    open = block
                }
            } else if trimmed == "```swift" {
                open = (index + 1, [])
            }
        }
        return blocks
    }

    init(document: String, number: Int, line: Int, lines: [String]) {
        self.document = document
        self.number = number
        self.line = line
        var rest = lines[...]
        var imports: [String] = []
        while let first = rest.first, let kind = Self.leadingKind(first) {
            if case .module(let name) = kind { imports.append(name) }
            rest = rest.dropFirst()
        }
        self.imports = imports
        self.body = dedented(Array(rest))
    }

    private enum LeadingKind { case blank, conditional, module(String) }

    /// What a leading line of a block is, if it belongs to its imports.
    private static func leadingKind(_ line: String) -> LeadingKind? {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard let first = words.first else { return .blank }
        if first == "import", words.count >= 2 { return .module(String(words[1])) }
        if first == "@testable", words.count >= 3, words[1] == "import" { return .module(String(words[2])) }
        if first == "#if", line.contains("canImport(") { return .conditional }
        if first == "#else" || first == "#endif" { return .conditional }
        return nil
    }
}

/// A marked copy of a block in a test source.
struct MarkedCopy: CustomStringConvertible {
    var file: String
    /// The line of the `// snippet:` marker.
    var line: Int
    /// What the marker names: `README.md#3`.
    var id: String
    /// The lines between the markers, dedented.
    var body: [String]
    /// Why the copy does not count as run by a test, if it does not.
    var placementProblem: String?

    var description: String { "\(file):\(line)" }
}

/// The lines of `text`, each without trailing whitespace.
func lines(of text: String) -> [String] {
    text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
        var line = Substring(line)
        while let last = line.last, last == " " || last == "\t" || last == "\r" { line = line.dropLast() }
        return String(line)
    }
}

/// `lines` without their common leading indentation, and without leading and trailing blank lines.
func dedented(_ lines: [String]) -> [String] {
    var lines = lines[...]
    while lines.first?.isEmpty == true { lines = lines.dropFirst() }
    while lines.last?.isEmpty == true { lines = lines.dropLast() }
    let indent = lines.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " || $0 == "\t" }.count }.min() ?? 0
    return lines.map { $0.isEmpty ? $0 : String($0.dropFirst(indent)) }
}

/// Finds the marked copies in a Swift source, and where each stands: a small lexer that knows
/// comments (nested block comments too), string literals (with interpolations) and braces, and
/// for each `{` what it opens, from the code before it.
enum MarkedCopies {
    private enum Scope {
        /// A function (or initializer, accessor…) body; whether it has the `@Test` attribute.
        case function(test: Bool)
        /// A type or extension body.
        case type
        /// A closure or a statement's block (`if`, `do`, `for`…): it runs where it stands.
        case transparent
    }

    static func find(in text: String, file: String) -> (copies: [MarkedCopy], problems: [String]) {
        let chars = Array(text.unicodeScalars)
        var copies: [MarkedCopy] = []
        var problems: [String] = []
        var scopes: [Scope] = []
        // The code since the last brace, `;` or statement's end: what a `{` opens. A line ends it
        // unless a parenthesis or bracket is open, or the line is an attribute (`@Test(…)`).
        var header = ""
        var line = ""
        var headerParens = 0
        var open: (line: Int, id: String, placement: String?, start: Int)?
        var lineNumber = 1
        var i = 0

        func placement() -> String? {
            for scope in scopes.reversed() {
                switch scope {
                case .transparent: continue
                case .function(let test): return test ? nil : "it is in a function that is not a @Test (it may never run)"
                case .type: return "it is in a type's body, not in a @Test function"
                }
            }
            return "it is at file scope, not in a @Test function"
        }

        func classify(_ header: String) -> Scope {
            let words = header.split(whereSeparator: { !$0.isLetter && !$0.isNumber && $0 != "_" && $0 != "@" && $0 != "#" })
            let keywords: Set<Substring> = ["func", "init", "deinit", "get", "set", "willSet", "didSet", "subscript"]
            if words.contains(where: { ["struct", "class", "actor", "enum", "extension", "protocol"].contains($0) })
                && !header.contains("=") { return .type }
            if words.contains("func") || (words.first.map { keywords.contains($0) } ?? false)
                || words.contains("init") && !header.contains(".") {
                return .function(test: words.contains("@Test"))
            }
            // A computed property: `var name: Type {`.
            if let first = words.first(where: { $0 != "private" && $0 != "static" && $0 != "public" && $0 != "nonisolated" && !$0.hasPrefix("@") }),
               first == "var", !header.contains("=") { return .function(test: false) }
            return .transparent
        }

        /// Skips a string literal starting at `i` (the opening quote), interpolations included.
        func skipString() {
            let multiline = i + 2 < chars.count && chars[i + 1] == "\"" && chars[i + 2] == "\""
            i += multiline ? 3 : 1
            while i < chars.count {
                let c = chars[i]
                if c == "\n" { lineNumber += 1 }
                if c == "\\" {
                    if i + 1 < chars.count, chars[i + 1] == "(" {
                        // An interpolation: lex it as code until its closing parenthesis.
                        i += 2
                        var depth = 1
                        while i < chars.count, depth > 0 {
                            let d = chars[i]
                            if d == "\"" { skipString(); continue }
                            if d == "(" { depth += 1 } else if d == ")" { depth -= 1 } else if d == "\n" { lineNumber += 1 }
                            i += 1
                        }
                        continue
                    }
                    i += 2
                    continue
                }
                if c == "\"" {
                    if !multiline { i += 1; return }
                    if i + 2 < chars.count, chars[i + 1] == "\"", chars[i + 2] == "\"" { i += 3; return }
                }
                i += 1
            }
        }

        let sourceLines = lines(of: text)
        while i < chars.count {
            let c = chars[i]
            let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
            if c == "\n" {
                lineNumber += 1
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if headerParens > 0 || trimmed.hasPrefix("@") {
                    header.append(" ")
                } else {
                    header = ""
                }
                line = ""
                i += 1
            } else if c == "/", next == "/" {
                var end = i
                while end < chars.count, chars[end] != "\n" { end += 1 }
                let comment = String(String.UnicodeScalarView(chars[i..<end])).trimmingCharacters(in: .whitespaces)
                if comment.hasPrefix("// snippet:") {
                    let id = comment.dropFirst("// snippet:".count).trimmingCharacters(in: .whitespaces)
                    if let previous = open { problems.append("\(file):\(lineNumber): `// snippet:` inside the copy opened at line \(previous.line)") }
                    open = (lineNumber, id, placement(), lineNumber)
                } else if comment == "// end snippet" {
                    if let copy = open {
                        let body = dedented(Array(sourceLines[copy.start..<(lineNumber - 1)]))
                        copies.append(MarkedCopy(file: file, line: copy.line, id: copy.id, body: body, placementProblem: copy.placement))
                        open = nil
                    } else {
                        problems.append("\(file):\(lineNumber): `// end snippet` without a `// snippet:` above it")
                    }
                }
                i = end
            } else if c == "/", next == "*" {
                var depth = 0
                repeat {
                    if chars[i] == "/", i + 1 < chars.count, chars[i + 1] == "*" { depth += 1; i += 2; continue }
                    if chars[i] == "*", i + 1 < chars.count, chars[i + 1] == "/" { depth -= 1; i += 2; continue }
                    if chars[i] == "\n" { lineNumber += 1 }
                    i += 1
                } while i < chars.count && depth > 0
            } else if c == "\"" {
                skipString()
                header.append("\"\"")
                line.append("\"\"")
            } else if c == "{" {
                scopes.append(classify(header))
                header = ""
                line = ""
                headerParens = 0
                i += 1
            } else if c == "}" || c == ";" {
                if c == "}", !scopes.isEmpty { scopes.removeLast() }
                header = ""
                line = ""
                headerParens = 0
                i += 1
            } else {
                if c == "(" || c == "[" { headerParens += 1 } else if c == ")" || c == "]" { headerParens = max(0, headerParens - 1) }
                header.unicodeScalars.append(c)
                line.unicodeScalars.append(c)
                i += 1
            }
        }
        if let copy = open { problems.append("\(file):\(copy.line): `// snippet: \(copy.id)` is never closed by `// end snippet`") }
        return (copies, problems)
    }
}

/// The package's files, found from this source file's place in it.
enum PackageFiles {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The documents whose blocks must be tested: README.md, Docs/*.md, and the Markdown files of
    /// the DocC catalogs in Sources/ that are not symlinks (those are the guides of Docs/).
    static func documents() -> [String] {
        var paths = ["README.md"]
        paths += entries(under: "Docs").filter { $0.hasSuffix(".md") && !isDirectory($0) }
        for target in entries(under: "Sources") where isDirectory(target) {
            for catalog in entries(under: target) where catalog.hasSuffix(".docc") {
                paths += entries(under: catalog).filter { $0.hasSuffix(".md") && !isSymlink($0) }
            }
        }
        return paths
    }

    /// The Swift files under Tests/.
    static func testSources(under path: String = "Tests") -> [String] {
        entries(under: path).flatMap { entry -> [String] in
            if isDirectory(entry) { return testSources(under: entry) }
            return entry.hasSuffix(".swift") ? [entry] : []
        }
    }

    static func text(of path: String) -> String {
        (try? String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)) ?? ""
    }

    private static func entries(under path: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(path).path)) ?? []
        return names.sorted().map { "\(path)/\($0)" }
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path, isDirectory: &isDirectory)
            && isDirectory.boolValue
    }

    private static func isSymlink(_ path: String) -> Bool {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: root.appendingPathComponent(path).path)) != nil
    }
}

/// What is wrong with the tests' copies of `blocks`: each problem, readable.
func snippetCoverageProblems(blocks: [DocBlock], sources: [(path: String, text: String)]) -> [String] {
    var problems: [String] = []
    var copies: [MarkedCopy] = []
    var importsOf: [String: Set<String>] = [:]
    for source in sources {
        let found = MarkedCopies.find(in: source.text, file: source.path)
        copies += found.copies
        problems += found.problems
        importsOf[source.path] = Set(lines(of: source.text).compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard let index = words.firstIndex(of: "import"), index + 1 < words.count else { return nil }
            return words[..<index].allSatisfy({ $0.hasPrefix("@") }) ? String(words[index + 1]) : nil
        })
    }
    let ids = Set(blocks.map(\.id))
    for copy in copies where !ids.contains(copy.id) {
        problems.append("\(copy): `// snippet: \(copy.id)` names no ```swift block (the blocks of a document are numbered from 1)")
    }
    for block in blocks {
        let held = copies.filter { $0.id == block.id }
        guard let copy = held.first else {
            problems.append("\(block) has no marked copy (`// snippet: \(block.id)`) in a test")
            continue
        }
        if held.count > 1 {
            problems.append("\(block) has \(held.count) marked copies: \(held.map(\.description).joined(separator: ", "))")
        }
        for misplaced in held {
            if let problem = misplaced.placementProblem { problems.append("\(misplaced), the copy of \(block.id): \(problem)") }
        }
        if copy.body != block.body {
            let index = zip(copy.body, block.body).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(copy.body.count, block.body.count)
            let doc = index < block.body.count ? block.body[index] : "(the block ends)"
            let test = index < copy.body.count ? copy.body[index] : "(the copy ends)"
            problems.append("\(copy), the copy of \(block.id), differs at its line \(index + 1): the document has \"\(doc)\", the test \"\(test)\"")
        }
        let missing = block.imports.filter { !(importsOf[copy.file]?.contains($0) ?? false) }
        if !missing.isEmpty {
            problems.append("\(copy.file) holds \(block.id) but does not import \(missing.joined(separator: ", "))")
        }
    }
    return problems
}

@Suite("Every Swift block of the README, Docs/ and the DocC articles has one exact copy in a test")
struct DocSnippetCoverageTests {
    @Test("Each ```swift block has exactly one marked copy, equal to it, in a @Test function; each marked copy names a block")
    func everySnippetIsTested() {
        var blocks: [DocBlock] = []
        for document in PackageFiles.documents() {
            blocks += DocBlock.all(in: PackageFiles.text(of: document), document: document)
        }
        let sources = PackageFiles.testSources().map { ($0, PackageFiles.text(of: $0)) }
        // The README and Docs/ hold more than twenty blocks: finding none means the files were not found.
        #expect(blocks.count >= 20, "found only \(blocks.count) blocks under \(PackageFiles.root.path)")
        #expect(sources.count >= 50, "found only \(sources.count) test sources")
        for problem in snippetCoverageProblems(blocks: blocks, sources: sources) {
            Issue.record(Comment(rawValue: problem))
        }
    }

    // MARK: - The checker itself

    static let document = """
        Text.

        ```swift
        import Foundation
        #if canImport(FoundationNetworking)
        import FoundationNetworking
        #endif

        let a = 1
            let b = a + 1   // indented in the doc

        print(b)
        ```

        ```sh
        swift test
        ```

        - In a list:

          ```swift
          print("second")
          ```
        """

    static let goodSource = """
        import Foundation
        #if canImport(FoundationNetworking)
        import FoundationNetworking
        #endif
        import Testing

        struct Checks {
            @Test("A title with a { brace") func first() async throws {
                let text = "a string with a } brace and \\(1 + 2) inside"
                try await run {
                    // snippet: Doc.md#1
                    let a = 1
                        let b = a + 1   // indented in the doc

                    print(b)
                    // end snippet
                }
                _ = text
            }

            @Test func second() {
                func helper() {}
                // snippet: Doc.md#2
                print("second")
                // end snippet
            }
        }
        """

    static func problems(_ source: String) -> [String] {
        snippetCoverageProblems(blocks: DocBlock.all(in: document, document: "Doc.md"), sources: [("Checks.swift", source)])
    }

    @Test("The document's blocks: numbered, imports apart, indentation and blank edges removed")
    func blocksOfADocument() {
        let blocks = DocBlock.all(in: Self.document, document: "Doc.md")
        #expect(blocks.map(\.id) == ["Doc.md#1", "Doc.md#2"])
        #expect(blocks.map(\.line) == [3, 21])
        #expect(blocks[0].imports == ["Foundation", "FoundationNetworking"])
        #expect(blocks[0].body == ["let a = 1", "    let b = a + 1   // indented in the doc", "", "print(b)"])
        #expect(blocks[1].body == ["print(\"second\")"])
    }

    @Test("Copies as written pass")
    func goodCopiesPass() {
        #expect(Self.problems(Self.goodSource) == [])
    }

    @Test("A copy with its first or last line deleted, or a line changed, fails")
    func changedCopyFails() {
        for (old, new) in [("        let a = 1\n", ""), ("        print(b)\n", ""), ("print(b)", "print(a)"),
                           ("            let b = a + 1", "        let b = a + 1")] {
            let source = Self.goodSource.replacingOccurrences(of: old, with: new)
            #expect(source != Self.goodSource)
            #expect(Self.problems(source).contains { $0.contains("the copy of Doc.md#1, differs") }, "\(old) -> \(new)")
        }
    }

    @Test("A copy in a block comment, a string, a nested function, a type or at file scope fails")
    func misplacedCopyFails() {
        let commented = Self.goodSource.replacingOccurrences(of: "// snippet: Doc.md#2", with: "/* // snippet: Doc.md#2")
            .replacingOccurrences(of: "print(\"second\")\n        // end snippet", with: "print(\"second\")\n        // end snippet */")
        #expect(Self.problems(commented).contains("Doc.md#2 (Doc.md:21) has no marked copy (`// snippet: Doc.md#2`) in a test"))
        let inString = Self.goodSource.replacingOccurrences(of: "// snippet: Doc.md#2", with: "_ = \"\"\"\n// snippet: Doc.md#2")
            .replacingOccurrences(of: "print(\"second\")\n        // end snippet", with: "print(\"second\")\n// end snippet\n\"\"\"")
        #expect(Self.problems(inString).contains("Doc.md#2 (Doc.md:21) has no marked copy (`// snippet: Doc.md#2`) in a test"))
        let nested = Self.goodSource.replacingOccurrences(of: "func helper() {}\n", with: "func helper() {\n")
            .replacingOccurrences(of: "print(\"second\")\n        // end snippet\n", with: "print(\"second\")\n        // end snippet\n}\n")
        #expect(Self.problems(nested).contains { $0.contains("the copy of Doc.md#2: it is in a function that is not a @Test") })
        let notATest = Self.goodSource.replacingOccurrences(of: "@Test func second()", with: "func second()")
        #expect(Self.problems(notATest).contains { $0.contains("the copy of Doc.md#2: it is in a function that is not a @Test") })
        let inType = Self.goodSource.replacingOccurrences(of: "func helper() {}\n", with: "struct Inner {\n")
            .replacingOccurrences(of: "print(\"second\")\n        // end snippet\n", with: "static let x = print(\"second\")\n        // end snippet\n}\n")
        #expect(Self.problems(inType).contains { $0.contains("Doc.md#2: it is in a type's body") })
        let fileScope = Self.goodSource + "\n// snippet: Doc.md#2\nprint(\"second\")\n// end snippet\n"
        #expect(Self.problems(fileScope).contains { $0.contains("it is at file scope") })
    }

    @Test("A missing, doubled or unknown copy, or a missing import, fails")
    func missingDoubledUnknownOrUnimportedFails() {
        let missing = Self.goodSource.replacingOccurrences(of: "// snippet: Doc.md#2", with: "// Doc.md#2")
            .replacingOccurrences(of: "print(\"second\")\n        // end snippet", with: "print(\"second\")")
        #expect(Self.problems(missing) == ["Doc.md#2 (Doc.md:21) has no marked copy (`// snippet: Doc.md#2`) in a test"])
        let doubled = Self.goodSource.replacingOccurrences(of: "func helper() {}\n", with: "// snippet: Doc.md#2\n print(\"second\")\n// end snippet\n")
        #expect(Self.problems(doubled).contains { $0.hasPrefix("Doc.md#2 (Doc.md:21) has 2 marked copies") })
        let unknown = Self.goodSource.replacingOccurrences(of: "func helper() {}\n", with: "// snippet: Doc.md#3\n// end snippet\n")
        #expect(Self.problems(unknown) == ["Checks.swift:22: `// snippet: Doc.md#3` names no ```swift block (the blocks of a document are numbered from 1)"])
        let unimported = Self.goodSource.replacingOccurrences(of: "import FoundationNetworking\n", with: "")
        #expect(Self.problems(unimported) == ["Checks.swift holds Doc.md#1 but does not import FoundationNetworking"])
        let unclosed = Self.goodSource.replacingOccurrences(of: "print(\"second\")\n        // end snippet", with: "print(\"second\")")
        #expect(Self.problems(unclosed).contains("Checks.swift:23: `// snippet: Doc.md#2` is never closed by `// end snippet`"))
    }
}

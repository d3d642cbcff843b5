import Foundation
import Testing

// Every ```swift snippet of the README, Docs/*.md and the DocC articles
// (Sources/*/*.docc/**/*.md) must be held, verbatim, by a test source file under Tests/, which
// compiles and runs it (ReadmeExamplesTests, DocsExamplesTests, ReadmeURLExampleTests): a snippet
// changed or added without its test fails here.
//
// "Verbatim" is line by line, with each line's leading and trailing whitespace ignored (a test
// indents the snippet into a function). A snippet's opening import lines (with the `#if
// canImport(…)` lines around them) cannot stand inside a function: they must appear together in
// the same file, as its imports.

/// One ```swift block of a document.
struct Snippet: Equatable, CustomStringConvertible {
    /// The document, relative to the package root, and the line of the opening fence.
    var document: String
    var line: Int
    /// The opening import lines (and the `#if`/`#endif` lines around them), trimmed.
    var imports: [String]
    /// The rest, trimmed, without leading and trailing blank lines.
    var body: [String]

    var description: String { "\(document):\(line)" }

    /// The ```swift blocks of `text`.
    static func all(in text: String, document: String) -> [Snippet] {
        var snippets: [Snippet] = []
        var open: (line: Int, lines: [String])?
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = trimmed(raw)
            if var block = open {
                if line == "```" {
                    snippets.append(Snippet(document: document, line: block.line, lines: block.lines))
                    open = nil
                } else {
                    block.lines.append(line)
                    open = block
                }
            } else if line == "```swift" {
                open = (index + 1, [])
            }
        }
        return snippets
    }

    init(document: String, line: Int, lines: [String]) {
        self.document = document
        self.line = line
        var rest = lines[...]
        var imports: [String] = []
        while let first = rest.first, first.isEmpty || Self.isImportLine(first) {
            if !first.isEmpty { imports.append(first) }
            rest = rest.dropFirst()
        }
        while rest.last?.isEmpty == true { rest = rest.dropLast() }
        self.imports = imports
        self.body = Array(rest)
    }

    private static func isImportLine(_ line: String) -> Bool {
        line.hasPrefix("import ") || line.hasPrefix("@testable import ") || line.hasPrefix("#if canImport(")
            || line == "#else" || line == "#endif"
    }

    /// Whether the lines of a test source file hold this snippet: its imports as one run of lines
    /// (blank lines between them ignored) and its body as another.
    func isHeld(byLinesOf source: [String]) -> Bool {
        let nonBlank = source.filter { !$0.isEmpty }
        return (imports.isEmpty || Self.contains(nonBlank, imports)) && (body.isEmpty || Self.contains(source, body))
    }

    private static func contains(_ lines: [String], _ run: [String]) -> Bool {
        guard run.count <= lines.count else { return false }
        return (0...(lines.count - run.count)).contains { start in
            lines[start..<start + run.count].elementsEqual(run)
        }
    }

    static func trimmed(_ line: Substring) -> String {
        String(line.drop { $0 == " " || $0 == "\t" }).trimmingCharacters(in: .whitespaces)
    }
}

/// The package's files, found from this source file's place in it.
enum PackageFiles {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The documents whose snippets must be tested: README.md, Docs/*.md, and every Markdown file
    /// of a DocC catalog in Sources/.
    static func documents() -> [String] {
        var paths = ["README.md"]
        paths += files(under: "Docs", recursive: false).filter { $0.hasSuffix(".md") }
        for target in directories(under: "Sources") {
            for catalog in directories(under: target) where catalog.hasSuffix(".docc") {
                paths += files(under: catalog, recursive: true).filter { $0.hasSuffix(".md") }
            }
        }
        return paths.sorted()
    }

    /// The Swift files under Tests/, each as its trimmed lines.
    static func testSources() -> [(path: String, lines: [String])] {
        files(under: "Tests", recursive: true).filter { $0.hasSuffix(".swift") }.map { path in
            (path, text(of: path).split(separator: "\n", omittingEmptySubsequences: false).map(Snippet.trimmed))
        }
    }

    static func text(of path: String) -> String {
        (try? String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)) ?? ""
    }

    private static func directories(under path: String) -> [String] {
        entries(under: path).filter { isDirectory($0) }
    }

    private static func files(under path: String, recursive: Bool) -> [String] {
        entries(under: path).flatMap { entry -> [String] in
            if isDirectory(entry) { return recursive ? files(under: entry, recursive: true) : [] }
            return [entry]
        }
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
}

@Suite("Every Swift snippet of the README, Docs/ and the DocC articles is held verbatim by a test")
struct DocSnippetCoverageTests {
    @Test("Each ```swift block appears, line by line, in a test source file")
    func everySnippetIsTested() {
        let sources = PackageFiles.testSources()
        var snippets: [Snippet] = []
        for document in PackageFiles.documents() {
            snippets += Snippet.all(in: PackageFiles.text(of: document), document: document)
        }
        // The README and Docs/ hold more than twenty snippets: finding none means the files were not found.
        #expect(snippets.count >= 20, "found only \(snippets.count) snippets under \(PackageFiles.root.path)")
        #expect(sources.count >= 50, "found only \(sources.count) test sources")
        for snippet in snippets where !sources.contains(where: { snippet.isHeld(byLinesOf: $0.lines) }) {
            let missing = snippet.body.first { line in !sources.contains { $0.lines.contains(line) } }
            Issue.record("""
                \(snippet) is not held verbatim by any test source under Tests/\
                \(missing.map { "; no test has the line: \($0)" } ?? " (its lines are not together in one file)")
                """)
        }
    }

    @Test("The matcher: a snippet held as written passes; a changed, added or reordered line fails; imports go on top")
    func matcher() {
        let document = """
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
            """
        let snippets = Snippet.all(in: document, document: "Doc.md")
        #expect(snippets.count == 1)
        let snippet = snippets[0]
        #expect(snippet.line == 3)
        #expect(snippet.imports == ["import Foundation", "#if canImport(FoundationNetworking)", "import FoundationNetworking", "#endif"])
        #expect(snippet.body == ["let a = 1", "let b = a + 1   // indented in the doc", "", "print(b)"])
        func lines(_ text: String) -> [String] {
            text.split(separator: "\n", omittingEmptySubsequences: false).map(Snippet.trimmed)
        }
        let held = lines("""
            import Foundation
            #if canImport(FoundationNetworking)
            import FoundationNetworking
            #endif

            import Testing
            func test() {
                let a = 1
                let b = a + 1   // indented in the doc

                print(b)
            }
            """)
        #expect(snippet.isHeld(byLinesOf: held))
        let changed = held.map { $0 == "print(b)" ? "print(a)" : $0 }
        #expect(!snippet.isHeld(byLinesOf: changed))
        let inserted = held.flatMap { $0 == "let a = 1" ? [$0, "let c = 3"] : [$0] }
        #expect(!snippet.isHeld(byLinesOf: inserted))
        let withoutImport = held.filter { $0 != "import FoundationNetworking" }
        #expect(!snippet.isHeld(byLinesOf: withoutImport))
        #expect(!snippet.isHeld(byLinesOf: Array(held.reversed())))
    }
}

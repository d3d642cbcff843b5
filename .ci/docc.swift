// The checks and the staging behind .ci/docc, with the toolchain alone (`swift .ci/docc.swift …`):
//
//   swift .ci/docc.swift undocumented SYMBOLGRAPH_DIR MODULE…
//       Lists every public symbol of each MODULE without a doc comment of its own, and exits 1 if
//       there is one. What counts (from `swift package dump-symbol-graph --skip-inherited-docs`):
//       every symbol of MODULE.symbols.json and MODULE@*.symbols.json whose access is public or open:
//       types, initializers, methods, properties, subscripts, enum cases, associated types, and the
//       members that implement a protocol's requirement publicly (`description`, `enqueue(_:)`, …:
//       the protocol's comment does not count, the implementation must say what it does here).
//       Left out: members the compiler synthesizes or the type inherits from a protocol extension
//       (their identifier has "::SYNTHESIZED::"; they are documented where they are written), and
//       extension blocks (an extension is not a symbol a reader looks up).
//
//   swift .ci/docc.swift stage CATALOG DESTINATION
//       Copies CATALOG to DESTINATION, reading symlinked articles through, and turns the links that
//       Docs/*.md make to each other into DocC links: in a catalog, `XGuide.md -> …/Docs/X.md` makes
//       `[text](X.md)` become `[text](doc:XGuide)` and `[text](X.md#some-heading)` become
//       `[text](doc:XGuide#Some-heading)` (GitHub's anchor to DocC's), and `[text](#some-heading)`
//       the same within one article. A relative link left over (to a file with no article in this
//       catalog) is a broken link: it is listed and the script exits 1. DocC itself then fails on a
//       `doc:` or symbol link that does not resolve (`--warnings-as-errors`).
import Foundation

enum DocCTool {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        switch (arguments.first, arguments.count) {
        case ("undocumented", 3...):
            exit(undocumented(in: URL(fileURLWithPath: arguments[1]), modules: Array(arguments[2...])))
        case ("stage", 3):
            exit(stage(catalog: URL(fileURLWithPath: arguments[1]), into: URL(fileURLWithPath: arguments[2])))
        default:
            fail("usage: swift .ci/docc.swift undocumented SYMBOLGRAPH_DIR MODULE… | stage CATALOG DESTINATION")
        }
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(2)
    }

    // MARK: Undocumented public symbols

    struct SymbolGraph: Decodable {
        struct Symbol: Decodable {
            struct Kind: Decodable { let identifier: String }
            struct Identifier: Decodable { let precise: String }
            struct DocComment: Decodable {
                struct Line: Decodable { let text: String }
                let lines: [Line]
            }
            struct Location: Decodable {
                struct Position: Decodable { let line: Int }
                let uri: String
                let position: Position
            }
            // `identifier`: its USR, where "::SYNTHESIZED::" marks a member the compiler made or a
            // protocol extension lent; `pathComponents`: the names from the module down; `docComment`:
            // its own comment only, as the graph is dumped with `--skip-inherited-docs`.
            let kind: Kind, identifier: Identifier, pathComponents: [String], accessLevel: String
            let docComment: DocComment?, location: Location?
        }
        let symbols: [Symbol]
    }

    static func undocumented(in directory: URL, modules: [String]) -> Int32 {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        var found: [String] = []
        var checked = 0
        for module in modules {
            let graphs = files.filter { $0 == "\(module).symbols.json" || $0.hasPrefix("\(module)@") && $0.hasSuffix(".symbols.json") }
            guard graphs.contains("\(module).symbols.json") else {
                fail("no symbol graph \(module).symbols.json in \(directory.path)")
            }
            for file in graphs.sorted() {
                let graph: SymbolGraph
                do {
                    graph = try JSONDecoder().decode(SymbolGraph.self, from: Data(contentsOf: directory.appendingPathComponent(file)))
                } catch {
                    fail("cannot read \(file): \(error)")
                }
                // A member with no place in the source is one the compiler derived (a `Codable`
                // type's `init(from:)`, an enum's `init(rawValue:)`): there is nowhere to comment it.
                for symbol in graph.symbols where ["public", "open"].contains(symbol.accessLevel)
                    && !symbol.identifier.precise.contains("::SYNTHESIZED::") && symbol.kind.identifier != "swift.extension"
                    && symbol.location != nil {
                    checked += 1
                    let text = symbol.docComment?.lines.map(\.text).joined().trimmingCharacters(in: .whitespaces) ?? ""
                    guard text.isEmpty else { continue }
                    let place = symbol.location.map { " (\(URL(string: $0.uri)?.lastPathComponent ?? $0.uri):\($0.position.line))" } ?? ""
                    found.append("\(module).\(symbol.pathComponents.joined(separator: ".")) [\(symbol.kind.identifier)]\(place)")
                }
            }
        }
        guard found.isEmpty else {
            print("error: \(found.count) public symbol(s) without a doc comment:")
            found.forEach { print("  \($0)") }
            return 1
        }
        print("\(checked) public symbols of \(modules.joined(separator: ", ")), each with a doc comment")
        return 0
    }

    // MARK: Staging a catalog

    static func stage(catalog: URL, into destination: URL) -> Int32 {
        let manager = FileManager.default
        try? manager.removeItem(at: destination)
        // Articles that are symlinks to a file elsewhere (Docs/X.md), by that file's name.
        var articleForFile: [String: String] = [:]
        var broken: [String] = []
        var linkTargets: [String: String] = [:]
        do {
            try manager.createDirectory(at: destination, withIntermediateDirectories: true)
            for name in try manager.contentsOfDirectory(atPath: catalog.path).sorted() {
                let source = catalog.appendingPathComponent(name)
                if let target = try? manager.destinationOfSymbolicLink(atPath: source.path), name.hasSuffix(".md") {
                    articleForFile[URL(fileURLWithPath: target).lastPathComponent] = String(name.dropLast(3))
                    linkTargets[name] = target
                }
                // copyItem copies a symlink as a symlink: read the file through it instead.
                let resolved = source.resolvingSymlinksInPath()
                guard manager.fileExists(atPath: resolved.path) else {
                    broken.append("\(name): a symlink to a file that does not exist")
                    continue
                }
                try manager.copyItem(at: resolved, to: destination.appendingPathComponent(name))
            }
        } catch {
            fail("cannot stage \(catalog.path): \(error)")
        }
        let articles = (manager.enumerator(atPath: destination.path)?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".md") }
        var headings: [String: [String]] = [:]
        for article in articles {
            headings[String((article as NSString).lastPathComponent.dropLast(3))] =
                headingTexts(in: (try? String(contentsOf: destination.appendingPathComponent(article), encoding: .utf8)) ?? "")
        }
        for article in articles.sorted() {
            let file = destination.appendingPathComponent(article)
            let name = String((article as NSString).lastPathComponent.dropLast(3))
            guard let text = try? String(contentsOf: file, encoding: .utf8) else { continue }
            let (rewritten, problems) = rewriteLinks(in: text, article: name, articleForFile: articleForFile, headings: headings)
            let place = "\(catalog.path)/\(article)" + (linkTargets[article].map { " (a symlink to \($0))" } ?? "")
            broken += problems.map { "\(place): \($0)" }
            try? rewritten.write(to: file, atomically: true, encoding: .utf8)
        }
        guard broken.isEmpty else {
            print("error: \(broken.count) broken link(s):")
            broken.forEach { print("  \($0)") }
            return 1
        }
        return 0
    }

    /// The text of every `#` heading outside code blocks.
    static func headingTexts(in markdown: String) -> [String] {
        var inCode = false
        var texts: [String] = []
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inCode.toggle() }
            guard !inCode, line.hasPrefix("#") else { continue }
            texts.append(line.drop(while: { $0 == "#" }).trimmingCharacters(in: .whitespaces))
        }
        return texts
    }

    /// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
    static func gitHubAnchor(_ heading: String) -> String {
        String(heading.lowercased().compactMap { character -> Character? in
            if character == " " { return "-" }
            return character.isLetter || character.isNumber || character == "-" || character == "_" ? character : nil
        })
    }

    /// DocC's anchor for a heading: its text, runs of spaces and dashes to one `-`, quotes dropped.
    static func doccAnchor(_ heading: String) -> String {
        heading.replacingOccurrences(of: "`", with: "")
            .components(separatedBy: CharacterSet.whitespaces.union(CharacterSet(charactersIn: "-")))
            .filter { !$0.isEmpty }.joined(separator: "-")
            .filter { !"'\"".contains($0) }
    }

    /// Rewrites `](X.md…)` and `](#…)` outside code blocks; returns the text and the links it could not resolve.
    static func rewriteLinks(in markdown: String, article: String, articleForFile: [String: String],
                             headings: [String: [String]]) -> (String, [String]) {
        let link = try! NSRegularExpression(pattern: #"\]\(([^)\s]*)\)"#)
        var inCode = false
        var problems: [String] = []
        var lines: [String] = []
        for (number, line) in markdown.components(separatedBy: "\n").enumerated() {
            if line.hasPrefix("```") { inCode.toggle() }
            guard !inCode, line.contains("](") else {
                lines.append(line)
                continue
            }
            var result = line
            for match in link.matches(in: line, range: NSRange(line.startIndex..., in: line)).reversed() {
                let target = (line as NSString).substring(with: match.range(at: 1))
                if target.isEmpty || target.hasPrefix("doc:") || target.contains("://") || target.hasPrefix("mailto:") {
                    continue
                }
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let destinationArticle = parts[0].isEmpty ? article : articleForFile[parts[0]]
                guard let destinationArticle else {
                    problems.append("line \(number + 1): \(target) has no article in this catalog")
                    continue
                }
                var doc = "doc:\(destinationArticle)"
                if parts.count == 2 {
                    guard let heading = headings[destinationArticle]?.first(where: { gitHubAnchor($0) == parts[1] }) else {
                        problems.append("line \(number + 1): \(target): no heading with that anchor")
                        continue
                    }
                    doc += "#" + doccAnchor(heading)
                }
                result = (result as NSString).replacingCharacters(in: match.range(at: 1), with: doc)
            }
            lines.append(result)
        }
        return (lines.joined(separator: "\n"), problems)
    }
}
DocCTool.main()

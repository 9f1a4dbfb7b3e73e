import Foundation

/// The plans PostgreSQL's auto_explain wrote to the server's log (`auto_explain.log_format =
/// json`), and the scans in them that read a whole big table (docs/database.md, "Planned on an
/// index").
public struct QueryPlans: Sendable {
    /// One statement as planned: its text and the scans of its plan.
    public struct Plan: Sendable {
        public var query: String
        public var scans: [Scan]
    }

    /// A scan node: how, of which table, through which index, with which index condition, and
    /// whether a `Limit` above it stops it early.
    public struct Scan: Sendable, Equatable {
        public var node: String
        public var relation: String
        public var index: String?
        public var condition: String?
        public var underLimit: Bool
    }

    public var plans: [Plan]
    /// Entries that said `plan:` but whose document did not parse: a test must see none, or it
    /// would pass over statements it never read.
    public var unreadable: Int

    /// The plans logged in `log` after byte `offset`. Each log entry starts with its timestamp;
    /// auto_explain's is `... LOG:  duration: ... ms  plan:` followed by the JSON document.
    public init(log: URL, from offset: UInt64) throws {
        let handle = try FileHandle(forReadingFrom: log)
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        let text = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        var plans: [Plan] = []
        var unreadable = 0
        for entry in Self.entries(text) {
            guard let start = entry.range(of: "plan:")?.upperBound else { continue }
            guard let document = try? JSONSerialization.jsonObject(with: Data(entry[start...].utf8)) as? [String: Any],
                  let plan = document["Plan"] as? [String: Any] else {
                unreadable += 1
                continue
            }
            var scans: [Scan] = []
            Self.collect(plan, underLimit: false, into: &scans)
            plans.append(Plan(query: (document["Query Text"] as? String ?? "").split(whereSeparator: \.isWhitespace).joined(separator: " "),
                              scans: scans))
        }
        self.plans = plans
        self.unreadable = unreadable
    }

    /// The scans of `relations` that read the whole table: a sequential scan, or an index read
    /// from end to end (no index condition) with no `Limit` to stop it, unless the index is one of
    /// `boundedIndexes` (a partial index of a backlog: the rows waiting, never the history).
    public func wholeTableScans(of relations: Set<String>, boundedIndexes: Set<String>) -> [(query: String, scan: Scan)] {
        plans.flatMap { plan in
            plan.scans.filter { scan in
                guard relations.contains(scan.relation) else { return false }
                if scan.node == "Seq Scan" { return true }
                guard scan.condition == nil, !scan.underLimit else { return false }
                return !(scan.index.map(boundedIndexes.contains) ?? false)
            }.map { (plan.query, $0) }
        }
    }

    static func entries(_ text: String) -> [Substring] {
        // A new entry: a line that starts with a date (log_line_prefix's %m).
        var entries: [Substring] = []
        var start = text.startIndex
        var lineStart = text.startIndex
        while lineStart < text.endIndex {
            let lineEnd = text[lineStart...].firstIndex(of: "\n") ?? text.endIndex
            let line = text[lineStart..<lineEnd]
            if lineStart != start, line.count > 10, line.prefix(4).allSatisfy(\.isNumber), line.dropFirst(4).first == "-" {
                entries.append(text[start..<lineStart])
                start = lineStart
            }
            lineStart = lineEnd < text.endIndex ? text.index(after: lineEnd) : text.endIndex
        }
        if start < text.endIndex { entries.append(text[start...]) }
        return entries
    }

    static func collect(_ node: [String: Any], underLimit: Bool, into scans: inout [Scan]) {
        let type = node["Node Type"] as? String ?? ""
        if let relation = node["Relation Name"] as? String, type.hasSuffix("Scan") {
            scans.append(Scan(node: type, relation: relation, index: node["Index Name"] as? String,
                              condition: (node["Index Cond"] ?? node["Recheck Cond"]) as? String, underLimit: underLimit))
        }
        // A node that reads all its input before it returns a row (a sort, an aggregate, a hash)
        // takes it whole, whatever Limit stands above it.
        // (A sorted GroupAggregate streams: it returns each group as its input moves on.)
        let takesWhole = ["Sort", "Incremental Sort", "Hash", "Materialize", "WindowAgg", "SetOp"].contains(type)
            || (type == "Aggregate" && node["Strategy"] as? String != "Sorted")
        let stopsEarly = type == "Limit" || (underLimit && !takesWhole)
        for child in node["Plans"] as? [[String: Any]] ?? [] {
            // A subplan runs whole each time it is called, and a nested loop's inner side once for
            // every outer row: no Limit above stops them early.
            let runsWhole = ["SubPlan", "InitPlan", "Inner"].contains(child["Parent Relationship"] as? String ?? "")
            collect(child, underLimit: stopsEarly && !runsWhole, into: &scans)
        }
    }
}

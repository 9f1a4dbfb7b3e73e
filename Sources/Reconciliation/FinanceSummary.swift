import Foundation
/// What finance ties out with Apple's reports: per currency and event, how many and how much, and
/// the net (`export-finance --summary`). Added up as the events stream by, in memory that grows
/// with the currencies, never with the period.
public struct FinanceSummary: Sendable, Equatable {
    public struct Line: Sendable, Equatable {
        public var count = 0
        /// Milliunits; `Int128`, so that no sum of range-checked prices can overflow.
        public var amount: Int128 = 0
        /// Events whose amount is unknown (no price anywhere): counted, not added.
        public var withoutAmount = 0
    }

    /// By currency (empty when unknown), then event.
    public private(set) var lines: [String: [FinanceEvent.Kind: Line]] = [:]

    public init() {}

    public mutating func add(_ event: FinanceEvent) {
        var line = lines[event.currency ?? "", default: [:]][event.kind, default: Line()]
        line.count += 1
        if let amount = event.amount { line.amount += Int128(amount) } else { line.withoutAmount += 1 }
        lines[event.currency ?? "", default: [:]][event.kind] = line
    }

    /// The net of a currency: every amount added, refunds negative.
    public func net(_ currency: String) -> Int128 {
        lines[currency, default: [:]].values.reduce(0) { $0 + $1.amount }
    }

    /// A table for a person: `currency  event  count  amount`, then the net per currency.
    public func text() -> String {
        var text = "currency  event            count  amount\n"
        for currency in lines.keys.sorted() {
            let shown = currency.isEmpty ? "(none)" : currency
            for kind in FinanceEvent.Kind.allCases {
                guard let line = lines[currency]?[kind] else { continue }
                text += shown.padding(toLength: 10, withPad: " ", startingAt: 0) + kind.rawValue.padding(toLength: 17, withPad: " ", startingAt: 0)
                    + String(line.count).padding(toLength: 7, withPad: " ", startingAt: 0) + MoneyText.decimal(milliunits: line.amount)
                    + (line.withoutAmount > 0 ? "  (\(line.withoutAmount) without a price)" : "") + "\n"
            }
            text += shown.padding(toLength: 10, withPad: " ", startingAt: 0) + "net".padding(toLength: 24, withPad: " ", startingAt: 0)
                + MoneyText.decimal(milliunits: net(currency)) + "\n"
        }
        return text
    }

}

import Foundation

/// One sale's appends, worked out against what the journal holds (`JournalRules.appends`).
struct Appending {
    let recorded: [JournalRecord]
    private(set) var appends: [JournalAppend] = []
    private var counts: [FinanceEvent.Kind: Int]

    init(recorded: [JournalRecord]) {
        self.recorded = recorded
        counts = Dictionary(recorded.map { ($0.kind, 1) }, uniquingKeysWith: +)
    }

    /// The sale: recorded once; when Apple's better terms arrive later (a signed price after the
    /// catalog's, another currency, an offer's price, a trial learned late), adjusted to them.
    /// Returns what the sale is worth now, which its refunds are priced from.
    mutating func sale(_ rows: [JournalTransaction]) -> SaleTerms {
        let sales = recorded.filter(\.isSale)
        // The sale is the purchase where two were recorded before sales had keys (a restored copy).
        guard let event = sales.filter({ $0.kind != .adjustment }).min(by: { ($0.kind == .purchase ? 0 : 1, $0.time, $0.transactionId)
            < ($1.kind == .purchase ? 0 : 1, $1.time, $1.transactionId) }) else {
            let saleRow = rows.first { $0.transactionId == ($0.originalTransactionId ?? $0.transactionId) }
                ?? rows.min { ($0.purchaseDate ?? .distantFuture, $0.transactionId) < ($1.purchaseDate ?? .distantFuture, $1.transactionId) }!
            let terms = SaleTerms(rows: rows, saleRow: saleRow)
            // Apple always sends a purchase date; a row without one has no sale to date. A
            // non-consumable was sold when first bought, whichever copy (a restore) told of it.
            let bought = saleRow.productType == .nonConsumable
                ? saleRow.originalPurchaseDate ?? rows.compactMap(\.originalPurchaseDate).min() ?? saleRow.purchaseDate
                : saleRow.purchaseDate
            guard let time = bought ?? rows.compactMap(\.purchaseDate).min() else { return terms }
            append(kind: Self.saleKind(rows), adjusts: nil, transactionId: saleRow.transactionId, time: time, amount: terms.amount,
                   currency: terms.currency, price: terms.price, source: terms.source)
            return terms
        }
        // A second sale recorded before sales had keys (a restored copy's) is reversed at its
        // own time, in its own period; the sale is the one that stays.
        for duplicate in sales where duplicate.kind != .adjustment && duplicate != event {
            let own = JournalRules.net(sales.filter { $0.transactionId == duplicate.transactionId })
            adjust(from: own, to: [:], adjusts: duplicate.kind, of: duplicate, price: duplicate.price, source: duplicate.amountSource)
        }
        let held = sales.filter { $0.transactionId == event.transactionId }
        let saleRow = rows.first { $0.transactionId == event.transactionId } ?? rows[0]
        let target = SaleTerms(rows: rows, saleRow: saleRow)
        let latest = held.last!
        let heldSource = held.map(\.amountSource).max { JournalRules.rank($0) < JournalRules.rank($1) }!
        let holding = SaleTerms(amount: JournalRules.net(held)[latest.currency ?? ""] ?? (latest.amount == nil ? nil : 0),
                                currency: latest.currency, price: latest.price, source: heldSource)
        // Better terms are Apple's signed ones, or any price where none was known, or other terms
        // (a trial) at the same list price. A catalog edited later changes no sale made before.
        let better = JournalRules.rank(target.source) > JournalRules.rank(heldSource)
            || (target.net != JournalRules.net(held) && (target.source == .signed || (target.price == latest.price && target.currency == latest.currency)))
        guard better else { return holding }
        adjust(from: JournalRules.net(held), to: target.net, adjusts: event.kind, of: event, price: target.price, source: target.source)
        return target
    }

    /// The refunds: one when Apple shows the sale refunded and the journal holds none open, an
    /// adjustment when its terms changed (a percentage learned after an unsigned cancellation,
    /// the sale's price corrected), a reversal when Apple no longer shows the refund.
    mutating func refund(_ rows: [JournalTransaction], sale: SaleTerms, now: Date) {
        let held = recorded.filter(\.isRefund)
        let refunds = recorded.filter { $0.kind == .refund }
        let isOpen = refunds.count > recorded.filter { $0.kind == .refundReversal }.count
        let refunded = rows.filter(\.isRefunded).sorted {
            ($0.revocationType == nil ? 1 : 0, $0.cancellationDate!, $0.transactionId) < ($1.revocationType == nil ? 1 : 0, $1.cancellationDate!, $1.transactionId)
        }
        if let row = refunded.first {
            let amount = sale.amount.map { JournalRules.refundAmount(sale: $0, revocationType: row.revocationType, percentage: row.revocationPercentage) }
            let target = SaleTerms(amount: amount, currency: sale.currency, price: sale.price, source: sale.source)
            if isOpen, let open = refunds.last {
                adjust(from: JournalRules.net(held), to: target.net, adjusts: .refund, of: open, price: sale.price, source: sale.source)
            } else {
                let refund = append(kind: .refund, adjusts: nil, transactionId: row.transactionId, time: row.cancellationDate!, amount: amount,
                                    currency: sale.currency, price: sale.price, source: sale.source)
                adjust(from: JournalRules.net(held + [refund]), to: target.net, adjusts: .refund, of: refund, price: sale.price, source: sale.source)
            }
            return
        }
        guard isOpen, let open = refunds.last else { return }
        // The refund's own row decides; a row not read says nothing.
        guard let row = rows.first(where: { $0.transactionId == open.transactionId }) else { return }
        if row.cancellationDate != nil {
            // Still cancelled, but no refund after all (an upgrade's, Family Sharing's): corrected to nothing.
            adjust(from: JournalRules.net(held), to: [:], adjusts: .refund, of: open, price: open.price, source: open.amountSource)
            return
        }
        let reversal = append(kind: .refundReversal, adjusts: nil, transactionId: open.transactionId, time: row.appleAsOf ?? now,
                              amount: open.amount.map { -$0 }, currency: open.currency, price: open.price, source: open.amountSource)
        adjust(from: JournalRules.net(held + [reversal]), to: [:], adjusts: .refundReversal, of: reversal, price: open.price, source: open.amountSource)
    }

    /// `purchase` for a sale that is its chain's first transaction (or any sale of a
    /// non-subscription), `renewal` for a subscription's later transaction.
    static func saleKind(_ rows: [JournalTransaction]) -> FinanceEvent.Kind {
        guard [.autoRenewable, .nonRenewing].contains(rows[0].productType) else { return .purchase }
        return rows.contains { $0.transactionId == ($0.originalTransactionId ?? $0.transactionId) } ? .purchase : .renewal
    }

    /// Adjustments taking `from` to `to`, per currency: what leaves a currency first, then what
    /// arrives in one, each at the time of the event it corrects.
    private mutating func adjust(from: JournalRules.Net, to: JournalRules.Net, adjusts: FinanceEvent.Kind, of event: JournalRecord,
                                 price: Int64?, source: FinanceEvent.AmountSource) {
        let deltas = Set(from.keys).union(to.keys).compactMap { currency -> (String, Int64)? in
            let delta = (to[currency] ?? 0) - (from[currency] ?? 0)
            return delta == 0 ? nil : (currency, delta)
        }.sorted { ($0.1 > 0 ? 1 : 0, $0.0) < ($1.1 > 0 ? 1 : 0, $1.0) }
        for (currency, delta) in deltas {
            append(kind: .adjustment, adjusts: adjusts, transactionId: event.transactionId, time: event.time, amount: delta,
                   currency: currency.isEmpty ? nil : currency, price: to[currency] == nil ? nil : price, source: source)
        }
    }

    @discardableResult
    private mutating func append(kind: FinanceEvent.Kind, adjusts: FinanceEvent.Kind?, transactionId: String, time: Date, amount: Int64?,
                                 currency: String?, price: Int64?, source: FinanceEvent.AmountSource) -> JournalRecord {
        counts[kind, default: 0] += 1
        appends.append(JournalAppend(kind: kind, adjusts: adjusts, transactionId: transactionId, occurrence: counts[kind]!, time: time,
                                     amount: amount, currency: currency, price: price, amountSource: amount == nil ? .none : source))
        return JournalRecord(kind: kind, adjusts: adjusts, transactionId: transactionId, time: time, amount: amount, currency: currency,
                             price: price, amountSource: source)
    }
}

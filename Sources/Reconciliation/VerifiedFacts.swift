import AppStoreModels
import Foundation

/// A price as signed transactions give it: milliunits of an ISO 4217 currency (990 EUR is 0.99 EUR).
public struct Price: Sendable, Equatable {
    public var milliunits: Int64
    public var currency: String

    public init(milliunits: Int64, currency: String) {
        self.milliunits = milliunits
        self.currency = currency
    }
}

/// Which of Apple's sources spoke.
public enum AppleSource: String, Sendable, CaseIterable, Codable {
    /// The deprecated verifyReceipt endpoint: an answer per receipt.
    case verifyReceipt = "verify_receipt"
    /// The App Store Server API: signed transactions and renewal infos per original transaction.
    case serverAPI = "server_api"
}

/// What Apple verified of one receipt (or, for the Server API, of one of an account's
/// subscriptions and purchases), in the rules' terms. The seam between Apple's sources and
/// everything after them: the rules, the diff, the writer and the reports read only this, so
/// they do not know which source spoke.
public struct VerifiedFacts: Sendable {
    /// The receipt row these facts are about; nil when they are the account's (the Server API).
    public var receiptId: Int64?
    /// Apple's current view of the transactions (verifyReceipt's `latest_receipt_info`, the
    /// Server API's transaction history): these win over `receiptTransactions` of the same id.
    public var transactions: [Transaction]
    /// The transactions the receipt itself lists (verifyReceipt's `receipt.in_app`).
    public var receiptTransactions: [Transaction]
    /// The renewal state of each subscription chain.
    public var renewals: [PendingRenewalInfo]
    /// Where the facts were verified: their transactions carry this environment.
    public var environment: AppleEnvironment
    public var source: AppleSource
    /// What signed transactions say of their money and their product's type, by transaction id.
    public var signedTerms: [String: SignedTerms] = [:]
    /// Each signed transaction's own environment, by transaction id, where it differs from
    /// `environment`: one Server API answer can hold a sandbox chain beside a production one, and
    /// each keeps its own (docs/guarantees.md, "Entitlement rules").
    public var transactionEnvironments: [String: AppleEnvironment] = [:]
    /// Each signed renewal info's own environment, by original transaction id, likewise.
    public var renewalEnvironments: [String: AppleEnvironment] = [:]

    /// Products signed data says are consumables (`type`), which verifyReceipt drops once finished.
    public var consumableProducts: Set<String> {
        Set(transactions.filter { signedTerms[$0.transactionId]?.productType == .consumable }.map(\.productId))
    }

    /// A transaction's environment: its own signed one, else the facts'.
    public func environment(ofTransaction id: String) -> AppleEnvironment { transactionEnvironments[id] ?? environment }

    /// A renewal entry's environment: its own signed one, else the facts'.
    public func environment(of renewal: PendingRenewalInfo) -> AppleEnvironment {
        renewal.originalTransactionId.flatMap { renewalEnvironments[$0] } ?? environment
    }

    public init(
        receiptId: Int64?, transactions: [Transaction], receiptTransactions: [Transaction] = [], renewals: [PendingRenewalInfo],
        environment: AppleEnvironment, source: AppleSource
    ) {
        self.receiptId = receiptId
        self.transactions = transactions
        self.receiptTransactions = receiptTransactions
        self.renewals = renewals
        self.environment = environment
        self.source = source
    }
}

extension VerifiedFacts {
    /// A verifyReceipt answer's facts.
    public init(receiptId: Int64, response: VerifyReceiptResponse, environment: AppleEnvironment) {
        self.init(
            receiptId: receiptId, transactions: response.latestReceiptInfo, receiptTransactions: response.receipt?.inApp ?? [],
            renewals: response.pendingRenewalInfo, environment: environment, source: .verifyReceipt)
    }

    /// Verified signed data's facts (the Server API, and V2 notifications): each transaction in
    /// the ledger's terms, each renewal info as verifyReceipt's pending renewal info.
    public init(receiptId: Int64?, signedTransactions: [JWSTransaction], renewalInfos: [JWSRenewalInfo], environment: AppleEnvironment) {
        self.init(
            receiptId: receiptId, transactions: signedTransactions.map(\.ledgerTransaction),
            renewals: renewalInfos.map(\.pendingRenewalInfo), environment: environment, source: .serverAPI)
        for transaction in signedTransactions {
            signedTerms[transaction.transactionId] = transaction.signedTerms
            if let own = transaction.environment, own != environment { transactionEnvironments[transaction.transactionId] = own }
        }
        for info in renewalInfos {
            if let original = info.originalTransactionId, let own = info.environment, own != environment {
                renewalEnvironments[original] = own
            }
        }
    }
}

/// What a signed transaction says of its money and of what the money meant, kept raw in the
/// ledger for the finance journal (docs/reports.md, "The finance journal"). verifyReceipt says
/// none of it.
public struct SignedTerms: Sendable, Equatable {
    /// The price Apple recorded at the purchase, when it gave both the amount and its currency.
    public var price: Price?
    /// `REFUND_FULL`, `REFUND_PRORATED`, `FAMILY_REVOKE`, as Apple wrote it.
    public var rawRevocationType: String?
    /// Milliunits of a percent, 0...100000 (checked where it is decoded).
    public var revocationPercentage: Int?
    public var rawOfferDiscountType: String?
    public var offerPeriod: String?
    /// Apple's three-letter storefront.
    public var storefront: String?
    public var appTransactionId: String?
    /// Apple's signed `type` of the product (`Auto-Renewable Subscription`, `Non-Consumable`, ...), as written.
    public var rawProductType: String?
    /// When Apple signed this snapshot of the transaction: a later one's word wins.
    public var signedDate: Date?

    public init(price: Price? = nil, rawRevocationType: String? = nil, revocationPercentage: Int? = nil, rawOfferDiscountType: String? = nil,
                offerPeriod: String? = nil, storefront: String? = nil, appTransactionId: String? = nil, rawProductType: String? = nil,
                signedDate: Date? = nil) {
        self.signedDate = signedDate
        self.price = price
        self.rawRevocationType = rawRevocationType
        self.revocationPercentage = revocationPercentage
        self.rawOfferDiscountType = rawOfferDiscountType
        self.offerPeriod = offerPeriod
        self.storefront = storefront
        self.appTransactionId = appTransactionId
        self.rawProductType = rawProductType
    }

    public var revocationType: RevocationType? { rawRevocationType.flatMap(RevocationType.init(rawValue:)) }

    /// Apple's signed type in the catalog's terms; nil when unsigned or a type this program does not know.
    public var productType: ProductType? {
        rawProductType.flatMap(SignedProductType.init(rawValue:)).flatMap { signed in ProductType.allCases.first { $0.signedType == signed } }
    }
}

extension ProductType {
    /// The type as Apple signs it (`JWSTransaction.type`).
    public var signedType: SignedProductType {
        switch self {
        case .autoRenewable: .autoRenewable
        case .nonConsumable: .nonConsumable
        case .consumable: .consumable
        case .nonRenewing: .nonRenewing
        }
    }
}

extension JWSTransaction {
    /// The transaction's own price, when Apple's signed data gave both the amount and its currency.
    public var signedPrice: Price? {
        guard let price, let currency else { return nil }
        return Price(milliunits: price, currency: currency)
    }

    /// Its money terms, as signed.
    public var signedTerms: SignedTerms {
        SignedTerms(
            price: signedPrice, rawRevocationType: rawRevocationType, revocationPercentage: revocationPercentage,
            rawOfferDiscountType: rawOfferDiscountType, offerPeriod: offerPeriod, storefront: storefront, appTransactionId: appTransactionId,
            rawProductType: rawType, signedDate: signedDate)
    }
}

extension JWSRenewalInfo {
    /// The renewal info in the rules' terms (verifyReceipt's `pending_renewal_info`). The codes
    /// pass as signed, as verifyReceipt's do: the ledger keeps a code Apple adds later, and only
    /// 1 turns auto-renew on.
    public var pendingRenewalInfo: PendingRenewalInfo {
        PendingRenewalInfo(
            originalTransactionId: originalTransactionId, productId: productId, autoRenewProductId: autoRenewProductId,
            autoRenewStatus: rawAutoRenewStatus.map { $0 == AutoRenewStatus.on.rawValue }, expirationIntent: rawExpirationIntent,
            gracePeriodExpiresDate: gracePeriodExpiresDate, isInBillingRetryPeriod: isInBillingRetryPeriod,
            priceConsentStatus: rawPriceIncreaseStatus)
    }
}

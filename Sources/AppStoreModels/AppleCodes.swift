/// What Apple's numeric codes mean, in words support can repeat to a customer: a code alone
/// (`reason 1`, `intent 2`, `21199`) tells nobody anything.
public enum AppleCodes {
    /// verifyReceipt's `status` (the App Store Receipts documentation's table).
    public static func verifyReceiptStatus(_ status: Int) -> String {
        switch status {
        case 0: "the receipt is valid"
        case 21000: "the request to the App Store was malformed"
        case 21002: "the receipt data was malformed"
        case 21003: "the receipt could not be authenticated"
        case 21004: "the shared secret does not match the account's (check APPLE_SHARED_SECRET)"
        case 21005: "the receipt server was unavailable"
        case 21006: "the subscription expired, and Apple sent no receipt"
        case 21007: "a sandbox receipt sent to production"
        case 21008: "a production receipt sent to sandbox"
        case 21009: "internal data access error"
        case 21010: "the user account cannot be found or has been deleted"
        case 21100...21199: "internal data access error"
        default: "a status Apple does not document"
        }
    }

    /// `cancellation_reason` (verifyReceipt) and `revocationReason` (signed transactions).
    public static func cancellationReason(_ code: Int) -> String {
        switch code {
        case 0: "another reason"
        case 1: "an issue in the app"
        default: "a reason Apple does not document"
        }
    }

    /// `expiration_intent` (verifyReceipt) and `expirationIntent` (signed renewal infos).
    public static func expirationIntent(_ code: Int) -> String {
        switch code {
        case 1: "the customer cancelled"
        case 2: "a billing error"
        case 3: "the customer did not agree to a price increase"
        case 4: "the product was not available at renewal"
        case 5: "an unknown error"
        default: "an intent Apple does not document"
        }
    }
}

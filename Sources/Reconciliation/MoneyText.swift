/// Money as text: the one place it is written. Amounts are integer milliunits of their currency,
/// never binary floating point, so the text is exact.
public enum MoneyText {
    /// `59.99`, `-16.5`, `0`, `230`, `0.001`: plain digits, at most three decimals, no exponent.
    /// Total: `magnitude` reads `Int64.min` too, where negation would trap.
    public static func decimal(milliunits: Int64) -> String {
        decimal(milliunits: Int128(milliunits))
    }

    /// The same for a sum (`export-finance --summary`), which no range-checked price can overflow.
    public static func decimal(milliunits: Int128) -> String {
        let magnitude = milliunits.magnitude
        var text = (milliunits < 0 ? "-" : "") + String(magnitude / 1000)
        var fraction = magnitude % 1000
        guard fraction > 0 else { return text }
        var digits = 3
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        let written = String(fraction)
        text += "." + String(repeating: "0", count: digits - written.count) + written
        return text
    }
}

import AppStore
import CommandLineValues
import AppStoreModels
import ArgumentParser
import Foundation
import Jobs
import Reconciliation
import SignedData
import Storage
import Throttling

/// `--source`, as docs/configuration.md spells it.
enum SourceOption: String, ExpressibleByArgument, CaseIterable, Sendable {
    case verifyReceipt = "verify-receipt"
    case serverAPI = "server-api"
    case both
}

/// `--authority`.
enum AuthorityOption: String, ExpressibleByArgument, CaseIterable, Sendable {
    case verifyReceipt = "verify-receipt"
    case serverAPI = "server-api"

    var appleSource: AppleSource {
        switch self {
        case .verifyReceipt: .verifyReceipt
        case .serverAPI: .serverAPI
        }
    }
}

// swift-tools-version: 6.2
import PackageDescription

let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let crypto = Target.Dependency.product(name: "Crypto", package: "swift-crypto")
let x509 = Target.Dependency.product(name: "X509", package: "swift-certificates")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")

let package = Package(
    name: "receipt-reconciler",
    products: [
        .executable(name: "receipt-reconciler", targets: ["receipt-reconciler"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        // Signed data: ES256 and SHA-256 (swift-crypto), X.509 parsing and chain verification (swift-certificates).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
    ],
    targets: [
        // C only: the two system libraries, with typed wrappers for curl's variadic calls.
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),

        // A lock the thread sanitizer understands, shared by the modules below.
        .target(name: "Locking"),

        // The stable checksums (FNV-1a: migrations, the ledger digest; MurmurHash64A: receipt blobs) and
        // SplitMix64, the one seedable generator.
        .target(name: "Hashing"),

        // Dates as text, the one owner: every timestamp written or read, by hand (no DateFormatter).
        .target(name: "CivilCalendar"),

        // The only importer of libpq.
        .target(name: "Postgres", dependencies: ["CLibPQ", "CivilCalendar", "Locking", "HTTP", logging]),
        // The only importer of libcurl.
        .target(name: "HTTP", dependencies: ["CCurl", "Locking"]),

        // Migrations/*.sql embedded into the binary at build time, and the code that applies them.
        .executableTarget(name: "embed-migrations"),

        // scripts/bench-json: the hand-written reader against JSONDecoder on real answers.
        .executableTarget(name: "bench-json", dependencies: ["AppStoreModels"]),
        // scripts/bench-signed-data: the cost of one verification of Apple's signed data.
        .executableTarget(name: "bench-signed-data", dependencies: ["AppStoreModels", "SignedData"]),
        .plugin(name: "EmbedMigrations", capability: .buildTool(), dependencies: ["embed-migrations"]),
        .target(name: "SchemaMigrations", dependencies: ["Postgres", "Hashing", "CivilCalendar", logging], plugins: ["EmbedMigrations"]),

        // Apple's data as values: the JSON models and their decoding, the local receipt decoder. No I/O,
        // no libcurl: the entitlement rules that read these cannot reach the network even by accident.
        // Lifetimes: the JSON reader's values are ~Escapable, bound to the bytes they point into.
        .target(
            name: "AppStoreModels", dependencies: ["CivilCalendar", .product(name: "SwiftASN1", package: "swift-asn1")],
            swiftSettings: [.enableExperimentalFeature("Lifetimes")]),

        // Apple's signed data (JWS) verified: the x5c chain to a trusted root with Apple's extension OIDs, the
        // ES256 signature, the app's claims. No I/O: bytes in, a verified payload or the check that failed out.
        .target(name: "SignedData", dependencies: ["AppStoreModels", "CivilCalendar", "Locking", crypto, x509, .product(name: "SwiftASN1", package: "swift-asn1")]),

        // Waiting well: bounded concurrency, request rates, backoff with jitter, the storm gate.
        .target(name: "Throttling", dependencies: ["Locking"]),

        // Apple's two clients: verifyReceipt (routing, retries, the outcome of a verification) and the App
        // Store Server API (paging, its retry policy, the ES256 JWT), each on the one AppleGateway it is
        // handed (connections, limits, the storm gate, the stop switch, Apple's budget).
        .target(name: "AppStore", dependencies: ["AppStoreModels", "HTTP", "Throttling", "Locking", crypto, logging]),

        // The local Apple (verifyReceipt, the Server API, signed notifications with a test chain) that the
        // demo, the tests and the benchmark talk to.
        .target(name: "AppleSimulator", dependencies: ["AppStoreModels", "CivilCalendar", "Hashing", "Locking", crypto, x509, .product(name: "SwiftASN1", package: "swift-asn1")]),

        // The domain, pure (no I/O): verified facts, entitlement rules, the diff, the comparison of two
        // sources, explain's decisions, the run's counts and the reports' content.
        .target(name: "Reconciliation", dependencies: ["AppStoreModels", "CivilCalendar"]),

        // Report and export files: written aside and renamed into place whole, failures named.
        .target(name: "ReportOutput"),

        // All the SQL, and every transaction: pages of accounts, batch commits, applying, notifications and
        // their transactions, the run lock, quarantine marks, the ledger's finance events, explain's evidence.
        .target(name: "Storage", dependencies: ["Postgres", "AppStoreModels", "Reconciliation", "CivilCalendar", "Hashing", "Throttling"]),

        // A run from lock to report: its phases, Apple's sources behind one seam, notifications, the safety
        // limit, the report files. No SQL and no libpq: Storage's stores and transactions only.
        .target(name: "Jobs", dependencies: ["Storage", "AppStore", "AppStoreModels", "SignedData", "Throttling", "Reconciliation", "ReportOutput", "CivilCalendar", "Locking", "HTTP", logging]),

        // What `inspect` shows of a receipt or of signed data (with every check), as text or JSON.
        .target(name: "Inspection", dependencies: ["AppStoreModels", "SignedData", "Reconciliation", "CivilCalendar"]),

        // What the command line's own values mean (durations, dates, rates, shards, Apple's URLs):
        // parsers of untrusted text, apart from the commands so that the fuzz targets reach them.
        .target(name: "CommandLineValues", dependencies: ["AppStore", "AppStoreModels", "Throttling", "CivilCalendar", "Reconciliation"]),

        // Fuzzing (scripts/fuzz, FuzzTesting/): one target for every parser of untrusted bytes. Built
        // with -sanitize=fuzzer it fuzzes; an ordinary build links without libFuzzer (its entry is a
        // weak symbol) and replays the inputs it is given: the suite replays FuzzTesting/FailCases.
        .target(name: "CFuzzDriver"),
        .executableTarget(
            name: "receipt-fuzz",
            dependencies: ["CFuzzDriver", "AppStoreModels", "SignedData", "AppleSimulator", "Reconciliation", "Inspection", "CommandLineValues", "CivilCalendar"],
            path: "Sources/FuzzTargets",
            // No top-level code: the entry point is `receipt_fuzz_main`, defined by hand for libFuzzer.
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]),

        // The executable: commands and their options, wiring, logging, exit statuses, the stop signals.
        .executableTarget(
            name: "receipt-reconciler",
            dependencies: ["Postgres", "SchemaMigrations", "AppStore", "AppStoreModels", "SignedData", "AppleSimulator", "Hashing", "CivilCalendar", "ReportOutput", "Reconciliation", "Storage", "Jobs", "Throttling", "CommandLineValues", "Inspection", "Locking", argumentParser, logging],
            path: "Sources/ReceiptReconciler"
        ),

        .target(name: "TestSupport", dependencies: ["Postgres", "HTTP", "Hashing", "Locking", "Throttling", logging], path: "Tests/TestSupport"),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "SchemaMigrations", "TestSupport", logging], exclude: ["FormerMigrations"]),
        .testTarget(name: "AppStoreTests", dependencies: ["AppStore", "AppStoreModels", "SignedData", "Throttling", "HTTP", "TestSupport", logging, crypto]),
        .testTarget(name: "SignedDataTests", dependencies: ["SignedData", "AppStoreModels", "AppleSimulator", "Hashing", "Locking", "TestSupport"]),
        .testTarget(name: "ReconciliationTests", dependencies: ["Reconciliation", "AppStoreModels", "CivilCalendar", "Hashing", "TestSupport"]),
        // A world for the tests below: a migrated database of its own, the simulator, accounts with known
        // truth, and the executable's environment (RunWorld, V2Notifications, V1Notifications, APIWorld).
        .target(
            name: "WorldSupport",
            dependencies: ["Jobs", "Storage", "SchemaMigrations", "AppStore", "AppStoreModels", "AppleSimulator", "Reconciliation", "Postgres", "TestSupport", logging],
            path: "Tests/WorldSupport"),
        // The tests of each module, by the module they test: Storage's SQL and its journal; a run of Jobs in
        // process; the executable as users run it; the house's own rules (sizes, citations, boundary lints, fuzz fail cases).
        .testTarget(name: "StorageTests", dependencies: ["Jobs", "Storage", "SchemaMigrations", "AppStore", "AppStoreModels", "SignedData", "AppleSimulator", "CivilCalendar", "Hashing", "Reconciliation", "ReportOutput", "Postgres", "TestSupport", "WorldSupport", logging], exclude: ["Golden"]),
        .testTarget(name: "JobsTests", dependencies: ["Jobs", "Storage", "SchemaMigrations", "AppStore", "AppStoreModels", "SignedData", "AppleSimulator", "CivilCalendar", "Hashing", "Reconciliation", "ReportOutput", "Postgres", "TestSupport", "WorldSupport", logging]),
        .testTarget(name: "CommandLineTests", dependencies: ["Jobs", "Storage", "SchemaMigrations", "AppStore", "AppStoreModels", "SignedData", "AppleSimulator", "CivilCalendar", "Hashing", "Reconciliation", "ReportOutput", "Postgres", "TestSupport", "WorldSupport", logging]),
        .testTarget(name: "HouseTests", dependencies: ["TestSupport"]),
    ]
)

// The compiler keeps the module boundaries: a member is visible only where its module is imported, so
// `store.connection.execute` cannot compile outside Storage even when Postgres is linked in.
for target in package.targets where target.type != .system && target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + [.enableUpcomingFeature("MemberImportVisibility")]
}

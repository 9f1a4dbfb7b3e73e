import Foundation
import Locking

/// Pauses all Apple traffic while Apple is in trouble, instead of letting every receipt burn
/// its attempts in a few seconds: when more than half of the last requests (at least
/// `minimumSamples`) failed transiently, new requests wait out a pause that doubles while the
/// trouble lasts (up to `maximumPause`) and resets after a success.
public final class StormGate: Sendable {
    private struct State {
        var outcomes: [Bool] = []  // true: transient failure
        var next = 0
        var failures = 0
        var pausedUntil = ContinuousClock.now
        var pause: Duration
        var pauses = 0
    }

    private let window: Int
    private let minimumSamples: Int
    private let basePause: Duration
    private let maximumPause: Duration
    private let state: Locked<State>

    public init(window: Int = 200, minimumSamples: Int = 20, basePause: Duration = .seconds(1), maximumPause: Duration = .seconds(60)) {
        self.window = window
        self.minimumSamples = minimumSamples
        self.basePause = basePause
        self.maximumPause = maximumPause
        state = Locked(State(pause: basePause))
    }

    /// How many times traffic was paused.
    public var pauses: Int { state.withLock { $0.pauses } }

    /// Waits while a pause is on.
    public func waitIfPaused() async {
        let until = state.withLock { $0.pausedUntil }
        if until > ContinuousClock.now { try? await Task.sleep(until: until, clock: .continuous) }
    }

    /// Records one request's result.
    public func record(transientFailure: Bool) {
        state.withLock { state in
            if state.outcomes.count < window {
                state.outcomes.append(transientFailure)
            } else {
                if state.outcomes[state.next] { state.failures -= 1 }
                state.outcomes[state.next] = transientFailure
                state.next = (state.next + 1) % window
            }
            if transientFailure { state.failures += 1 } else { state.pause = basePause }
            guard state.outcomes.count >= minimumSamples, state.failures * 2 > state.outcomes.count,
                  state.pausedUntil <= ContinuousClock.now
            else { return }
            state.pausedUntil = ContinuousClock.now + state.pause
            state.pause = min(state.pause * 2, maximumPause)
            state.pauses += 1
            // Start counting afresh after the pause: the requests after it decide.
            state.outcomes.removeAll(keepingCapacity: true)
            state.next = 0
            state.failures = 0
        }
    }
}

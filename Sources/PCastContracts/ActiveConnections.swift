import Synchronization

/// Counts connections being served, in all and per remote address: the signaling listener
/// (control plane) and the RTMP push endpoint (media services) admit connections with it.
public final class ActiveConnections: Sendable {
    public init() {}

    private let counts = Mutex<(total: Int, byAddress: [String: Int])>((0, [:]))

    /// Takes a place for a connection from `address`; false when either limit is reached.
    public func enter(_ address: String, perAddress: Int, total: Int) -> Bool {
        counts.withLock { counts in
            guard counts.total < total, counts.byAddress[address, default: 0] < perAddress else { return false }
            counts.total += 1
            counts.byAddress[address, default: 0] += 1
            return true
        }
    }

    public func leave(_ address: String) {
        counts.withLock { counts in
            counts.total -= 1
            let left = counts.byAddress[address, default: 1] - 1
            counts.byAddress[address] = left > 0 ? left : nil
        }
    }

    public var total: Int { counts.withLock { $0.total } }
}


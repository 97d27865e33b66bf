import NIOCore
import Synchronization

/// Who may hold a connection to the RTMP push endpoint.
///
/// Two budgets, so that connections nobody has authenticated cannot take an encoder's place:
/// - **Publishers**: connections that asked to publish; at most ``Limits/publishers`` in all and
///   ``Limits/perAddress`` from one address. A publish beyond them is refused ("at capacity").
/// - **Handshakes**: connections that have not asked to publish yet; at most
///   ``Limits/perAddress`` from one address, and ``Limits/pending`` in all. When the pending budget is
///   full, the oldest handshake is closed to make room: a flood from many addresses ages out
///   faster than an encoder finishes its handshake (a few round trips), so encoders still get in.
///
/// ```swift
/// var state = RTMPAdmissionState(limits: .init(perAddress: 8, publishers: 64))
/// let (ticket, evicted) = state.arrive(address: "198.18.0.7")   // ticket nil: refused
/// ```
struct RTMPAdmissionState: Sendable {
    struct Limits: Sendable, Hashable {
        var perAddress: Int
        var publishers: Int
        /// Handshakes in all; default four times the publishers.
        var pending: Int

        init(perAddress: Int, publishers: Int, pending: Int? = nil) {
            self.perAddress = perAddress
            self.publishers = publishers
            self.pending = pending ?? max(publishers * 4, perAddress)
        }
    }

    let limits: Limits
    private var nextTicket = 0
    /// Handshakes by ticket, oldest first (tickets grow).
    private var pending: [Int: String] = [:]
    private var pendingOrder: [Int] = []
    private var pendingByAddress: [String: Int] = [:]
    private var publishers: [Int: String] = [:]
    private var publishersByAddress: [String: Int] = [:]

    init(limits: Limits) {
        self.limits = limits
    }

    var pendingCount: Int { pending.count }
    var publisherCount: Int { publishers.count }

    /// A new connection from `address`: its ticket (nil: refused, its address holds as many
    /// handshakes as it may), and the handshake closed to make room for it, if any.
    mutating func arrive(address: String) -> (ticket: Int?, evicted: Int?) {
        guard pendingByAddress[address, default: 0] < limits.perAddress else { return (nil, nil) }
        var evicted: Int?
        if pending.count >= limits.pending, let oldest = pendingOrder.first(where: { pending[$0] != nil }) {
            removePending(oldest)
            evicted = oldest
        }
        nextTicket += 1
        pending[nextTicket] = address
        pendingOrder.append(nextTicket)
        pendingByAddress[address, default: 0] += 1
        return (nextTicket, evicted)
    }

    /// The connection asks to publish: true (it now holds a publisher's place) unless the
    /// publishers' budget, in all or for its address, is spent. A ticket evicted or unknown: false.
    mutating func promote(_ ticket: Int) -> Bool {
        if publishers[ticket] != nil { return true }
        guard let address = pending[ticket] else { return false }
        guard publishers.count < limits.publishers, publishersByAddress[address, default: 0] < limits.perAddress else { return false }
        removePending(ticket)
        publishers[ticket] = address
        publishersByAddress[address, default: 0] += 1
        return true
    }

    /// The connection ended.
    mutating func leave(_ ticket: Int) {
        if pending[ticket] != nil { removePending(ticket) }
        if let address = publishers.removeValue(forKey: ticket) {
            let left = publishersByAddress[address, default: 1] - 1
            publishersByAddress[address] = left > 0 ? left : nil
        }
    }

    private mutating func removePending(_ ticket: Int) {
        guard let address = pending.removeValue(forKey: ticket) else { return }
        let left = pendingByAddress[address, default: 1] - 1
        pendingByAddress[address] = left > 0 ? left : nil
        // Dropped lazily from the order; compacted once stale entries outnumber live ones.
        if pendingOrder.count > 2 * pending.count + 16 { pendingOrder.removeAll { pending[$0] == nil } }
    }
}

/// ``RTMPAdmissionState`` behind a lock, with the channels it may have to close.
final class RTMPAdmission: Sendable {
    private struct Held {
        var state: RTMPAdmissionState
        var channels: [Int: any Channel] = [:]
    }
    private let held: Mutex<Held>

    init(limits: RTMPAdmissionState.Limits) {
        held = Mutex(Held(state: RTMPAdmissionState(limits: limits)))
    }

    /// Admits `channel` from `address` as a handshake (nil: refused); closes the handshake it
    /// displaced, if any.
    func arrive(address: String, channel: any Channel) -> Int? {
        let (ticket, evicted) = held.withLock { held -> (Int?, (any Channel)?) in
            let (ticket, evicted) = held.state.arrive(address: address)
            if let ticket { held.channels[ticket] = channel }
            return (ticket, evicted.flatMap { held.channels.removeValue(forKey: $0) })
        }
        evicted?.close(promise: nil)
        return ticket
    }

    func promote(_ ticket: Int) -> Bool { held.withLock { $0.state.promote(ticket) } }

    func leave(_ ticket: Int) {
        held.withLock { held in
            held.state.leave(ticket)
            held.channels[ticket] = nil
        }
    }
}

import Foundation
import PCastProtocol
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Which way a client's media reaches a relay (``PCastOptions/mediaTransport``).
public enum MediaTransportPolicy: String, Sendable, Hashable, CaseIterable {
    /// UDP when the relay answers a probe over it within ``MediaPathProbe/deadline``, else SRTP
    /// over TCP to the relay's TCP port (networks that drop UDP).
    case automatic
    /// UDP only (the relay's UDP port must be reachable).
    case udp
    /// SRTP over TCP always.
    case tcp
}

/// Whether UDP reaches a relay: a STUN Binding request without credentials to its media port,
/// which the relay answers as a STUN server does (three tries over ``deadline``). Answers are
/// remembered per relay for a minute, so a session's flows do not each wait.
final class MediaPathProbe: Sendable {
    static let deadline: Duration = .seconds(1)
    static let memory: Duration = .seconds(60)
    private let known = Mutex<[String: (path: MediaPath, at: ContinuousClock.Instant)]>([:])

    /// The path for a flow to `host` with `transport`, as `policy` asks.
    func path(host: String, transport: MediaTransport, policy: MediaTransportPolicy) async -> MediaPath {
        switch policy {
        case .udp: return .udp
        case .tcp: return transport.tcpPort == nil ? .udp : .tcp("PCastOptions.mediaTransport is tcp")
        case .automatic:
            guard let tcpPort = transport.tcpPort else { return .udp }
            let key = "\(host)|\(transport.port)|\(tcpPort)"
            if let remembered = known.withLock({ $0[key] }), ContinuousClock.now - remembered.at < Self.memory { return remembered.path }
            // Up to a second of blocking waits: on a thread of its own, not the cooperative pool's.
            let answered = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let thread = Thread { continuation.resume(returning: Self.udpAnswers(host: host, port: transport.port, within: Self.deadline)) }
                thread.name = "pcast.udp-probe"
                thread.start()
            }
            let path: MediaPath = answered ? .udp
                : .tcp("UDP to \(host):\(transport.port) did not answer within \(Self.deadline.components.seconds) s")
            known.withLock { $0[key] = (path, .now) }
            return path
        }
    }

    /// Sends up to three probes over `within` and waits for the relay's answer to one of them.
    static func udpAnswers(host: String, port: UInt16, within deadline: Duration) -> Bool {
        guard let (address, length) = try? MediaSocket.relayAddress(host: host, port: port) else { return false }
        let fd = socket(Int32(address.ss_family), Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let transaction = STUNMessage.newTransactionID()
        // SOFTWARE pads the request beyond the answer's size: the relay answers nothing larger.
        let request = STUNMessage(kind: .request, method: .binding, transactionID: transaction,
                                  attributes: [STUNAttribute(type: STUNAttribute.software, value: Array("PCastKit UDP reachability probe".utf8))])
            .encoded(fingerprint: true)
        let end = ContinuousClock.now + deadline
        var target = address
        for attempt in 0..<3 {
            _ = request.withUnsafeBytes { raw in
                withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, raw.baseAddress, raw.count, 0, $0, length) } }
            }
            let tryEnd = min(end, ContinuousClock.now + deadline / 3 * (attempt == 2 ? 2 : 1))
            var buffer = [UInt8](repeating: 0, count: 512)
            while ContinuousClock.now < tryEnd {
                let left = tryEnd - ContinuousClock.now
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let milliseconds = Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
                guard poll(&poller, 1, milliseconds) == 1 else { continue }
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                guard count > 0, let answer = try? STUNMessage(decoding: buffer[0..<count]) else { continue }
                if answer.kind == .successResponse, answer.transactionID == transaction { return true }
            }
            if ContinuousClock.now >= end { break }
        }
        return false
    }
}

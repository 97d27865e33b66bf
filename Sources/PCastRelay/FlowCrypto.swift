import DTLS
import SRTP
import Synchronization

/// The two SRTP sessions of one flow: `inbound` unprotects what the client sends (its clientKey),
/// `outbound` protects what the relay sends it (its serverKey).
///
/// A WebRTC flow starts with random keys (nothing it sends authenticates, and it has no address to
/// be sent anything) and is keyed again by the I/O thread when its DTLS handshake ends; the
/// sessions are only touched by the I/O thread once the flow is handed over, hence
/// `@unchecked Sendable`.
/// Unchecked: the sessions are replaced by the I/O thread only (fan-out workers read them inside its fork–join); `lastHeard` is atomic.
final class FlowCrypto: @unchecked Sendable {
    private(set) var inbound: SRTPSession
    private(set) var outbound: SRTPSession
    /// Monotonic nanoseconds of the flow's latest authenticated packet (a publisher's RTP, a
    /// subscriber's RTCP; its creation until one arrives); written by the I/O thread, read by
    /// control calls.
    let lastHeard: Atomic<UInt64>
    /// A WebRTC viewer's payload types, indexed by the stream's (nil: sent as they are).
    let payloadTypes: [UInt8]?
    /// A WebRTC publisher's packets lose their header extension on arrival (see `RTPRewrite`).
    let stripsHeaderExtensions: Bool
    /// A WebRTC AV1 publisher's dependency descriptor extension id (see ``ScalableTrack``).
    let dependencyDescriptorExtension: UInt8?

    init(inbound: SRTPSession, outbound: SRTPSession, payloadTypes: [UInt8]? = nil, stripsHeaderExtensions: Bool = false,
         dependencyDescriptorExtension: UInt8? = nil) {
        self.dependencyDescriptorExtension = dependencyDescriptorExtension
        self.inbound = inbound
        self.outbound = outbound
        self.payloadTypes = payloadTypes
        self.stripsHeaderExtensions = stripsHeaderExtensions
        lastHeard = Atomic(monotonicNanoseconds())
    }

    /// The keys a DTLS handshake produced (I/O thread).
    func rekey(_ keys: DTLSSRTPKeys) throws(SRTPError) {
        let inbound = try SRTPSession(key: keys.client, direction: .inbound)
        let outbound = try SRTPSession(key: keys.server, direction: .outbound)
        self.inbound = inbound
        self.outbound = outbound
    }

    /// Rewrites the payload type of a plain RTP packet in a send slot for this flow.
    @inline(__always)
    func mapPayloadType(_ slot: UnsafeMutableRawBufferPointer) {
        guard let payloadTypes else { return }
        slot[1] = (slot[1] & 0x80) | payloadTypes[Int(slot[1] & 0x7F)]
    }
}

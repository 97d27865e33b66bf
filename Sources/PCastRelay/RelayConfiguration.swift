import Glibc
import PCastProtocol
import SRTP

/// How a ``Relay`` is set up: where it listens, which SRTP profile it hands out, and its timers
/// and buffer sizes.
///
/// ```swift
/// var configuration = RelayConfiguration()          // 127.0.0.1, ephemeral port
/// configuration.host = "0.0.0.0"
/// configuration.port = 5004
/// let relay = try Relay(configuration: configuration)
/// ```
public struct RelayConfiguration: Sendable, Hashable {
    /// IPv4 address to bind (dotted quad).
    public var host: String = "127.0.0.1"
    /// UDP port; 0 picks an ephemeral one (read it back from ``Relay/mediaPort``).
    public var port: UInt16 = 0
    /// IPv4 addresses WebRTC answers announce as host candidates (`pcast serve --public-address`):
    /// needed when the relay binds 0.0.0.0 behind an address it cannot see (NAT, a load
    /// balancer). Empty: the bound address, or every local IPv4 interface's when it binds 0.0.0.0.
    public var announcedAddresses: [String] = []
    /// A WebRTC peer silent this long after its last connectivity check is torn down (RFC 7675: 30 s).
    public var webRTCConsentTimeout: Duration = ICELiteAgent.consentTimeout
    /// A WebRTC peer that sends no valid check this long after its session was created is torn down.
    public var webRTCConnectTimeout: Duration = ICELiteAgent.connectTimeout
    /// The profile of every flow's keys.
    public var srtpProfile: SRTPProfile = .aeadAES128GCM
    /// At most one keyframe request per publisher video SSRC in this window; requests inside it
    /// are coalesced into one more at its end.
    public var keyframeRequestInterval: Duration = .milliseconds(300)
    /// Plain packets kept per publisher SSRC for NACKs.
    public var packetCacheCapacity: Int = 512
    /// How long a cached packet may still answer a NACK.
    public var packetCacheDuration: Duration = .seconds(1)
    /// How often each publisher gets the relay's receiver report.
    public var receiverReportInterval: Duration = .seconds(1)
    /// Kernel send and receive buffer asked for on the media socket (capped by `net.core.*mem_max`).
    public var socketBufferSize: Int = 4 << 20
    /// Datagrams read per `recvmmsg`.
    public var receiveBatchSize: Int = 32
    /// Datagrams sent per `sendmmsg`.
    public var sendBatchSize: Int = 64
    /// UDP segmentation offload (GSO): a subscriber's consecutive packets of one batch, as a
    /// frame's burst, leave as one message the kernel cuts into datagrams (see `SendBatch`).
    /// Used where the kernel has it (Linux 4.18); false sends every datagram as its own message.
    public var segmentationOffload = true
    /// Largest plain RTP/RTCP packet relayed; larger datagrams are dropped as unknown.
    public var maximumPacketSize: Int = 1500
    /// Threads that share a large fan-out (the I/O thread is one of them; see the relay's
    /// documentation): one per core by default, at most 64. 1 keeps the whole relay on its I/O thread.
    public var fanOutThreads: Int = RelayConfiguration.onlineCores
    /// ICE over TCP for WebRTC peers whose networks drop UDP (RFC 6544 passive candidates, RFC 4571
    /// framing) on a TCP port beside the UDP one (the same number when it is free).
    public var iceTCP = true

    /// Cores online (at least 1).
    public static var onlineCores: Int { max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

    public init(host: String = "127.0.0.1", port: UInt16 = 0) {
        self.host = host
        self.port = port
    }
}

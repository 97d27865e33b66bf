import Foundation
import GStreamer
public import Logging
public import PCastMedia
import PCastProtocol
import Synchronization

/// A media relay endpoint: an IPv4 address (or `localhost`) and a UDP port.
public struct MediaRelayAddress: Sendable, Hashable {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }
}

/// Options of ``PCast``.
public struct PCastOptions: Sendable, Hashable {
    /// The platform's signaling endpoint, `ws://host:port/ws`, or `wss://host[:port]/ws` over TLS.
    public var uri: String
    /// For `wss://`: a PEM file of certificate authorities trusted besides the system's (a
    /// private CA, a test deployment). Nil: the system's authorities only.
    public var certificateAuthorityFile: String?
    /// For `wss://` from inside the platform: the server's own certificate chain file; exactly its
    /// leaf is trusted, whatever names it was issued for (the media services' own session
    /// connects to its listener on loopback).
    package var pinnedServerCertificateFile: String?
    /// Where an adaptive playout delay starts, before its first measurements.
    public static let defaultPlayoutDelay: Duration = RTPReceiver.defaultPlayoutDelay

    /// The playout delay a subscription gets: fixed by `explicit` or ``playoutDelay``, else adaptive.
    func playoutDelaySetting(_ explicit: Duration?) -> PlayoutDelaySetting {
        (explicit ?? playoutDelay).map { .fixed($0) } ?? .adaptive(adaptivePlayoutDelayBounds)
    }
    /// The bounds of an adaptive playout delay unless ``adaptivePlayoutDelayBounds`` says otherwise.
    public static let defaultAdaptivePlayoutDelayBounds: ClosedRange<Duration> = PlayoutDelaySetting.defaultBounds
    /// Playout delay of subscribed streams (their jitter buffer). Nil (the default): each stream
    /// chooses its own from what it measures, as a browser does: the path's jitter, and room for
    /// retransmissions once packets go missing, within ``adaptivePlayoutDelayBounds``. A value
    /// fixes it. `overridePlayoutDelay` on a renderer fixes it for a while either way.
    public var playoutDelay: Duration?
    /// The bounds an adaptive playout delay stays within.
    public var adaptivePlayoutDelayBounds: ClosedRange<Duration> = PCastOptions.defaultAdaptivePlayoutDelayBounds
    /// Reconnect (and resume the session) when the connection drops. Streams keep flowing while
    /// the SDK reconnects: the platform keeps a dropped session's streams for its resume window.
    public var reconnects = true
    /// For tests and benchmarks: loss and delay imposed on received video (GStreamer's netsim).
    public var receiveImpairment: NetworkImpairment?
    /// Where this client sends media instead of the relay the platform names: a port forward, a
    /// proxy (the tests' ``UDPImpairmentProxy``). Nil: the signaling host and the relay's port.
    public var mediaRelay: MediaRelayAddress?
    /// Other nodes of the same platform (a cluster), tried in turn after ``uri`` when it cannot
    /// be reached, at start and when reconnecting. A session does not move between nodes: on
    /// another node the SDK starts a new one and joins its rooms again. Subscriptions follow:
    /// each is subscribed again there and its stream goes on playing, unless it lived on the lost
    /// node (it then ends as `failed`, as do the session's publishers; their ended reason says why).
    public var fallbackURIs: [String] = []
    /// The PCast iOS SDK's process termination signal handling: on SIGTERM or SIGINT the SDK ends this
    /// instance's streams (their viewers are told `ended`, the signal named in the description)
    /// and closes its session, then the signal ends the process as it would have. Only a signal
    /// the application neither catches nor ignores is handled. False: the application's business.
    public var enableProcessTerminationSignalHandling = true
    /// Whether the SDK logs at all (the PCast iOS SDK's `configureLogging`); ``PCast/collectLogMessages()``
    /// keeps the session's recent messages either way.
    public var configureLogging = true
    /// From which level the SDK writes to standard error. Nil (the default): the level the
    /// `PCAST_LOG_LEVEL` environment variable names (`trace`, `debug`, `info`, `notice`,
    /// `warning`, `error`, `critical`), and nothing when it is unset, as the PCast iOS SDK's console
    /// logging is off unless its environment variable asks. Process-wide: the latest instance's
    /// options hold.
    public var consoleLogLevel: Logger.Level?
    /// The PCast iOS SDK's `streamingSourceMapping`: where this client's player fetches streams delivered
    /// as HLS (a stream token with the `streaming` capability), e.g. an operator's CDN in front of
    /// the platform. Nil: from the platform itself.
    public var streamingSourceMapping: StreamingSourceMapping?
    /// How a stream delivered as HLS is played: ``StreamingPlayback/lowLatency`` (the default)
    /// follows its parts, about half a second behind the publisher; ``StreamingPlayback/segments``
    /// lets GStreamer's hlsdemux2 play whole segments, about ten seconds behind.
    public var streamingPlayback: StreamingPlayback = .lowLatency
    /// How media reaches the relay: ``MediaTransportPolicy/automatic`` (the default) takes UDP
    /// when the relay answers over it within a second, else SRTP over TCP to the relay's TCP port
    /// (networks that drop UDP); each publisher's and subscription's ``MediaPath`` says which, and why.
    public var mediaTransport: MediaTransportPolicy = .automatic

    public init(uri: String, playoutDelay: Duration? = nil, reconnects: Bool = true,
                receiveImpairment: NetworkImpairment? = nil) {
        self.uri = uri
        self.playoutDelay = playoutDelay
        self.reconnects = reconnects
        self.receiveImpairment = receiveImpairment
    }
}

/// How the SDK plays a stream delivered as HLS (``PCastOptions/streamingPlayback``).
public enum StreamingPlayback: String, Sendable, Hashable, CaseIterable {
    /// Follows the playlist's low-latency parts with blocking reloads, from the next keyframe at
    /// the live edge (a playlist without parts is played as segments).
    case lowLatency = "low-latency"
    /// GStreamer's hlsdemux2: whole segments, from three segments behind the live edge.
    case segments
}

/// Rewrites the URL of a stream delivered as HLS before the player fetches it (the PCast iOS SDK's
/// `PhenixStreamingSourceMapping`): the first match of ``patternToReplace`` (a regular
/// expression) in the playlist's URL is replaced by ``replacement`` (`$1`… name its groups). The
/// playlist's own URIs are relative, so parts and segments come from the same place.
///
/// ```swift
/// options.streamingSourceMapping = StreamingSourceMapping(patternToReplace: #"^https?://[^/]+/hls"#,
///                                                         replacement: "https://cdn.example.com/live")
/// ```
public struct StreamingSourceMapping: Sendable, Hashable {
    public var patternToReplace: String
    public var replacement: String

    public init(patternToReplace: String, replacement: String) {
        self.patternToReplace = patternToReplace
        self.replacement = replacement
    }

    /// `url` with the mapping applied; an invalid pattern is an `invalidRequest`.
    public func apply(to url: String) throws(PCastError) -> String {
        let expression: NSRegularExpression
        do {
            expression = try NSRegularExpression(pattern: patternToReplace)
        } catch {
            throw .invalidRequest("streamingSourceMapping: '\(patternToReplace)' is not a regular expression: \(error.localizedDescription)")
        }
        let whole = NSRange(url.startIndex..., in: url)
        guard let match = expression.firstMatch(in: url, range: whole), let range = Range(match.range, in: url) else { return url }
        let replaced = expression.replacementString(for: match, in: url, offset: 0, template: replacement)
        return url.replacingCharacters(in: range, with: replaced)
    }
}

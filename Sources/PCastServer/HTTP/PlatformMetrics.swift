import PCastContracts
import Prometheus
import Synchronization

/// The platform's Prometheus metrics: its own gauges and counters, and the relay's counters
/// copied from ``RelayControl/statistics()`` at every scrape.
///
/// Names (all prefixed `pcast_`): gauges `sessions`, `streams`, `subscribers`,
/// `relay_streams`, `relay_subscribers`; counters `signaling_messages_total`,
/// `signaling_refusals_total`, `relay_packets_in_total`,
/// `relay_bytes_in_total`, `relay_packets_out_total`, `relay_bytes_out_total`,
/// `relay_srtp_failures_total`, `relay_unknown_packets_total`, `relay_nacks_served_total`,
/// `relay_nacks_missed_total`, `relay_keyframe_requests_total`, `relay_webrtc_peers`,
/// `relay_stun_refusals_total`, `relay_dtls_failures_total`; in a cluster, `cluster_edges_dropped_total`
/// and `cluster_legs_pulled_again_total`; `relay_webrtc_peers` by `transport` (`udp`, `tcp`);
/// histograms `signaling_request_duration_seconds` (a request's arrival to its answer),
/// `relay_viewer_join_seconds` (a subscription to its first keyframe sent) and
/// `relay_viewer_loss_ratio` (each viewer report's fraction lost). No label grows with the
/// audience: `deploy/README.md` lists them for operators.
///
/// ```swift
/// let metrics = PlatformMetrics()
/// print(metrics.render(relay: relay.statistics()))
/// ```
public final class PlatformMetrics: Sendable {
    private let registry: PrometheusCollectorRegistry

    let sessions: Gauge
    let streams: Gauge
    let subscribers: Gauge
    let messages: Counter
    let refusals: Counter
    /// Origin: edge flows dropped unreleased (their reports stopped, or their node left).
    let edgesDropped: Counter
    /// Edge: silent legs asked of their origin again.
    let legsPulledAgain: Counter
    /// When the HTTPS certificate in use expires (seconds since 1970); absent without TLS.
    private let tlsExpiry = Mutex<Gauge?>(nil)

    private let relayStreams: Gauge
    private let relaySubscribers: Gauge
    private let relayWebRTCPeers: Gauge
    private let relayWebRTCPeersOverTCP: Gauge
    /// A signaling request's arrival to its answer (s).
    private let signalingDurations = Mutex(HistogramCounts(bounds: PlatformMetrics.signalingBounds))
    static let signalingBounds: [Double] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
    private let relayCounters: [(KeyPath<RelayStatistics, UInt64> & Sendable, Counter)]
    /// What the relay counters were at the last scrape; counters only move by the difference.
    private let lastRelay = Mutex(RelayStatistics())

    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        sessions = registry.makeGauge(descriptor: Self.name("sessions", "", "Authenticated signaling sessions"))
        streams = registry.makeGauge(descriptor: Self.name("streams", "", "Published streams"))
        subscribers = registry.makeGauge(descriptor: Self.name("subscribers", "", "Subscriptions on published streams"))
        messages = registry.makeCounter(descriptor: Self.name("signaling_messages", "total", "Signaling messages received"))
        refusals = registry.makeCounter(descriptor: Self.name("signaling_refusals", "total", "Signaling requests answered with an error"))
        edgesDropped = registry.makeCounter(descriptor: Self.name("cluster_edges_dropped", "total",
                                                                  "Origin of a cascade: edges' flows dropped unreleased (their reports stopped, or their node left the cluster)"))
        legsPulledAgain = registry.makeCounter(descriptor: Self.name("cluster_legs_pulled_again", "total",
                                                                     "Edge of a cascade: silent legs asked of their origin again"))
        relayStreams = registry.makeGauge(descriptor: Self.name("relay_streams", "", "Streams open on the relay"))
        relaySubscribers = registry.makeGauge(descriptor: Self.name("relay_subscribers", "", "Subscriber flows open on the relay"))
        let peers = Self.name("relay_webrtc_peers", "", "WebRTC peers (WHIP publishers and WHEP viewers) on the relay, by the transport of their media")
        relayWebRTCPeers = registry.makeGauge(descriptor: peers, labels: [("transport", "udp")])
        relayWebRTCPeersOverTCP = registry.makeGauge(descriptor: peers, labels: [("transport", "tcp")])
        let counters: [(KeyPath<RelayStatistics, UInt64> & Sendable, String, String)] = [
            (\.packetsIn, "relay_packets_in", "Media packets received by the relay"),
            (\.bytesIn, "relay_bytes_in", "Media bytes received by the relay"),
            (\.packetsOut, "relay_packets_out", "Media packets sent by the relay"),
            (\.bytesOut, "relay_bytes_out", "Media bytes sent by the relay"),
            (\.srtpFailures, "relay_srtp_failures", "Packets dropped for failing SRTP/SRTCP authentication (or SRTCP replay) checks"),
            (\.duplicates, "relay_duplicate_packets", "Publishers' RTP packets received twice (dropped)"),
            (\.unknownPackets, "relay_unknown_packets", "Packets from unknown SSRCs or not RTP/RTCP"),
            (\.nacksServed, "relay_nacks_served", "Retransmissions sent from the packet cache for NACKs"),
            (\.nacksMissed, "relay_nacks_missed", "NACKed packets no longer in the cache"),
            (\.keyframeRequests, "relay_keyframe_requests", "Keyframe requests (PLI/FIR) sent to publishers"),
            (\.nacksForwarded, "relay_nacks_forwarded", "NACKed packets the cache lacked, asked upstream (of the origin or the publisher)"),
            (\.gapRequests, "relay_gap_requests", "Packets asked upstream because a later one arrived first and the reordering allowance passed (publisher-leg loss)"),
            (\.upstreamRetransmissions, "relay_upstream_retransmissions", "Edge of a cascade: the origin's retransmissions sent on to the viewers that asked"),
            (\.stunRefusals, "relay_stun_refusals", "STUN messages refused (unknown ufrag, failed integrity, malformed)"),
            (\.dtlsFailures, "relay_dtls_failures", "WebRTC peers whose DTLS handshake failed (fingerprint, profile, malformed records)"),
            (\.sharedFanOuts, "relay_shared_fan_outs", "Batches of a stream's packets whose fan-out was split over the relay's threads"),
            (\.segmentedDatagrams, "relay_segmented_datagrams", "Datagrams sent in segmented (UDP GSO) messages, several to one subscriber at once"),
            (\.layerSwitches, "relay_layer_switches", "Simulcast viewers moved from one layer to another"),
            (\.nacksThrottled, "relay_nacks_throttled", "Retransmissions held back to keep within a quarter of a subscriber's estimated downlink"),
        ]
        relayCounters = counters.map { ($0.0, registry.makeCounter(descriptor: Self.name($0.1, "total", $0.2))) }
    }

    /// `pcast_<name>[_<unit>]`; an empty unit adds nothing.
    private static func name(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "pcast", metricName: name, unitName: unit, helpText: help)
    }

    /// Notes the expiry of the HTTPS certificate now in use (at start and after each reload).
    func tlsCertificate(notValidAfter: Int) {
        tlsExpiry.withLock { gauge in
            if gauge == nil {
                gauge = registry.makeGauge(descriptor: Self.name("tls_certificate_expiry_timestamp", "seconds",
                                                                 "When the HTTPS listener's certificate expires, seconds since 1970"))
            }
            gauge?.set(to: Double(notValidAfter))
        }
    }

    /// A signaling request was answered `seconds` after it arrived.
    func signalingRequest(answeredAfter seconds: Double) {
        signalingDurations.withLock { $0.record(seconds) }
    }

    /// Sets the registry gauges.
    func update(sessions: Int, streams: Int, subscribers: Int) {
        self.sessions.set(to: Double(sessions))
        self.streams.set(to: Double(streams))
        self.subscribers.set(to: Double(subscribers))
    }

    /// The Prometheus text exposition, with the relay's figures brought up to date first.
    public func render(relay statistics: RelayStatistics) -> String {
        relayStreams.set(to: Double(statistics.streams))
        relaySubscribers.set(to: Double(statistics.subscribers))
        relayWebRTCPeers.set(to: Double(statistics.webRTCPeers - statistics.webRTCPeersOverTCP))
        relayWebRTCPeersOverTCP.set(to: Double(statistics.webRTCPeersOverTCP))
        lastRelay.withLock { last in
            for (path, counter) in relayCounters {
                let now = statistics[keyPath: path]
                let before = last[keyPath: path]
                // A relay that restarted counts from zero again: start from its new figure.
                let delta = now >= before ? now - before : now
                if delta > 0 { counter.increment(by: Int64(clamping: delta)) }
            }
            last = statistics
        }
        return registry.emitToString()
            + Self.histogram("pcast_signaling_request_duration_seconds", "From a signaling request's arrival to its answer",
                             signalingDurations.withLock { $0 })
            + Self.histogram("pcast_relay_viewer_join_seconds",
                             "From a subscription to the first keyframe the relay sent its viewer (viewers it starts at a keyframe)",
                             statistics.viewerJoin)
            + Self.histogram("pcast_relay_viewer_loss_ratio", "The fraction lost in each block of viewers' receiver reports",
                             statistics.viewerLoss)
    }

    /// A histogram in the text exposition format: cumulative `_bucket` lines by `le`, `_sum`,
    /// `_count` (the registry's own histograms take observations one by one; these are counted
    /// where they happen, the relay's on its I/O thread).
    static func histogram(_ name: String, _ help: String, _ counts: HistogramCounts) -> String {
        var text = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        let cumulative = counts.cumulative
        for (index, bound) in counts.bounds.enumerated() {
            text += "\(name)_bucket{le=\"\(bound)\"} \(cumulative[index])\n"
        }
        text += "\(name)_bucket{le=\"+Inf\"} \(cumulative.last ?? 0)\n"
        text += "\(name)_sum \(counts.sum)\n\(name)_count \(counts.count)\n"
        return text
    }
}

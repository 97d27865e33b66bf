import Foundation
import GStreamer
import Logging
import PCastProtocol
import Synchronization

/// Encoder settings of a publisher.
public struct EncodingSettings: Sendable, Hashable {
    /// Video bitrate, kbit/s.
    public var videoBitrate: Int = 2500
    /// The video codec (H.264 by default, as every WebRTC client can decode it).
    public var videoCodec: VideoCodec = .h264
    /// Frames between keyframes (a PLI asks for one sooner).
    public var keyframeInterval: Int = 60
    /// Audio bitrate, bit/s.
    public var audioBitrate: Int = 64_000
    public init(videoBitrate: Int = 2500, keyframeInterval: Int = 60, audioBitrate: Int = 64_000, videoCodec: VideoCodec = .h264) {
        self.videoBitrate = videoBitrate
        self.videoCodec = videoCodec
        self.keyframeInterval = keyframeInterval
        self.audioBitrate = audioBitrate
    }
}

/// Loss and delay imposed on received video packets, with GStreamer's `netsim`, for tests and
/// benchmarks of how the receive path copes (playout delay, reordering). It acts after SRTP has
/// accepted each packet, so a retransmission of a packet it dropped is an SRTP replay the
/// receiver refuses: loss here cannot be repaired (measured: 36–46 % of frames delivered at 2 %,
/// whatever the playout delay). For loss as a network causes it, route the media through a
/// `UDPImpairmentProxy` (`PCastOptions.mediaRelay`): 99–100 % delivered at 10 %.
public struct NetworkImpairment: Sendable, Hashable, Codable {
    /// Probability that a packet is dropped (0…1).
    public var dropProbability: Double
    /// Probability that a packet is delayed, and by how much (uniform in the range, ms).
    public var delayProbability: Double
    public var delayMilliseconds: ClosedRange<Int>

    public init(dropProbability: Double = 0, delayProbability: Double = 0, delayMilliseconds: ClosedRange<Int> = 0...0) {
        self.dropProbability = dropProbability
        self.delayProbability = delayProbability
        self.delayMilliseconds = delayMilliseconds
    }

    var description: String {
        "netsim name=video-impairment drop-probability=\(dropProbability) delay-probability=\(delayProbability) min-delay=\(delayMilliseconds.lowerBound) max-delay=\(delayMilliseconds.upperBound)"
    }
}

/// A packet leaving a media pipeline for the network (RTP or RTCP, unprotected).
package struct OutgoingPacket: Sendable {
    package enum Kind: Sendable { case rtp, rtcp }
    package let kind: Kind
    package let buffer: Buffer
    package init(kind: Kind, buffer: Buffer) {
        self.kind = kind
        self.buffer = buffer
    }
}

/// Something that produces a published stream's RTP: encoded local media (``RTPPublisher``) or an
/// ingest (``IngestPublisher``). The SDK announces its tracks and carries its packets.
package protocol RTPSource: AnyObject, Sendable {
    /// What to announce in the publish request.
    var tracks: [MediaTrackDescription] { get }
    /// RTCP from the network (PLI, FIR, receiver reports).
    func receiveRTCP(_ packet: Buffer)
    /// Stops producing packets.
    func stop() async
    /// Caps the video encoder's bitrate (bits per second; nil lifts the cap). Sources that do not
    /// encode video (passed-through ingest) cannot and ignore it.
    func limitVideoBitrate(_ bitsPerSecond: Int?)
}

extension RTPSource {
    package func limitVideoBitrate(_ bitsPerSecond: Int?) {}
}

/// Network statistics of one received track.
public struct ReceivedTrackStatistics: Sendable, Hashable {
    public var kind: MediaType
    /// RTP packets and bytes that arrived (retransmissions included).
    public var packetsReceived: Int
    public var bytesReceived: Int
    /// Sequence numbers from the first to the highest seen.
    public var packetsExpected: Int
    /// Sequence numbers skipped as packets arrived: the network's loss, before any repair.
    public var packetsMissingOnArrival: Int
    /// Packets the jitter buffer gave up on (not repaired within the playout delay).
    public var packetsLost: Int
    /// Packets that arrived after their time had passed.
    public var packetsLate: Int
    /// Retransmission requests (NACKs) sent.
    public var nacksSent: Int
    /// Interarrival jitter (RFC 3550), as the jitter buffer estimates it.
    public var jitter: Duration

    /// The share of packets the network lost (0…1), before repair.
    public var lossBeforeRepair: Double { packetsExpected > 0 ? Double(packetsMissingOnArrival) / Double(packetsExpected) : 0 }
    /// The share of packets missing after repair (0…1).
    public var lossAfterRepair: Double { packetsExpected > 0 ? Double(packetsLost) / Double(packetsExpected) : 0 }
}

/// Encodes a stream's tracks to RTP: one consumer per track (encoder, payloader, RTP session) on
/// the stream's tees. Packets go to `send`; RTCP from the network comes in with ``receiveRTCP(_:)``
/// (a PLI or FIR makes the encoder send a keyframe).
///
/// ```swift
/// let rtp = try await RTPPublisher.start(stream: media.mediaStream) { packet in transport.send(packet) }
/// rtp.tracks   // what to announce in the publish request
/// ```
package final class RTPPublisher: RTPSource, Sendable {
    package let tracks: [MediaTrackDescription]
    private let consumers: [MediaConsumer]
    private let rtcpInputs: [AppSource]
    private let stopped = Atomic<Bool>(false)
    private let videoEncoder: Element?
    /// The encoder's configured bitrate, kbit/s: a limit only ever lowers it.
    private let videoBitrate: Int
    private let videoCodec: VideoCodec
    let counters: SentCounters
    private let videoSSRC: UInt32?
    /// A simulcast's layers: the valve in front of each one's encoder, by RID.
    private let layerValves: [String: Element]
    /// The user's limit and the loss-based estimate: the encoder gets the lowest of them and the
    /// configured bitrate.
    private let rate: Mutex<RateInputs>

    /// What the encoder's bitrate is the lowest of (with the configured bitrate).
    private struct RateInputs {
        /// The publishing user's limit.
        var limit: Int?
        /// The lowest limit the stream's viewers ask for, through the platform.
        var viewers: Int?
        var controller: BitrateController
        func target(configured: Int) -> Int { min(limit ?? .max, viewers ?? .max, controller.target, configured) }
    }

    /// RTP packets and bytes handed to `send`, per kind.
    final class SentCounters: Sendable {
        let videoPackets = Atomic<Int>(0), videoBytes = Atomic<Int>(0)
        let keyframesEncoded = Atomic<Int>(0)
        let audioPackets = Atomic<Int>(0), audioBytes = Atomic<Int>(0)

        func count(_ kind: MediaType, bytes: Int) {
            switch kind {
            case .video:
                videoPackets.add(1, ordering: .relaxed)
                videoBytes.add(bytes, ordering: .relaxed)
            case .audio:
                audioPackets.add(1, ordering: .relaxed)
                audioBytes.add(bytes, ordering: .relaxed)
            }
        }
    }

    private let feedback: RTCPFeedbackRecorder

    private init(tracks: [MediaTrackDescription], consumers: [MediaConsumer], rtcpInputs: [AppSource], videoEncoder: Element?,
                 layerValves: [String: Element], videoBitrate: Int, videoCodec: VideoCodec, counters: SentCounters, feedback: RTCPFeedbackRecorder) {
        self.tracks = tracks
        self.videoCodec = videoCodec
        self.layerValves = layerValves
        self.feedback = feedback
        self.consumers = consumers
        self.rtcpInputs = rtcpInputs
        self.videoEncoder = videoEncoder
        self.videoBitrate = videoBitrate
        self.counters = counters
        videoSSRC = tracks.first { $0.kind == .video }?.ssrc
        rate = Mutex(RateInputs(controller: BitrateController(maximum: videoBitrate * 1000)))
    }

    /// The estimate of what the network carries, bits per second: loss- and round-trip-based,
    /// capped by the relay's delay-based estimate (REMB) while it sends one.
    package var estimatedBitrate: Int { rate.withLock { $0.controller.target } }
    /// The relay's latest delay-based estimate of this uplink (REMB), while it holds.
    package var remoteEstimate: Int? { rate.withLock { $0.controller.remoteEstimate } }
    /// Whether the estimate holds the video below its configured bitrate (upload limited).
    package var isUploadLimited: Bool { rate.withLock { $0.controller.isLimited } }
    /// Whether the viewers' bandwidth requests hold the video below what it would otherwise send.
    package var isNetworkLimited: Bool {
        rate.withLock { rate in
            guard let viewers = rate.viewers else { return false }
            return viewers < min(rate.limit ?? .max, rate.controller.target, videoBitrate * 1000)
        }
    }

    /// RTP bytes sent so far for `kind` (headers included).
    package func bytesSent(_ kind: MediaType) -> Int {
        kind == .video ? counters.videoBytes.load(ordering: .relaxed) : counters.audioBytes.load(ordering: .relaxed)
    }

    /// RTP packets sent so far for `kind`.
    package func packetsSent(_ kind: MediaType) -> Int {
        kind == .video ? counters.videoPackets.load(ordering: .relaxed) : counters.audioPackets.load(ordering: .relaxed)
    }

    /// Sets x264enc's bitrate while it runs (x264 reconfigures at the next frame): the configured
    /// bitrate, or the limit when lower. At least 16 kbit/s.
    package func limitVideoBitrate(_ bitsPerSecond: Int?) {
        rate.withLock { rate in
            rate.limit = bitsPerSecond
            applyRate(rate)
        }
    }

    /// Encodes only the simulcast layers named (RIDs): the others' frames stop before their
    /// encoders. A layer started again begins with the keyframe its first viewer's relay asks for.
    package func setActiveLayers(_ active: Set<String>) {
        for (rid, valve) in layerValves { try? valve.set("drop", !active.contains(rid)) }
    }

    /// The simulcast layers being encoded now (RIDs); empty without simulcast.
    package var activeLayers: Set<String> {
        Set(layerValves.filter { (try? $0.value.property("drop", as: Bool.self)) == false }.map(\.key))
    }

    /// Caps the video bitrate at what the stream's viewers ask for (nil: no viewer asks), on top
    /// of the publisher's own limit and the estimate.
    package func limitVideoBitrateForViewers(_ bitsPerSecond: Int?) {
        rate.withLock { rate in
            rate.viewers = bitsPerSecond
            applyRate(rate)
        }
    }

    private func applyRate(_ rate: RateInputs) {
        let bits = rate.target(configured: videoBitrate * 1000)
        if let videoEncoder { try? videoCodec.setBitrate(bits, on: videoEncoder) }
    }

    /// Feeds the controller from receiver reports about the video SSRC.
    private func observe(_ compound: RTCPCompoundPacket) {
        guard let videoSSRC, videoEncoder != nil else { return }
        for case .receiverEstimatedMaxBitrate(let remb) in compound.packets where remb.ssrcs.contains(videoSSRC) {
            rate.withLock { rate in
                let before = rate.controller.target
                rate.controller.applyRemoteEstimate(Int(clamping: remb.bitrate))
                if rate.controller.target != before { applyRate(rate) }
            }
        }
        for case .receiverReport(let report) in compound.packets {
            for block in report.reportBlocks where block.ssrc == videoSSRC {
                let roundTrip = block.lastSenderReport != 0 ? feedback.remote(videoSSRC).roundTripTime : nil
                rate.withLock { rate in
                    let before = rate.controller.target
                    rate.controller.report(fractionLost: Double(block.fractionLost) / 256, roundTripTime: roundTrip)
                    if rate.controller.target != before { applyRate(rate) }
                }
            }
        }
    }

    static func randomSSRC() -> UInt32 { UInt32.random(in: 1...UInt32.max) }

    /// The encodings of a simulcast video from a `width`×`height` capture at `bitrate` kbit/s:
    /// the full size at that bitrate, half the size at 12 % of it and a quarter at 6 % (from
    /// 2,500 kbit/s: 2.5 Mbit/s, 300 kbit/s, 150 kbit/s). Sizes are kept even (4:2:0). The middle
    /// layer leaves a 500 kbit/s link room for its retransmissions and keyframes.
    package static func simulcastLayers(width: Int, height: Int, bitrate: Int) -> [SimulcastLayer] {
        func even(_ value: Int) -> Int { max(2, value / 2 * 2) }
        return [
            SimulcastLayer(rid: "h", width: width, height: height, bitrate: bitrate * 1000),
            SimulcastLayer(rid: "m", width: even(width / 2), height: even(height / 2), bitrate: max(100_000, bitrate * 120)),
            SimulcastLayer(rid: "l", width: even(width / 4), height: even(height / 4), bitrate: max(50_000, bitrate * 60)),
        ]
    }

    /// Starts encoding the stream's tracks. With `simulcast`, the video is encoded three times
    /// (``simulcastLayers(width:height:bitrate:)``), each layer its own SSRC and RTP session, all
    /// with one timestamp offset so a relay can switch a viewer between them at a keyframe. With a
    /// `ceiling` (the publish token's quality capability) the video is scaled to fit its box first.
    package static func start(stream: MediaStream, settings: EncodingSettings = EncodingSettings(), simulcast: Bool = false,
                             ceiling: QualityCeiling? = nil,
                             send: @escaping @Sendable (OutgoingPacket) -> Void) async throws(MediaError) -> RTPPublisher {
        var tracks: [MediaTrackDescription] = []
        var consumers: [MediaConsumer] = []
        var inputs: [AppSource] = []
        var videoEncoder: Element?
        var layerValves: [String: Element] = [:]
        let counters = SentCounters()
        let feedback = RTCPFeedbackRecorder()
        do {
            // One entry per encoding: a video with simulcast is three.
            var encodings: [(track: MediaStreamTrack, layer: SimulcastLayer?)] = []
            // The capture's size (user media names it; a subscribed stream's is known only once it flows).
            var captured: (width: Int, height: Int)?
            if let element = try? stream.engine.pipeline.element(named: "video-caps"), case .caps(let caps?) = try element.property("caps"),
               let info = caps.videoInfo {
                captured = (info.width, info.height)
            }
            for track in stream.getTracks() {
                guard simulcast, track.kind == .video else {
                    encodings.append((track, nil))
                    continue
                }
                guard let captured else {
                    throw MediaError.unsupportedFormat("simulcast needs the capture's size, and the stream's video caps give none")
                }
                let size = ceiling?.fit(width: captured.width, height: captured.height) ?? captured
                for layer in simulcastLayers(width: size.width, height: size.height, bitrate: settings.videoBitrate) { encodings.append((track, layer)) }
            }
            let timestampOffset = String(UInt32.random(in: 0..<UInt32.max))
            for (track, layer) in encodings {
                let prefix = "pub-\(track.kind)-\(UUID().uuidString.prefix(6).lowercased())"
                let ssrc = randomSSRC()
                let description: String
                let announced: MediaTrackDescription
                switch track.kind {
                case .video:
                    var values = ["prefix": prefix, "ssrc": String(ssrc)]
                    // A keyframe of at most 200 ms of a layer's bitrate: a viewer whose link just
                    // carries the layer takes it without overflowing its queue.
                    values["encoder"] = settings.videoCodec.encoder(
                        name: "\(prefix)-encoder", kilobitsPerSecond: (layer?.bitrate).map { $0 / 1000 } ?? settings.videoBitrate,
                        keyframeInterval: settings.keyframeInterval, burstMilliseconds: layer == nil ? 600 : 200)
                    values["payloader"] = settings.videoCodec.payloader(
                        name: "\(prefix)-payloader", payloadType: "96", ssrc: String(ssrc),
                        timestampOffset: layer == nil ? "4294967295" : timestampOffset)
                    if layer == nil, let ceiling {
                        if let captured {
                            let fitted = ceiling.fit(width: captured.width, height: captured.height)
                            if fitted != captured { values["size"] = "video/x-raw,width=\(fitted.width),height=\(fitted.height),pixel-aspect-ratio=1/1" }
                        } else {
                            // Size unknown yet: no larger than the box (the scaler keeps the shape).
                            values["size"] = "video/x-raw,width=(int)[2,\(ceiling.box.width)],height=(int)[2,\(ceiling.box.height)]"
                        }
                    }
                    if let layer, layer.rid != "h" { values["size"] = "video/x-raw,width=\(layer.width),height=\(layer.height)" }
                    description = try StockPipelines.template("publish-video").render(values)
                    announced = MediaTrackDescription(kind: .video, codec: settings.videoCodec.encodingName, payloadType: 96, clockRate: 90_000,
                                                      ssrc: ssrc, layer: layer)
                case .audio:
                    description = try StockPipelines.template("publish-audio").render([
                        "prefix": prefix, "ssrc": String(ssrc), "pt": "111", "bitrate": String(settings.audioBitrate)])
                    announced = MediaTrackDescription(kind: .audio, codec: "OPUS", payloadType: 111, clockRate: 48_000, ssrc: ssrc)
                }
                let consumer = try await stream.attachConsumer(description, to: track.kind)
                let pipeline = stream.engine.pipeline
                let rtp = try pipeline.appSink(named: "\(prefix)-rtp-out")
                let rtcp = try pipeline.appSink(named: "\(prefix)-rtcp-out")
                let kind = track.kind
                rtp.onSample { sample in
                    counters.count(kind, bytes: sample.buffer.size)
                    send(OutgoingPacket(kind: .rtp, buffer: sample.buffer))
                }
                if kind == .video {
                    let encoder = try pipeline.element(named: "\(prefix)-encoder")
                    // The estimate and limits steer the best encoding; the others keep their bitrates.
                    if videoEncoder == nil { videoEncoder = encoder }
                    if let layer { layerValves[layer.rid] = try pipeline.element(named: "\(prefix)-valve") }
                    encoder.pads.first { $0.isSource }?.addBufferProbe { buffer in
                        if buffer.isKeyframe { counters.keyframesEncoded.add(1, ordering: .relaxed) }
                        return .pass
                    }
                    settings.videoCodec.answerKeyframeRequests(of: encoder, keyframeInterval: settings.keyframeInterval)
                }
                rtcp.onSample { sample in
                    feedback.sent(sample.buffer)
                    send(OutgoingPacket(kind: .rtcp, buffer: sample.buffer))
                }
                inputs.append(try pipeline.appSource(named: "\(prefix)-rtcp-in"))
                consumers.append(consumer)
                tracks.append(announced)
            }
        } catch let error as MediaError {
            for consumer in consumers { await consumer.detach() }
            throw error
        } catch let error as GStreamerError {
            for consumer in consumers { await consumer.detach() }
            throw .gstreamer(error)
        } catch {
            for consumer in consumers { await consumer.detach() }
            throw .gstreamer(.flow("\(error)"))
        }
        return RTPPublisher(tracks: tracks, consumers: consumers, rtcpInputs: inputs, videoEncoder: videoEncoder,
                            layerValves: layerValves, videoBitrate: settings.videoBitrate, videoCodec: settings.videoCodec, counters: counters, feedback: feedback)
    }

    /// RTCP from the network (the relay's PLI, FIR, receiver reports: their loss drives the
    /// bitrate, see ``BitrateController``).
    package func receiveRTCP(_ packet: Buffer) {
        // Parsed once; the round trip first: the controller takes it with the same report's loss.
        if let compound = RTCPFeedbackRecorder.parse(packet) {
            feedback.received(compound)
            observe(compound)
        }
        for input in rtcpInputs { input.pushNow(RTPReceiver.arrived(packet)) }
    }

    /// `outbound-rtp` and `remote-inbound-rtp` entries for each track (see ``RTCStatsReport``).
    package func rtcStats() -> [RTCStats] {
        var entries: [RTCStats] = []
        for track in tracks {
            let remote = feedback.remote(track.ssrc)
            var outbound = RTCStats(type: "outbound-rtp", id: "outbound-\(track.kind.rawValue)-\(track.ssrc)", kind: track.kind.rawValue, ssrc: track.ssrc)
            let kind: MediaType = track.kind == .video ? .video : .audio
            outbound.packetsSent = packetsSent(kind)
            outbound.bytesSent = bytesSent(kind)
            outbound.nackCount = remote.nacks
            if kind == .video { outbound.keyFramesEncoded = counters.keyframesEncoded.load(ordering: .relaxed) }
            outbound.pliCount = remote.plis
            outbound.firCount = remote.firs
            if track.kind == .video, videoEncoder != nil {
                outbound.targetBitrate = rate.withLock { $0.target(configured: videoBitrate * 1000) }
            }
            entries.append(outbound)
            if remote.fractionLost != nil {
                var inbound = RTCStats(type: "remote-inbound-rtp", id: "remote-inbound-\(track.kind.rawValue)-\(track.ssrc)", kind: track.kind.rawValue, ssrc: track.ssrc)
                inbound.fractionLost = remote.fractionLost
                inbound.packetsLost = remote.packetsLost
                inbound.jitter = remote.jitter.map { Double($0) / Double(track.clockRate) }
                inbound.roundTripTime = remote.roundTripTime.map { Double($0 / .microseconds(1)) / 1_000_000 }
                entries.append(inbound)
            }
        }
        return entries
    }

    /// Stops encoding; the stream keeps running for its other consumers.
    package func stop() async {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        for consumer in consumers { await consumer.detach() }
    }
}

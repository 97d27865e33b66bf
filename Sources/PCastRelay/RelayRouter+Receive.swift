import PCastProtocol
import PCastContracts
import SRTP

// Every RTP and RTCP packet the relay receives comes in here, by one call: routed by its SSRC,
// authenticated with its flow's keys, taken in by its stream, and turned into what to send.

/// What the router needs of a flow's keys to take its packets in: ``FlowCrypto`` in the relay,
/// plain values in tests.
protocol RelayFlowKeys {
    /// Authenticates (and decrypts) a flow's RTP packet in place.
    func openRTP(_ packet: inout [UInt8]) throws(SRTPError)
    /// Authenticates (and decrypts) a flow's RTCP compound in place.
    func openRTCP(_ packet: inout [UInt8]) throws(SRTPError)
    /// Whether a publisher's packets lose their header extension on arrival (a WebRTC
    /// publisher's, see ``RTPRewrite/stripHeaderExtension(_:)``).
    var stripsHeaderExtensions: Bool { get }
    /// The id of the dependency descriptor extension a publisher's packets carry (a WebRTC
    /// publisher of AV1): read before the extension is stripped (see ``ScalableTrack``).
    var dependencyDescriptorExtension: UInt8? { get }
    /// An authenticated packet of the flow came at `now` (a publisher's RTP, a subscriber's RTCP).
    func heard(at now: UInt64)
}

/// What the I/O side knows of a packet's source that the packet itself does not say: a WebRTC
/// peer whose DTLS ended there (its ICE and DTLS are the I/O side's, `RelayEngine+WebRTC.swift`).
enum WebRTCSource: Sendable, Equatable {
    /// A viewer: its RTCP carries the browser's own SSRCs, so it is known by its address and
    /// routed to its relay-assigned RTCP SSRC.
    case viewer(streamId: String, rtcpSSRC: UInt32)
    /// A publisher whose simulcast layers name themselves by RID in this header extension: a
    /// packet from an SSRC not yet known is bound to the layer its RID names.
    case publisher(streamId: String, ridExtension: UInt8)
}

extension RelayRouter where Context: RelayFlowKeys {
    /// One RTP or RTCP packet from `source`, as it came (a UDP datagram, or a frame of an ICE-TCP
    /// connection): the single way packets enter the router. `peer` is asked only when the packet
    /// cannot be routed by its SSRC alone (a WebRTC viewer's RTCP, a WebRTC publisher's new layer).
    ///
    /// Returns what to send, in order: ``RelayAction/forward(_:)`` for a publisher packet every
    /// subscriber gets (the I/O side gathers a batch's worth and fans them out together),
    /// retransmissions, feedback to the publisher and the publisher's reports to each subscriber.
    /// A packet that is not RTP or RTCP, routes nowhere or does not authenticate changes nothing
    /// and is counted (``RouterCounters/unknownPackets``, ``RouterCounters/srtpFailures``,
    /// ``RouterCounters/duplicates``). STUN and DTLS never come here (RFC 7983 demultiplexing is
    /// the I/O side's first look at a datagram).
    mutating func receive(
        datagram data: UnsafeRawBufferPointer, from source: RelayAddress, now: UInt64, peer: @autoclosure () -> WebRTCSource? = nil
    ) -> [RelayAction<Context>] {
        guard data.count >= 8, data[0] & 0xC0 == 0x80 else {
            state.counters.unknownPackets += 1
            return []
        }
        // RFC 5761 §4: payload types 192–223 in the second byte are RTCP.
        if (192...223).contains(data[1]) {
            // A WebRTC viewer's RTCP carries its own SSRCs: it is known by its address.
            if case .viewer(let streamId, let rtcpSSRC)? = peer(), let handle = handle(streamId: streamId) {
                return subscriberRTCP(data, stream: handle, rtcpSSRC: rtcpSSRC, from: source, now: now)
            }
            switch routes[Self.bigEndian32(data, 4)] {
            case .track(let handle, _)?:
                return publisherRTCP(data, stream: handle, from: source, now: now)
            case .subscriber(let handle, let rtcpSSRC)?:
                return subscriberRTCP(data, stream: handle, rtcpSSRC: rtcpSSRC, from: source, now: now)
            case nil:
                state.counters.unknownPackets += 1
                return []
            }
        }
        guard data.count >= RTPPacketLayout.fixedHeaderLength else {
            state.counters.unknownPackets += 1
            return []
        }
        let ssrc = Self.bigEndian32(data, 8)
        if case .track(let handle, let track)? = routes[ssrc] {
            return publisherRTP(data, stream: handle, track: track, from: source, now: now, binding: nil)
        }
        if case .publisher(let streamId, let ridExtension)? = peer(), let handle = handle(streamId: streamId),
           let track = layer(of: data, stream: handle, ridExtension: ridExtension) {
            return publisherRTP(data, stream: handle, track: track, from: source, now: now, binding: ssrc)
        }
        state.counters.unknownPackets += 1
        return []
    }

    @inline(__always)
    static func bigEndian32(_ data: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
        UInt32(data[offset]) << 24 | UInt32(data[offset + 1]) << 16 | UInt32(data[offset + 2]) << 8 | UInt32(data[offset + 3])
    }

    /// The simulcast layer a WebRTC publisher's packet from an SSRC not yet known belongs to, by
    /// the RID in its header extension (read before SRTP: headers are authenticated, not
    /// encrypted; the binding waits for the packet to authenticate).
    private func layer(of data: UnsafeRawBufferPointer, stream: StreamHandle, ridExtension: UInt8) -> Int? {
        guard let layout = try? RTPPacketLayout(parsing: data), let rid = layout.extensionElement(ridExtension, in: data) else { return nil }
        return layerTrack(stream: stream, rid: String(decoding: data[rid], as: UTF8.self))
    }

    /// A publisher's RTP packet: authenticated, bound to its layer when it is a new SSRC of one,
    /// cached and counted; forwarded unless it answers an edge's own request.
    private mutating func publisherRTP(
        _ data: UnsafeRawBufferPointer, stream handle: StreamHandle, track: Int, from source: RelayAddress, now: UInt64, binding wireSSRC: UInt32?
    ) -> [RelayAction<Context>] {
        guard let keys = publisherContext(stream: handle) else { return [] }
        var packet = [UInt8](data)
        do throws(SRTPError) { try keys.openRTP(&packet) } catch {
            // A packet that authenticates but was had before is a duplicate (an origin's
            // retransmission crossing the original, a network's copy), not a forgery.
            guard error == .replayed else {
                state.counters.srtpFailures += 1
                return []
            }
            state.counters.duplicates += 1
            // Its header is in the clear: the copy of a packet asked for tells the relay's
            // recovery that the first to come was the packet itself, overtaken on the way.
            guard packet.count >= RTPPacketLayout.fixedHeaderLength,
                  let action = publisherDuplicate(stream: handle, track: track, sequenceNumber: UInt16(packet[2]) << 8 | UInt16(packet[3]), now: now)
            else { return [] }
            return [action]
        }
        if let wireSSRC { bindWireSSRC(stream: handle, track: track, ssrc: wireSSRC) }
        authenticated(.track(stream: handle, track: track), from: source)
        keys.heard(at: now)
        var descriptor: [UInt8]?
        if let id = keys.dependencyDescriptorExtension {
            descriptor = packet.withUnsafeBytes { bytes in
                (try? RTPPacketLayout(parsing: bytes))?.extensionElement(id, in: bytes).map { [UInt8](bytes[$0]) }
            }
        }
        if keys.stripsHeaderExtensions {
            RTPRewrite.stripHeaderExtension(&packet)
            // A WebRTC simulcast layer goes on under the SSRC it was declared with.
            if let declared = declaredSSRC(stream: handle, track: track) {
                packet.withUnsafeMutableBytes { $0.storeBytes(of: declared.bigEndian, toByteOffset: 8, as: UInt32.self) }
            }
        }
        let layout: RTPPacketLayout
        do { layout = try RTPPacketLayout(parsing: packet) } catch {
            state.counters.unknownPackets += 1
            return []
        }
        var actions: [RelayAction<Context>] = []
        if let remb = publisherRTP(stream: handle, track: track, packet: packet, sequenceNumber: layout.sequenceNumber,
                                   timestamp: layout.timestamp, now: now) {
            actions.append(remb)
        }
        // On an edge, a retransmission it asked the origin for goes to those who asked only.
        if let answers = answerRequested(stream: handle, track: track, sequenceNumber: layout.sequenceNumber, packet: packet) {
            return actions + answers
        }
        let layers = withStream(handle) { stream, state in
            stream.readLayers(track: track, packet: packet, descriptor: descriptor, now: now, &state)
        } ?? nil
        actions.append(.forward(PendingPacket(stream: handle, track: track, video: isVideo(stream: handle, track: track),
                                              packet: packet, arrival: now, layers: layers)))
        return actions
    }

    /// A publisher's RTCP: its sender reports noted, and passed on to each subscriber.
    private mutating func publisherRTCP(
        _ data: UnsafeRawBufferPointer, stream handle: StreamHandle, from source: RelayAddress, now: UInt64
    ) -> [RelayAction<Context>] {
        guard let keys = publisherContext(stream: handle) else { return [] }
        var packet = [UInt8](data)
        do throws(SRTPError) { try keys.openRTCP(&packet) } catch {
            state.counters.srtpFailures += 1
            return []
        }
        authenticated(.track(stream: handle, track: 0), from: source)
        // A WebRTC simulcast layer's reports go on under the SSRC it was declared with.
        for (wire, declared) in wireSSRCs(stream: handle) { RTPRewrite.replaceSenderSSRC(&packet, wire, with: declared) }
        let compound: RTCPCompoundPacket
        do { compound = try RTCPCompoundPacket(parsing: packet) } catch {
            state.counters.unknownPackets += 1
            return []
        }
        guard publisherRTCP(stream: handle, packets: compound.packets, now: now) else { return [] }
        // Parsed, so at least one header's 8 bytes.
        let sender = UInt32(packet[4]) << 24 | UInt32(packet[5]) << 16 | UInt32(packet[6]) << 8 | UInt32(packet[7])
        return streams[handle]?.subscriberCopies(of: packet, senderSSRC: sender) ?? []
    }

    /// A subscriber's RTCP: where it is now, its reports, NACKs and keyframe requests.
    private mutating func subscriberRTCP(
        _ data: UnsafeRawBufferPointer, stream handle: StreamHandle, rtcpSSRC: UInt32, from source: RelayAddress, now: UInt64
    ) -> [RelayAction<Context>] {
        guard let keys = subscriberContext(stream: handle, rtcpSSRC: rtcpSSRC) else { return [] }
        var packet = [UInt8](data)
        do throws(SRTPError) { try keys.openRTCP(&packet) } catch {
            state.counters.srtpFailures += 1
            return []
        }
        keys.heard(at: now)
        var actions = authenticated(.subscriber(stream: handle, rtcpSSRC: rtcpSSRC), from: source, now: now)
        let compound: RTCPCompoundPacket
        do { compound = try RTCPCompoundPacket(parsing: packet) } catch {
            state.counters.unknownPackets += 1
            return actions
        }
        actions += subscriberRTCP(stream: handle, rtcpSSRC: rtcpSSRC, packets: compound.packets, now: now)
        return actions
    }
}

extension RelayFlowKeys {
    var dependencyDescriptorExtension: UInt8? { nil }
}

extension FlowCrypto: RelayFlowKeys {
    func openRTP(_ packet: inout [UInt8]) throws(SRTPError) { try inbound.unprotect(&packet) }
    func openRTCP(_ packet: inout [UInt8]) throws(SRTPError) { try inbound.unprotectRTCP(&packet) }
    func heard(at now: UInt64) { lastHeard.store(now, ordering: .relaxed) }
}

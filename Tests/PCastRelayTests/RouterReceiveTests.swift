import PCastProtocol
@testable import PCastRelay
import SRTP
import Testing

/// A flow's keys without cryptography: a packet "authenticates" when it ends with the tag byte
/// 0xA5 (which opening removes); an RTP packet whose sequence number this flow has opened before
/// is a replay, as SRTP's check would say.
final class TagKeys: RelayFlowKeys, Equatable, CustomStringConvertible {
    static let tag: UInt8 = 0xA5
    let name: String
    let stripsHeaderExtensions: Bool
    private(set) var heardAt: UInt64?
    private var opened = Set<UInt16>()

    init(_ name: String, stripsHeaderExtensions: Bool = false) {
        self.name = name
        self.stripsHeaderExtensions = stripsHeaderExtensions
    }

    static func seal(_ packet: [UInt8]) -> [UInt8] { packet + [tag] }

    func openRTP(_ packet: inout [UInt8]) throws(SRTPError) {
        guard packet.count >= 13, packet.last == Self.tag else { throw .authenticationFailed }
        guard opened.insert(UInt16(packet[2]) << 8 | UInt16(packet[3])).inserted else { throw .replayed }
        packet.removeLast()
    }

    func openRTCP(_ packet: inout [UInt8]) throws(SRTPError) {
        guard packet.last == Self.tag else { throw .authenticationFailed }
        packet.removeLast()
    }

    func heard(at now: UInt64) { heardAt = now }

    static func == (a: TagKeys, b: TagKeys) -> Bool { a === b }
    var description: String { name }
}

/// ``RelayRouter/receive(datagram:from:now:peer:)``: the one way a packet enters the router.
@Suite("Relay router: receiving a packet")
struct RouterReceiveTests {
    static let ms: UInt64 = 1_000_000
    static let video: UInt32 = 0xAAAA_0001
    static let audio: UInt32 = 0xAAAA_0002
    static let publisherAddress = RelayAddress(ipv4: 0x7F00_0001, port: 4000)
    static let viewerAddress = RelayAddress(ipv4: 0x7F00_0001, port: 4100)

    static func receive(_ router: inout RelayRouter<TagKeys>, _ datagram: [UInt8], from source: RelayAddress, at now: UInt64,
                        peer: WebRTCSource? = nil) -> [RelayAction<TagKeys>] {
        datagram.withUnsafeBytes { router.receive(datagram: $0, from: source, now: now, peer: peer) }
    }

    static func router(publisher: TagKeys) -> RelayRouter<TagKeys> {
        var settings = RouterSettings(relaySSRC: 9)
        settings.arrivalEstimator = nil
        var router = RelayRouter<TagKeys>(settings: settings, now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: video), audioTrack(ssrc: audio)], publisher: publisher)
        return router
    }

    @Test("a publisher's packet is opened with its flow's keys, tells where the publisher is and comes back as one forward of the plain packet; a forged one, a copy, an SSRC nobody sends, a datagram that is not RTP and a short one send nothing, change nothing and are counted")
    func publisherPackets() throws {
        let publisher = TagKeys("publisher")
        var router = Self.router(publisher: publisher)
        let stream = try #require(router.handle(streamId: "s"))
        let plain = try rtpPacket(ssrc: Self.video, sequence: 10)
        #expect(Self.receive(&router, TagKeys.seal(plain), from: Self.publisherAddress, at: 5 * Self.ms)
                == [.forward(PendingPacket(stream: stream, track: 0, video: true, packet: plain, arrival: 5 * Self.ms))])
        #expect(router.streams[stream]?.publisher.address == Self.publisherAddress)
        #expect(publisher.heardAt == 5 * Self.ms)
        let audio = try rtpPacket(ssrc: Self.audio, sequence: 7, payloadType: 111)
        #expect(Self.receive(&router, TagKeys.seal(audio), from: Self.publisherAddress, at: 6 * Self.ms)
                == [.forward(PendingPacket(stream: stream, track: 1, video: false, packet: audio, arrival: 6 * Self.ms))])

        var forged = TagKeys.seal(try rtpPacket(ssrc: Self.video, sequence: 11))
        forged[forged.count - 1] = 0
        let elsewhere = RelayAddress(ipv4: 0x7F00_0001, port: 4999)
        #expect(Self.receive(&router, forged, from: elsewhere, at: 7 * Self.ms) == [])
        #expect(router.counters.srtpFailures == 1)
        #expect(router.streams[stream]?.publisher.address == Self.publisherAddress, "a forged packet moves nobody")
        #expect(router.streams[stream]?.tracks[0].cache.holds(sequenceNumber: 11) == false, "nor is it cached")
        #expect(publisher.heardAt == 6 * Self.ms)

        #expect(Self.receive(&router, TagKeys.seal(plain), from: Self.publisherAddress, at: 8 * Self.ms) == [])
        #expect(router.counters.duplicates == 1, "a copy of packet 10")

        #expect(Self.receive(&router, TagKeys.seal(try rtpPacket(ssrc: 0xDEAD_BEEF, sequence: 1)), from: Self.publisherAddress, at: 9 * Self.ms) == [])
        #expect(Self.receive(&router, [0x40] + [UInt8](repeating: 0, count: 20), from: Self.publisherAddress, at: 9 * Self.ms) == [])
        #expect(Self.receive(&router, [0x80, 96, 0, 1, 0, 0, 0, 0, 0xAA], from: Self.publisherAddress, at: 9 * Self.ms) == [])
        #expect(Self.receive(&router, [], from: Self.publisherAddress, at: 9 * Self.ms) == [])
        #expect(router.counters.unknownPackets == 4)
        #expect(router.counters.srtpFailures == 1 && router.counters.duplicates == 1)
    }

    @Test("a subscriber's RTCP comes in the same way: it tells where the subscriber is, and its NACK is answered from the cache there; the publisher's sender report goes on to each subscriber heard from, and a report the subscriber's keys do not open is counted and answered with nothing")
    func feedback() throws {
        let publisher = TagKeys("publisher"), heard = TagKeys("heard"), silent = TagKeys("silent")
        var router = Self.router(publisher: publisher)
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: heard, now: 0)
        _ = router.addSubscriber(streamId: "s", subscriberId: "b", rtcpSSRC: 501, context: silent, now: 0)
        let plain = try rtpPacket(ssrc: Self.video, sequence: 10)
        _ = Self.receive(&router, TagKeys.seal(plain), from: Self.publisherAddress, at: 1 * Self.ms)

        let nack = try RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: 500)),
                                                    .genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.video, lostSequenceNumbers: [10]))]).serialized()
        var forged = TagKeys.seal(nack)
        forged[forged.count - 1] = 1
        #expect(Self.receive(&router, forged, from: Self.viewerAddress, at: 2 * Self.ms) == [])
        #expect(router.counters.srtpFailures == 1 && heard.heardAt == nil)

        let actions = Self.receive(&router, TagKeys.seal(nack), from: Self.viewerAddress, at: 3 * Self.ms)
        #expect(actions.contains(.retransmit(heard, Self.viewerAddress, rtp: plain)), "\(actions)")
        #expect(heard.heardAt == 3 * Self.ms)
        #expect(router.counters.nacksServed == 1)

        let report = try RTCPCompoundPacket(packets: [.senderReport(RTCPSenderReport(
            ssrc: Self.video, ntpTimestamp: 1 << 32, rtpTimestamp: 3000, packetCount: 1, octetCount: 400))]).serialized()
        #expect(Self.receive(&router, TagKeys.seal(report), from: Self.publisherAddress, at: 4 * Self.ms)
                == [.toSubscriber(heard, Self.viewerAddress, rtcp: report)], "not to the subscriber never heard from")
    }

    @Test("a WebRTC viewer's RTCP, under the browser's own SSRC, reaches its flow by what the I/O side knows of its address; a WebRTC publisher's new SSRC is bound to the simulcast layer its RID names and forwarded without its header extension under the layer's declared SSRC; without that knowledge both are unknown packets")
    func webRTCSources() throws {
        let publisher = TagKeys("browser publisher", stripsHeaderExtensions: true), viewer = TagKeys("browser viewer")
        var router = RelayRouter<TagKeys>(settings: RouterSettings(relaySSRC: 9), now: 0)
        let high: UInt32 = 0x1000, low: UInt32 = 0x3000
        router.addStream(id: "s", tracks: [
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: high,
                                  layer: SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000)),
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: low,
                                  layer: SimulcastLayer(rid: "l", width: 320, height: 180, bitrate: 150_000)),
        ], publisher: publisher)
        let stream = try #require(router.handle(streamId: "s"))

        let browserSSRC: UInt32 = 0x7777
        let withRID = try RTPPacket(payloadType: 96, sequenceNumber: 20, timestamp: 90, ssrc: browserSSRC,
                                    headerExtension: .oneByte([RTPHeaderExtensionElement(id: 4, data: Array("l".utf8))]),
                                    payload: [0x41, 0x9A][...]).serialized()
        #expect(Self.receive(&router, TagKeys.seal(withRID), from: Self.publisherAddress, at: 1 * Self.ms) == [])
        #expect(router.counters.unknownPackets == 1, "an SSRC nobody declared, from nobody known")
        let bound = Self.receive(&router, TagKeys.seal(withRID), from: Self.publisherAddress, at: 2 * Self.ms,
                                 peer: .publisher(streamId: "s", ridExtension: 4))
        let expected = try RTPPacket(payloadType: 96, sequenceNumber: 20, timestamp: 90, ssrc: low, payload: [0x41, 0x9A][...]).serialized()
        #expect(bound == [.forward(PendingPacket(stream: stream, track: 1, video: true, packet: expected, arrival: 2 * Self.ms))])
        #expect(router.route(ssrc: browserSSRC) == .track(stream: stream, track: 1), "the browser's SSRC routes to the layer from now on")

        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: viewer, now: 0)
        let browserReport = TagKeys.seal(try RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: 0xB0B0))]).serialized())
        #expect(Self.receive(&router, browserReport, from: Self.viewerAddress, at: 3 * Self.ms) == [])
        #expect(router.counters.unknownPackets == 2 && viewer.heardAt == nil)
        _ = Self.receive(&router, browserReport, from: Self.viewerAddress, at: 4 * Self.ms, peer: .viewer(streamId: "s", rtcpSSRC: 500))
        #expect(viewer.heardAt == 4 * Self.ms)
        #expect(router.reachableSubscriber(stream: stream, slot: 0)?.1 == Self.viewerAddress)
    }

    @Test("a stream handle kept after its stream was removed finds nothing: every call by it answers empty, none traps, and the next stream gets another handle")
    func staleHandle() throws {
        let publisher = TagKeys("publisher")
        var router = Self.router(publisher: publisher)
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: TagKeys("a"), now: 0)
        let stale = try #require(router.handle(streamId: "s"))
        router.removeStream(id: "s")
        router.addStream(id: "s", tracks: [videoTrack(ssrc: Self.video)], publisher: publisher)
        let fresh = try #require(router.handle(streamId: "s"))
        #expect(fresh != stale)
        let packet = try rtpPacket(ssrc: Self.video, sequence: 1)
        #expect(router.publisherRTP(stream: stale, track: 0, packet: packet, sequenceNumber: 1, timestamp: 0, now: 0) == nil)
        #expect(router.publisherDuplicate(stream: stale, track: 0, sequenceNumber: 1, now: 0) == nil)
        #expect(router.answerRequested(stream: stale, track: 0, sequenceNumber: 1, packet: packet) == nil)
        #expect(router.forwardVideo(stream: stale, track: 0, slot: 0, packet: packet, now: 0) == .unchanged)
        #expect(router.subscriberRTCP(stream: stale, rtcpSSRC: 500, packets: [.pictureLossIndication(.init(senderSSRC: 500, mediaSSRC: Self.video))], now: 0) == [])
        #expect(router.authenticated(.subscriber(stream: stale, rtcpSSRC: 500), from: Self.viewerAddress, now: 0) == [])
        #expect(router.receiverReport(stream: stale, now: 0) == nil)
        #expect(router.publisherRTCP(stream: stale, packets: [], now: 0) == false)
        #expect(!router.isVideo(stream: stale, track: 0) && router.reachableSubscriber(stream: stale, slot: 0) == nil)
        #expect(router.streams[fresh]?.subscribers.isEmpty == true, "the new stream is untouched")
    }
}

import Foundation
import Glibc
import PCastContracts
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

/// The control contract (errors, SSRC bookkeeping) and the relay's lifecycle.
@Suite("Relay control")
struct RelayControlTests {
    @Test("SSRCs are unique across flows: a taken SSRC is ssrcInUse until its flow is removed")
    func ssrcInUse() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let first = try relay.addPublisher(streamId: "a", tracks: [videoTrack(ssrc: 1), audioTrack(ssrc: 2)])
        #expect(first.rtcpSSRC == nil && first.port == relay.mediaPort && first.clientKey != first.serverKey)
        #expect(throws: RelayError.ssrcInUse(2)) { try relay.addPublisher(streamId: "b", tracks: [audioTrack(ssrc: 2)]) }
        #expect(throws: RelayError.streamExists("a")) { try relay.addPublisher(streamId: "a", tracks: [videoTrack(ssrc: 3)]) }
        #expect(throws: RelayError.ssrcInUse(relay.relaySSRC)) { try relay.addPublisher(streamId: "c", tracks: [videoTrack(ssrc: relay.relaySSRC)]) }

        let subscriber = try relay.addSubscriber(streamId: "a", subscriberId: "x")
        let rtcpSSRC = try #require(subscriber.rtcpSSRC)
        #expect(![1, 2, relay.relaySSRC].contains(rtcpSSRC))
        #expect(throws: RelayError.ssrcInUse(rtcpSSRC)) { try relay.addPublisher(streamId: "d", tracks: [videoTrack(ssrc: rtcpSSRC)]) }

        relay.removeStream(streamId: "a")
        _ = try relay.addPublisher(streamId: "e", tracks: [videoTrack(ssrc: 2), videoTrack(ssrc: rtcpSSRC)])
        #expect(relay.statistics().streams == 1)
    }

    @Test("the relay tells its handler when a simulcast's watched layers gain one (a first viewer, a viewer pinned to a layer nobody watched), not when they only shrink")
    func watchedLayersGrow() async throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let layered = [("h", 1280, 2_500_000), ("m", 640, 400_000), ("l", 320, 150_000)].enumerated().map { index, layer in
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: UInt32(31 + index),
                                  layer: SimulcastLayer(rid: layer.0, width: layer.1, height: layer.1 * 9 / 16, bitrate: layer.2))
        }
        _ = try relay.addPublisher(streamId: "s", tracks: layered)
        let told = Counter()
        relay.onWatchedLayersGrew { _ = told.increment() }
        _ = try relay.addSubscriber(streamId: "s", subscriberId: "v")
        #expect(await eventually(.seconds(5)) { told.value == 1 })
        let first = try #require(relay.watchedLayers(streamId: "s"))
        #expect(first.count == 1 && !first.contains("l"), "a new viewer starts on one layer above the smallest: \(first)")

        relay.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "l")
        #expect(await eventually(.seconds(5)) { told.value == 2 })
        #expect(relay.watchedLayers(streamId: "s")?.contains("l") == true)

        relay.removeSubscriber(streamId: "s", subscriberId: "v")
        #expect(await eventually(.seconds(5)) { relay.watchedLayers(streamId: "s") == [] })
        #expect(told.value == 2, "a shrinking set wakes nothing")
    }

    @Test("invalid tracks, unknown streams and a stopped relay are typed errors")
    func errors() throws {
        let relay = try Relay()
        #expect(throws: RelayError.invalidTracks("no tracks")) { try relay.addPublisher(streamId: "a", tracks: []) }
        #expect(throws: RelayError.invalidTracks("SSRC 5 appears twice")) { try relay.addPublisher(streamId: "a", tracks: [videoTrack(ssrc: 5), audioTrack(ssrc: 5)]) }
        #expect(throws: RelayError.self) { try relay.addPublisher(streamId: "a", tracks: [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 72, clockRate: 90_000, ssrc: 9)]) }
        #expect(throws: RelayError.invalidTracks("SSRC 0")) { try relay.addPublisher(streamId: "a", tracks: [videoTrack(ssrc: 0)]) }
        #expect(throws: RelayError.invalidTracks("clock rate 4000000000")) {
            try relay.addPublisher(streamId: "a", tracks: [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 4_000_000_000, ssrc: 9)])
        }
        #expect(throws: RelayError.invalidTracks("empty stream id")) { try relay.addPublisher(streamId: "", tracks: [videoTrack(ssrc: 9)]) }
        #expect(throws: RelayError.streamNotFound("nope")) { try relay.addSubscriber(streamId: "nope", subscriberId: "x") }

        _ = try relay.addPublisher(streamId: "a", tracks: [videoTrack(ssrc: 5)])
        let once = try relay.addSubscriber(streamId: "a", subscriberId: "x")
        let again = try relay.addSubscriber(streamId: "a", subscriberId: "x")
        #expect(once.rtcpSSRC != again.rtcpSSRC && once.clientKey != again.clientKey, "subscribing again replaces the flow")
        #expect(relay.statistics().subscribers == 1)

        relay.shutdown()
        relay.shutdown()
        #expect(throws: RelayError.stopped) { try relay.addPublisher(streamId: "b", tracks: [videoTrack(ssrc: 6)]) }
        #expect(throws: RelayError.stopped) { try relay.addSubscriber(streamId: "a", subscriberId: "y") }
        relay.removeStream(streamId: "a")
    }

    @Test("binding a port that is taken, or a host that is not an IP address, is a socket error; an IPv6 host binds")
    func bindErrors() throws {
        let first = try Relay()
        defer { first.shutdown() }
        #expect(throws: RelayError.socket(operation: "bind(127.0.0.1:\(first.mediaPort))", errno: EADDRINUSE)) {
            try Relay(configuration: RelayConfiguration(port: first.mediaPort))
        }
        #expect(throws: RelayError.socket(operation: "inet_pton(relay.example)", errno: EINVAL)) {
            try Relay(configuration: RelayConfiguration(host: "relay.example"))
        }
        let v6 = try Relay(configuration: RelayConfiguration(host: "::1"))
        #expect(v6.mediaPort != 0)
        v6.shutdown()
    }

    @Test("statistics report the I/O thread's CPU time, also after shutdown")
    func cpuTime() throws {
        let relay = try Relay()
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: 9)])
        for sequence in UInt16(0)..<50 { try publisher.send(rtp: try rtpPacket(ssrc: 9, sequence: sequence)) }
        #expect(waitUntil { relay.statistics().packetsIn == 50 })
        relay.shutdown()
        #expect(relay.ioThreadCPUTime > .zero)
    }
}

@Suite("ICE over TCP: the relay's passive TCP port, RFC 4571 frames handled as datagrams")
struct RelayTCPTests {
    /// A STUN binding request with no credentials (the relay refuses it, and counts the refusal).
    static let bareBindingRequest: [UInt8] = [0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xA4, 0x42] + (0..<12).map { UInt8($0) }

    @Test("frames are read whole however the bytes arrive (two in one write, one split over two); a zero-length frame closes the connection")
    func framing() async throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let port = try #require(relay.tcpPort)
        let fd = try #require(RawTCP.connect(to: Int(port)))
        defer { RawTCP.close(fd) }
        let frame = [UInt8(0), UInt8(Self.bareBindingRequest.count)] + Self.bareBindingRequest
        #expect(RawTCP.write(fd, frame + frame))
        #expect(RawTCP.write(fd, Array(frame[..<7])))
        try await Task.sleep(for: .milliseconds(50))
        #expect(RawTCP.write(fd, Array(frame[7...])))
        #expect(await eventually(.seconds(5)) { relay.statistics().stunRefusals == 3 }, "\(relay.statistics().stunRefusals) refusals")
        #expect(RawTCP.write(fd, [0, 0]))
        let closed = await RawTCP.offload { RawTCP.read(fd, timeout: 5).closed }
        #expect(closed, "a zero-length frame left the connection open")
    }

    @Test("the TCP port is the UDP port's number when it is free, and off when asked")
    func port() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let tcpPort = try #require(relay.tcpPort)
        if tcpPort != relay.mediaPort {
            // Only when that number was taken for TCP: then binding it must fail.
            let probe = TCPProbe.bindable(port: Int(relay.mediaPort))
            #expect(!probe, "the relay's TCP port is \(tcpPort) though \(relay.mediaPort) was free")
        }
        var configuration = RelayConfiguration()
        configuration.iceTCP = false
        let without = try Relay(configuration: configuration)
        defer { without.shutdown() }
        #expect(without.tcpPort == nil && without.webRTC?.tcpCandidates.isEmpty == true)
    }
}

import Foundation
import PCastContracts
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

/// Two relays over real sockets, one pulling a stream from the other (origin → edge).
@Suite("Relay cascade")
struct RelayCascadeTests {
    static let video: UInt32 = 0x3333_0001
    static let audio: UInt32 = 0x3333_0002

    @Test("an edge pulls a stream over one SRTP leg: its viewers get every packet in order, a NACK is answered from the edge's cache, a viewer's keyframe request reaches the publisher through the origin")
    func edgeServesItsViewers() throws {
        let origin = try Relay()
        let edge = try Relay()
        defer {
            edge.shutdown()
            origin.shutdown()
        }
        let tracks = [videoTrack(ssrc: Self.video), audioTrack(ssrc: Self.audio)]
        let publisher = try TestPublisher(relay: origin, streamId: "s", tracks: tracks)
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))  // the origin learns where the publisher is
        let leg = try origin.addEdgeSubscriber(streamId: "s", subscriberId: "edge@node-2")
        try edge.addUpstream(streamId: "s", tracks: tracks, origin: UpstreamOrigin(host: "127.0.0.1", port: origin.mediaPort, transport: leg))
        // The edge's first report reaches the origin (it authenticates with the leg's keys), which
        // then asks the publisher for a keyframe: the edge's viewers will need one.
        #expect(publisher.receiveRTCP { $0.contains { if case .pictureLossIndication = $0 { true } else { false } } } != nil)
        #expect(origin.statistics().srtpFailures == 0 && edge.statistics().srtpFailures == 0)

        let viewers = try (0..<3).map { try TestSubscriber(relay: edge, streamId: "s", subscriberId: "viewer-\($0)") }
        for viewer in viewers { try viewer.sendReceiverReport() }
        #expect(waitUntil { edge.statistics().packetsIn >= 3 }, "the edge's relay heard its viewers")
        var plain: [UInt16: [UInt8]] = [:]
        for sequence in UInt16(2)...61 {
            plain[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence)
            try publisher.send(rtp: plain[sequence]!)
        }
        for (index, viewer) in viewers.enumerated() {
            var received: [UInt16] = []
            while received.count < 60, var datagram = viewer.socket.receive(timeout: 5) {
                if (192...223).contains(datagram[1]) { continue }  // RTCP (forwarded SRs)
                let sequence = try RTPPacketLayout(parsing: datagram).sequenceNumber
                received.append(sequence)
                // Viewer 0 "loses" 40: never unprotected, as if it never came (it NACKs it below).
                if index == 0 && sequence == 40 { continue }
                try viewer.receiver.unprotect(&datagram)
                #expect(datagram == plain[sequence], "byte for byte what the publisher sent")
            }
            #expect(received == Array(2...61), "in order, none missing")
        }
        #expect(origin.statistics().subscribers == 1, "the origin serves one leg however many viewers the edge has")

        // A viewer's NACK: the edge has the packet and answers; the origin is not asked.
        try viewers[0].sendRTCP([.genericNACK(RTCPGenericNACK(senderSSRC: viewers[0].rtcpSSRC, mediaSSRC: Self.video, lostSequenceNumbers: [40]))])
        let resent = try #require(try viewers[0].receiveRTP())
        #expect(try resent.serialized() == plain[40])
        // The counters are published after the batch whose datagrams went first.
        #expect(waitUntil { edge.statistics().nacksServed == 1 })
        #expect(origin.statistics().nacksServed == 0 && edge.statistics().nacksForwarded == 0)

        // A viewer's PLI goes through the edge to the origin to the publisher (throttled, so wait out the window).
        // The edge's and the origin's windows from the viewers' arrival both end within 600 ms.
        Thread.sleep(forTimeInterval: 0.8)
        _ = publisher.socket.drain()
        let before = origin.statistics().keyframeRequests
        try viewers[1].sendRTCP([.pictureLossIndication(.init(senderSSRC: viewers[1].rtcpSSRC, mediaSSRC: Self.video))])
        #expect(publisher.receiveRTCP { $0.contains { if case .pictureLossIndication(let pli) = $0 { pli.mediaSSRC == Self.video } else { false } } } != nil)
        // The counters are published after the batch whose datagrams went first.
        #expect(waitUntil { origin.statistics().keyframeRequests > before })

        // The edge drops its leg: the origin's flow goes, and the edge's viewers with the stream.
        edge.removeStream(streamId: "s")
        origin.removeSubscriber(streamId: "s", subscriberId: "edge@node-2")
        #expect(origin.statistics().subscribers == 0 && edge.statistics().streams == 0)
    }

    @Test("a leg moved to a new flow of the origin carries the stream to the same viewers; the origin tells how long an edge has been silent, and replacing a stream that is not pulled is refused")
    func legMovesToANewFlow() throws {
        let origin = try Relay()
        let edge = try Relay()
        defer {
            edge.shutdown()
            origin.shutdown()
        }
        let tracks = [videoTrack(ssrc: Self.video)]
        let publisher = try TestPublisher(relay: origin, streamId: "s", tracks: tracks)
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))
        #expect(origin.edgeIdleTime(streamId: "s", subscriberId: "edge@node-2") == nil)
        let first = try origin.addEdgeSubscriber(streamId: "s", subscriberId: "edge@node-2")
        try edge.addUpstream(streamId: "s", tracks: tracks, origin: UpstreamOrigin(host: "127.0.0.1", port: origin.mediaPort, transport: first))
        let viewer = try TestSubscriber(relay: edge, streamId: "s", subscriberId: "viewer")
        try viewer.sendReceiverReport()
        #expect(waitUntil { origin.statistics().packetsIn >= 2 && edge.statistics().packetsIn >= 1 }, "the edge's report and the viewer's arrived")
        #expect((origin.edgeIdleTime(streamId: "s", subscriberId: "edge@node-2") ?? .seconds(9)) < .seconds(1), "the edge has just reported")
        #expect(origin.edgeIdleTime(streamId: "s", subscriberId: "viewer-unknown") == nil)

        // The origin replaces the edge's flow (the edge asked again): the old keys stop working
        // there, and the edge moves its leg to the new flow.
        let second = try origin.addEdgeSubscriber(streamId: "s", subscriberId: "edge@node-2")
        #expect(second.clientKey != first.clientKey && second.rtcpSSRC != first.rtcpSSRC)
        try edge.replaceUpstream(streamId: "s", origin: UpstreamOrigin(host: "127.0.0.1", port: origin.mediaPort, transport: second))
        // The origin sends on the new flow once the edge's first report there has arrived (the
        // edge speaks first): until the viewer hears a packet, what is sent goes nowhere.
        var next: UInt16 = 2
        var heard = false
        while !heard, next < 300 {
            try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: next))
            next += 1
            while let datagram = viewer.socket.receive(timeout: 0.02) {
                if !(192...223).contains(datagram[1]) { heard = true }
            }
        }
        #expect(heard, "the viewer hears the stream over the leg's new flow")
        Thread.sleep(forTimeInterval: 0.1)
        _ = viewer.socket.drain()
        var plain: [UInt16: [UInt8]] = [:]
        let batch = Array(next..<(next + 20))
        for sequence in batch {
            plain[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence)
            try publisher.send(rtp: plain[sequence]!)
        }
        var received: [UInt16] = []
        while received.count < 20, var datagram = viewer.socket.receive(timeout: 5) {
            if (192...223).contains(datagram[1]) { continue }
            try viewer.receiver.unprotect(&datagram)
            let sequence = try RTPPacketLayout(parsing: datagram).sequenceNumber
            // A packet from before the batch, repaired late (the edge asked its origin for a gap
            // the move left), is not the batch's.
            if !batch.contains(sequence) { continue }
            #expect(datagram == plain[sequence])
            received.append(sequence)
        }
        #expect(received == batch, "the same viewer, over the new flow, in order, none missing")
        #expect(origin.statistics().subscribers == 1 && edge.statistics().srtpFailures == 0)

        #expect(throws: RelayError.streamNotFound("p")) {
            try origin.replaceUpstream(streamId: "p", origin: UpstreamOrigin(host: "127.0.0.1", port: edge.mediaPort, transport: second))
        }
        #expect(throws: RelayError.streamNotFound("s"), "the origin's own stream is not pulled") {
            try origin.replaceUpstream(streamId: "s", origin: UpstreamOrigin(host: "127.0.0.1", port: edge.mediaPort, transport: second))
        }
    }

    @Test("an origin that cannot be used is refused with a typed error and leaves nothing behind")
    func badUpstream() throws {
        let edge = try Relay()
        defer { edge.shutdown() }
        let tracks = [videoTrack(ssrc: Self.video)]
        let good = MediaTransport(srtpProfile: SRTPProfile.aeadAES128GCM.rawValue, port: 1, clientKey: SRTPKey.random(for: .aeadAES128GCM).base64,
                                  serverKey: SRTPKey.random(for: .aeadAES128GCM).base64, rtcpSSRC: 7)
        var noSSRC = good
        noSSRC.rtcpSSRC = nil
        var badKey = good
        badKey.serverKey = "AAAA"
        var badProfile = good
        badProfile.srtpProfile = "NULL"
        for (host, transport) in [("localhost", good), ("127.0.0.1", noSSRC), ("127.0.0.1", badKey), ("127.0.0.1", badProfile)] {
            #expect(throws: RelayError.self) {
                try edge.addUpstream(streamId: "s", tracks: tracks, origin: UpstreamOrigin(host: host, port: 9, transport: transport))
            }
        }
        #expect(edge.statistics().streams == 0)
        try edge.addUpstream(streamId: "s", tracks: tracks, origin: UpstreamOrigin(host: "127.0.0.1", port: 9, transport: good))
        #expect(edge.statistics().streams == 1)
    }
}

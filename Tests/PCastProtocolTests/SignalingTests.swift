import Foundation
import PCastProtocol
import Testing

@Suite("Signaling messages")
struct SignalingTests {
    static let video = MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 0x1234)
    static let audio = MediaTrackDescription(kind: .audio, codec: "OPUS", payloadType: 111, clockRate: 48_000, ssrc: 0x5678)
    static let transport = MediaTransport(srtpProfile: "AEAD_AES_128_GCM", port: 5000, clientKey: "a2V5", serverKey: "c2FsdA==")

    static let clientMessages: [Envelope<ClientMessage>] = [
        .request(id: 1, .authenticate(.init(token: "DIGEST:abc"))),
        .request(id: 2, .authenticate(.init(token: "DIGEST:abc", sessionId: "s-1"))),
        .request(id: 3, .keepAlive),
        .request(id: 4, .publish(.init(streamToken: "DIGEST:x", tags: ["a", "b/c"], publishType: .append, streamName: "show", tracks: [video, audio]))),
        .request(id: 5, .unpublish(.init(streamId: "st-1", reason: .custom, description: "I-am-done-publishing"))),
        .request(id: 6, .subscribe(.init(streamToken: "DIGEST:y"))),
        .request(id: 7, .unsubscribe(.init(streamId: "st-1"))),
        .request(id: 8, .unsubscribe(.init(streamId: "st-1", subscriberId: "subscriber-2"))),
        .request(id: 9, .limitBandwidth(.init(streamId: "st-1", subscriberId: "subscriber-2", bitsPerSecond: 300_000))),
        .request(id: 10, .limitBandwidth(.init(streamId: "st-1", bitsPerSecond: nil))),
        .request(id: 11, .publisherQuality(.init(streamId: "st-1", reason: .uploadLimited))),
        .request(id: 12, .subscribe(.init(streamToken: "DIGEST:y", layer: "best"))),
        .request(id: 14, .setViewSize(.init(streamId: "st-1", subscriberId: "subscriber-2", size: ViewSize(width: 320, height: 180)))),
        .request(id: 15, .setViewSize(.init(streamId: "st-1", size: nil))),
        .request(id: 13, .publish(.init(streamToken: "DIGEST:x", tracks: [
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 7,
                                  layer: SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000)),
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 8,
                                  layer: SimulcastLayer(rid: "m", width: 640, height: 360, bitrate: 300_000)),
        ]))),
        .event(.bye),
    ]

    static let serverMessages: [Envelope<ServerMessage>] = [
        .request(id: 1, .authenticated(.init(sessionId: "s-1", keepAliveInterval: 10))),
        .request(id: 4, .published(.init(streamId: "st-1", transport: transport))),
        .request(id: 6, .subscribed(.init(streamId: "st-1", tracks: [video, audio], transport: transport))),
        .request(id: 8, .subscribed(.init(streamId: "st-1", tracks: [video], transport: transport, subscriberId: "subscriber-2"))),
        .event(.bandwidthLimit(.init(streamId: "st-1", bitsPerSecond: 300_000))),
        .event(.bandwidthLimit(.init(streamId: "st-1", bitsPerSecond: nil))),
        .event(.publisherQuality(.init(streamId: "st-1", reason: .networkLimited))),
        .event(.subscriberVideo(.init(streamId: "st-1", subscriberId: "subscriber-2", suspended: true))),
        .event(.layerActivity(.init(streamId: "st-1", active: ["h", "m"]))),
        .event(.subscriberLayer(.init(streamId: "st-1", subscriberId: "subscriber-2", layer: "m", reduced: true))),
        .request(id: 7, .ok),
        .event(.streamEnded(.init(streamId: "st-1", reason: .censored, description: "by operator"))),
        .request(id: 9, .failure(.init(status: .unauthorized, message: "token expired"))),
    ]

    @Test("every client message round-trips with its request id")
    func clientRoundTrip() throws {
        for envelope in Self.clientMessages {
            let data = try SignalingCodec.encode(envelope)
            #expect(try SignalingCodec.decodeClientMessage(data) == envelope)
        }
    }

    @Test("every server message round-trips with its request id")
    func serverRoundTrip() throws {
        for envelope in Self.serverMessages {
            let data = try SignalingCodec.encode(envelope)
            #expect(try SignalingCodec.decodeServerMessage(data) == envelope)
        }
    }

    @Test("the wire form is versioned JSON with type and payload")
    func wireForm() throws {
        let data = try SignalingCodec.encode(Envelope.request(id: 5, ClientMessage.unpublish(.init(streamId: "st", reason: .appBackground))))
        let text = String(decoding: data, as: UTF8.self)
        #expect(text == #"{"id":5,"payload":{"reason":"app-background","streamId":"st"},"type":"unpublish","v":1}"#)
    }

    func decodeError(_ text: String, limit: Int = SignalingCodec.defaultSizeLimit) -> SignalingError? {
        do {
            _ = try SignalingCodec.decodeClientMessage(Data(text.utf8), sizeLimit: limit)
            return nil
        } catch {
            return error
        }
    }

    @Test("malformed, oversized, unknown and wrong-version messages are typed errors carrying the request id")
    func refusals() {
        #expect(decodeError("not json")?.kind == .malformed)
        #expect(decodeError("[1,2]")?.kind == .malformed)
        #expect(decodeError(String(repeating: " ", count: 100), limit: 50)?.kind == .tooLarge(size: 100, limit: 50))
        #expect(decodeError(#"{"v":2,"id":3,"type":"keep-alive"}"#) == SignalingError(kind: .unsupportedVersion(2), requestId: 3))
        #expect(decodeError(#"{"id":3,"type":"keep-alive"}"#)?.requestId == 3)
        #expect(decodeError(#"{"v":1,"id":4,"type":"launch-rockets"}"#) == SignalingError(kind: .unknownType("launch-rockets"), requestId: 4))
        #expect(decodeError(#"{"v":1,"id":5,"type":"subscribe","payload":{}}"#)
                == SignalingError(kind: .invalidPayload(type: "subscribe", detail: "missing field 'streamToken'"), requestId: 5))
        #expect(decodeError(#"{"v":1,"id":6,"type":"subscribe","payload":{"streamToken":7}}"#)?.kind
                == .invalidPayload(type: "subscribe", detail: "field 'streamToken' has the wrong type"))
        #expect(decodeError(#"{"v":1,"id":7,"type":"unpublish","payload":{"streamId":"s","reason":"bored"}}"#)?.kind
                == .invalidPayload(type: "unpublish", detail: "field 'reason' has an invalid value"))
        #expect(decodeError(#"{"v":1,"id":-1,"type":"bye"}"#)?.kind == .malformed)
    }

    @Test("limits inside a message are enforced")
    func limits() throws {
        func publish(_ p: ClientMessage.Publish) throws -> SignalingError? {
            decodeError(String(decoding: try SignalingCodec.encode(.request(id: 1, .publish(p))), as: UTF8.self))
        }
        #expect(try publish(.init(streamToken: "t", tracks: [])) != nil)
        #expect(try publish(.init(streamToken: "t", tags: (0...64).map(String.init), tracks: [Self.video])) != nil)
        #expect(try publish(.init(streamToken: "t", tracks: [Self.video, Self.video])) != nil)          // same SSRC
        var rtcpType = Self.video
        rtcpType.payloadType = 72
        #expect(try publish(.init(streamToken: "t", tracks: [rtcpType])) != nil)
        #expect(try publish(.init(streamToken: "t", publishType: .record, tracks: [Self.video])) != nil)  // no stream name
        #expect(try publish(.init(streamToken: String(repeating: "x", count: 9000), tracks: [Self.video])) != nil)
        #expect(try publish(.init(streamToken: "t", publishType: .record, streamName: "show", tracks: [Self.video])) == nil)
        func limit(_ bits: Int?) throws -> SignalingError? {
            decodeError(String(decoding: try SignalingCodec.encode(.request(id: 1, .limitBandwidth(.init(streamId: "s", bitsPerSecond: bits)))), as: UTF8.self))
        }
        #expect(try limit(0) != nil)
        #expect(try limit(-5) != nil)
        #expect(try limit(2_000_000_000) != nil)
        #expect(try limit(300_000) == nil && limit(nil) == nil)
        func viewSize(_ width: Int, _ height: Int) throws -> SignalingError? {
            decodeError(String(decoding: try SignalingCodec.encode(.request(id: 1, .setViewSize(.init(streamId: "s", size: ViewSize(width: width, height: height))))), as: UTF8.self))
        }
        #expect(try viewSize(0, 180) != nil && viewSize(320, -1) != nil && viewSize(20_000, 180) != nil)
        #expect(try viewSize(320, 180) == nil)
    }

    @Test("an error's reply is a bad-request failure echoing the request id")
    func errorReply() throws {
        let error = try #require(decodeError(#"{"v":1,"id":42,"type":"nope"}"#))
        guard case .failure(let failure) = error.reply.message else {
            Issue.record("reply should be a failure")
            return
        }
        #expect(error.reply.id == 42)
        #expect(failure.status == .badRequest)
        #expect(failure.message.contains("nope"))
    }

    @Test("random bytes never crash the decoder")
    func randomBytes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let length = Int.random(in: 0..<200, using: &generator)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = try? SignalingCodec.decodeClientMessage(Data(bytes))
            _ = try? SignalingCodec.decodeServerMessage(Data(bytes))
        }
        // Valid messages with random bytes spliced in.
        for envelope in Self.clientMessages {
            let data = Array((try? SignalingCodec.encode(envelope)) ?? Data())
            for _ in 0..<50 where !data.isEmpty {
                var mutated = data
                mutated[Int.random(in: 0..<mutated.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
                _ = try? SignalingCodec.decodeClientMessage(Data(mutated))
            }
        }
    }
}

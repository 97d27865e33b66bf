import Foundation
import PCastContracts
import PCastProtocol
import PCastRelay
import PCastTestSupport
import Synchronization
import Testing
import NIOCore
import NIOHTTP1
import NIOPosix

// MARK: Relay fake (tests only)

/// A relay that records every call and answers with made-up transports, so tests can prove
/// what was (and was not) opened.
final class RecordingRelay: RelayControl {
    enum Call: Hashable, Sendable {
        case addPublisher(streamId: String, tracks: [MediaTrackDescription])
        case addSubscriber(streamId: String, subscriberId: String)
        case removeSubscriber(streamId: String, subscriberId: String)
        case removeStream(streamId: String)
        case limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?)
        case sizeSubscriber(streamId: String, subscriberId: String, size: ViewSize?)
    }

    private struct State {
        var calls: [Call] = []
        var statistics = RelayStatistics()
        var publishers: Set<String> = []
        var refusePublishersWith: RelayError?
        var idle: [String: Duration] = [:]
        var videoEvents: [SubscriberVideoEvent] = []
        var watched: [String: Set<String>] = [:]
        var watchedGrew: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())
    let mediaPort: UInt16

    init(mediaPort: UInt16 = 40_000) {
        self.mediaPort = mediaPort
    }

    var calls: [Call] { state.withLock { $0.calls } }

    func setStatistics(_ statistics: RelayStatistics) { state.withLock { $0.statistics = statistics } }
    func refusePublishers(with error: RelayError?) { state.withLock { $0.refusePublishersWith = error } }

    func addPublisher(streamId: String, tracks: [MediaTrackDescription]) throws(RelayError) -> MediaTransport {
        let refusal: RelayError? = state.withLock { state in
            state.calls.append(.addPublisher(streamId: streamId, tracks: tracks))
            if let error = state.refusePublishersWith { return error }
            state.publishers.insert(streamId)
            return nil
        }
        if let refusal { throw refusal }
        return MediaTransport(srtpProfile: "AEAD_AES_128_GCM", port: mediaPort, clientKey: "pub-client-\(streamId)", serverKey: "pub-server-\(streamId)")
    }

    func addSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport {
        let known = state.withLock { state in
            state.calls.append(.addSubscriber(streamId: streamId, subscriberId: subscriberId))
            return state.publishers.contains(streamId)
        }
        guard known else { throw .streamNotFound(streamId) }
        return MediaTransport(
            srtpProfile: "AEAD_AES_128_GCM", port: mediaPort, clientKey: "sub-client-\(subscriberId)",
            serverKey: "sub-server-\(subscriberId)", rtcpSSRC: 0x1234)
    }

    func removeSubscriber(streamId: String, subscriberId: String) {
        state.withLock { $0.calls.append(.removeSubscriber(streamId: streamId, subscriberId: subscriberId)) }
    }

    func removeStream(streamId: String) {
        state.withLock {
            $0.calls.append(.removeStream(streamId: streamId))
            $0.publishers.remove(streamId)
        }
    }

    func statistics() -> RelayStatistics { state.withLock { $0.statistics } }

    func setSubscriberViewSize(streamId: String, subscriberId: String, size: ViewSize?) {
        state.withLock { $0.calls.append(.sizeSubscriber(streamId: streamId, subscriberId: subscriberId, size: size)) }
    }

    func limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?) {
        state.withLock { $0.calls.append(.limitSubscriber(streamId: streamId, subscriberId: subscriberId, bitsPerSecond: bitsPerSecond)) }
    }

    func subscriberLayer(streamId: String, subscriberId: String) -> SubscriberLayer? { nil }

    func pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?) {}

    func watchedLayers(streamId: String) -> Set<String>? { state.withLock { $0.watched[streamId] } }

    func onWatchedLayersGrew(_ grew: @escaping @Sendable () -> Void) { state.withLock { $0.watchedGrew = grew } }

    /// Sets the layers viewers watch, telling the platform at once when some were added (as the
    /// relay's thread does).
    func setWatched(_ rids: Set<String>, streamId: String) {
        let grew = state.withLock { state -> (@Sendable () -> Void)? in
            defer { state.watched[streamId] = rids }
            return rids.isSubset(of: state.watched[streamId] ?? []) ? nil : state.watchedGrew
        }
        grew?()
    }

    /// Queues an audio-only fallback event for the platform's next tick.
    func pushVideoEvent(_ event: SubscriberVideoEvent) { state.withLock { $0.videoEvents.append(event) } }

    func takeSubscriberVideoEvents() -> [SubscriberVideoEvent] {
        state.withLock { state in
            defer { state.videoEvents.removeAll() }
            return state.videoEvents
        }
    }

    /// Idle times by stream; a published stream not listed counts as sending (zero).
    func setIdleTime(_ idle: Duration, streamId: String) { state.withLock { $0.idle[streamId] = idle } }

    func publisherIdleTime(streamId: String) -> Duration? {
        state.withLock { state in state.publishers.contains(streamId) ? (state.idle[streamId] ?? .zero) : nil }
    }
}

// MARK: Tokens

enum Fixture {
    static let applicationId = "test-app"
    static let secret = "test-secret"

    static let video = MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 1111)
    static let audio = MediaTrackDescription(kind: .audio, codec: "OPUS", payloadType: 111, clockRate: 48_000, ssrc: 2222)

    static func token(
        _ type: TokenType, expiresIn seconds: Int = 3600, now: Date = Date(), secret: String = Fixture.secret,
        _ configure: (DigestTokenBuilder) -> DigestTokenBuilder = { $0 }
    ) -> String {
        let builder = configure(DigestTokenBuilder().expiresIn(seconds: seconds, now: now).type(type))
        do {
            return try builder.encode(applicationId: applicationId, secret: secret)
        } catch {
            Issue.record("cannot build token: \(error)")
            return ""
        }
    }

    static func publish(_ token: String, tags: [String] = [], tracks: [MediaTrackDescription] = [video, audio]) -> ClientMessage.Publish {
        ClientMessage.Publish(streamToken: token, tags: tags, tracks: tracks)
    }
}

// MARK: Waiting without timing assertions

/// A clock tests move by hand.
final class ManualClock: Sendable {
    private let current = Mutex(Date())
    var now: Date { current.withLock { $0 } }
    func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
    var function: @Sendable () -> Date { { [self] in self.now } }
}

// MARK: HTTP

struct HTTPResult: Sendable {
    let status: Int
    let body: String
    let headers: [String: String]
}

/// One HTTP/1.1 request on its own connection, over NIO (URLSession on Linux stalls on a 401
/// that carries `WWW-Authenticate`).
func http(_ method: String, _ url: String, body: String? = nil, basic: (String, String)? = nil,
          headers extra: [String: String] = [:]) async throws -> HTTPResult {
    guard let target = URL(string: url), let host = target.host, let port = target.port else {
        throw TimedOut(what: "a valid URL \(url)")
    }
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: host, port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHTTPClientHandlers()
                return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
            }
        }
    return try await channel.executeThenClose { inbound, outbound in
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "\(host):\(port)")
        headers.add(name: "Connection", value: "close")
        let bytes = body.map { ByteBuffer(string: $0) } ?? ByteBuffer()
        headers.add(name: "Content-Length", value: String(bytes.readableBytes))
        if body != nil { headers.add(name: "Content-Type", value: "application/json") }
        if let (user, password) = basic {
            headers.add(name: "Authorization", value: "Basic " + Data("\(user):\(password)".utf8).base64EncodedString())
        }
        for (name, value) in extra.sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
        let path = (target.path.isEmpty ? "/" : target.path) + (target.query.map { "?" + $0 } ?? "")
        try await outbound.write(.head(HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method), uri: path, headers: headers)))
        if bytes.readableBytes > 0 { try await outbound.write(.body(.byteBuffer(bytes))) }
        try await outbound.write(.end(nil))
        var status = 0
        var responseHeaders: [String: String] = [:]
        var responseBody = ByteBuffer()
        for try await part in inbound {
            switch part {
            case .head(let head):
                status = Int(head.status.code)
                for (name, value) in head.headers { responseHeaders[name.lowercased()] = value }
            case .body(var chunk):
                responseBody.writeBuffer(&chunk)
            case .end:
                return HTTPResult(status: status, body: String(buffer: responseBody), headers: responseHeaders)
            }
        }
        return HTTPResult(status: status, body: String(buffer: responseBody), headers: responseHeaders)
    }
}

/// The value of an unlabelled Prometheus sample line `name value`.
func metric(_ name: String, in text: String) -> Double? {
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        if parts.count == 2, parts[0] == name { return Double(parts[1]) }
    }
    return nil
}

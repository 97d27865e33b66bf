import Foundation
import Logging
import PCastContracts
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// Media services that record how the control plane drives them (ingest, recorder, lifecycle).
final class RecordingMediaServices: MediaServices, IngestControl, RecordingControl, HLSControl {
    enum Call: Hashable, Sendable {
        case listening(String)
        case ingestStart(owner: String, uri: String)
        case ingestStop(String, owner: String)
        case ownerEnded(String)
        case record(streamId: String, name: String, type: PublishType)
        case hls(streamId: String)
        case shutdown
    }

    private struct State {
        var calls: [Call] = []
        var endedHandler: (@Sendable (IngestEnded) async -> Void)?
        var pendingProgress: [IngestProgressReport] = []
    }

    private let state = Mutex(State())
    private let listeningFailure: MediaServiceError?

    init(failListeningWith failure: MediaServiceError? = nil) {
        listeningFailure = failure
    }

    var calls: [Call] { state.withLock { $0.calls } }
    private func note(_ call: Call) { state.withLock { $0.calls.append(call) } }

    // MediaServices
    var ingest: (any IngestControl)? { self }
    var recordings: (any RecordingControl)? { self }
    var hls: (any HLSControl)? { self }

    // HLSControl
    func start(streamId: String) async { note(.hls(streamId: streamId)) }
    func serve(streamId: String, file: String, reload: HLSReload?, uriQuery: String?, startIfNeeded: Bool) async -> HLSReply {
        .ok(contentType: "text/plain", body: Array("\(streamId)/\(file)".utf8), maxAge: 0)
    }

    func platformListening(at endpoint: PlatformEndpoint) async throws(MediaServiceError) {
        note(.listening(endpoint.signalingURL))
        if let listeningFailure { throw listeningFailure }
    }

    func shutdown() async { note(.shutdown) }

    // IngestControl
    func start(owner: String, _ request: ClientMessage.PublishRemote) async -> Result<ServerMessage.IngestStarted, ServerMessage.Failure> {
        note(.ingestStart(owner: owner, uri: request.streamURI))
        return .success(.init(streamId: "stream-ingested", passthrough: true))
    }

    func stop(_ streamId: String, by owner: String) async -> ServerMessage.Failure? {
        note(.ingestStop(streamId, owner: owner))
        return streamId == "stream-ingested" ? nil : .init(status: .notFound, message: "no ingest '\(streamId)'")
    }

    func ownerEnded(_ owner: String) async { note(.ownerEnded(owner)) }

    /// Reports are handed out once.
    func progress() async -> [IngestProgressReport] {
        state.withLock { state in
            defer { state.pendingProgress = [] }
            return state.pendingProgress
        }
    }

    func report(_ progress: IngestProgressReport) { state.withLock { $0.pendingProgress.append(progress) } }

    func setEndedHandler(_ handler: @escaping @Sendable (IngestEnded) async -> Void) async {
        state.withLock { $0.endedHandler = handler }
    }

    func end(_ ended: IngestEnded) async {
        let handler = state.withLock { $0.endedHandler }
        await handler?(ended)
    }

    // RecordingControl
    func start(streamId: String, name: String, type: PublishType) async {
        note(.record(streamId: streamId, name: name, type: type))
    }

    func list() async -> [RecordingInfo] {
        [RecordingInfo(name: "show", bytes: 1234, durationMilliseconds: 5000, modified: "2026-11-25T00:00:00Z", recordingStreamId: nil)]
    }

    func path(of name: RecordingName) -> String { "/nonexistent/\(name.fileName)" }
}

/// The control plane reaches ingest, RTMP push and recording only through the contracts in
/// `PCastContracts`: these tests drive a real `PlatformServer` over sockets with media services
/// that only record what they are asked.
@Suite struct MediaServicesContractTests {
    static let configuration = PlatformServerTests.configuration

    func withServer(services: (any MediaServices)?, _ body: (PlatformServer) async throws -> Void) async throws {
        var logger = Logger(label: "pcast.test")
        logger.logLevel = .warning
        let server = try await PlatformServer.start(configuration: Self.configuration, relay: RecordingRelay(), services: services,
                                                    logger: logger, tickInterval: .milliseconds(50))
        do {
            try await body(server)
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }

    /// The next message that is not an ingest progress event.
    func reply(_ socket: TestSocket, to id: UInt64, _ message: ClientMessage) async throws -> Envelope<ServerMessage> {
        try socket.send(.request(id: id, message))
        return try await next(socket) { $0.id == id }
    }

    func next(_ socket: TestSocket, where matches: (Envelope<ServerMessage>) -> Bool) async throws -> Envelope<ServerMessage> {
        while true {
            let envelope = try await socket.nextMessage()
            if matches(envelope) { return envelope }
        }
    }

    func status(_ envelope: Envelope<ServerMessage>) -> RequestStatus? {
        if case .failure(let failure) = envelope.message { return failure.status }
        return nil
    }

    @Test("the control plane drives ingest and recording through the contracts, after its own checks")
    func drivesServices() async throws {
        let services = RecordingMediaServices()
        try await withServer(services: services) { server in
            #expect(services.calls == [.listening("ws://127.0.0.1:\(server.httpPort)/ws")])
            let helper = PlatformServerTests()
            let (socket, sessionId) = try await helper.authenticated(server)

            // A token that may not publish never reaches the ingest service.
            let forged = try await reply(socket, to: 2, .publishRemote(.init(
                streamToken: Fixture.token(.publish, secret: "not-the-secret"), streamURI: "rtsp://198.51.100.7/x")))
            #expect(status(forged) == .unauthorized)
            #expect(!services.calls.contains { if case .ingestStart = $0 { return true } else { return false } })

            let started = try await reply(socket, to: 3, .publishRemote(.init(streamToken: Fixture.token(.publish), streamURI: "rtsp://198.51.100.7/x")))
            #expect(started.message == .ingestStarted(.init(streamId: "stream-ingested", passthrough: true)))
            #expect(services.calls.contains(.ingestStart(owner: sessionId, uri: "rtsp://198.51.100.7/x")))

            // Progress and the end reach the owner.
            services.report(IngestProgressReport(owner: sessionId, progress: .init(streamId: "stream-ingested", positionMilliseconds: 1500,
                                                                                    durationMilliseconds: 60_000)))
            let progress = try await next(socket) { if case .ingestProgress = $0.message { return true } else { return false } }
            #expect(progress.message == .ingestProgress(.init(streamId: "stream-ingested", positionMilliseconds: 1500, durationMilliseconds: 60_000)))
            await services.end(IngestEnded(owner: sessionId, streamId: "stream-ingested", reason: .ended, description: "source ended"))
            let ended = try await next(socket) { if case .streamEnded = $0.message { return true } else { return false } }
            #expect(ended.message == .streamEnded(.init(streamId: "stream-ingested", reason: .ended, description: "source ended")))

            let stopped = try await reply(socket, to: 4, .stopIngest(.init(streamId: "stream-ingested")))
            #expect(stopped.message == .ok)
            let unknown = try await reply(socket, to: 5, .stopIngest(.init(streamId: "stream-other")))
            #expect(status(unknown) == .notFound)
            #expect(services.calls.contains(.ingestStop("stream-ingested", owner: sessionId)))

            // A recording publish starts the recorder with the stream's id and name.
            let token = Fixture.token(.publish) { $0.streamName("show") }
            let published = try await reply(socket, to: 6, .publish(.init(streamToken: token, publishType: .record, streamName: "show",
                                                                          tracks: [Fixture.video, Fixture.audio])))
            guard case .published(let stream) = published.message else {
                Issue.record("expected published, got \(published)")
                return
            }
            try await eventually("the recorder is started") {
                services.calls.contains(.record(streamId: stream.streamId, name: "show", type: .record))
            }

            let listing = try await http("GET", server.httpURL + "/recordings", basic: (Fixture.applicationId, Fixture.secret))
            #expect(listing.status == 200)
            #expect(listing.body.contains("\"name\":\"show\"") && listing.body.contains("\"bytes\":1234"))

            _ = try await reply(socket, to: 7, .bye)
            try await eventually("the owner's ingests are stopped") { services.calls.contains(.ownerEnded(sessionId)) }
            await socket.close()
        }
        #expect(services.calls.last == .shutdown)
    }

    @Test("without media services, ingest and recording publishes are refused as not supported")
    func withoutServices() async throws {
        try await withServer(services: nil) { server in
            let (socket, _) = try await PlatformServerTests().authenticated(server)
            let remote = try await reply(socket, to: 2, .publishRemote(.init(streamToken: Fixture.token(.publish), streamURI: "rtsp://198.51.100.7/x")))
            #expect(status(remote) == .notSupported)
            let token = Fixture.token(.publish) { $0.streamName("show") }
            for (id, type) in [(UInt64(3), PublishType.record), (4, .append)] {
                let refused = try await reply(socket, to: id, .publish(.init(streamToken: token, publishType: type, streamName: "show",
                                                                            tracks: [Fixture.video])))
                #expect(status(refused) == .notSupported)
            }
            let live = try await reply(socket, to: 5, .publish(Fixture.publish(Fixture.token(.publish))))
            guard case .published = live.message else {
                Issue.record("a live publish needs no media service: \(live)")
                return
            }
            let listing = try await http("GET", server.httpURL + "/recordings", basic: (Fixture.applicationId, Fixture.secret))
            #expect(listing.status == 200)
            #expect(listing.body.replacingOccurrences(of: " ", with: "") == #"{"recordings":[]}"#)
            let download = try await http("GET", server.httpURL + "/recordings/show", basic: (Fixture.applicationId, Fixture.secret))
            #expect(download.status == 404)
            await socket.close()
        }
    }

    @Test("a media service that cannot start fails the server's start with its reason")
    func serviceStartFailure() async throws {
        let services = RecordingMediaServices(failListeningWith: .cannotListen(service: "rtmp", host: "127.0.0.1", port: 1, reason: "EACCES"))
        do {
            _ = try await PlatformServer.start(configuration: Self.configuration, relay: RecordingRelay(), services: services)
            Issue.record("the server started although a media service could not")
        } catch {
            #expect(error == .mediaService(.cannotListen(service: "rtmp", host: "127.0.0.1", port: 1, reason: "EACCES")))
            #expect(error.description.contains("rtmp: cannot listen on 127.0.0.1:1: EACCES"))
        }
        #expect(services.calls.last == .shutdown)
    }
}

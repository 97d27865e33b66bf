import Foundation
import PCastMedia
import PCastProtocol
import Synchronization

/// How a channel viewer picks the stream to view (the PCast iOS SDK's stream selection strategies).
public enum StreamSelectionStrategy: String, Sendable, Hashable, CaseIterable {
    /// View the stream that started most recently; switch whenever a newer one starts.
    case mostRecent = "most-recent"
    /// Stay on the current stream until it fails or goes away; then take the most recent other one.
    case highAvailability = "high-availability"
}

/// Options of ``ChannelExpress/createChannel(_:)`` (the PCast iOS SDK's `ChannelOptions`).
public struct ChannelOptions: Sendable, Hashable {
    public var name: String
    /// Generated when nil.
    public var alias: String?
    public var description: String?

    public init(name: String, alias: String? = nil, description: String? = nil) {
        self.name = name
        self.alias = alias
        self.description = description
    }

    var roomOptions: RoomOptions { RoomOptions(name: name, type: .channel, alias: alias, description: description) }
}

/// Options of ``ChannelExpress/joinChannel(_:subscriberCallback:)``.
public struct JoinChannelOptions: Sendable {
    public var joinRoomOptions: JoinRoomOptions
    /// Options of the renderer each viewed stream gets; nil: no renderer.
    public var renderer: RendererOptions?
    public var streamSelectionStrategy: StreamSelectionStrategy = .mostRecent
    public var capabilities: [String] = []
    public var playoutDelay: Duration?

    public init(joinRoomOptions: JoinRoomOptions, renderer: RendererOptions? = nil, streamSelectionStrategy: StreamSelectionStrategy = .mostRecent) {
        self.joinRoomOptions = joinRoomOptions
        self.renderer = renderer
        self.streamSelectionStrategy = streamSelectionStrategy
    }
}

/// Options of ``ChannelExpress/publishToChannel(_:)``.
public struct PublishToChannelOptions: Sendable {
    public var channelOptions: ChannelOptions?
    public var channelId: String?
    public var publishOptions: PublishOptions?
    public var publishRemoteOptions: PublishRemoteOptions?
    public var memberRole: MemberRole = .presenter
    public var streamType: RoomStreamType = .presentation
    public var screenName: String?
    /// The strategy the channel's viewers use (see ``PublishToRoomOptions/viewerStreamSelectionStrategy``).
    /// A channel's streams always carry wildcard tokens.
    public var viewerStreamSelectionStrategy: StreamSelectionStrategy = .mostRecent

    public init(channelOptions: ChannelOptions? = nil, channelId: String? = nil, publishOptions: PublishOptions? = nil,
                publishRemoteOptions: PublishRemoteOptions? = nil, memberRole: MemberRole = .presenter,
                streamType: RoomStreamType = .presentation, screenName: String? = nil) {
        self.channelOptions = channelOptions
        self.channelId = channelId
        self.publishOptions = publishOptions
        self.publishRemoteOptions = publishRemoteOptions
        self.memberRole = memberRole
        self.streamType = streamType
        self.screenName = screenName
    }
}

extension PublishToChannelOptions {
    /// The room publish these options make (a channel's streams always carry wildcard tokens).
    var roomOptions: PublishToRoomOptions {
        var room = PublishToRoomOptions(
            roomOptions: channelOptions?.roomOptions, roomId: channelId, publishOptions: publishOptions,
            publishRemoteOptions: publishRemoteOptions, memberRole: memberRole, streamType: streamType,
            screenName: screenName, wildcardTokens: true)
        room.viewerStreamSelectionStrategy = viewerStreamSelectionStrategy
        return room
    }
}

/// The PCast iOS SDK's Channel Express: one-to-many broadcast over a room of type `channel`. Presenters
/// publish to it; viewers join as audience and view the stream the selection strategy picks,
/// switching as streams start and fail.
///
/// ```swift
/// let channels = ChannelExpress(roomExpress: RoomExpress(PCastExpressOptions(backendURI: backend)))
/// let viewer = try await channels.joinChannel(JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "news"),
///                                                                renderer: RendererOptions())) { status, subscriber, renderer in
///     if status == .noStreamPlaying { print("waiting for a presenter") }
/// }
/// ```
public final class ChannelExpress: Sendable {
    public let roomExpress: RoomExpress

    public init(roomExpress: RoomExpress) {
        self.roomExpress = roomExpress
    }

    public convenience init(_ options: PCastExpressOptions) {
        self.init(roomExpress: RoomExpress(options))
    }

    public var pcastExpress: PCastExpress { roomExpress.pcastExpress }

    /// Creates a channel (returns it when the alias exists already).
    public func createChannel(_ options: ChannelOptions) async throws(PCastError) -> Room {
        let pcast = try await pcastExpress.pcast()
        return try await RoomService(pcast: pcast).createRoom(options.roomOptions)
    }

    /// Publishes to a channel, creating it when ``PublishToChannelOptions/channelOptions`` names a missing one.
    public func publishToChannel(_ options: PublishToChannelOptions) async throws(PCastError) -> (RoomService, ExpressPublisher) {
        try await roomExpress.publishToRoom(options.roomOptions)
    }

    /// Has the platform ingest a remote source (``PublishToChannelOptions/publishRemoteOptions``:
    /// an mp4, rtmp or rtsp URI) and publishes it to a channel, creating the channel when
    /// ``PublishToChannelOptions/channelOptions`` names a missing one; viewers see it as any
    /// presenter's stream.
    public func publishRemoteToChannel(_ options: PublishToChannelOptions) async throws(PCastError) -> (RoomService, RemotePublisher) {
        try await roomExpress.publishRemoteToRoom(options.roomOptions)
    }

    /// Joins a channel as a viewer. `subscriberCallback` hears `ok` with the subscriber (and its
    /// renderer) each time the viewed stream changes, `no-stream-playing` when there is nothing to
    /// view, and the failure status when subscribing failed. Viewing lasts as long as the returned
    /// service lives.
    public func joinChannel(_ options: JoinChannelOptions,
                            subscriberCallback: @escaping @Sendable (RequestStatus, ExpressSubscriber?, Renderer?) -> Void) async throws(PCastError) -> RoomService {
        var join = options.joinRoomOptions
        join.role = .audience
        join.streams = []
        let rooms = try await roomExpress.joinRoom(join)
        guard let room = rooms.activeRoom.value else { throw .invalidRequest("the channel was left while joining") }
        let viewer = ChannelViewer(express: roomExpress, options: options, callback: subscriberCallback)
        viewer.watch(room)
        rooms.keep(viewer)
        return rooms
    }
}

/// Follows a channel's members and keeps one subscription to the stream the strategy selects.
/// Decisions run one at a time on a task of their own, fed by observable changes.
final class ChannelViewer: Sendable {
    private let express: RoomExpress
    private let options: JoinChannelOptions
    private let callback: @Sendable (RequestStatus, ExpressSubscriber?, Renderer?) -> Void
    private struct State {
        /// Stream URI → order first seen (the higher, the more recent).
        var firstSeen: [String: Int] = [:]
        var counter = 0
        /// Streams whose subscription failed or ended: not selected again while listed.
        var failed: Set<String> = []
        var current: (uri: String, subscriber: ExpressSubscriber)?
        var watches: [String: Disposable] = [:]
        var membersWatch: Disposable?
        var reportedNothing = false
        var task: Task<Void, Never>?
    }
    private let state = Mutex(State())
    private let triggers: AsyncStream<Void>.Continuation
    private let stream: AsyncStream<Void>

    init(express: RoomExpress, options: JoinChannelOptions, callback: @escaping @Sendable (RequestStatus, ExpressSubscriber?, Renderer?) -> Void) {
        self.express = express
        self.options = options
        self.callback = callback
        (stream, triggers) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func watch(_ room: Room) {
        let triggers = self.triggers
        let watch = room.members.subscribe { [weak self] members in
            guard let self else { return }
            self.state.withLock { state in
                let ids = Set(members.map(\.sessionId))
                for (id, _) in state.watches where !ids.contains(id) { state.watches[id] = nil }
                for member in members where state.watches[member.sessionId] == nil {
                    state.watches[member.sessionId] = member.streams.subscribe { _ in triggers.yield() }
                }
            }
            triggers.yield()
        }
        let task = Task { [weak self, stream] in
            for await _ in stream {
                guard let self else { return }
                await self.evaluate(room)
            }
        }
        state.withLock { state in
            state.membersWatch = watch
            state.task = task
        }
    }

    /// Streams on offer, most recent last: presenters' and participants' pcast streams.
    private func candidates(_ room: Room) -> [RoomStream] {
        let members = room.members.value.sorted { $0.lastUpdate.value < $1.lastUpdate.value }
        let streams = members.filter { $0.role.value.mayPublish && $0.state.value != .offline }
            .flatMap { $0.streams.value }
            .filter { $0.pcastStreamId != nil && $0.videoState != .ended }
        return state.withLock { state in
            for stream in streams where state.firstSeen[stream.uri] == nil {
                state.counter += 1
                state.firstSeen[stream.uri] = state.counter
            }
            let listed = Set(streams.map(\.uri))
            state.failed.formIntersection(listed)
            return streams.filter { !state.failed.contains($0.uri) }
                .sorted { (state.firstSeen[$0.uri] ?? 0) < (state.firstSeen[$1.uri] ?? 0) }
        }
    }

    private func evaluate(_ room: Room) async {
        let available = candidates(room)
        let current = state.withLock { $0.current }
        let choice: RoomStream?
        switch options.streamSelectionStrategy {
        case .mostRecent:
            choice = available.last
        case .highAvailability:
            if let current, available.contains(where: { $0.uri == current.uri }) {
                choice = available.first { $0.uri == current.uri }
            } else {
                choice = available.last
            }
        }
        guard let choice else {
            if let current {
                state.withLock { $0.current = nil }
                await current.subscriber.stop()
            }
            let report = state.withLock { state -> Bool in
                defer { state.reportedNothing = true }
                return !state.reportedNothing
            }
            if report { callback(.noStreamPlaying, nil, nil) }
            return
        }
        guard choice.uri != current?.uri else { return }
        var subscribe = SubscribeToMemberStreamOptions(capabilities: options.capabilities, renderer: options.renderer)
        subscribe.playoutDelay = options.playoutDelay
        let triggers = self.triggers
        let uri = choice.uri
        subscribe.monitor = MonitorOptions(streamEnded: { [weak self] _, _, _ in
            // The viewed stream ended: never pick it again while it is listed, and choose anew.
            self?.state.withLock { _ = $0.failed.insert(uri) }
            triggers.yield()
        })
        do throws(PCastError) {
            let member = room.members.value.first { $0.streams.value.contains { $0.uri == uri } }
            let subscriber = try await express.subscribeToMemberStream(choice, subscribe, member: member)
            let old = state.withLock { state -> ExpressSubscriber? in
                defer { state.current = (uri, subscriber); state.reportedNothing = false }
                return state.current?.subscriber
            }
            callback(.ok, subscriber, subscriber.renderer)
            await old?.stop()
        } catch {
            state.withLock { _ = $0.failed.insert(uri) }
            callback(error.status, nil, nil)
            triggers.yield()
        }
    }

    deinit {
        let (task, current) = state.withLock { ($0.task, $0.current) }
        task?.cancel()
        triggers.finish()
        if let subscriber = current?.subscriber { Task { await subscriber.stop() } }
    }
}

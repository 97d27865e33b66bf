import Foundation
import PCastMedia
import PCastProtocol
import Synchronization

/// Options of ``RoomExpress/joinRoom(_:membersChanged:)`` (the PCast iOS SDK's `JoinRoomOptionsBuilder`).
public struct JoinRoomOptions: Sendable, Hashable {
    public var roomId: String?
    public var roomAlias: String?
    public var capabilities: [String] = []
    public var role: MemberRole = .audience
    /// Generated when nil.
    public var screenName: String?
    public var streams: [RoomStream] = []

    public init(roomId: String? = nil, roomAlias: String? = nil, capabilities: [String] = [], role: MemberRole = .audience,
                screenName: String? = nil, streams: [RoomStream] = []) {
        self.roomId = roomId
        self.roomAlias = roomAlias
        self.capabilities = capabilities
        self.role = role
        self.screenName = screenName
        self.streams = streams
    }
}

/// Options of ``RoomExpress/publishToRoom(_:)`` (the PCast iOS SDK's `PublishToRoomOptionsBuilder`).
public struct PublishToRoomOptions: Sendable {
    /// The room to publish to (created when missing); or give ``roomId``.
    public var roomOptions: RoomOptions?
    public var roomId: String?
    /// Local media to publish; or give ``publishRemoteOptions``.
    public var publishOptions: PublishOptions?
    public var publishRemoteOptions: PublishRemoteOptions?
    public var memberRole: MemberRole
    public var streamType: RoomStreamType
    public var screenName: String?
    /// Put a stream token in the member's stream URI, so viewers subscribe without asking the backend.
    public var wildcardTokens = true
    /// The strategy the room's viewers use (it has to match theirs). With
    /// ``StreamSelectionStrategy/highAvailability`` the stream always carries a wildcard token, so
    /// a viewer whose stream fails switches to this one without asking the backend first.
    public var viewerStreamSelectionStrategy: StreamSelectionStrategy = .mostRecent

    public init(roomOptions: RoomOptions? = nil, roomId: String? = nil, publishOptions: PublishOptions? = nil,
                publishRemoteOptions: PublishRemoteOptions? = nil, memberRole: MemberRole = .participant,
                streamType: RoomStreamType = .user, screenName: String? = nil, wildcardTokens: Bool = true) {
        self.roomOptions = roomOptions
        self.roomId = roomId
        self.publishOptions = publishOptions
        self.publishRemoteOptions = publishRemoteOptions
        self.memberRole = memberRole
        self.streamType = streamType
        self.screenName = screenName
        self.wildcardTokens = wildcardTokens
    }
}

/// Options of ``RoomExpress/subscribeToMemberStream(_:_:)``.
public struct SubscribeToMemberStreamOptions: Sendable {
    public var capabilities: [String] = []
    public var renderer: RendererOptions?
    public var monitor: MonitorOptions?
    public var playoutDelay: Duration?

    public init(capabilities: [String] = [], renderer: RendererOptions? = nil, monitor: MonitorOptions? = nil) {
        self.capabilities = capabilities
        self.renderer = renderer
        self.monitor = monitor
    }
}

/// The PCast iOS SDK's Room Express: join a room, publish to it, subscribe to members' streams, on top of
/// ``PCastExpress`` (``pcastExpress``) and ``RoomService``. Hold the returned room service for as
/// long as you stay in the room; releasing it leaves.
///
/// ```swift
/// let express = RoomExpress(pcastExpress: PCastExpress(PCastExpressOptions(backendURI: backend)))
/// let (rooms, publisher) = try await express.publishToRoom(PublishToRoomOptions(
///     roomOptions: RoomOptions(name: "Stand-up", type: .multiPartyChat, alias: "standup"),
///     publishOptions: PublishOptions()))
/// let viewer = try await express.joinRoom(JoinRoomOptions(roomAlias: "standup")) { members in
///     print(members.map(\.screenName.value))
/// }
/// ```
public final class RoomExpress: Sendable {
    public let pcastExpress: PCastExpress

    public init(pcastExpress: PCastExpress) {
        self.pcastExpress = pcastExpress
    }

    public convenience init(_ options: PCastExpressOptions) {
        self.init(pcastExpress: PCastExpress(options))
    }

    /// Joins a room; `membersChanged` is called with the visible members at once and whenever they
    /// change, for as long as the returned service lives.
    public func joinRoom(_ options: JoinRoomOptions, membersChanged: (@Sendable ([Member]) -> Void)? = nil) async throws(PCastError) -> RoomService {
        let pcast = try await pcastExpress.pcast()
        let rooms = RoomService(pcast: pcast)
        rooms.selfMember.role.setValue(options.role)
        rooms.selfMember.screenName.setValue(options.screenName ?? RoomService.randomScreenName())
        rooms.selfMember.streams.setValue(options.streams)
        let room = try await rooms.joinRoom(roomId: options.roomId, alias: options.roomAlias)
        if let membersChanged { rooms.keep(room.members.subscribe(membersChanged)) }
        return rooms
    }

    /// Publishes local (or, once ingest exists, remote) media into a room, creating the room when
    /// ``PublishToRoomOptions/roomOptions`` names one that does not exist, and joining it with the
    /// stream in the self member. Releasing the publisher stops it; releasing the service leaves.
    public func publishToRoom(_ options: PublishToRoomOptions) async throws(PCastError) -> (RoomService, ExpressPublisher) {
        guard let publishOptions = options.publishOptions else {
            throw .invalidRequest(options.publishRemoteOptions != nil
                ? "remote media goes through publishRemoteToRoom(_:)" : "give publishOptions")
        }
        let (rooms, roomId) = try await roomService(for: options)
        var publish = publishOptions
        publish.tags += ["roomId:\(roomId)"]
        let publisher = try await pcastExpress.publish(publish)
        let stream = try await offer(publisher.streamId, capabilities: publishOptions.capabilities, in: rooms, options)
        do {
            try await rooms.joinRoom(roomId: roomId)
        } catch {
            await publisher.stop()
            throw error
        }
        // When the stream ends, the member no longer offers it; when the publisher's monitor
        // publishes again (after a failure, or its node going: perhaps on another node), the
        // member offers the new stream. One change after another, in order.
        let offered = Mutex(stream.uri)
        let changes = SerialRequests()
        publisher.setPublisherEndedCallback { [weak rooms] _, _ in
            let uri = offered.withLock { $0 }
            changes.enqueue { [weak rooms] in
                guard let rooms else { return }
                rooms.selfMember.streams.update { $0.removeAll { $0.uri == uri } }
                try? await rooms.selfMember.commitChanges()
            }
        }
        // Enabling or disabling the published audio or video changes the member's stream state,
        // which the other members follow.
        publisher.setTrackStateCallback { [weak rooms] kind, enabled in
            let uri = offered.withLock { $0 }
            changes.enqueue { [weak rooms] in
                guard let rooms else { return }
                rooms.selfMember.streams.update { streams in
                    for index in streams.indices where streams[index].uri == uri {
                        if kind == .audio { streams[index].audioState = enabled ? .enabled : .disabled }
                        else { streams[index].videoState = enabled ? .enabled : .disabled }
                    }
                }
                try? await rooms.selfMember.commitChanges()
            }
        }
        publisher.setRepublishedCallback { [weak self, weak rooms] streamId in
            changes.enqueue { [weak self, weak rooms] in
                guard let self, let rooms,
                      let again = try? await self.roomStream(streamId, capabilities: publishOptions.capabilities, in: rooms, options) else { return }
                offered.withLock { $0 = again.uri }
                rooms.selfMember.streams.setValue([again])
                try? await rooms.selfMember.commitChanges()
            }
        }
        return (rooms, publisher)
    }

    /// Has the platform ingest a remote source and shares the stream in the room as this member's.
    public func publishRemoteToRoom(_ options: PublishToRoomOptions) async throws(PCastError) -> (RoomService, RemotePublisher) {
        guard let remoteOptions = options.publishRemoteOptions else { throw .invalidRequest("give publishRemoteOptions") }
        let (rooms, roomId) = try await roomService(for: options)
        var remote = remoteOptions
        remote.tags += ["roomId:\(roomId)"]
        let publisher = try await pcastExpress.publishRemote(remote)
        _ = try await offer(publisher.streamId, capabilities: remoteOptions.capabilities, in: rooms, options)
        do {
            try await rooms.joinRoom(roomId: roomId)
        } catch {
            try? await publisher.stop()
            throw error
        }
        return (rooms, publisher)
    }

    /// A room service on the express's PCast, and the room to publish to (created from the
    /// options' room options when it has no id).
    private func roomService(for options: PublishToRoomOptions) async throws(PCastError) -> (RoomService, String) {
        let rooms = RoomService(pcast: try await pcastExpress.pcast())
        if let id = options.roomId { return (rooms, id) }
        guard let roomOptions = options.roomOptions else { throw .invalidRequest("give roomOptions or roomId") }
        return (rooms, try await rooms.createRoom(roomOptions).roomId)
    }

    /// Sets the self model to offer `streamId` (with a wildcard stream token when asked) in the
    /// options' role and screen name; returns the stream as offered.
    private func offer(_ streamId: String, capabilities: [String], in rooms: RoomService,
                       _ options: PublishToRoomOptions) async throws(PCastError) -> RoomStream {
        let stream = try await roomStream(streamId, capabilities: capabilities, in: rooms, options)
        rooms.selfMember.role.setValue(options.memberRole)
        rooms.selfMember.screenName.setValue(options.screenName ?? RoomService.randomScreenName())
        rooms.selfMember.streams.setValue([stream])
        return stream
    }

    /// The member's stream for `streamId` (its URI with a wildcard stream token when asked).
    private func roomStream(_ streamId: String, capabilities: [String], in rooms: RoomService,
                            _ options: PublishToRoomOptions) async throws(PCastError) -> RoomStream {
        var uri = "pcast://\(streamId)"
        if options.wildcardTokens || options.viewerStreamSelectionStrategy == .highAvailability {
            let token = try await pcastExpress.streamToken(streamId: streamId, capabilities: capabilities)
            uri += "?streamToken=" + (token.addingPercentEncoding(withAllowedCharacters: .urlQueryValueAllowed) ?? token)
        }
        return rooms.createStream(uri: uri, type: options.streamType)
    }

    /// Subscribes to a member's stream: with the wildcard token in its URI when there is one, else
    /// with a token from the backend. Given the `member` that offers it, the subscriber follows the
    /// stream's state as the member changes it: audio or video `disabled` (or `ended`) there is
    /// disabled here (silence, black), `enabled` enables it again.
    public func subscribeToMemberStream(_ stream: RoomStream, _ options: SubscribeToMemberStreamOptions = .init(),
                                        member: Member? = nil) async throws(PCastError) -> ExpressSubscriber {
        guard let streamId = stream.pcastStreamId else { throw .invalidRequest("'\(stream.uri)' is not a pcast:// stream") }
        var subscribe = SubscribeOptions(streamId: streamId, capabilities: options.capabilities, streamToken: stream.streamToken,
                                         renderer: options.renderer, monitor: options.monitor)
        subscribe.playoutDelay = options.playoutDelay
        let subscriber = try await pcastExpress.subscribe(subscribe)
        if let member {
            let uri = stream.uri
            subscriber.keep(member.streams.subscribe { [weak subscriber] streams in
                guard let subscriber, let current = streams.first(where: { $0.uri == uri }) else { return }
                subscriber.follow(audio: current.audioState, video: current.videoState)
            })
        }
        return subscriber
    }
}

extension CharacterSet {
    /// Characters left as they are in a query value (`&`, `=`, `+` and `?` are encoded).
    static let urlQueryValueAllowed: CharacterSet = {
        var set = CharacterSet.urlQueryAllowed
        set.remove(charactersIn: "&=+?#")
        return set
    }()
}

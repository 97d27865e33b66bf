import ArgumentParser
import Foundation
import PCast
import PCastMedia

/// Which room a command is about: `--room-id` or `--alias`.
struct RoomSelection: ParsableArguments {
    @Option(help: "Room id.") var roomId: String?
    @Option(help: "Room alias.") var alias: String?

    func validate() throws {
        guard roomId != nil || alias != nil else { throw ValidationError("give --room-id or --alias") }
    }
}

func describe(_ member: MemberDescription) -> String {
    "\(member.sessionId) \(member.role.rawValue) \(member.state.rawValue) \"\(member.screenName)\" streams=\(member.streams.map(\.uri))"
}

func describe(_ member: Member) -> String { describe(member.model) }

/// Prints a JSON line to standard output (what scripts read).
func printJSON<T: Encodable>(_ value: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    if let data = try? encoder.encode(value), let line = String(data: data, encoding: .utf8) { print(line) }
    fflush(nil)
}

struct RoomCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "room",
        abstract: "Create, join and inspect rooms.",
        subcommands: [Create.self, Join.self, Members.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a room (or find the one with the alias); prints its id and alias.")
        @OptionGroup var session: SessionOptions
        @Option(help: "Room name.") var name: String
        @Option(help: "Room type: \(RoomType.allCases.map(\.rawValue).joined(separator: ", ")).") var type: String = RoomType.multiPartyChat.rawValue
        @Option(help: "Alias (generated when absent).") var alias: String?
        @Option(help: "Description.") var description: String?

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            guard let roomType = RoomType(rawValue: type) else { throw fail("no room type '\(type)'", code: 2) }
            let pcast = try await session.start()
            defer { Task { await pcast.stop() } }
            do {
                let room = try await RoomService(pcast: pcast).createRoom(RoomOptions(name: name, type: roomType, alias: alias, description: description))
                print("\(room.roomId) \(room.alias.value)")
                fflush(nil)
            } catch {
                await pcast.stop()
                throw fail("create room failed (\(error.status.rawValue)): \(error)")
            }
            await pcast.stop()
        }
    }

    struct Join: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Join a room and print member changes (one line each) until Ctrl-C or --seconds; leaves at the end.")
        @OptionGroup var session: SessionOptions
        @OptionGroup var room: RoomSelection
        @Option(help: "Role: participant, audience, presenter, moderator.") var role: String = MemberRole.participant.rawValue
        @Option(help: "Screen name.") var screenName: String?
        @Option(help: "State: active, passive, hand-raised, inactive.") var state: String = MemberState.active.rawValue
        @Option(help: "Seconds to stay (0: until Ctrl-C).") var seconds: Double = 0

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            guard let memberRole = MemberRole(rawValue: role) else { throw fail("no role '\(role)'", code: 2) }
            guard let memberState = MemberState(rawValue: state) else { throw fail("no state '\(state)'", code: 2) }
            let pcast = try await session.start()
            let rooms = RoomService(pcast: pcast)
            rooms.selfMember.role.setValue(memberRole)
            rooms.selfMember.state.setValue(memberState)
            if let screenName { rooms.selfMember.screenName.setValue(screenName) }
            let listener = pcast.addEventListener { message in
                switch message {
                case .roomEvent(let event):
                    if let member = event.member { print("\(event.kind.rawValue) \(describe(member))") }
                    if let room = event.room { print("\(event.kind.rawValue) \(room.roomId) \"\(room.name)\"") }
                case .roomSize(let size):
                    print("size \(size.estimatedSize)")
                case .chatMessage(let chat):
                    print("chat \(chat.message.messageId) \(chat.message.from.screenName): \(chat.message.message)")
                default:
                    return
                }
                fflush(nil)
            }
            let joined: Room
            do {
                joined = try await rooms.joinRoom(roomId: room.roomId, alias: room.alias)
            } catch {
                await pcast.stop()
                throw fail("join failed (\(error.status.rawValue)): \(error)")
            }
            print("joined \(joined.roomId) \"\(joined.name.value)\" as \(rooms.selfMember.sessionId)")
            for member in joined.members.value { print("member \(describe(member))") }
            fflush(nil)
            await runUntilStopped(seconds: seconds) {
                // Ends early when the room is destroyed.
                for await room in rooms.activeRoom.values where room == nil { return }
            }
            _ = listener
            try? await rooms.leaveRoom()
            await pcast.stop()
        }
    }

    struct Members: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a room's visible members and estimated size without joining.")
        @OptionGroup var session: SessionOptions
        @OptionGroup var room: RoomSelection

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            let pcast = try await session.start()
            do throws(PCastError) {
                let reply = try await pcast.request(.getRoomInfo(.init(roomId: room.roomId, alias: room.alias)))
                guard case .roomInfo(let info) = reply else { throw .invalidRequest("unexpected reply \(reply.type)") }
                print("room \(info.room.roomId) \(info.room.alias) \(info.room.type.rawValue) \"\(info.room.name)\"")
                for member in info.members { print("member \(describe(member))") }
                print("size \(info.estimatedSize)")
                fflush(nil)
            } catch {
                await pcast.stop()
                throw fail("room info failed (\(error.status.rawValue)): \(error)")
            }
            await pcast.stop()
        }
    }
}

struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Send chat messages to a room and read its history (joins as audience for the duration).",
        subcommands: [Send.self, History.self]
    )

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a message; prints its id.")
        @OptionGroup var session: SessionOptions
        @OptionGroup var room: RoomSelection
        @Option(help: "The message.") var message: String
        @Option(help: "Screen name.") var screenName: String?

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            let pcast = try await session.start()
            let rooms = RoomService(pcast: pcast)
            if let screenName { rooms.selfMember.screenName.setValue(screenName) }
            do {
                try await rooms.joinRoom(roomId: room.roomId, alias: room.alias)
                let sent = try await ChatService(roomService: rooms, batchSize: 1).sendMessageToRoom(message)
                print(sent.messageId)
                fflush(nil)
            } catch {
                await pcast.stop()
                throw fail("chat send failed (\(error.status.rawValue)): \(error)")
            }
            try? await rooms.leaveRoom()
            await pcast.stop()
        }
    }

    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print chat history as JSON lines, oldest first.")
        @OptionGroup var session: SessionOptions
        @OptionGroup var room: RoomSelection
        @Option(help: "Messages to fetch (1...100).") var batchSize = 20
        @Option(help: "Only messages after this id.") var after: String?
        @Option(help: "Only messages before this id.") var before: String?

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            let pcast = try await session.start()
            let rooms = RoomService(pcast: pcast)
            do {
                try await rooms.joinRoom(roomId: room.roomId, alias: room.alias)
                let messages = try await ChatService(roomService: rooms, batchSize: 1)
                    .getMessages(batchSize: batchSize, afterMessageId: after, beforeMessageId: before)
                for message in messages { printJSON(message) }
            } catch {
                await pcast.stop()
                throw fail("chat history failed (\(error.status.rawValue)): \(error)")
            }
            try? await rooms.leaveRoom()
            await pcast.stop()
        }
    }
}

/// Express clients of the platform's sample backend.
struct BackendOptions: ParsableArguments {
    @Option(help: "The application backend (e.g. http://127.0.0.1:8080/backend/ of `pcast serve --sample-backend`).")
    var backend: String
    @Option(help: "Authentication data sent to the backend (a JSON object).") var authData: String?
    @Option(help: "Room role to ask the backend for (repeatable).") var askRole: [String] = []

    func express() throws -> PCastExpress {
        guard let url = URL(string: backend.hasSuffix("/") ? backend : backend + "/"), url.scheme == "http" || url.scheme == "https" else {
            throw fail("--backend must be an http(s) URL", code: 2)
        }
        var roles: [MemberRole] = []
        for name in askRole {
            guard let role = MemberRole(rawValue: name) else { throw fail("no role '\(name)'", code: 2) }
            roles.append(role)
        }
        return PCastExpress(PCastExpressOptions(backendURI: url, authenticationData: authData, roles: roles))
    }
}

struct ChannelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Publish to and view channels through the Express APIs and an application backend.",
        subcommands: [Publish.self, View.self]
    )

    struct Publish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a test pattern (or --source) to a channel, creating it if needed; prints the stream id.")
        @OptionGroup var backend: BackendOptions
        @Option(help: "Channel alias.") var alias: String
        @Option(help: "Channel name (when it is created).") var name: String?
        @Option(help: "Video source: test, null, a device id, a URI, or a gst-launch description.") var source = "test"
        @Option(help: "Width.") var width = 1280
        @Option(help: "Height.") var height = 720
        @Option(help: "Frame rate.") var fps: Double = 30
        @Option(help: "Screen name.") var screenName: String?
        @Option(help: "Seconds to publish (0: until Ctrl-C).") var seconds: Double = 0

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            var media = UserMediaOptions()
            switch PreviewCommand.parse(source, kind: .video) {
            case .id(let id): media.video.deviceId = .exact(id)
            case .override(let override): media.video.source = override
            }
            media.video.width = .exact(width)
            media.video.height = .exact(height)
            media.video.frameRate = .exact(fps)
            media.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
            let channels = ChannelExpress(roomExpress: RoomExpress(pcastExpress: try backend.express()))
            let rooms: RoomService, publisher: ExpressPublisher
            do {
                (rooms, publisher) = try await channels.publishToChannel(PublishToChannelOptions(
                    channelOptions: ChannelOptions(name: name ?? alias, alias: alias),
                    publishOptions: PublishOptions(mediaConstraints: media, capabilities: ["real-time"]), screenName: screenName))
            } catch {
                await channels.pcastExpress.shutdown()
                throw fail("publish to channel failed (\(error.status.rawValue)): \(error)")
            }
            print(publisher.streamId)
            fflush(nil)
            // Until Ctrl-C, --seconds, or the stream ends.
            let low = publisher.publisher
            await runUntilStopped(seconds: seconds) { _ = await low?.ended() }
            await publisher.stop()
            try? await rooms.leaveRoom()
            await channels.pcastExpress.shutdown()
        }
    }

    struct View: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "View a channel: render the stream the strategy selects, following it as streams start and stop. Prints one line per change.")
        @OptionGroup var backend: BackendOptions
        @Option(help: "Channel alias.") var alias: String
        @Option(help: "Stream selection: most-recent or high-availability.") var strategy = StreamSelectionStrategy.mostRecent.rawValue
        @Option(help: "Sink: auto (a window and speakers) or null.") var sink = "auto"
        @Option(help: "Seconds to view (0: until Ctrl-C).") var seconds: Double = 0

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            guard let selection = StreamSelectionStrategy(rawValue: strategy) else { throw fail("no strategy '\(strategy)'", code: 2) }
            let headless = ProcessInfo.processInfo.environment["DISPLAY"].map(\.isEmpty) ?? true
            let useNull = sink == "null" || headless
            let channels = ChannelExpress(roomExpress: RoomExpress(pcastExpress: try backend.express()))
            var options = JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: alias, capabilities: ["real-time"]),
                                             renderer: RendererOptions(useNullVideoDevice: useNull, useNullAudioDevice: useNull),
                                             streamSelectionStrategy: selection)
            options.capabilities = ["real-time"]
            let rooms: RoomService
            do {
                // Viewing a channel nobody has published to yet waits for its first stream.
                _ = try await channels.createChannel(ChannelOptions(name: alias, alias: alias))
                rooms = try await channels.joinChannel(options) { status, subscriber, _ in
                    switch status {
                    case .ok: print("viewing \(subscriber?.streamId ?? "?")")
                    case .noStreamPlaying: print("no stream playing")
                    default: print("subscribe failed: \(status.rawValue)")
                    }
                    fflush(nil)
                }
            } catch {
                await channels.pcastExpress.shutdown()
                throw fail("join channel failed (\(error.status.rawValue)): \(error)")
            }
            // Until Ctrl-C, --seconds, or the channel is gone.
            await runUntilStopped(seconds: seconds) {
                for await room in rooms.activeRoom.values where room == nil { return }
            }
            try? await rooms.leaveRoom()
            await channels.pcastExpress.shutdown()
        }
    }
}

struct IngestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingest",
        abstract: "Have the platform pull a remote source (http(s) mp4, rtmp, rtsp) and publish it; prints the stream id, then progress, until the source ends or Ctrl-C.")
    @OptionGroup var session: SessionOptions
    @Option(help: "Publish token.") var token: String
    @Option(help: "The source URI.") var uri: String
    @Option(help: "Re-encode to at most this frame rate.") var maxFps: Double?
    @Option(help: "Re-encode to exactly this frame rate.") var exactFps: Double?
    @Option(help: "Milliseconds skipped at the start.") var prerollSkip: Int?
    @Flag(help: "Play a file again at its end.") var loop = false
    @Option(help: "Tag to put on the stream (repeatable).") var tag: [String] = []

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let pcast = try await session.start()
        let remote: RemotePublisher
        do {
            remote = try await pcast.publishRemote(.init(
                streamToken: token, streamURI: uri, tags: tag, connectOptions: loop ? ["loop"] : [],
                maximumFrameRate: maxFps, exactFrameRate: exactFps, prerollSkipMilliseconds: prerollSkip))
        } catch {
            await pcast.stop()
            throw fail("ingest failed (\(error.status.rawValue)): \(error)")
        }
        print("\(remote.streamId)\(remote.passthrough ? "" : " (re-encoded)")")
        fflush(nil)
        let watching = remote.progress.subscribe { progress in
            guard let progress, let position = progress.positionMilliseconds else { return }
            let total = progress.durationMilliseconds.map { String(format: " / %.1f s", Double($0) / 1000) } ?? ""
            print(String(format: "position %.1f s", Double(position) / 1000) + total)
            fflush(nil)
        }
        await runUntilStopped(seconds: 0) { _ = await remote.ended() }
        _ = watching
        if remote.hasEnded {
            let (reason, description) = await remote.ended()
            print("ended: \(reason.rawValue)\(description.map { " (\($0))" } ?? "")")
        } else {
            try? await remote.stop()
        }
        await pcast.stop()
    }
}

import Foundation
@testable import PCast
import PCastNode
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

func express(_ platform: LocalPlatform, roles: [MemberRole] = [], authenticationData: String? = nil) -> PCastExpress {
    PCastExpress(PCastExpressOptions(backendURI: URL(string: platform.backendURL)!, authenticationData: authenticationData, roles: roles))
}

/// 320×240 test pattern with a tone, small enough for several publishers on a 2-core machine.
func smallMedia() -> UserMediaOptions {
    var options = UserMediaOptions()
    options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
    options.video.width = .exact(320)
    options.video.height = .exact(240)
    options.video.frameRate = .exact(15)
    options.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
    return options
}

extension OneAtATime {
    @Suite("Express APIs against the sample backend", .serialized)
    struct ExpressTests {
        @Test("PCast Express fetches tokens from the backend, publishes with a preview and subscribes with a renderer")
        func publishSubscribe() async throws {
            let platform = try await LocalPlatform.start()
            let publishing = express(platform, authenticationData: #"{"user":"ada"}"#)
            let publisher = try await publishing.publish(PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"],
                                                                        previewRenderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)))
            #expect(!publisher.streamId.isEmpty && publisher.preview?.isStarted == true)
            let viewing = express(platform)
            let subscriber = try await viewing.subscribe(SubscribeOptions(streamId: publisher.streamId, capabilities: ["real-time"],
                                                                          renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)))
            let renderer = try #require(subscriber.renderer)
            #expect(await eventually { renderer.videoDimensions == Dimensions(width: 320, height: 240) })
            #expect(subscriber.getVideoTracks().count == 1 && subscriber.getAudioTracks().count == 1)
            await publisher.stop()
            #expect(await eventually { subscriber.mediaStream?.endReason != nil })
            if case .remote(let reason, _)? = subscriber.mediaStream?.endReason { #expect(reason == .ended) } else { Issue.record("not ended remotely") }
            await subscriber.stop()
            await publishing.shutdown()
            await viewing.shutdown()
            await platform.shutdown()
        }

        @Test("publishRemote refuses internal addresses and unknown connect options with typed errors")
        func publishRemoteRefused() async throws {
            let platform = try await LocalPlatform.start()
            let client = express(platform)
            for uri in ["http://169.254.169.254/latest/meta-data", "http://10.0.0.1/clip.mp4", "gopher://example.com/x"] {
                do {
                    _ = try await client.publishRemote(PublishRemoteOptions(streamURI: uri))
                    Issue.record("the platform agreed to pull \(uri)")
                } catch {
                    #expect(error.status == .unauthorized, "\(uri): \(error)")
                }
            }
            await client.shutdown()
            await platform.shutdown()
        }

        @Test("a backend refusal is typed and reaches the unrecoverable-error callback")
        func backendRefusal() async throws {
            let platform = try await LocalPlatform.start()
            let heard = Values<RequestStatus>()
            var options = PCastExpressOptions(backendURI: URL(string: platform.backendURL)!, roles: [.moderator])
            options.unrecoverableErrorCallback = { status, _ in heard.append(status) }
            let client = PCastExpress(options)
            do {
                _ = try await client.pcast()
                Issue.record("the backend gave a moderator token without the password")
            } catch {
                #expect(error.status == .unauthorized)
            }
            #expect(heard.all == [.unauthorized])
            // An unreachable backend is a connection failure, not a hang.
            let nowhere = PCastExpress(PCastExpressOptions(backendURI: URL(string: "http://127.0.0.1:9/backend/")!))
            do {
                _ = try await nowhere.pcast()
                Issue.record("an unreachable backend worked")
            } catch {
                guard error.code == .connectionFailed else { Issue.record("unexpected \(error)"); return }
            }
            await platform.shutdown()
        }

        @Test("monitor: a failed setup waits for the retry decision; retrying a stream that never comes ends in the typed error")
        func monitorRetry() async throws {
            let platform = try await LocalPlatform.start()
            let client = express(platform)
            let attempts = Values<RequestStatus>()
            let monitor = MonitorOptions(setupFailed: { status, retry in
                attempts.append(status)
                #expect(retry.isPresent)
                if attempts.all.count < 3 { try? retry.perform() } else { retry.dismiss() }
            })
            do {
                _ = try await client.subscribe(SubscribeOptions(streamId: "stream-missing", monitor: monitor))
                Issue.record("subscribed to a stream that does not exist")
            } catch {
                #expect(error.status == .notFound)
            }
            #expect(attempts.all == [.notFound, .notFound, .notFound])
            await client.shutdown()
            await platform.shutdown()
        }

        @Test("monitor: a publisher that ends normally offers no retry; a failed subscription offers one that resubscribes")
        func monitorStreamEnded() async throws {
            let platform = try await LocalPlatform.start()
            let publishing = express(platform)
            let publisher = try await publishing.publish(PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"]))
            let endings = Values<(StreamEndedReason, Bool)>()
            let viewing = express(platform)
            let subscriber = try await viewing.subscribe(SubscribeOptions(
                streamId: publisher.streamId, monitor: MonitorOptions(streamEnded: { reason, _, retry in
                    endings.append((reason, retry.isPresent))
                })))
            _ = await platform.server.endStream(publisher.streamId, reason: .maintenance, description: "drill")
            #expect(await eventually { endings.all.count == 1 })
            #expect(endings.all.first?.0 == .maintenance && endings.all.first?.1 == true)
            await subscriber.stop()
            await publisher.stop()
            await publishing.shutdown()
            await viewing.shutdown()
            await platform.shutdown()
        }
    }
}

extension OneAtATime {
    @Suite("Room and Channel Express", .serialized)
    struct RoomChannelExpressTests {
        @Test("joinRoom calls membersChanged at once and on changes; publishToRoom shares a stream a member subscribes to with its wildcard token")
        func roomExpress() async throws {
            let platform = try await LocalPlatform.start()
            let hostExpress = RoomExpress(pcastExpress: express(platform))
            let (hostRooms, publisher) = try await hostExpress.publishToRoom(PublishToRoomOptions(
                roomOptions: RoomOptions(name: "Studio", type: .multiPartyChat, alias: "studio"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"]), screenName: "Host"))
            let guestExpress = RoomExpress(pcastExpress: express(platform))
            let seen = Values<[String]>()
            let guestRooms = try await guestExpress.joinRoom(JoinRoomOptions(roomAlias: "studio", role: .participant, screenName: "Guest")) { members in
                seen.append(members.map { $0.screenName.value })
            }
            #expect(seen.all.first == ["Host", "Guest"])
            let host = try #require(guestRooms.activeRoom.value?.members.value.first { $0.screenName.value == "Host" })
            let stream = try #require(host.streams.value.first)
            #expect(stream.pcastStreamId == publisher.streamId && stream.streamToken != nil)
            let subscriber = try await guestExpress.subscribeToMemberStream(stream, SubscribeToMemberStreamOptions(
                renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)))
            #expect(await eventually { subscriber.renderer?.videoDimensions != nil })
            // The host leaves: the guest's callback hears it.
            try await hostRooms.leaveRoom()
            #expect(await eventually { seen.all.last == ["Guest"] })
            await subscriber.stop()
            await publisher.stop()
            await hostExpress.pcastExpress.shutdown()
            await guestExpress.pcastExpress.shutdown()
            await platform.shutdown()
        }

        @Test("mostRecent switches to a newer presenter; noStreamPlaying before any")
        func mostRecent() async throws {
            let platform = try await LocalPlatform.start()
            let viewer = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            _ = try await viewer.createChannel(ChannelOptions(name: "News", alias: "news"))
            let viewed = Values<(RequestStatus, String?)>()
            let viewerRooms = try await viewer.joinChannel(JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "news"))) { status, subscriber, _ in
                viewed.append((status, subscriber?.streamId))
            }
            #expect(await eventually { viewed.all.first?.0 == .noStreamPlaying })

            let first = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let (firstRooms, one) = try await first.publishToChannel(PublishToChannelOptions(
                channelOptions: ChannelOptions(name: "News", alias: "news"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])))
            #expect(await eventually { viewed.all.last?.1 == one.streamId })
            let second = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let (secondRooms, two) = try await second.publishToChannel(PublishToChannelOptions(
                channelOptions: ChannelOptions(name: "News", alias: "news"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])))
            let switched = ContinuousClock.now
            #expect(await eventually { viewed.all.last?.1 == two.streamId })
            print("mostRecent switch took \(ContinuousClock.now - switched)")
            _ = (viewerRooms, firstRooms, secondRooms)
            await one.stop()
            await two.stop()
            for e in [viewer, first, second] { await e.pcastExpress.shutdown() }
            await platform.shutdown()
        }

        @Test("highAvailability stays on its stream when a newer one starts and switches when its publisher is killed")
        func highAvailability() async throws {
            let platform = try await LocalPlatform.start()
            let first = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let (firstRooms, one) = try await first.publishToChannel(PublishToChannelOptions(
                channelOptions: ChannelOptions(name: "Live", alias: "live"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])))
            let viewer = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let viewed = Values<String?>()
            var options = JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "live"), streamSelectionStrategy: .highAvailability)
            options.renderer = RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)
            let rooms = try await viewer.joinChannel(options) { status, subscriber, _ in
                if status != .ok { print("channel viewer: \(status)") }
                viewed.append(subscriber?.streamId)
            }
            #expect(await eventually { viewed.all.last == one.streamId })

            let second = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let (secondRooms, two) = try await second.publishToChannel(PublishToChannelOptions(
                channelOptions: ChannelOptions(name: "Live", alias: "live"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])))
            try await Task.sleep(for: .seconds(2))
            #expect(viewed.all == [one.streamId], "high availability must not follow a newer stream")

            // The first publisher crashes (media and connection gone, no bye): once its media has
            // stopped too, the platform ends its stream as failed and the viewer moves on.
            let killed = try await first.pcastExpress.pcast()
            killed.crashForTesting()
            #expect(await eventually { viewed.all.last == two.streamId })
            _ = (rooms, firstRooms, secondRooms)
            await two.stop()
            for e in [viewer, first, second] { await e.pcastExpress.shutdown() }
            await platform.shutdown()
        }
    }
}

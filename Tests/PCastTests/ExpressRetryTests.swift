import Foundation
@testable import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Testing

/// Whether `subscriber`'s current renderer decodes `count` more video frames within `limit`.
func decodes(_ subscriber: ExpressSubscriber, _ count: Int = 10, within limit: Duration = .seconds(15)) async -> Bool {
    guard let renderer = subscriber.renderer, let track = subscriber.videoTracks.first else { return false }
    let frames = Values<Int>()
    guard (try? renderer.setFrameReadyCallback(track) { _ in frames.append(1) }) != nil else { return false }
    return await eventually(limit) { frames.all.count >= count }
}

extension OneAtATime {
    /// The Express APIs' monitors, retries and room state, through the embedded platform.
    @Suite("Express: monitor retries, data quality across retries, member stream state, remote media in a channel", .serialized)
    struct ExpressRetryTests {
        @Test("a publisher whose stream the platform ends as maintenance is offered a retry; performing it publishes a new stream that a viewer decodes, and the data-quality callback set before is called for it; the platform ending it as `ended` offers no retry")
        func publisherRetry() async throws {
            let platform = try await LocalPlatform.start()
            let publishing = express(platform)
            let endings = Values<(StreamEndedReason, Bool)>()
            var options = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
            options.monitor = MonitorOptions(streamEnded: { reason, _, retry in
                endings.append((reason, retry.isPresent))
                if retry.isPresent { try? retry.perform() }
            })
            let publisher = try await publishing.publish(options)
            let first = publisher.streamId
            let qualities = Values<String>()
            publisher.setDataQualityChangedCallback { status, reason in qualities.append("\(status.rawValue)/\(reason.rawValue)") }
            #expect(await eventually { qualities.all.count == 1 }, "the first stream's report")

            #expect(await platform.server.endStream(first, reason: .maintenance, description: "drill"))
            #expect(await eventually { endings.all.count == 1 })
            #expect(endings.all.first?.0 == .maintenance && endings.all.first?.1 == true)
            #expect(await eventually(.seconds(15)) { !publisher.streamId.isEmpty && publisher.streamId != first && !publisher.hasEnded },
                    "published again under a new stream id")
            #expect(await eventually { qualities.all.count >= 2 }, "the callback carried over to the new stream: \(qualities.all)")
            #expect(qualities.all.allSatisfy { $0 == "all/none" })

            let viewing = express(platform)
            let viewer = try await viewing.subscribe(SubscribeOptions(streamId: publisher.streamId,
                                                                      renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)))
            #expect(await decodes(viewer))

            // The platform ends the new stream normally (an operator's `ended`): no retry.
            #expect(await platform.server.endStream(publisher.streamId, reason: .ended, description: "the show is over"))
            #expect(await eventually { endings.all.count == 2 })
            #expect(endings.all.last?.0 == .ended && endings.all.last?.1 == false, "a normal end: no retry")
            await publisher.stop()
            await viewer.stop()
            await viewing.shutdown()
            await publishing.shutdown()
            await platform.shutdown()
        }

        @Test("a subscriber whose session is lost (no reconnection) is offered a retry; performed once the network is back, it subscribes again on a new session and decodes; the publisher's normal end then offers none")
        func subscriberRetry() async throws {
            let platform = try await LocalPlatform.start()
            let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: platform.server.httpPort)
            let publishing = express(platform)
            let publisher = try await publishing.publish(PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"]))

            var viewerOptions = PCastExpressOptions(backendURI: try #require(URL(string: platform.backendURL)),
                                                    pcastURI: "ws://127.0.0.1:\(proxy.port)/ws")
            viewerOptions.pcastOptions = PCastOptions(uri: "ws://127.0.0.1:\(proxy.port)/ws", reconnects: false)
            let viewing = PCastExpress(viewerOptions)
            let endings = Values<(StreamEndedReason, Bool)>()
            let retries = Values<OptionalAction>()
            let subscriber = try await viewing.subscribe(SubscribeOptions(
                streamId: publisher.streamId, renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true),
                monitor: MonitorOptions(streamEnded: { reason, _, retry in
                    endings.append((reason, retry.isPresent))
                    retries.append(retry)
                })))
            #expect(await decodes(subscriber))
            let firstSession = try await viewing.pcast().sessionId
            let firstStream = try #require(subscriber.mediaStream)

            proxy.setOutage(true)
            #expect(await eventually(.seconds(10)) { endings.all.count == 1 })
            #expect(endings.all.first?.0 == .failed && endings.all.first?.1 == true)
            proxy.setOutage(false)
            try retries.all.first?.perform()
            #expect(await eventually(.seconds(15)) { subscriber.mediaStream.map { $0 !== firstStream } ?? false }, "subscribed again")
            #expect(await decodes(subscriber))
            let secondSession = try await viewing.pcast().sessionId
            #expect(secondSession != nil && secondSession != firstSession, "on a new session")

            await publisher.stop()
            #expect(await eventually { endings.all.count == 2 })
            #expect(endings.all.last?.0 == .ended && endings.all.last?.1 == false)
            await subscriber.stop()
            await viewing.shutdown()
            await publishing.shutdown()
            proxy.stop()
            await platform.shutdown()
        }

        @Test("disableVideo / disableAudio on a room publisher set its member stream's states for the other members; a subscriber given the member follows them (its tracks disabled, then enabled again)")
        func memberStreamState() async throws {
            let platform = try await LocalPlatform.start()
            let hostExpress = RoomExpress(pcastExpress: express(platform))
            let (hostRooms, publisher) = try await hostExpress.publishToRoom(PublishToRoomOptions(
                roomOptions: RoomOptions(name: "Studio", type: .multiPartyChat, alias: "studio-state"),
                publishOptions: PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"]), screenName: "Host"))
            let guestExpress = RoomExpress(pcastExpress: express(platform))
            let guestRooms = try await guestExpress.joinRoom(JoinRoomOptions(roomAlias: "studio-state", role: .participant, screenName: "Guest"))
            let host = try #require(guestRooms.activeRoom.value?.members.value.first { $0.screenName.value == "Host" })
            let stream = try #require(host.streams.value.first)
            #expect(stream.audioState == .enabled && stream.videoState == .enabled)
            let subscriber = try await guestExpress.subscribeToMemberStream(
                stream, SubscribeToMemberStreamOptions(renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true)), member: host)
            #expect(await decodes(subscriber))
            #expect(subscriber.videoTracks.allSatisfy { $0.isEnabled } && subscriber.audioTracks.allSatisfy { $0.isEnabled })

            publisher.disableVideo()
            #expect(await eventually { host.streams.value.first?.videoState == .disabled }, "the guest sees the host's video disabled")
            #expect(host.streams.value.first?.audioState == .enabled)
            #expect(await eventually { subscriber.videoTracks.allSatisfy { !$0.isEnabled } })
            #expect(subscriber.audioTracks.allSatisfy { $0.isEnabled })
            publisher.disableAudio()
            #expect(await eventually { host.streams.value.first?.audioState == .disabled })
            #expect(await eventually { subscriber.audioTracks.allSatisfy { !$0.isEnabled } })
            publisher.enableVideo()
            publisher.enableAudio()
            #expect(await eventually { host.streams.value.first.map { $0.videoState == .enabled && $0.audioState == .enabled } == true })
            #expect(await eventually { subscriber.videoTracks.allSatisfy { $0.isEnabled } && subscriber.audioTracks.allSatisfy { $0.isEnabled } })
            #expect(hostRooms.selfMember.streams.value.first?.uri == stream.uri, "the same stream, its state changed")

            await subscriber.stop()
            await publisher.stop()
            try? await hostRooms.leaveRoom()
            try? await guestRooms.leaveRoom()
            await hostExpress.pcastExpress.shutdown()
            await guestExpress.pcastExpress.shutdown()
            await platform.shutdown()
        }

        @Test("ChannelExpress.publishRemoteToChannel: the platform ingests an mp4 over HTTP into a new channel as a presenter's stream with a wildcard token; a channel viewer decodes it")
        func remoteMediaInAChannel() async throws {
            let http = try StaticHTTPServer.start(directory: (try await TestMedia.clip720p() as NSString).deletingLastPathComponent)
            defer { http.stop() }
            let platform = try await ingestPlatform()
            let presenter = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            var options = PublishToChannelOptions(channelOptions: ChannelOptions(name: "Replay", alias: "replay"),
                                                  publishRemoteOptions: PublishRemoteOptions(streamURI: http.url(clip), capabilities: ["real-time"]))
            options.viewerStreamSelectionStrategy = .highAvailability
            let (rooms, remote) = try await presenter.publishRemoteToChannel(options)
            let offered = try #require(rooms.selfMember.streams.value.first)
            #expect(offered.pcastStreamId == remote.streamId && offered.streamToken != nil && rooms.selfMember.role.value == .presenter)

            let viewer = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let viewed = Values<String>()
            let subscribers = Values<ExpressSubscriber>()
            var join = JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "replay"),
                                          renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            join.streamSelectionStrategy = .highAvailability
            let viewing = try await viewer.joinChannel(join) { status, subscriber, _ in
                if status == .ok, let subscriber { viewed.append(subscriber.streamId); subscribers.append(subscriber) }
            }
            #expect(await eventually { viewed.all.first == remote.streamId })
            let subscriber = try #require(subscribers.all.first)
            #expect(await decodes(subscriber))

            _ = viewing
            try? await remote.stop()
            try? await rooms.leaveRoom()
            await viewer.pcastExpress.shutdown()
            await presenter.pcastExpress.shutdown()
            await platform.shutdown()
        }
    }

    @Suite("Re-publishing a subscribed stream", .serialized)
    struct RepublishTests {
        @Test("a viewer re-publishes the stream it subscribed to: a third client decodes it at the source's size; when the source ends, the re-published stream ends with the same reason; an ended stream cannot be re-published")
        func republish() async throws {
            let platform = try await LocalPlatform.start()
            let source = try await client(platform)
            let media = try await UserMedia.getUserMedia(smallMedia())
            let original = try await source.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let relay = try await client(platform)
            let subscribed = try await relay.subscribe(streamToken: try platform.token(.stream, originStreamId: original.streamId))
            let again = try await relay.publish(streamToken: try platform.token(.publish), subscribedStream: subscribed,
                                                settings: EncodingSettings(videoBitrate: 500, keyframeInterval: 30))
            #expect(again.streamId != original.streamId)
            #expect(Set(again.tracks.map(\.kind)) == [.video, .audio])

            let (viewer, stream, renderer, frames) = try await watchFrames(platform, again.streamId)
            #expect(await eventually { frames.all.count >= 15 }, "the re-published stream decodes")
            #expect(frames.all.last == Dimensions(width: 320, height: 240))
            #expect(platform.relay.statistics().streams == 2)

            await original.stop(reason: .custom, description: "end of show")
            #expect(await eventually { again.hasEnded })
            let (reason, description) = await again.ended()
            #expect(reason == .custom && description == "end of show", "\(reason) \(description ?? "")")
            #expect(await eventually { stream.endReason != nil })
            if case .remote(let why, _)? = stream.endReason { #expect(why == .custom) } else { Issue.record("\(String(describing: stream.endReason))") }

            await #expect(throws: PCastError.invalidRequest("the subscribed stream has ended")) {
                _ = try await relay.publish(streamToken: try platform.token(.publish), subscribedStream: subscribed)
            }
            _ = renderer
            await viewer.stop()
            await relay.stop()
            await source.stop()
            await media.stop()
            await platform.shutdown()
        }
    }

    @Suite("Quality capabilities", .serialized)
    struct QualityCapabilityTests {
        @Test("a publish token with sd makes the SDK encode a 1280×720 capture at 854×480 (a viewer decodes that size), one with ld a 640×480 capture at 480×360; a re-publish, whose size is known only once it flows, stays within the box; without one the capture's size is kept")
        func publishCeiling() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = try await client(platform)
            func published(_ width: Int, _ height: Int, capabilities: [String]) async throws -> (Dimensions?, Publisher, UserMediaStream) {
                var options = smallMedia()
                options.video.width = .exact(width)
                options.video.height = .exact(height)
                options.audio.enabled = false
                let media = try await UserMedia.getUserMedia(options)
                let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: capabilities), mediaStream: media)
                let (viewer, _, renderer, frames) = try await watchFrames(platform, publisher.streamId)
                _ = await eventually { frames.all.count >= 5 }
                _ = renderer
                await viewer.stop()
                return (frames.all.last, publisher, media)
            }
            let (sd, sdPublisher, sdMedia) = try await published(1280, 720, capabilities: ["sd"])
            #expect(sd == Dimensions(width: 854, height: 480))
            let (ld, ldPublisher, ldMedia) = try await published(640, 480, capabilities: ["ld"])
            #expect(ld == Dimensions(width: 480, height: 360))
            let (plain, plainPublisher, plainMedia) = try await published(640, 480, capabilities: [])
            #expect(plain == Dimensions(width: 640, height: 480))

            // The 854×480 stream re-published with a `vld` token: within 426×240.
            let relay = try await client(platform)
            let subscribed = try await relay.subscribe(streamToken: try platform.token(.stream, originStreamId: sdPublisher.streamId))
            let again = try await relay.publish(streamToken: try platform.token(.publish, capabilities: ["vld"]), subscribedStream: subscribed)
            let (viewer, _, renderer, frames) = try await watchFrames(platform, again.streamId)
            #expect(await eventually { frames.all.count >= 5 })
            let size = frames.all.last
            #expect(size.map { $0.width <= 426 && $0.height <= 240 && $0.height >= 230 } == true, "\(String(describing: size))")
            _ = renderer
            await viewer.stop()
            await again.stop()
            await relay.stop()
            for publisher in [sdPublisher, ldPublisher, plainPublisher] { await publisher.stop() }
            for media in [sdMedia, ldMedia, plainMedia] { await media.stop() }
            await sdk.stop()
            await platform.shutdown()
        }
    }

    @Suite("Express: connect options and subscription tags", .serialized)
    struct ExpressConnectOptionTests {
        @Test("publish connect options set the encoder (bitrate=300 → a 300 kbit/s target), subscribe ones the playout delay (120 ms at the viewer); SubscribeOptions.tags reach the backend with the viewer's subscriber-started / subscriber-ended notifications; unknown or out-of-range options are refused before anything starts")
        func connectOptionsAndTags() async throws {
            let collector = try ReportCollector()
            defer { collector.close() }
            let platform = try await LocalPlatform.start { configuration in
                var settings = StreamNotificationSettings(url: URL(string: collector.url + "hook")!, secret: "hook-secret")
                settings.includeViewers = true
                configuration.streamNotifications = settings
            }
            let publishing = express(platform)
            var publishOptions = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
            publishOptions.connectOptions = ["bitrate=300", "keyframe-interval=15"]
            let publisher = try await publishing.publish(publishOptions)
            let outbound = publisher.publisher?.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }
            #expect(outbound?.targetBitrate == 300_000, "\(String(describing: outbound))")

            let viewing = express(platform)
            var options = SubscribeOptions(streamId: publisher.streamId, renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            options.tags = ["viewer:42", "region:eu"]
            options.connectOptions = ["playout-delay=120", "layer=adaptive"]
            let subscriber = try await viewing.subscribe(options)
            #expect(await decodes(subscriber))
            let inbound = subscriber.mediaStream?.rtcStatsReport().stats.first { $0.type == "inbound-rtp" && $0.kind == "video" }
            #expect(inbound?.jitterBufferTargetDelay.map { abs($0 - 0.12) < 0.001 } == true, "\(String(describing: inbound))")
            await subscriber.stop()
            #expect(await eventually { collector.allReports.contains { $0.string("type") == "subscriber-ended" } })
            let viewerEvents = collector.allReports.filter { $0.string("type").hasPrefix("subscriber-") }
            #expect(viewerEvents.map { $0.string("type") } == ["subscriber-started", "subscriber-ended"])
            #expect(viewerEvents.allSatisfy { ($0["tags"] as? [any Sendable])?.compactMap { $0 as? String } == ["viewer:42", "region:eu"] })
            #expect(viewerEvents.allSatisfy { $0.string("streamId") == publisher.streamId && !$0.string("subscriberId").isEmpty })
            #expect(collector.allReports.first?.string("type") == "stream-started")

            for bad in [["bitrate=9"], ["resolution=4k"], ["keyframe-interval"]] {
                var refused = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
                refused.connectOptions = bad
                await #expect { _ = try await publishing.publish(refused) } throws: { ($0 as? PCastError)?.code == .invalidRequest }
            }
            for bad in [["playout-delay=-5"], ["layer=a b"], ["reconnect=true"]] {
                var refused = SubscribeOptions(streamId: publisher.streamId)
                refused.connectOptions = bad
                await #expect { _ = try await viewing.subscribe(refused) } throws: { ($0 as? PCastError)?.code == .invalidRequest }
            }
            #expect(platform.relay.statistics().streams == 1, "the refused publishes published nothing")
            await publisher.stop()
            await viewing.shutdown()
            await publishing.shutdown()
            await platform.shutdown()
        }
    }
}

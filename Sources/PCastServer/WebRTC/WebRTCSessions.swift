import Foundation
import PCastContracts
import PCastProtocol

/// The WHIP and WHEP sessions the platform holds: each is a session of its own in the
/// ``StreamRegistry`` (so its token is checked exactly as an SDK session's is, and its stream or
/// subscription lives and ends like any other), reached over HTTP by its resource id.
struct WebRTCSessions: Sendable {
    struct Resource: Sendable, Hashable {
        let id: String
        let sessionId: String
        let streamId: String
        /// Nil for a WHIP publisher.
        let subscriberId: String?
    }

    private(set) var resources: [String: Resource] = [:]
    private var sessions: Set<String> = []
    /// What the registry answered each WebRTC session's request (read once the request is done).
    private var replies: [String: ServerMessage] = [:]
    /// Peer parameters waiting for the registry's relay call, by stream id (WHIP) or subscriber id (WHEP).
    private var pendingPeers: [String: WebRTCPeerParameters] = [:]

    static let sessionPrefixes = ["whip-", "whep-"]

    func isWebRTC(_ sessionId: String) -> Bool { sessions.contains(sessionId) }

    mutating func open(sessionId: String) {
        sessions.insert(sessionId)
    }

    mutating func reply(_ message: ServerMessage, to sessionId: String) {
        // The first reply is the request's; later ones are events (a stream ending) the resource
        // learns about through the relay or DELETE.
        if replies[sessionId] == nil { replies[sessionId] = message }
    }

    mutating func takeReply(_ sessionId: String) -> ServerMessage? {
        replies.removeValue(forKey: sessionId)
    }

    mutating func expect(_ peer: WebRTCPeerParameters, for flowId: String) {
        pendingPeers[flowId] = peer
    }

    mutating func takePendingPeer(_ flowId: String) -> WebRTCPeerParameters? {
        pendingPeers.removeValue(forKey: flowId)
    }

    mutating func add(_ resource: Resource) {
        resources[resource.id] = resource
    }

    /// Forgets a session (its resource, if it had one); returns the resource.
    @discardableResult
    mutating func close(sessionId: String) -> Resource? {
        sessions.remove(sessionId)
        replies[sessionId] = nil
        guard let resource = resources.values.first(where: { $0.sessionId == sessionId }) else { return nil }
        resources[resource.id] = nil
        return resource
    }

    func resource(streamId: String, subscriberId: String?) -> Resource? {
        resources.values.first { $0.streamId == streamId && $0.subscriberId == subscriberId }
    }

    /// What the registry is told a WebRTC flow's transport is: its keys come from DTLS, not signaling.
    static func dtlsTransport(port: UInt16) -> MediaTransport {
        MediaTransport(srtpProfile: "DTLS-SRTP", port: port, clientKey: "", serverKey: "")
    }
}

/// Why a WHIP or WHEP request was refused: an HTTP status and an RFC 9457 problem.
struct WebRTCRefusal: Error, Sendable, Hashable {
    var status: Int
    var title: String
    var detail: String

    init(_ status: Int, _ title: String, _ detail: String) {
        self.status = status
        self.title = title
        self.detail = detail
    }

    /// The HTTP status for a registry refusal.
    init(_ failure: ServerMessage.Failure) {
        switch failure.status {
        case .unauthorized: self.init(401, "Unauthorized", failure.message)
        case .notFound, .noStreamPlaying: self.init(404, "Not Found", failure.message)
        case .conflict: self.init(409, "Conflict", failure.message)
        case .badRequest: self.init(400, "Bad Request", failure.message)
        case .capacity: self.init(503, "Service Unavailable", failure.message)
        default: self.init(500, "Internal Server Error", failure.message)
        }
    }

    init(_ error: NegotiationError) {
        self.init(error.httpStatus, error.httpStatus == 422 ? "Unprocessable Content" : "Bad Request", error.description)
    }
}

/// A WHIP or WHEP session the platform created.
struct WebRTCCreated: Sendable {
    var resourceId: String
    var answer: String
    var streamId: String
}

extension Platform {
    /// WHIP: publishes the offerer's media as a stream named `name` (its channel alias and stream
    /// name), checked against `token` (a publish token) exactly as an SDK publish is. The stream
    /// is recorded under `name` when `publishType` is `record` or `append`, and offered in the
    /// channel `name` (created when there is none) as a presenter's stream, so channel viewers
    /// find it as they find an SDK publisher's.
    func openWHIP(name: String, token: String?, offer: String, publishType: PublishType = .live,
                  remoteAddress: String?) -> Result<WebRTCCreated, WebRTCRefusal> {
        guard isAccepting else { return .failure(WebRTCRefusal(503, "Service Unavailable", "the platform is shutting down")) }
        if publishType != .live, recordings == nil {
            return .failure(WebRTCRefusal(501, "Not Implemented",
                                          "publish type '\(publishType.rawValue)' records, and this platform node runs no recording service"))
        }
        guard let endpoint = relay.webRTC else { return .failure(WebRTCRefusal(503, "Service Unavailable", "this relay does not accept WebRTC peers")) }
        guard let token, !token.isEmpty else { return .failure(WebRTCRefusal(401, "Unauthorized", "no publish token (Authorization: Bearer <token>)")) }
        let local = ICECredentials.random()
        let negotiated: WebRTCNegotiation.Result
        do {
            let description = try SessionDescription(parsing: offer)
            negotiated = try WebRTCNegotiation.answer(description, as: .publisher, local: local,
                                                      fingerprint: endpoint.fingerprint, candidates: endpoint.candidates,
                                                      tcpCandidates: endpoint.tcpCandidates,
                                                      videoCodecs: Self.whipVideoCodecs(publishType))
        } catch let error as SDPError {
            return .failure(WebRTCRefusal(400, "Bad Request", "malformed SDP offer: \(error)"))
        } catch let error as NegotiationError {
            var refusal = WebRTCRefusal(error)
            if case .unsupportedCodec = error, publishType != .live {
                refusal.detail += "; a '\(publishType.rawValue)' stream is recorded, and recordings take H.264, VP9 or AV1 video"
            }
            return .failure(refusal)
        } catch {
            return .failure(WebRTCRefusal(400, "Bad Request", "\(error)"))
        }
        var tracks: [MediaTrackDescription] = []
        var generator = SystemRandomNumberGenerator()
        for media in negotiated.media where !media.rids.isEmpty {
            // A browser's simulcast names its streams by RID, not SSRC: each layer is declared
            // here under an SSRC of the platform's, and the relay binds the browser's own to it
            // when the layer's first packet names its RID.
            let announced = Set(negotiated.media.flatMap(\.remoteSSRCs))
            for layer in media.simulcastLayers {
                var ssrc: UInt32
                repeat { ssrc = UInt32.random(in: 1...UInt32.max, using: &generator) }
                while announced.contains(ssrc) || tracks.contains(where: { $0.ssrc == ssrc })
                tracks.append(MediaTrackDescription(kind: .video, codec: media.codec.name.uppercased(), payloadType: media.codec.payloadType,
                                                    clockRate: UInt32(media.codec.clockRate), ssrc: ssrc, layer: layer))
            }
        }
        for media in negotiated.media where media.rids.isEmpty {
            guard let ssrc = media.remoteSSRCs.first else {
                return .failure(WebRTCRefusal(422, "Unprocessable Content",
                                              "the \(media.kind) section \(media.mid) announces no SSRC (a=ssrc): the relay finds a publisher's media by it"))
            }
            tracks.append(MediaTrackDescription(kind: media.kind == "video" ? .video : .audio, codec: media.codec.name.uppercased(),
                                                payloadType: media.codec.payloadType, clockRate: UInt32(media.codec.clockRate), ssrc: ssrc))
        }
        let ridExtension = negotiated.media.first { !$0.rids.isEmpty }?.headerExtensions
            .first { $0.value == WebRTCNegotiation.sdesRTPStreamID }?.key
        let descriptorExtension = negotiated.media.lazy.flatMap(\.headerExtensions).first { $0.value == WebRTCNegotiation.dependencyDescriptor }?.key
        let peer = WebRTCPeerParameters(local: local, remoteUfrag: negotiated.remote.iceUfrag,
                                        remoteFingerprint: negotiated.remote.fingerprint?.digest ?? "", rtpStreamIDExtension: ridExtension,
                                        dependencyDescriptorExtension: descriptorExtension)
        let publish = ClientMessage.Publish(streamToken: token, tags: ["channelAlias:\(name)"], publishType: publishType, streamName: name, tracks: tracks)
        let (sessionId, reply) = request(.publish(publish), as: "whip", flowId: Self.makeId("stream"), peer: peer, remoteAddress: remoteAddress)
        guard case .published(let published)? = reply else {
            let refusal = Self.refusal(reply, doing: "publish")
            closeWebRTCSession(sessionId, how: .connectionLost)
            return .failure(refusal)
        }
        let resource = WebRTCSessions.Resource(id: Self.makeId("whip"), sessionId: sessionId, streamId: published.streamId, subscriberId: nil)
        webRTCSessions.add(resource)
        offerInChannel(alias: name, streamId: published.streamId, sessionId: sessionId)
        logger.info("WHIP session opened", metadata: ["pcast.stream": .string(published.streamId), "pcast.name": .string(name),
                                                      "pcast.publishType": .string(publishType.rawValue)])
        return .success(WebRTCCreated(resourceId: resource.id, answer: negotiated.answer.text, streamId: published.streamId))
    }

    /// The video codecs a WHIP publisher may send, in no order of ours: the answer keeps the
    /// offer's own preference among them. Live streams take every codec the relay forwards; a
    /// recorded one (`record`, `append`) those recordings store (not VP8: see `VideoCodec.recordingParser`).
    static func whipVideoCodecs(_ publishType: PublishType) -> [String] {
        publishType == .live ? ["H264", "VP8", "VP9", "AV1"] : ["H264", "VP9", "AV1"]
    }

    /// WHEP: plays the stream `name` (a stream id, or a channel alias whose newest stream is
    /// played) to the offerer, checked against `token` (a stream token) exactly as an SDK
    /// subscribe is; the token must lead to that stream.
    func openWHEP(name: String, token: String?, offer: String, remoteAddress: String?) async -> Result<WebRTCCreated, WebRTCRefusal> {
        guard isAccepting else { return .failure(WebRTCRefusal(503, "Service Unavailable", "the platform is shutting down")) }
        guard let endpoint = relay.webRTC else { return .failure(WebRTCRefusal(503, "Service Unavailable", "this relay does not accept WebRTC peers")) }
        guard let token, !token.isEmpty else { return .failure(WebRTCRefusal(401, "Unauthorized", "no stream token (Authorization: Bearer <token>)")) }
        let description: SessionDescription
        do {
            description = try SessionDescription(parsing: offer)
        } catch {
            return .failure(WebRTCRefusal(400, "Bad Request", "malformed SDP offer: \(error)"))
        }
        guard let record = registry.stream(name) ?? registry.newestStream(tagged: "channelAlias:\(name)") else {
            return .failure(WebRTCRefusal(404, "Not Found", "no stream or channel '\(name)' is live"))
        }
        let video = record.tracks.asReceived.first { $0.kind == .video }
        let audio = record.tracks.asReceived.first { $0.kind == .audio }
        // A viewer is sent the stream's own codec (the relay does not transcode): H.264, VP8, VP9,
        // AV1, or H.265 to a browser that offers it.
        if let video, VideoPayload(encodingName: video.codec) == nil {
            return .failure(WebRTCRefusal(422, "Unprocessable Content", "stream '\(record.streamId)' carries \(video.codec) video; WebRTC viewers are sent H.264, VP8, VP9, AV1 or H.265"))
        }
        if let audio, audio.codec.uppercased() != "OPUS" {
            return .failure(WebRTCRefusal(422, "Unprocessable Content", "stream '\(record.streamId)' carries \(audio.codec) audio; WebRTC viewers are sent Opus only"))
        }
        var generator = SystemRandomNumberGenerator()
        let local = ICECredentials.random()
        let negotiated: WebRTCNegotiation.Result
        do {
            negotiated = try WebRTCNegotiation.answer(
                description,
                as: .viewer(videoSSRC: video?.ssrc ?? UInt32.random(in: 1...UInt32.max, using: &generator),
                            audioSSRC: audio?.ssrc ?? UInt32.random(in: 1...UInt32.max, using: &generator),
                            cname: "pcast-\(record.streamId.suffix(8))"),
                local: local, fingerprint: endpoint.fingerprint, candidates: endpoint.candidates, tcpCandidates: endpoint.tcpCandidates,
                videoCodecs: [video?.codec ?? "H264"])
        } catch {
            if case .unsupportedCodec = error, video?.codec.uppercased() == "H265" {
                // An ingested camera's H.265 passes through untouched: a browser without it
                // watches the stream's HLS instead.
                return .failure(WebRTCRefusal(422, "Unprocessable Content", "stream '\(record.streamId)' carries H.265 video, which this offer does not "
                    + "take (the relay does not transcode); watch it as HLS at /hls/\(record.streamId)/index.m3u8, or with the SDK"))
            }
            return .failure(WebRTCRefusal(error))
        }
        // The stream's payload types → the ones the viewer chose for each codec.
        var payloadTypes: [UInt8: UInt8] = [:]
        for media in negotiated.media {
            if let track = media.kind == "video" ? video : audio { payloadTypes[track.payloadType] = media.codec.payloadType }
        }
        let subscriberId = Self.makeId("whep-viewer")
        // Another node's stream is pulled here first (once for all its viewers), for a token that
        // may subscribe at all: a caller without one makes this node pull nothing.
        if let origin = record.originNodeId {
            if case .failure(let failure) = configuration.tokenAuthority.check(token, as: .stream, sessionId: "", remoteAddress: remoteAddress, now: clock()),
               failure.status == .unauthorized {
                return .failure(WebRTCRefusal(failure))
            }
            // Held until the subscribe below has its answer (the leg has no viewer before).
            legHolds[record.streamId, default: 0] += 1
            let opened = await openLeg(record.streamId, origin: origin)
            if case .failure(let error) = opened {
                releaseHold(record.streamId)
                return .failure(WebRTCRefusal(502, "Bad Gateway", "stream '\(record.streamId)' is on node \(origin), which could not be reached: \(error)"))
            }
        }
        defer { if record.originNodeId != nil { releaseHold(record.streamId) } }
        let peer = WebRTCPeerParameters(local: local, remoteUfrag: negotiated.remote.iceUfrag,
                                        remoteFingerprint: negotiated.remote.fingerprint?.digest ?? "", payloadTypes: payloadTypes)
        let (sessionId, reply) = request(.subscribe(.init(streamToken: token)), as: "whep", flowId: subscriberId, peer: peer,
                                         remoteAddress: remoteAddress)
        guard case .subscribed(let subscribed)? = reply else {
            let refusal = Self.refusal(reply, doing: "subscribe")
            closeWebRTCSession(sessionId, how: .connectionLost)
            return .failure(refusal)
        }
        guard subscribed.streamId == record.streamId else {
            closeWebRTCSession(sessionId, how: .connectionLost)
            return .failure(WebRTCRefusal(401, "Unauthorized", "the stream token grants stream '\(subscribed.streamId)', not '\(name)'"))
        }
        let resource = WebRTCSessions.Resource(id: Self.makeId("whep"), sessionId: sessionId, streamId: record.streamId, subscriberId: subscriberId)
        webRTCSessions.add(resource)
        logger.info("WHEP session opened", metadata: ["pcast.stream": .string(record.streamId), "pcast.subscriber": .string(subscriberId)])
        return .success(WebRTCCreated(resourceId: resource.id, answer: negotiated.answer.text, streamId: record.streamId))
    }

    /// DELETE of a WHIP or WHEP resource: a publisher's stream ends (`ended`), a viewer's
    /// subscription goes. False for an unknown resource.
    func closeWebRTC(resourceId: String) -> Bool {
        guard let resource = webRTCSessions.resources[resourceId] else { return false }
        closeWebRTCSession(resource.sessionId, how: .bye)
        return true
    }

    /// Whether `token` is one a WHIP (`.publish`) or WHEP (`.stream`) session from `remoteAddress`
    /// would be admitted with: signature, expiry, type and address, as the session checks them.
    func admitsWebRTC(token: String?, as type: TokenType, remoteAddress: String?) -> Bool {
        guard let token, !token.isEmpty else { return false }
        if case .success = configuration.tokenAuthority.check(token, as: type, sessionId: "", remoteAddress: remoteAddress, now: clock()) {
            return true
        }
        return false
    }

    func hasWebRTCResource(_ resourceId: String) -> Bool {
        webRTCSessions.resources[resourceId] != nil
    }

    /// The relay's news of WebRTC transports: one that ended on its own ends its session (a
    /// publisher's stream ends as `failed`, with the transport's reason).
    func webRTCTransportEvents(_ events: [WebRTCPeerEvent]) {
        for event in events {
            guard let resource = webRTCSessions.resource(streamId: event.streamId, subscriberId: event.subscriberId) else { continue }
            switch event.change {
            case .connected(let profile):
                logger.info("WebRTC peer connected", metadata: ["pcast.stream": .string(event.streamId), "pcast.srtp": .string(profile)])
            case .ended(let reason):
                logger.notice("WebRTC peer ended", metadata: ["pcast.stream": .string(event.streamId), "pcast.reason": .string(reason)])
                if event.subscriberId == nil {
                    perform(registry: .endStream(streamId: event.streamId, reason: .failed, description: reason))
                }
                closeWebRTCSession(resource.sessionId, how: .connectionLost)
            }
        }
    }

    /// Opens a registry session of its own for one WHIP or WHEP request and makes `message` on it,
    /// with `peer` waiting for the relay call the request leads to (the flow `flowId`: the new
    /// stream or subscriber id); returns the session and the registry's answer.
    private func request(_ message: SessionStateMachine.Request, as kind: String, flowId: String, peer: WebRTCPeerParameters,
                         remoteAddress: String?) -> (sessionId: String, reply: ServerMessage?) {
        let sessionId = newSessionId(kind)
        webRTCSessions.open(sessionId: sessionId)
        webRTCSessions.expect(peer, for: flowId)
        perform(registry: .sessionOpened(sessionId: sessionId, remoteAddress: remoteAddress))
        perform(registry: .request(sessionId: sessionId, requestId: 1, message, now: clock(), newId: flowId))
        _ = webRTCSessions.takePendingPeer(flowId)
        return (sessionId, webRTCSessions.takeReply(sessionId))
    }

    private func closeWebRTCSession(_ sessionId: String, how: SessionEnd) {
        perform(registry: .sessionClosed(sessionId: sessionId, how))
        perform(rooms: .sessionEnded(sessionId: sessionId))
        webRTCSessions.close(sessionId: sessionId)
    }

    /// Makes a WHIP session a presenter of the room aliased `alias` (a channel of that name is
    /// created when none exists, as ChannelExpress's publishToChannel does), offering `streamId`:
    /// the member leaves with the session. A room that refuses it (a full direct chat) only costs
    /// the channel listing; the stream itself is published.
    private func offerInChannel(alias: String, streamId: String, sessionId: String) {
        let now = clock()
        perform(rooms: .sessionOpened(sessionId: sessionId, roles: [.presenter], now: now))
        perform(rooms: .request(sessionId: sessionId, requestId: nil, .createRoom(.init(name: alias, type: .channel, alias: alias)),
                                now: now, newId: Self.makeId("room")))
        let member = ClientMessage.MemberModel(screenName: "WHIP \(alias)", role: .presenter,
                                              streams: [RoomStreamDescription(uri: "pcast://\(streamId)", type: .user)])
        perform(rooms: .request(sessionId: sessionId, requestId: nil, .joinRoom(.init(room: .init(alias: alias), member: member)),
                                now: now, newId: ""))
        if !rooms.isMember(sessionId) {
            logger.notice("the WHIP stream is not listed in room '\(alias)': the room refused a presenter", metadata: ["pcast.stream": .string(streamId)])
        }
    }

    private static func refusal(_ reply: ServerMessage?, doing what: String) -> WebRTCRefusal {
        // The registry's failure went to the session as its reply.
        if case .failure(let failure)? = reply { return WebRTCRefusal(failure) }
        return WebRTCRefusal(500, "Internal Server Error", "the \(what) request got no answer")
    }
}

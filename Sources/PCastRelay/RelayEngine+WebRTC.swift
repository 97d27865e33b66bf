import DTLS
import Glibc
import PCastContracts
import PCastProtocol
import SRTP
import Synchronization

// The relay's standard WebRTC peers on its I/O thread: STUN checks (ICE-lite), DTLS handshakes
// and their keys, consent freshness, and the end of a peer.

extension RelayEngine {
    // MARK: WebRTC peers (I/O thread)

    func openWebRTC(_ setup: WebRTCSetup) {
        guard let dtlsContext else {
            ended(setup.streamId, setup.subscriberId, "this relay has no DTLS")
            return
        }
        do {
            webrtc.insert(try WebRTCPeer(setup: setup, context: dtlsContext, now: .now,
                                         consentTimeout: webRTCConsentTimeout, connectTimeout: webRTCConnectTimeout))
            nextWebRTCService = 0
        } catch {
            dtlsFailures &+= 1
            ended(setup.streamId, setup.subscriberId, "\(error)")
        }
    }

    /// A connectivity check (or other STUN) to one of the peers' ufrags.
    func handleSTUN(_ data: UnsafeRawBufferPointer, from source: RelayAddress, now: UInt64) {
        let bytes = [UInt8](data)
        guard let ufrag = ICELiteAgent.localUfrag(of: bytes), let peer = webrtc.peer(ufrag: ufrag) else {
            // A Binding request with no credentials at all is a reachability probe (an SDK
            // checking that UDP gets through before it picks TCP): answered as a STUN server
            // answers (RFC 8489 §6.3.1), with the address it came from; never larger than the
            // request, so a forged source gains nothing by it.
            if let probe = try? STUNMessage(decoding: bytes), probe.kind == .request, probe.method == .binding,
               probe.attribute(STUNAttribute.username) == nil, !TCPMediaFlows.isTCP(source) {
                var answer = STUNMessage(kind: .successResponse, method: .binding, transactionID: probe.transactionID)
                answer.xorMappedAddress = STUNAddress(source)
                let encoded = answer.encoded(fingerprint: false)
                if encoded.count <= bytes.count {
                    // Not media: sent on its own, so packetsOut counts only what is relayed.
                    socket.send(encoded, to: source)
                    return
                }
            }
            stunRefusals &+= 1
            return
        }
        let consentBefore = peer.agent.lastConsent
        let actions = peer.agent.handle(.request(bytes, from: STUNAddress(source), at: .now))
        if peer.agent.lastConsent != consentBefore { webrtc.bind(peer, to: source) }
        for action in actions {
            switch action {
            case .send(let reply, let destination):
                if let address = RelayAddress(destination) { send.append(reply, to: address, descriptor: socket.descriptor) }
            case .selected(let nominated):
                guard let address = RelayAddress(nominated) else { continue }
                peer.address = address
                webRTCTransportsChanged = true
                // Media follows a nomination (a network change moves it); before DTLS ends there is none.
                if peer.connected { perform(authenticate(peer, at: address, now: now)) }
            case .refused:
                stunRefusals &+= 1
            case .expired:
                end(peer, "ICE consent expired")
            }
        }
    }

    /// DTLS from an address a check passed at; anything else is dropped.
    func handleDTLS(_ data: UnsafeRawBufferPointer, from source: RelayAddress, now: UInt64) {
        guard let peer = webrtc.peer(at: source) else {
            unknownPackets &+= 1
            return
        }
        if peer.address == nil {
            peer.address = source
            webRTCTransportsChanged = true
        }
        handle(peer.dtls.receive([UInt8](data)), of: peer, replyingTo: source, now: now)
    }

    func handle(_ events: [DTLSEndpoint.Event], of peer: WebRTCPeer, replyingTo address: RelayAddress?, now: UInt64) {
        for event in events {
            switch event {
            case .send(let bytes):
                if let address = address ?? peer.address { send.append(bytes, to: address, descriptor: socket.descriptor) }
            case .connected(let keys):
                do {
                    try peer.setup.crypto.rekey(keys)
                } catch {
                    dtlsFailures &+= 1
                    end(peer, "SRTP could not start: \(error)")
                    return
                }
                peer.connected = true
                guard let target = peer.address ?? address else { continue }
                perform(authenticate(peer, at: target, now: now))
                webRTCEvents.withLock { queue in
                    queue.append(WebRTCPeerEvent(streamId: peer.setup.streamId, subscriberId: peer.setup.subscriberId,
                                                 change: .connected(srtpProfile: keys.profile.rawValue)))
                    if queue.count > 4_096 { queue.removeFirst(queue.count - 4_096) }
                }
            case .closed:
                end(peer, "the peer closed its DTLS association")
            case .failed(let error):
                dtlsFailures &+= 1
                end(peer, "\(error)")
            }
        }
    }

    /// The peer's flow can be sent to at `address` from now on (a viewer's first such moment asks
    /// the publisher for a keyframe).
    func authenticate(_ peer: WebRTCPeer, at address: RelayAddress, now: UInt64) -> [RelayAction<FlowCrypto>] {
        guard let stream = router.handle(streamId: peer.setup.streamId) else { return [] }
        if let rtcpSSRC = peer.setup.rtcpSSRC {
            return router.authenticated(.subscriber(stream: stream, rtcpSSRC: rtcpSSRC), from: address, now: now)
        }
        return router.authenticated(.track(stream: stream, track: 0), from: address, now: now)
    }

    /// Consent freshness and DTLS retransmissions.
    func serviceWebRTC(now: UInt64) {
        var next = now &+ 1_000_000_000
        let instant = ContinuousClock.now
        for peer in webrtc.all {
            for action in peer.agent.handle(.tick(instant)) where action == .expired {
                end(peer, peer.agent.lastConsent == nil ? "ICE did not connect in time" : "ICE consent expired (no check for \(peer.agent.consentTimeout))")
            }
            guard webrtc.peer(peer.key) === peer, let milliseconds = peer.dtls.timeoutMilliseconds else { continue }
            if milliseconds == 0 {
                handle(peer.dtls.handleTimeout(), of: peer, replyingTo: nil, now: now)
                if let again = peer.dtls.timeoutMilliseconds { next = min(next, now &+ UInt64(max(again, 1)) * 1_000_000) }
            } else {
                next = min(next, now &+ UInt64(milliseconds) * 1_000_000)
            }
        }
        nextWebRTCService = next
    }

    /// The relay closes a peer (its stream or subscription was removed): close_notify, forgotten.
    func close(_ peer: WebRTCPeer) {
        guard webrtc.remove(peer) else { return }
        webRTCTransportsChanged = true
        handle(peer.dtls.close(), of: peer, replyingTo: nil, now: 0)
    }

    /// A peer's transport ended on its own: its flow closes here at once, and the platform is told.
    func end(_ peer: WebRTCPeer, _ reason: String) {
        guard webrtc.remove(peer) else { return }
        webRTCTransportsChanged = true
        _ = peer.dtls.close()
        if let subscriberId = peer.setup.subscriberId {
            router.removeSubscriber(streamId: peer.setup.streamId, subscriberId: subscriberId)
        } else {
            router.removeStream(id: peer.setup.streamId)
            for viewer in webrtc.peers(ofStream: peer.setup.streamId) { close(viewer) }
        }
        ended(peer.setup.streamId, peer.setup.subscriberId, reason)
    }

    func ended(_ streamId: String, _ subscriberId: String?, _ reason: String) {
        webRTCEvents.withLock { queue in
            queue.append(WebRTCPeerEvent(streamId: streamId, subscriberId: subscriberId, change: .ended(reason)))
            if queue.count > 4_096 { queue.removeFirst(queue.count - 4_096) }
        }
    }
}

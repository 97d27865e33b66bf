import Foundation
@testable import PCast
import PCastContracts
import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// A platform whose HTTP and WebSocket listener speaks TLS with `pair` (files the test may replace).
func tlsPlatform(_ pair: TestCertificates.Pair, rtmps: Bool = false,
                 configure: (inout PlatformConfiguration) -> Void = { _ in }) async throws -> LocalPlatform {
    try await LocalPlatform.start { configuration in
        configuration.tls = TLSFiles(certificateChain: pair.certificate, privateKey: pair.key)
        if rtmps { configuration.rtmpsPort = 0 }
        configure(&configuration)
    }
}

/// An SDK client of `platform` trusting `authority` (nil: the system's authorities only).
func tlsClient(_ platform: LocalPlatform, trusting authority: String?, uri: String? = nil) -> PCast {
    var options = PCastOptions(uri: uri ?? platform.signalingURL)
    options.certificateAuthorityFile = authority
    options.enableProcessTerminationSignalHandling = false
    return PCast(options)
}

/// What `curl` got from `url` trusting `authority`: its exit status, and the status line and
/// headers (`-i`) with the body.
func curl(_ url: String, authority: String? = nil, extra: [String] = []) async throws -> (status: Int32, output: String) {
    let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-curl-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: output) }
    let arguments = ["-sS", "-i", "--max-time", "10"] + (authority.map { ["--cacert", $0] } ?? []) + extra + [url]
    let process = try ChildProcess.spawn(try executable("curl"), arguments, environment: ProcessInfo.processInfo.environment,
                                         output: output, errorsToOutput: true)
    let status = await RawTCP.offload { process.wait() }
    return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
}

extension OneAtATime {
    /// Publishes and decodes through a TLS platform: alone, not beside the frame-by-frame suites.
    @Suite("TLS: HTTPS and WSS on the platform's listener, a private CA, bad certificates, reloads", .serialized)
    struct TLSTests {
        @Test("over wss:// with a private CA, a publisher's frames reach a subscriber; the page, /healthz and /metrics answer over HTTPS and nothing answers in clear")
        func publishAndSubscribeOverTLS() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf)
            #expect(platform.signalingURL.hasPrefix("wss://127.0.0.1:"))
            #expect(platform.httpURL.hasPrefix("https://127.0.0.1:"))
            let publisherSDK = tlsClient(platform, trusting: certificates.authority)
            try await publisherSDK.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(width: 320, height: 180)
            let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
            // By name, as a browser or an operator would reach it.
            let viewerSDK = tlsClient(platform, trusting: certificates.authority, uri: platform.signalingURL.replacingOccurrences(of: "127.0.0.1", with: "localhost"))
            try await viewerSDK.start(authToken: try platform.token(.auth))
            let stream = try await viewerSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            let (renderer, seen) = try await watch(stream)
            #expect(await eventually { seen.all.count >= 30 }, "\(seen.all.count) frames shown over a TLS-signalled session")
            #expect(platform.relay.statistics().srtpFailures == 0)

            let health = try await curl(platform.httpURL + "/healthz", authority: certificates.authority)
            #expect(health.status == 0 && health.output.hasPrefix("HTTP/1.1 200"), "\(health.output)")
            let page = try await curl(platform.httpURL + "/", authority: certificates.authority)
            #expect(page.status == 0 && page.output.contains("<html"), "\(page.output.prefix(200))")
            let metrics = try await curl(platform.httpURL + "/metrics", authority: certificates.authority)
            #expect(metrics.output.contains("pcast_tls_certificate_expiry_timestamp_seconds"), "\(metrics.output.prefix(400))")
            // Plain HTTP on the TLS port gets no page: the handshake fails.
            let clear = try await curl(platform.httpURL.replacingOccurrences(of: "https://", with: "http://") + "/healthz")
            #expect(clear.status != 0 && !clear.output.contains("200"), "\(clear.output)")

            await renderer.stop()
            await stream.stop()
            await viewerSDK.stop()
            await publisher.stop()
            await publisherSDK.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("with a private CA in PCastOptions, Express gets its tokens from the HTTPS sample backend and a 'streaming' viewer plays the low-latency HLS parts over HTTPS (frames decoded); another CA's client gets certificateRejected from the backend, one trusting the system's store a connection failure")
        func expressAndHLSOverTLS() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf)
            func express(trusting authority: String?) -> PCastExpress {
                var pcastOptions = PCastOptions(uri: platform.signalingURL)
                pcastOptions.certificateAuthorityFile = authority
                pcastOptions.enableProcessTerminationSignalHandling = false
                var options = PCastExpressOptions(backendURI: URL(string: platform.backendURL)!)
                options.pcastOptions = pcastOptions
                return PCastExpress(options)
            }
            #expect(platform.backendURL.hasPrefix("https://"))
            let trusted = express(trusting: certificates.authority)
            let pcast = try await trusted.pcast()
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]))
            // The viewer: a stream token from the backend over HTTPS, then the playlist and its parts.
            let token = try await trusted.streamToken(streamId: publisher.streamId, capabilities: ["streaming"])
            let stream = try await pcast.subscribe(streamToken: token)
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            let frames = Atomic<Int>(0)
            try renderer.setFrameReadyCallback(try #require(stream.getVideoTracks().first)) { notification in
                if case .video? = try? notification.read() { frames.add(1, ordering: .relaxed) }
            }
            #expect(await eventually(.seconds(25)) { frames.load(ordering: .relaxed) >= 60 }, "\(frames.load(ordering: .relaxed)) HLS frames over HTTPS")
            #expect(stream.endReason == nil, "\(String(describing: stream.endReason))")

            let otherAuthority = certificates.directory + "/other-ca.pem"
            do {
                _ = try await express(trusting: otherAuthority).pcast()
                Issue.record("another CA's client got a session from the backend")
            } catch {
                #expect(error.code == .certificateRejected, "\(error)")
            }
            do {
                _ = try await express(trusting: nil).pcast()
                Issue.record("a client trusting the system's store got a session from a private CA's backend")
            } catch {
                #expect(error.code == .connectionFailed, "\(error)")
            }
            await renderer.stop()
            await stream.stop()
            await publisher.stop()
            await media.stop()
            await trusted.shutdown()
            await platform.shutdown()
        }

        @Test("an untrusted, an expired and a wrongly named certificate each fail the SDK's start at once with certificateRejected saying why")
        func badCertificatesAreTypedErrors() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let cases: [(TestCertificates.Pair, String)] = [
                (certificates.untrusted, "authority"),
                (certificates.expired, "expired on 2020-02-01"),
                (certificates.otherName, "other names"),
            ]
            for (pair, reason) in cases {
                let platform = try await tlsPlatform(pair)
                let sdk = tlsClient(platform, trusting: certificates.authority)
                let token = try platform.token(.auth)
                let started = ContinuousClock.now
                do throws(PCastError) {
                    try await sdk.start(authToken: token)
                    Issue.record("\(pair.certificate) was accepted")
                } catch {
                    #expect(error.code == .certificateRejected, "\(error)")
                    #expect(error.description.contains(reason), "\(error)")
                }
                #expect(ContinuousClock.now - started < .seconds(5), "a rejected certificate took \(ContinuousClock.now - started)")
                await sdk.stop()
                await platform.shutdown()
            }
            // Without the private CA the valid certificate is not trusted either.
            let platform = try await tlsPlatform(certificates.leaf)
            let sdk = tlsClient(platform, trusting: nil)
            await #expect(throws: PCastError.self) { try await sdk.start(authToken: try platform.token(.auth)) }
            // A CA file that is not there is the caller's mistake, said as such.
            let missing = tlsClient(platform, trusting: certificates.directory + "/none.pem")
            let token = try platform.token(.auth)
            do throws(PCastError) {
                try await missing.start(authToken: token)
                Issue.record("a missing CA file was accepted")
            } catch {
                #expect(error.code == .invalidRequest && error.detail.contains("none.pem"), "\(error)")
            }
            await platform.shutdown()
        }

        @Test("a reload serves the new certificate to new connections and keeps open sessions; a reload of bad files keeps the old certificate")
        func reloadKeepsConnections() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let served = try certificates.copy(certificates.leaf, as: "served")
            let platform = try await tlsPlatform(served)
            let before = tlsClient(platform, trusting: certificates.authority)
            try await before.start(authToken: try platform.token(.auth))

            // A renewal that went wrong: the key file is not a key. The reload says so, and nothing changes.
            try "not a key".write(toFile: served.key, atomically: true, encoding: .utf8)
            #expect(throws: TLSSetupError.self) { try platform.reloadCertificates() }
            let still = tlsClient(platform, trusting: certificates.authority)
            try await still.start(authToken: try platform.token(.auth))
            // A key that is another certificate's is refused too.
            try certificates.install(TestCertificates.Pair(certificate: certificates.leaf.certificate, key: certificates.renewed.key), over: served)
            do throws(TLSSetupError) {
                try platform.reloadCertificates()
                Issue.record("a key of another certificate was accepted")
            } catch {
                #expect(error.reason.contains("does not belong"), "\(error)")
            }

            // Now the expired certificate is installed: new connections see it at once ...
            try certificates.install(certificates.expired, over: served)
            try platform.reloadCertificates()
            let after = tlsClient(platform, trusting: certificates.authority)
            let token = try platform.token(.auth)
            do throws(PCastError) {
                try await after.start(authToken: token)
                Issue.record("the reloaded (expired) certificate was not served")
            } catch {
                #expect(error.code == .certificateRejected && error.detail.contains("expired"), "\(error)")
            }
            // ... while the sessions opened before go on: they still get answers on their connection.
            let media = try await stampedMedia(width: 320, height: 180)
            let publisher = try await before.publish(streamToken: try platform.token(.publish), mediaStream: media)
            #expect(!publisher.streamId.isEmpty && before.isOnline && still.isOnline)
            await publisher.stop()
            await media.stop()
            await before.stop()
            await still.stop()
            await platform.shutdown()
        }

        @Test("the redirect port answers every request 308 to the same path on HTTPS and serves nothing else")
        func redirectPort() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf) { $0.httpRedirectPort = 0 }
            let port = try #require(platform.httpRedirectPort)
            let httpsPort = try #require(URL(string: platform.httpURL)?.port)
            let answer = try await curl("http://localhost:\(port)/whep/show?token=x")
            #expect(answer.output.hasPrefix("HTTP/1.1 308"), "\(answer.output)")
            #expect(answer.output.contains("Location: https://localhost:\(httpsPort)/whep/show?token=x"), "\(answer.output)")
            // A Host header cannot steer the redirect into another URL part.
            let forged = try await curl("http://127.0.0.1:\(port)/", extra: ["-H", "Host: evil.example/@x"])
            #expect(forged.output.contains("Location: https://127.0.0.1:\(httpsPort)/"), "\(forged.output)")
            // Followed, it reaches the HTTPS listener.
            let followed = try await curl("http://localhost:\(port)/healthz", authority: certificates.authority, extra: ["-L"])
            #expect(followed.status == 0 && followed.output.contains("HTTP/1.1 200"), "\(followed.output)")
            await platform.shutdown()
        }
    }
}

extension ManyClients {
    @Suite("TLS listener under attack: handshakes that never finish, floods from one address", .serialized)
    struct TLSAttackTests {
        @Test("a TLS handshake that never finishes holds its slot no longer than the request-head deadline")
        func stalledHandshakesAreClosed() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf) { configuration in
                configuration.connectionLimits.perAddress = 4
                configuration.connectionLimits.requestHeadTimeout = .seconds(1)
            }
            let port = try #require(URL(string: platform.httpURL)?.port)
            // Four connections from 127.0.0.2 that send half a ClientHello and stop.
            let stalled = await RawTCP.offload {
                (0..<4).compactMap { _ -> Int32? in
                    guard let fd = RawTCP.connect(to: port, from: "127.0.0.2") else { return nil }
                    _ = RawTCP.write(fd, [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC])
                    return fd
                }
            }
            defer { stalled.forEach(RawTCP.close) }
            #expect(stalled.count == 4)
            // The fifth from that address is closed at once, without a handshake.
            let refused = await RawTCP.offload { () -> Bool in
                guard let fd = RawTCP.connect(to: port, from: "127.0.0.2") else { return true }
                defer { RawTCP.close(fd) }
                return RawTCP.read(fd, timeout: 2).closed
            }
            #expect(refused)
            // The stalled ones are closed at the deadline (1 s), well before the 10 s a handshake timer would allow ...
            let closed = await RawTCP.offload { stalled.map { RawTCP.read($0, timeout: 4).closed } }
            #expect(closed.allSatisfy { $0 }, "\(closed)")
            // ... and the address may connect again.
            let health = try await curl(platform.httpURL + "/healthz", authority: certificates.authority, extra: ["--interface", "127.0.0.2"])
            #expect(health.output.hasPrefix("HTTP/1.1 200"), "\(health.output)")
            await platform.shutdown()
        }

        @Test("1,000 TLS connections from one address leave another client's /healthz answering")
        func floodFromOneAddress() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf) { configuration in
                configuration.connectionLimits.perAddress = 256
            }
            let port = try #require(URL(string: platform.httpURL)?.port)
            // A ClientHello's first bytes on each: every admitted one holds a handshake open.
            let flood = await RawTCP.offload {
                (0..<1000).compactMap { _ -> Int32? in
                    guard let fd = RawTCP.connect(to: port, from: "127.0.0.3") else { return nil }
                    _ = RawTCP.write(fd, [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC])
                    return fd
                }
            }
            defer { flood.forEach(RawTCP.close) }
            let started = ContinuousClock.now
            let health = try await curl(platform.httpURL + "/healthz", authority: certificates.authority)
            #expect(health.output.hasPrefix("HTTP/1.1 200"), "\(health.output)")
            #expect(ContinuousClock.now - started < .seconds(5))
            let sdk = tlsClient(platform, trusting: certificates.authority)
            try await sdk.start(authToken: try platform.token(.auth))
            await sdk.stop()
            await platform.shutdown()
        }
    }
}

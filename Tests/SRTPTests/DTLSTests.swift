import DTLS
import Foundation
import PCastTestSupport
import SRTP
import Testing

/// The relay's DTLS-SRTP server against another implementation: `openssl s_client` as the WebRTC
/// peer (DTLS client), over real UDP on loopback. The keys are checked against the ones s_client
/// exports with `-keymatexport EXTRACTOR-dtls_srtp` (RFC 5764's layout, so SRTP sessions keyed
/// with them interoperate: SRTPTests checks those against pylibsrtp).
@Suite("DTLS-SRTP server against openssl s_client; our client role against the server")
struct DTLSTests {
    /// A client key and certificate made by the openssl command, and its SHA-256 fingerprint.
    struct ClientIdentity {
        let directory: URL
        let fingerprint: String
        var certificate: String { directory.appendingPathComponent("client.pem").path }
        var key: String { directory.appendingPathComponent("client.key").path }

        static func make() throws -> ClientIdentity {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-dtls-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            _ = try run("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                    "-subj", "/CN=peer", "-days", "1",
                                    "-keyout", directory.appendingPathComponent("client.key").path,
                                    "-out", directory.appendingPathComponent("client.pem").path])
            let text = try run("openssl", ["x509", "-noout", "-fingerprint", "-sha256", "-in", directory.appendingPathComponent("client.pem").path])
            // "sha256 Fingerprint=AB:CD:…"
            guard let fingerprint = text.split(separator: "=").last.map({ $0.trimmingCharacters(in: .whitespacesAndNewlines) }) else {
                throw StandInFailure(description: "no fingerprint in \(text)")
            }
            return ClientIdentity(directory: directory, fingerprint: fingerprint)
        }

        static func run(_ tool: String, _ arguments: [String]) throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [tool] + arguments
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw StandInFailure(description: "\(tool) \(arguments.first ?? "") exited \(process.terminationStatus)") }
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// What one handshake produced on each side.
    struct Outcome {
        var events: [DTLSEndpoint.Event] = []
        var clientOutput = ""
        var keys: DTLSSRTPKeys? {
            for case .connected(let keys) in events { return keys }
            return nil
        }
        var failure: DTLSError? {
            for case .failed(let error) in events { return error }
            return nil
        }
        /// s_client's `Keying material: <hex>` line.
        var clientKeyingMaterial: String? {
            clientOutput.split(separator: "\n").first { $0.hasPrefix("    Keying material: ") }
                .map { String($0.dropFirst("    Keying material: ".count)).lowercased() }
        }
    }

    static let context = Result { try DTLSContext(certificate: DTLSCertificate()) }

    /// Runs `openssl s_client` against a `DTLSEndpoint` on a UDP socket until the server connects or
    /// fails (or `seconds` pass), feeding it through `filter` (which may drop or alter datagrams).
    func handshake(
        offering profiles: String, materialLength: Int, expecting fingerprint: ((ClientIdentity) -> String)? = nil,
        withCertificate: Bool = true, seconds: Double = 10,
        filter: (_ datagram: [UInt8], _ index: Int) -> [UInt8]? = { datagram, _ in datagram }
    ) throws -> Outcome {
        let context = try Self.context.get()
        let identity = try ClientIdentity.make()
        defer { try? FileManager.default.removeItem(at: identity.directory) }
        let socket = try LoopbackUDP()
        defer { socket.close() }
        let server = try DTLSEndpoint(context: context, peerFingerprint: fingerprint?(identity) ?? identity.fingerprint)
        let output = identity.directory.appendingPathComponent("client.out").path
        var arguments = ["s_client", "-dtls1_2", "-connect", "127.0.0.1:\(socket.port)", "-use_srtp", profiles,
                         "-keymatexport", "EXTRACTOR-dtls_srtp", "-keymatexportlen", "\(materialLength)", "-ign_eof", "-mtu", "1200"]
        if withCertificate { arguments += ["-cert", identity.certificate, "-key", identity.key] }
        let client = try ChildProcess.spawn(try PCastTestSupport.executable("openssl"), arguments, environment: ProcessInfo.processInfo.environment, output: output)
        defer { client.stop() }

        var outcome = Outcome()
        var peer: LoopbackUDP.Address?
        var received = 0
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, server.state == .handshaking {
            let wait = server.timeoutMilliseconds.map { min($0, 100) } ?? 100
            var events: [DTLSEndpoint.Event] = []
            if let (datagram, from) = socket.receive(timeoutMilliseconds: wait) {
                peer = from
                defer { received += 1 }
                if let altered = filter(datagram, received) { events = server.receive(altered) }
            } else if server.timeoutMilliseconds == 0 {
                events = server.handleTimeout()
            }
            for event in events {
                if case .send(let bytes) = event, let peer { socket.send(bytes, to: peer) } else { outcome.events.append(event) }
            }
        }
        // s_client prints the keying material once its side of the handshake ends.
        let printed = Date().addingTimeInterval(3)
        while Date() < printed {
            outcome.clientOutput = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            if outcome.clientKeyingMaterial != nil || server.state != .connected { break }
            usleep(20_000)
        }
        return outcome
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test("GCM is chosen when the peer offers both profiles (its order CM first); keys equal s_client's export")
    func prefersGCM() throws {
        let outcome = try handshake(offering: "SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM", materialLength: 56)
        let keys = try #require(outcome.keys, "no keys: \(outcome.events)")
        #expect(keys.profile == .aeadAES128GCM)
        #expect(outcome.clientOutput.contains("SRTP Extension negotiated, profile=SRTP_AEAD_AES_128_GCM"))
        // RFC 5764 §4.2: client key | server key | client salt | server salt.
        let client = keys.client.bytes, server = keys.server.bytes
        let ours = Self.hex(Array(client[0..<16] + server[0..<16] + client[16...] + server[16...]))
        #expect(outcome.clientKeyingMaterial == ours)
    }

    @Test("AES-CM-80 when that is all the peer offers (GStreamer 1.22's DTLS), with s_client's keys")
    func acceptsCM80() throws {
        let outcome = try handshake(offering: "SRTP_AES128_CM_SHA1_80", materialLength: 60)
        let keys = try #require(outcome.keys, "no keys: \(outcome.events)")
        #expect(keys.profile == .aes128CMHMACSHA1_80)
        #expect(keys.client.bytes.count == 30 && keys.server.bytes.count == 30)
        let client = keys.client.bytes, server = keys.server.bytes
        #expect(outcome.clientKeyingMaterial == Self.hex(Array(client[0..<16] + server[0..<16] + client[16...] + server[16...])))
    }

    @Test("a certificate other than the offer's fingerprint: no keys, a typed mismatch")
    func refusesWrongFingerprint() throws {
        let other = String(repeating: "AB:", count: 31) + "AB"
        let outcome = try handshake(offering: "SRTP_AEAD_AES_128_GCM", materialLength: 56, expecting: { _ in other })
        #expect(outcome.keys == nil)
        guard case .fingerprintMismatch(let expected, let received)? = outcome.failure else {
            Issue.record("expected a fingerprint mismatch, got \(outcome.events)")
            return
        }
        #expect(expected == other)
        #expect(received.count == 95)
    }

    @Test("a peer without a certificate cannot finish the handshake")
    func requiresClientCertificate() throws {
        let outcome = try handshake(offering: "SRTP_AEAD_AES_128_GCM", materialLength: 56, withCertificate: false)
        #expect(outcome.keys == nil)
        #expect(outcome.failure != nil, "events: \(outcome.events)")
    }

    @Test("a peer offering no SRTP profile the relay does: no keys")
    func refusesWithoutCommonProfile() throws {
        let outcome = try handshake(offering: "SRTP_AES128_CM_SHA1_32", materialLength: 60)
        #expect(outcome.keys == nil)
        #expect(outcome.failure != nil, "events: \(outcome.events)")
    }

    @Test("a lost first ClientHello and a garbage datagram: the handshake completes with the client's keys")
    func survivesLossAndGarbage() throws {
        var garbage = SystemRandomNumberGenerator()
        let outcome = try handshake(offering: "SRTP_AEAD_AES_128_GCM", materialLength: 56, seconds: 15) { datagram, index in
            switch index {
            case 0: return nil   // lost: s_client retransmits after its timer
            case 1: return (0..<300).map { _ in UInt8.random(in: 20...63, using: &garbage) }   // garbage that looks like DTLS
            default: return datagram
            }
        }
        // DTLS drops records it cannot decode (RFC 6347 §4.1.2.7): the garbage costs nothing.
        let keys = try #require(outcome.keys, "no keys: \(outcome.events)")
        let client = keys.client.bytes, server = keys.server.bytes
        #expect(outcome.clientKeyingMaterial == Self.hex(Array(client[0..<16] + server[0..<16] + client[16...] + server[16...])))
    }

    @Test("truncated and random records never crash the server and never yield keys")
    func hostileRecords() throws {
        let context = try Self.context.get()
        var generator = SystemRandomNumberGenerator()
        for round in 0..<500 {
            let server = try DTLSEndpoint(context: context, peerFingerprint: "00")
            let length = Int.random(in: 0...1_400, using: &generator)
            var datagram = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if round % 2 == 0, length >= 13 {
                // A plausible record header: handshake, DTLS 1.2 (or 1.0), epoch 0, a length.
                datagram[0] = 22
                datagram[1] = 0xFE
                datagram[2] = round % 4 == 0 ? 0xFD : 0xFF
                datagram[3] = 0
                datagram[4] = 0
            }
            for event in server.receive(datagram) {
                if case .connected = event { Issue.record("keys from random bytes") }
            }
            #expect(server.state != .connected)
        }
    }

    /// Runs a client and a server against each other in memory until neither has anything to
    /// send; returns each side's events.
    static func handshake(_ client: DTLSEndpoint, _ server: DTLSEndpoint) -> (client: [DTLSEndpoint.Event], server: [DTLSEndpoint.Event]) {
        var seenByClient: [DTLSEndpoint.Event] = [], seenByServer: [DTLSEndpoint.Event] = []
        var toServer = client.start()
        seenByClient += toServer
        for _ in 0..<20 {
            var toClient: [DTLSEndpoint.Event] = []
            for case .send(let bytes) in toServer { toClient += server.receive(bytes) }
            seenByServer += toClient
            toServer = []
            for case .send(let bytes) in toClient { toServer += client.receive(bytes) }
            seenByClient += toServer
            if toServer.isEmpty && toClient.allSatisfy({ if case .send = $0 { false } else { true } }) { break }
        }
        return (seenByClient, seenByServer)
    }

    @Test("the client role (the relay dialling out, the benchmarks' viewers) against the server: both derive the same AES-GCM keys")
    func clientRole() throws {
        let serverIdentity = try DTLSCertificate(), clientIdentity = try DTLSCertificate()
        let client = try DTLSEndpoint(context: try DTLSContext(certificate: clientIdentity, role: .client), peerFingerprint: serverIdentity.fingerprint)
        let server = try DTLSEndpoint(context: try DTLSContext(certificate: serverIdentity), peerFingerprint: clientIdentity.fingerprint)
        #expect(server.start().isEmpty, "a server waits for a ClientHello")
        let (clientEvents, serverEvents) = Self.handshake(client, server)
        let clientKeys = clientEvents.compactMap { if case .connected(let keys) = $0 { keys } else { nil } }
        let serverKeys = serverEvents.compactMap { if case .connected(let keys) = $0 { keys } else { nil } }
        #expect(clientKeys.count == 1 && serverKeys.count == 1, "client \(clientEvents), server \(serverEvents)")
        #expect(clientKeys.first == serverKeys.first)
        #expect(clientKeys.first?.profile == .aeadAES128GCM)
        #expect(client.state == .connected && server.state == .connected)
    }

    @Test("a client refuses a server whose certificate is not the one announced: no keys, a typed mismatch")
    func clientChecksServer() throws {
        let serverIdentity = try DTLSCertificate(), clientIdentity = try DTLSCertificate(), other = try DTLSCertificate()
        let client = try DTLSEndpoint(context: try DTLSContext(certificate: clientIdentity, role: .client), peerFingerprint: other.fingerprint)
        let server = try DTLSEndpoint(context: try DTLSContext(certificate: serverIdentity), peerFingerprint: clientIdentity.fingerprint)
        let (clientEvents, serverEvents) = Self.handshake(client, server)
        #expect(!clientEvents.contains { if case .connected = $0 { true } else { false } })
        #expect(!serverEvents.contains { if case .connected = $0 { true } else { false } })
        #expect(clientEvents.contains { if case .failed(.fingerprintMismatch(_, let received)) = $0 { received == serverIdentity.fingerprint } else { false } },
                "\(clientEvents)")
        #expect(client.state == .failed)
    }
}

/// A UDP socket on 127.0.0.1 for the tests, blocking with a timeout.
final class LoopbackUDP {
    typealias Address = sockaddr_in
    let descriptor: Int32
    let port: UInt16

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard fd >= 0, bound == 0 else { throw StandInFailure(description: "UDP bind failed: errno \(errno)") }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    func close() { Glibc.close(descriptor) }

    func receive(timeoutMilliseconds: Int) -> ([UInt8], Address)? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(max(0, timeoutMilliseconds))) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var from = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let count = withUnsafeMutablePointer(to: &from) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(descriptor, &buffer, buffer.count, 0, $0, &length) }
        }
        guard count >= 0 else { return nil }
        return (Array(buffer[0..<count]), from)
    }

    func send(_ bytes: [UInt8], to address: Address) {
        var address = address
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(descriptor, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }
}

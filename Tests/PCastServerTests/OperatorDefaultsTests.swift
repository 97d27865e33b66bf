import Foundation
import Logging
@testable import PCastServer
import PCastTestSupport
import Testing

/// What an operator gets without setting anything, as the articles state it: the listener's
/// connection caps, the lifetime of minted TURN credentials, the bound on every database call.
@Suite("Operator defaults: connection caps, TURN credential lifetime, the bound on database calls")
struct OperatorDefaultsTests {
    @Test("with only a secret set, the HTTP/WebSocket listener allows 256 connections from one address and 10,000 in all, 10 s for the first request head and 32 KiB heads; PCAST_MAX_CONNECTIONS_PER_ADDRESS and PCAST_MAX_CONNECTIONS replace the two caps")
    func connectionLimitDefaults() throws {
        let limits = ConnectionLimits()
        #expect(limits.perAddress == 256)
        #expect(limits.total == 10_000)
        #expect(limits.requestHeadTimeout == .seconds(10))
        #expect(limits.maximumHeadBytes == 32 * 1024)
        let loaded = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s"])
        #expect(loaded.connectionLimits == limits)
        let set = try PlatformConfiguration.load(environment: [
            "PCAST_SECRET": "s", "PCAST_MAX_CONNECTIONS_PER_ADDRESS": "32", "PCAST_MAX_CONNECTIONS": "500",
        ])
        #expect(set.connectionLimits.perAddress == 32)
        #expect(set.connectionLimits.total == 500)
    }

    @Test("TURN settings without a lifetime mint credentials valid a day: 86,400 s by default, every announced server's username is <minting time + 86,400>:<label> and its password is HMAC-SHA1 of that username")
    func turnCredentialsLastADay() throws {
        let secret = "turn-shared-secret"
        let settings = TURNSettings(secret: secret, servers: ["turn:turn.example:3478?transport=udp", "turns:turn.example:443?transport=tcp"])
        #expect(settings.lifetime == 86_400)
        let now = Date(timeIntervalSince1970: 1_700_000_000.75)
        let servers = TURNCredential.iceServers(settings, now: now)
        #expect(servers.map(\.url) == settings.servers)
        for server in servers {
            let username = try #require(server.username)
            let parts = username.split(separator: ":", maxSplits: 1).map(String.init)
            try #require(parts.count == 2, "\(username)")
            #expect(parts[0] == "1700086400", "\(username)")
            let label = parts[1]
            #expect(server.credential == TURNCredential.mint(secret: secret, lifetime: 86_400, now: now, label: label).password)
        }
    }

    @Test("a store opened without a timeout, as the platform opens its database, bounds its calls at 5 s: PostgreSQL where no server listens fails as unavailable, saying it had no answer within 5 s")
    func databaseCallsBoundedAtFiveSeconds() async throws {
        let port = try freeTCPPort()
        let location = DatabaseLocation.postgres(try PostgresURL(parsing: "postgres://pcast@127.0.0.1:\(port)/pcast"))
        var failure: RoomStoreError?
        do throws(RoomStoreError) {
            let store = try await PlatformStores.open(location, logger: Logger(label: "test"))
            Issue.record("opened a store with no server")
            await store.close()
        } catch {
            failure = error
        }
        guard case .unavailable(let message)? = failure else {
            Issue.record("expected unavailable, got \(String(describing: failure))")
            return
        }
        #expect(message.contains("no answer within \(Duration.seconds(5))"), "\(message)")
        #expect(message.contains("127.0.0.1:\(port)"), "\(message)")
    }
}

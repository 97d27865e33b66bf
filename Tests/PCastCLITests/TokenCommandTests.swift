import Foundation
import Testing

/// `pcast token` against the public `phenix-edge-auth` Python library, in both directions.
@Suite("pcast token")
struct TokenCommandTests {
    /// Builds a token with the Python library, calling the builder in the order of `calls`
    /// (pairs of `[method, argument]`).
    static let pythonBuild = """
        import json, sys
        from datetime import datetime, timezone
        from edgeauth.token_builder import TokenBuilder
        spec = json.loads(sys.stdin.read())
        b = TokenBuilder().with_application_id(spec["app"]).with_secret(spec["secret"])
        for name, arg in spec["calls"]:
            if name == "expires_at": b = b.expires_at(datetime.fromtimestamp(arg / 1000, tz=timezone.utc))
            elif arg is None: b = getattr(b, name)()
            else: b = getattr(b, name)(arg)
        print(b.build())
        """

    static let pythonVerify = """
        import json, sys
        from edgeauth.digest_tokens import DigestTokens
        spec = json.loads(sys.stdin.read())
        r = DigestTokens().verify_and_decode(spec["secret"], spec["token"])
        print(r["code"])
        """

    /// CLI option → Python builder method.
    static let methods: [String: String] = [
        "--uri": "with_uri", "--capability": "with_capability", "--expires-at-ms": "expires_at",
        "--session-id": "for_session", "--remote-address": "for_remote_address",
        "--origin-stream-id": "for_origin_stream", "--channel-id": "for_channel",
        "--channel-alias": "for_channel_alias", "--room-id": "for_room", "--room-alias": "for_room_alias",
        "--tag": "for_tag", "--apply-tag": "apply_tag",
    ]

    func pythonToken(app: String, secret: String, options: [(String, String)]) throws -> String {
        var calls: [[Any]] = []
        for (option, value) in options {
            if option == "--type" {
                let method = ["auth": "for_authenticate_only", "stream": "for_streaming_only", "publish": "for_publishing_only"][value]!
                calls.append([method, NSNull()])
            } else if option == "--expires-at-ms" {
                calls.append([Self.methods[option]!, Int64(value)!])
            } else {
                calls.append([Self.methods[option]!, value])
            }
        }
        let spec = try JSONSerialization.data(withJSONObject: ["app": app, "secret": secret, "calls": calls])
        let result = try runCommand(try python3(), ["-c", Self.pythonBuild], stdin: String(decoding: spec, as: UTF8.self))
        try #require(result.status == 0, "python failed: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static let orders: [[(String, String)]] = [
        [("--expires-at-ms", "1999999999000"), ("--type", "stream"), ("--channel-alias", "demo")],
        [("--type", "publish"), ("--capability", "streaming"), ("--capability", "hd"), ("--expires-at-ms", "1800000000000"),
         ("--session-id", "s-1"), ("--remote-address", "127.0.0.1"), ("--room-alias", "room/with \"quotes\" é")],
        [("--uri", "https://pcast.example/x"), ("--expires-at-ms", "1900000000000"), ("--type", "auth"),
         ("--origin-stream-id", "us-east#abc"), ("--tag", "custom:tag"), ("--apply-tag", "a")],
        [("--apply-tag", "first"), ("--room-id", "r1"), ("--expires-at-ms", "1900000001000"), ("--capability", "multi-bitrate")],
    ]

    @Test("create gives the same bytes as the Python builder called in the same order", arguments: 0..<orders.count)
    func createMatchesPython(index: Int) throws {
        let options = Self.orders[index]
        let cli = try runCommand(try pcastBinary(),
                                 ["token", "create", "--application-id", "app-1", "--secret", "s3cret"] + options.flatMap { [$0.0, $0.1] })
        #expect(cli.status == 0, "\(cli.stderr)")
        #expect(cli.lines.count == 2 && cli.lines[1].isEmpty, "the token alone on one line")
        let python = try pythonToken(app: "app-1", secret: "s3cret", options: options)
        #expect(cli.lines.first == python)
    }

    @Test("Python verifies what create makes")
    func pythonVerifiesCLI() throws {
        for options in Self.orders {
            let cli = try runCommand(try pcastBinary(),
                                     ["token", "create", "--application-id", "app-2", "--secret", "k"] + options.flatMap { [$0.0, $0.1] })
            let token = cli.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let spec = try JSONSerialization.data(withJSONObject: ["secret": "k", "token": token])
            let verdict = try runCommand(try python3(), ["-c", Self.pythonVerify], stdin: String(decoding: spec, as: UTF8.self))
            #expect(verdict.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "verified")
        }
    }

    @Test("verify prints the verdict, the token JSON, and exits 0 only when verified")
    func verify() throws {
        let token = try pythonToken(app: "app-3", secret: "right", options: Self.orders[1])
        let ok = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "app-3", "--secret", "right", token])
        #expect(ok.status == 0)
        #expect(ok.lines[0] == "verified")
        #expect(ok.lines[1].hasPrefix("{\"type\":\"publish\",\"capabilities\":[\"hd\",\"streaming\"],\"expires\":1800000000000"))

        let wrong = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "app-3", "--secret", "wrong", token])
        #expect(wrong.status != 0 && wrong.lines[0] == "bad-digest")

        let other = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "other-app", "--secret", "right", token])
        #expect(other.status != 0 && other.lines[0] == "bad-digest")

        let plain = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "a", "--secret", "s", "not a token"])
        #expect(plain.status != 0 && plain.lines[0] == "not-a-digest-token")

        let garbage = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "a", "--secret", "s", "DIGEST:%%%notbase64"])
        #expect(garbage.status != 0 && garbage.lines[0] == "bad-token")
    }

    @Test("an expired token is verified and says so on its own line")
    func expired() throws {
        let created = try runCommand(try pcastBinary(), ["token", "create", "--application-id", "a", "--secret", "s",
                                                         "--expires-at-ms", "1000", "--type", "auth"])
        let token = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let result = try runCommand(try pcastBinary(), ["token", "verify", "--application-id", "a", "--secret", "s", token])
        #expect(result.status == 0)
        #expect(result.lines.prefix(3) == ["verified", "{\"expires\":1000,\"type\":\"auth\"}", "expired"])
    }

    @Test("create refuses a token without expiry or with two required tags")
    func refusals() throws {
        let noExpiry = try runCommand(try pcastBinary(), ["token", "create", "--application-id", "a", "--secret", "s", "--type", "auth"])
        #expect(noExpiry.status != 0 && noExpiry.stdout.isEmpty)
        let twoTags = try runCommand(try pcastBinary(), ["token", "create", "--application-id", "a", "--secret", "s",
                                                         "--expires-in", "60", "--room-id", "r", "--channel-id", "c"])
        #expect(twoTags.status != 0 && twoTags.stdout.isEmpty)
    }
}

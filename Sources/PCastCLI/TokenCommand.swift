import ArgumentParser
import Foundation
import PCastProtocol

/// `pcast token create|verify`: EdgeAuth-compatible digest tokens.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Create and verify digest tokens (compatible with the public EdgeAuth libraries).",
        subcommands: [Create.self, Verify.self]
    )

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Print a new digest token alone on one line.",
            discussion: """
            The token's fields appear in the order their options are given, as the public builders add
            them in call order: the same options in the same order give the same bytes.
            Example:
              pcast token create --application-id my-app --secret s3cret --expires-in 3600 \\
                --type stream --channel-alias demo
            """
        )

        @Option var applicationId: String
        @Option var secret: String
        @Option var uri: String?
        @Option(help: "Lifetime from now.") var expiresIn: Int?
        @Option(help: "Expiry, milliseconds since the epoch.") var expiresAtMs: Int64?
        @Option(help: "auth, stream or publish.") var type: String?
        @Option var capability: [String] = []
        @Option var sessionId: String?
        @Option var remoteAddress: String?
        @Option var originStreamId: String?
        @Option var channelId: String?
        @Option var channelAlias: String?
        @Option var roomId: String?
        @Option var roomAlias: String?
        @Option(help: "A raw required tag.") var tag: String?
        @Option var applyTag: [String] = []
        @Option(help: "The recording a publish token may record or append to (--publish-type record|append --stream-name NAME).") var streamName: String?

        func validate() throws {
            if expiresIn != nil && expiresAtMs != nil {
                throw ValidationError("give --expires-in or --expires-at-ms, not both")
            }
            if expiresIn == nil && expiresAtMs == nil {
                throw ValidationError("a token needs an expiry: --expires-in SECONDS or --expires-at-ms MS")
            }
            let requiredTags = [channelId, channelAlias, roomId, roomAlias, tag].compactMap { $0 }
            if requiredTags.count > 1 {
                throw ValidationError("give at most one of --channel-id, --channel-alias, --room-id, --room-alias, --tag")
            }
            if let type, !["auth", "stream", "publish"].contains(type) {
                throw ValidationError("--type must be auth, stream or publish")
            }
        }

        func run() throws {
            let builder = Self.builder(fromArguments: Array(CommandLine.arguments.dropFirst()))
            do {
                print(try builder.encode(applicationId: applicationId, secret: secret))
            } catch {
                printError("cannot create the token: \(error)")
                throw ExitCode(2)
            }
        }

        /// Applies the token options in the order they appear on the command line.
        static func builder(fromArguments arguments: [String], now: Date = Date()) -> DigestTokenBuilder {
            var builder = DigestTokenBuilder()
            var index = 0
            while index < arguments.count {
                var name = arguments[index]
                var value: String?
                if let equals = name.firstIndex(of: "="), name.hasPrefix("--") {
                    value = String(name[name.index(after: equals)...])
                    name = String(name[..<equals])
                } else if index + 1 < arguments.count {
                    value = arguments[index + 1]
                }
                let consumed = name.contains("=") || arguments[index].contains("=") ? 1 : 2
                guard let value else { index += 1; continue }
                var used = true
                switch name {
                case "--uri": builder = builder.uri(value)
                case "--expires-in": builder = builder.expiresIn(seconds: Int(value) ?? 0, now: now)
                case "--expires-at-ms": builder = builder.expiresAt(milliseconds: Int64(value) ?? 0)
                case "--type":
                    switch value {
                    case "auth": builder = builder.forAuthenticateOnly()
                    case "publish": builder = builder.forPublishingOnly()
                    default: builder = builder.forStreamingOnly()
                    }
                case "--capability": builder = builder.capability(value)
                case "--session-id": builder = builder.sessionId(value)
                case "--remote-address": builder = builder.remoteAddress(value)
                case "--origin-stream-id": builder = builder.originStreamId(value)
                case "--channel-id": builder = builder.channel(value)
                case "--channel-alias": builder = builder.channelAlias(value)
                case "--room-id": builder = builder.room(value)
                case "--room-alias": builder = builder.roomAlias(value)
                case "--tag": builder = builder.tag(value)
                case "--apply-tag": builder = builder.applyTag(value)
                case "--stream-name": builder = builder.streamName(value)
                case "--application-id", "--secret": break
                default: used = false
                }
                index += used ? consumed : 1
            }
            return builder
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Verify a digest token.",
            discussion: """
            Prints the verdict alone on the first line (verified, not-a-digest-token, bad-token or
            bad-digest), then the decoded token JSON, then `expired` when it is. Exits 0 only when verified.
            """
        )

        @Option var applicationId: String
        @Option var secret: String
        @Argument var token: String

        func run() throws {
            let verdict = DigestToken.verify(token, applicationId: applicationId, secret: secret)
            print(verdict.code)
            let claims: TokenClaims?
            switch verdict {
            case .verified(let verified): claims = verified
            default: claims = try? DigestToken.decode(token).claims
            }
            if let claims {
                print(claims.json)
                if claims.isExpired(now: Date()) { print("expired") }
            }
            guard case .verified = verdict else { throw ExitCode(1) }
        }
    }
}

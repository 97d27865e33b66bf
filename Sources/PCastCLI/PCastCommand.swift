import ArgumentParser
import Foundation
import Logging
import PCastMedia

@main
struct PCastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pcast",
        abstract: "PCastKit: real-time streaming on GStreamer.",
        subcommands: [DemoCommand.self, ServeCommand.self, PublishCommand.self, SubscribeCommand.self, RoomCommand.self, ChatCommand.self, ChannelCommand.self, IngestCommand.self, NetTestCommand.self, DevicesCommand.self, PreviewCommand.self, PipelineCommand.self, InspectCommand.self, TokenCommand.self]
    )

    static func bootstrapLogging() {
        let level = ProcessInfo.processInfo.environment["PCAST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        // The SDK's messages among the command's own, at the same level.
        SDKLog.useLoggingSystem()
    }
}

import ArgumentParser
import Foundation
import PCastMedia

@main
struct PCastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pcast",
        abstract: "PCastKit: real-time streaming on GStreamer.",
        subcommands: [DemoCommand.self, ServeCommand.self, PublishCommand.self, SubscribeCommand.self, RoomCommand.self, ChatCommand.self, ChannelCommand.self, IngestCommand.self, NetTestCommand.self, DevicesCommand.self, PreviewCommand.self, PipelineCommand.self, InspectCommand.self, TokenCommand.self]
    )
}

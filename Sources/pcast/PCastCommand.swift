import ArgumentParser
import Foundation
import Logging

@main
struct PCastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pcast",
        abstract: "PCastKit: real-time streaming on GStreamer.",
        subcommands: [PipelineCommand.self, InspectCommand.self, TokenCommand.self, DevicesCommand.self, PreviewCommand.self, BenchCommand.self]
    )

    static func bootstrapLogging() {
        let level = ProcessInfo.processInfo.environment["PCAST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

import Foundation
import GStreamer
import Logging
import Synchronization

/// Where the SDK's log messages go, for the whole process (the PCast iOS SDK's initialize options):
/// - the console (standard error) only from a level the application chose, or that
///   `PCAST_LOG_LEVEL` names when it chose none: an application's standard error is its own, and
///   the SDK writes nothing there by default;
/// - a swift-log handler the application gives, every message at that handler's level;
/// - nowhere at all when logging is turned off;
/// - or, for an application that bootstrapped swift-log's `LoggingSystem` and wants the SDK's
///   messages among its own (the `pcast` command line), through that (``useLoggingSystem()``).
///
/// Every logger of the SDK (the session's, capture, renderers, recordings, ingest, GStreamer's own
/// warnings) is made here, so one setting covers them all.
package enum SDKLog {
    struct Configuration: Sendable {
        var enabled = true
        var consoleLevel: Logger.Level? = SDKLog.environmentLevel
        var makeHandler: (@Sendable (String) -> any LogHandler)?
        var loggingSystem = false
        /// Bumped on each change: handlers made for an earlier one are made again.
        var generation = 0
    }
    static let configuration = Mutex(Configuration())

    /// The level `PCAST_LOG_LEVEL` names (swift-log's names in any case, and `warn`); nil when it
    /// is unset, `off` or not a level.
    package static var environmentLevel: Logger.Level? {
        level(named: ProcessInfo.processInfo.environment["PCAST_LOG_LEVEL"])
    }

    /// How a command-line tool writes its log lines.
    package enum LineFormat: String, Sendable, CaseIterable {
        /// swift-log's text lines.
        case text
        /// One JSON object a line (``JSONLogHandler``).
        case json
    }

    /// The format `PCAST_LOG_FORMAT` names (`text` or `json`); nil when it is unset or neither.
    package static var environmentFormat: LineFormat? {
        ProcessInfo.processInfo.environment["PCAST_LOG_FORMAT"].flatMap { LineFormat(rawValue: $0.lowercased()) }
    }

    /// A command-line tool's logging (`pcast`, `pcast-bench`): swift-log to standard error at
    /// `PCAST_LOG_LEVEL` (info when unset), as text or, with `format` (else `PCAST_LOG_FORMAT`)
    /// `json`, one JSON object a line; the SDK's messages among the tool's own. An application
    /// bootstraps its own logging instead.
    package static func bootstrapCommandLine(format: LineFormat? = nil) {
        let level = environmentLevel ?? .info
        let format = format ?? environmentFormat ?? .text
        LoggingSystem.bootstrap { label in
            switch format {
            case .text:
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            case .json:
                var handler = JSONLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        }
        useLoggingSystem()
    }

    package static func level(named name: String?) -> Logger.Level? {
        guard let name = name?.lowercased() else { return nil }
        return name == "warn" ? .warning : Logger.Level(rawValue: name)
    }

    /// Applies the logging options of a `PCast` being initialised (the latest one wins, as the
    /// seed's initialize does for its process). Nil `consoleLevel`: `PCAST_LOG_LEVEL`'s.
    package static func configure(enabled: Bool, consoleLevel: Logger.Level?, makeHandler: (@Sendable (String) -> any LogHandler)?) {
        configuration.withLock {
            $0.enabled = enabled
            $0.consoleLevel = consoleLevel ?? environmentLevel
            $0.makeHandler = makeHandler
            $0.generation &+= 1
        }
        routeGStreamer()
    }

    /// From now on every message goes to swift-log's `LoggingSystem` (for an application that
    /// bootstrapped it), whatever a `PCast`'s options say.
    package static func useLoggingSystem() {
        configuration.withLock {
            $0.loggingSystem = true
            $0.generation &+= 1
        }
        routeGStreamer()
    }

    /// GStreamer's warnings and errors follow the same settings.
    package static func routeGStreamer() {
        GStreamerRuntime.setLogHandlerFactory { SDKLogHandler(label: $0) }
    }

    /// A logger whose messages go where the configuration says.
    package static func logger(_ label: String) -> Logger {
        Logger(label: label) { SDKLogHandler(label: $0) }
    }
}

/// The SDK's swift-log handler: reads the process's logging configuration for each message
/// (messages are few; none is on a per-packet path).
package struct SDKLogHandler: LogHandler {
    /// What this label's messages are handed to besides the console: the application's handler
    /// or the logging system's logger, made again after the configuration changed.
    private final class Destination: Sendable {
        enum Made { case none, handler(any LogHandler), system(Logger) }
        let made = Mutex<(generation: Int, destination: Made)>((-1, .none))
    }

    let label: String
    package var metadata: Logger.Metadata = [:]
    /// Everything reaches `log`; each destination has its own level.
    package var logLevel: Logger.Level = .trace
    private let console: StreamLogHandler
    private let destination = Destination()

    package init(label: String) {
        self.label = label
        var console = StreamLogHandler.standardError(label: label)
        console.logLevel = .trace
        self.console = console
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let configuration = SDKLog.configuration.withLock { $0 }
        var event = event
        if !metadata.isEmpty { event.metadata = metadata.merging(event.metadata ?? [:]) { $1 } }
        let made = destination.made.withLock { made -> Destination.Made in
            if made.generation != configuration.generation {
                if configuration.loggingSystem {
                    made = (configuration.generation, .system(Logger(label: label)))
                } else {
                    made = (configuration.generation, configuration.makeHandler.map { .handler($0(label)) } ?? .none)
                }
            }
            return made.destination
        }
        if case .system(let logger) = made {
            logger.log(level: event.level, event.message, metadata: event.metadata, source: event.source,
                       file: event.file, function: event.function, line: event.line)
            return
        }
        guard configuration.enabled else { return }
        if let level = configuration.consoleLevel, event.level >= level { console.log(event: event) }
        if case .handler(let handler) = made, event.level >= handler.logLevel { handler.log(event: event) }
    }
}

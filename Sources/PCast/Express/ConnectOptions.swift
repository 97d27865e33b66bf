import Foundation
import PCastMedia

/// The PCast iOS SDK's connect options for publishing and subscribing through the Express APIs: strings
/// of the form `name=value`, each setting one of the typed options (a remote publish's go to the
/// platform instead: `loop`). An option not listed here, or a value out of range, is refused as
/// ``PCastError/invalidRequest(_:)`` before anything is published or subscribed.
///
/// | publish | |
/// |---|---|
/// | `bitrate=<kbit/s>` | video bitrate, 50…50000 |
/// | `keyframe-interval=<frames>` | 1…600 |
/// | `audio-bitrate=<bit/s>` | 6000…510000 |
///
/// | subscribe | |
/// |---|---|
/// | `playout-delay=<ms>` | 0…10000 |
/// | `layer=<adaptive, best, lowest or a RID>` | a simulcast's layer |
///
/// ```swift
/// var options = PublishOptions(capabilities: ["real-time"])
/// options.connectOptions = ["bitrate=800", "keyframe-interval=30"]
/// ```
enum ConnectOptions {
    static let publishNames = ["bitrate", "keyframe-interval", "audio-bitrate"]
    static let subscribeNames = ["playout-delay", "layer"]

    /// `settings` with the publish options applied.
    static func publish(_ options: [String], onto settings: EncodingSettings) throws(PCastError) -> EncodingSettings {
        var settings = settings
        for option in options {
            let (name, value) = try split(option, supported: publishNames)
            switch name {
            case "bitrate": settings.videoBitrate = try integer(option, value, in: 50...50_000)
            case "keyframe-interval": settings.keyframeInterval = try integer(option, value, in: 1...600)
            default: settings.audioBitrate = try integer(option, value, in: 6_000...510_000)
            }
        }
        return settings
    }

    /// The subscribe options' playout delay and layer (nil where not given).
    static func subscribe(_ options: [String]) throws(PCastError) -> (playoutDelay: Duration?, layer: LayerSelection?) {
        var result: (playoutDelay: Duration?, layer: LayerSelection?) = (nil, nil)
        for option in options {
            let (name, value) = try split(option, supported: subscribeNames)
            if name == "playout-delay" {
                result.playoutDelay = .milliseconds(try integer(option, value, in: 0...10_000))
            } else {
                switch value {
                case "adaptive": result.layer = .adaptive
                case "best": result.layer = .best
                case "lowest": result.layer = .lowest
                default:
                    guard !value.isEmpty, value.count <= 16, value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                        throw .invalidRequest("connect option '\(option)': a layer is adaptive, best, lowest or a RID")
                    }
                    result.layer = .rid(value)
                }
            }
        }
        return result
    }

    private static func split(_ option: String, supported: [String]) throws(PCastError) -> (String, String) {
        let parts = option.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, supported.contains(parts[0]) else {
            throw .invalidRequest("connect option '\(option.prefix(64))' is not supported (supported: \(supported.map { "\($0)=…" }.joined(separator: ", ")))")
        }
        return (parts[0], parts[1])
    }

    private static func integer(_ option: String, _ value: String, in range: ClosedRange<Int>) throws(PCastError) -> Int {
        guard let number = Int(value), range.contains(number) else {
            throw .invalidRequest("connect option '\(option.prefix(64))': the value must be a whole number in \(range.lowerBound)…\(range.upperBound)")
        }
        return number
    }
}

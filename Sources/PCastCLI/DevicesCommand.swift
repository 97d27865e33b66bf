import ArgumentParser
import Foundation
import PCastMedia

/// `pcast devices`: the video and audio sources getUserMedia can use, with their capabilities.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List video and audio sources (cameras, microphones, screen, synthetic and null sources) and their capture modes."
    )

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let video = await UserMedia.enumerateSourceDevices(.video)
        let audio = await UserMedia.enumerateSourceDevices(.audio)
        if json {
            struct Entry: Encodable {
                var id, name, mediaType, deviceType, facingMode, source: String
                var modes: [String]
            }
            let entries = (video + audio).map {
                Entry(id: $0.id, name: $0.name, mediaType: $0.mediaType.rawValue, deviceType: $0.deviceType.rawValue,
                      facingMode: $0.facingMode.rawValue, source: $0.sourceDescription, modes: $0.videoModes.map(\.description))
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(entries), as: UTF8.self))
            return
        }
        for (title, list) in [("Video sources", video), ("Audio sources", audio)] {
            print("\(title):")
            for device in list {
                print("  \(device.id)  [\(device.deviceType)]  \(device.name)")
                if device.mediaType == .video {
                    if device.videoModes.isEmpty {
                        print("      any size and frame rate (scaled)")
                    } else {
                        for mode in device.videoModes { print("      \(mode)") }
                    }
                }
            }
        }
    }
}

import ArgumentParser
import CSRTP
import Foundation
import GStreamer

/// `pcast inspect`: which GStreamer elements PCastKit needs are present, and what to install for the rest.
struct InspectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "List the GStreamer plugins PCastKit needs, which are present, and the package for each missing one."
    )

    func run() throws {
        do {
            try GStreamerRuntime.initialize()
        } catch {
            printError("\(error)")
            throw ExitCode(1)
        }
        print(GStreamerRuntime.version)
        print("libsrtp \(String(cString: srtp_get_version_string()))")
        print("")
        var missingRequired: Set<String> = []
        var missingOptional: Set<String> = []
        for entry in PluginCatalog.entries {
            let present = GStreamerRuntime.hasElement(entry.element)
            let mark = present ? "ok     " : (entry.required ? "MISSING" : "absent ")
            let name = entry.element.padding(toLength: 16, withPad: " ", startingAt: 0)
            let purpose = entry.purpose.padding(toLength: 30, withPad: " ", startingAt: 0)
            print("\(mark) \(name) \(purpose) \(entry.debianPackage)\(entry.required ? "" : "  (optional)")")
            if !present {
                if entry.required { missingRequired.insert(entry.debianPackage) } else { missingOptional.insert(entry.debianPackage) }
            }
        }
        print("")
        if missingRequired.isEmpty {
            print("all required elements are present")
        } else {
            print("missing required elements: apt-get install \(missingRequired.sorted().joined(separator: " "))")
        }
        if !missingOptional.isEmpty {
            print("optional features: apt-get install \(missingOptional.sorted().joined(separator: " "))")
        }
        if !missingRequired.isEmpty { throw ExitCode(1) }
    }
}

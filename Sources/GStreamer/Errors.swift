/// Every error the GStreamer layer reports.
///
/// ```swift
/// do {
///     _ = try Pipeline(description: "videotestsrc ! nosuchelement ! fakesink")
/// } catch .missingElements(let missing, _) {
///     print(missing.map(\.name))   // ["nosuchelement"]
/// }
/// ```
public enum GStreamerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `gst_init` failed (no plugin registry could be built, for example).
    case initializationFailed(String)
    /// A gst-launch description GStreamer could not parse or link, with GStreamer's message.
    case invalidDescription(String)
    /// Elements named in a description that no installed plugin provides.
    case missingElements([MissingElement], message: String)
    /// An element factory that is not installed.
    case elementFactoryMissing(MissingElement)
    /// No element with this name in the pipeline.
    case elementNotFound(String)
    /// The element exists but is not of the expected kind (for example an `appsink`).
    case wrongElementType(element: String, expected: String)
    /// The element has no pad of that name.
    case padNotFound(element: String, pad: String)
    /// The element has no property of that name.
    case unknownProperty(element: String, property: String)
    /// The element has no signal of that name.
    case unknownSignal(element: String, signal: String)
    /// The property exists but the value does not fit it (type or range).
    case badPropertyValue(element: String, property: String, expected: String, given: String)
    /// The property is read-only (or write-only, when reading).
    case propertyNotAccessible(element: String, property: String, reason: String)
    /// A caps string GStreamer could not parse.
    case invalidCaps(String)
    /// A state change GStreamer refused; `error` is the error the pipeline posted, when it posted one.
    case stateChangeFailed(to: PipelineState, error: StreamError?)
    /// A state change that did not complete within its timeout.
    case stateChangeTimeout(to: PipelineState, after: Duration)
    /// Two elements could not be linked (no compatible pads or caps).
    case linkFailed(from: String, to: String)
    /// An error posted by an element while running.
    case stream(StreamError)
    /// Buffer memory could not be mapped.
    case mapFailed
    /// `appsrc` refused a buffer: `flushing` (pipeline stopped), `eos` (after end of stream), …
    case flow(String)
    /// A timed wait ran out.
    case timeout(Duration)
    /// The waiting task was cancelled.
    case cancelled
    /// A pipeline template placeholder had no value and no default.
    case missingPlaceholderValue(template: String, name: String)
    /// A value was given for a placeholder the template does not have.
    case unknownPlaceholder(template: String, name: String, known: [String])
    /// A template that cannot be used (unreadable, malformed placeholder, conflicting defaults).
    case invalidTemplate(template: String, reason: String)

    public var description: String {
        switch self {
        case .initializationFailed(let m): return "GStreamer could not be initialized: \(m)"
        case .invalidDescription(let m): return "invalid pipeline description: \(m)"
        case .missingElements(let missing, let m):
            return "missing GStreamer elements: " + missing.map(\.description).joined(separator: ", ") + " (\(m))"
        case .elementFactoryMissing(let missing): return "missing GStreamer element: \(missing)"
        case .elementNotFound(let n): return "no element named '\(n)' in the pipeline"
        case .wrongElementType(let e, let expected): return "element '\(e)' is not \(expected)"
        case .padNotFound(let e, let p): return "element '\(e)' has no pad '\(p)'"
        case .unknownProperty(let e, let p): return "element '\(e)' has no property '\(p)'"
        case .unknownSignal(let e, let s): return "element '\(e)' has no signal '\(s)'"
        case .badPropertyValue(let e, let p, let expected, let given):
            return "bad value for '\(e).\(p)': expected \(expected), given \(given)"
        case .propertyNotAccessible(let e, let p, let r): return "property '\(e).\(p)' is \(r)"
        case .invalidCaps(let c): return "invalid caps: \(c)"
        case .stateChangeFailed(let to, let error):
            return "state change to \(to) failed" + (error.map { ": \($0)" } ?? "")
        case .stateChangeTimeout(let to, let after): return "state change to \(to) did not complete within \(after)"
        case .linkFailed(let from, let to): return "could not link \(from) to \(to): no compatible pads or formats"
        case .stream(let e): return e.description
        case .mapFailed: return "buffer memory could not be mapped"
        case .flow(let reason): return "appsrc refused the buffer: \(reason)"
        case .timeout(let d): return "timed out after \(d)"
        case .cancelled: return "cancelled"
        case .missingPlaceholderValue(let t, let n): return "template '\(t)': no value for placeholder {\(n)}"
        case .unknownPlaceholder(let t, let n, let known):
            return "template '\(t)' has no placeholder {\(n)} (it has: \(known.joined(separator: ", ")))"
        case .invalidTemplate(let t, let r): return "template '\(t)': \(r)"
        }
    }
}

/// An element factory that is not installed, with the Debian package that provides it when known.
public struct MissingElement: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    public let debianPackage: String?

    public init(name: String) {
        self.name = name
        self.debianPackage = PluginCatalog.debianPackage(forElement: name)
    }

    public var description: String {
        debianPackage.map { "\(name) (install \($0))" } ?? name
    }
}

/// An error, warning or info message posted by an element.
public struct StreamError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The GLib error domain, for example `gst-resource-error-quark`.
    public let domain: String
    public let code: Int
    public let message: String
    public let debug: String?
    /// The name of the element that posted it.
    public let source: String

    public init(domain: String, code: Int, message: String, debug: String?, source: String) {
        self.domain = domain
        self.code = code
        self.message = message
        self.debug = debug
        self.source = source
    }

    public var description: String {
        "\(source): \(message)" + (debug.map { " [\($0)]" } ?? "")
    }
}

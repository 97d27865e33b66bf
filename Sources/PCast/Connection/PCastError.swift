import Foundation
import GStreamer
import Logging
public import PCastMedia
public import PCastProtocol
import Synchronization

/// Why a PCast operation failed: a ``code`` to compare, a human ``description``, the PCast iOS SDK's
/// request ``status``, and the error underneath, kept as a value.
///
/// A struct, not an enum, so that a new code breaks no `switch` in an application:
///
/// ```swift
/// do {
///     try await pcast.start(authToken: token)
/// } catch where error.code == .refused {
///     print("the platform said \(error.status): \(error.detail)")
/// } catch {
///     print(error)   // "cannot connect: …", "the platform did not answer in time", …
/// }
/// ```
public struct PCastError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure. New codes may be added in any release.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The platform URI cannot be used.
        public static let invalidURI = Code("invalidURI")
        /// The signaling connection could not be made.
        public static let connectionFailed = Code("connectionFailed")
        /// The signaling connection is gone.
        public static let disconnected = Code("disconnected")
        /// The platform did not answer in time.
        public static let timeout = Code("timeout")
        /// The platform refused the request (``PCastError/status`` says how).
        public static let refused = Code("refused")
        /// ``PCast/start(authToken:)`` has not succeeded (or ``PCast/stop()`` was called).
        public static let notStarted = Code("notStarted")
        /// The connection to the platform dropped and the SDK is reconnecting: no new streams
        /// until it is back online (existing streams keep flowing).
        public static let offline = Code("offline")
        /// The platform named a media transport this SDK cannot use.
        public static let invalidTransport = Code("invalidTransport")
        /// The request is malformed (a token that cannot be one, options that contradict).
        public static let invalidRequest = Code("invalidRequest")
        /// The media engine failed (``PCastError/mediaError`` has its error).
        public static let media = Code("media")
        /// A stream the operation needed ended before it finished (``PCastError/detail`` says why).
        public static let streamEnded = Code("streamEnded")
        /// The task running the operation was cancelled.
        public static let cancelled = Code("cancelled")
        /// The platform's TLS certificate was not accepted (``PCastError/detail`` says why:
        /// expired, not yet valid, issued by an authority not trusted, for another name).
        public static let certificateRejected = Code("certificateRejected")

        public var description: String { name }
    }

    public let code: Code
    /// The specifics: the URI, the platform's message, the reason.
    public let detail: String
    /// The PCast iOS SDK's request status for this failure.
    public let status: RequestStatus
    /// The error underneath, kept as a value (a `MediaError` for ``Code/media``).
    public let underlying: (any Error & Sendable)?

    public init(code: Code, detail: String = "", status: RequestStatus? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.detail = detail
        self.underlying = underlying
        self.status = status ?? {
            switch code {
            case .timeout: return .timeout
            case .invalidURI, .invalidRequest: return .badRequest
            default: return .failed
            }
        }()
    }

    public static func invalidURI(_ uri: String) -> PCastError { PCastError(code: .invalidURI, detail: uri) }
    public static func connectionFailed(_ why: String) -> PCastError { PCastError(code: .connectionFailed, detail: why) }
    public static let disconnected = PCastError(code: .disconnected)
    public static let timeout = PCastError(code: .timeout)
    public static func refused(_ status: RequestStatus, _ message: String) -> PCastError {
        PCastError(code: .refused, detail: message, status: status)
    }
    public static let notStarted = PCastError(code: .notStarted)
    public static let offline = PCastError(code: .offline)
    public static func invalidTransport(_ why: String) -> PCastError { PCastError(code: .invalidTransport, detail: why) }
    public static func invalidRequest(_ why: String) -> PCastError { PCastError(code: .invalidRequest, detail: why) }
    public static func media(_ error: MediaError) -> PCastError {
        PCastError(code: .media, detail: error.description, underlying: error)
    }

    /// The media engine's error, for ``Code/media``.
    public var mediaError: MediaError? { underlying as? MediaError }

    public var description: String {
        switch code {
        case .invalidURI: return "invalid platform URI '\(detail)' (expected ws://host:port/ws or wss://host:port/ws)"
        case .connectionFailed: return "cannot connect: \(detail)"
        case .disconnected: return "the connection to the platform is gone"
        case .timeout: return "the platform did not answer in time"
        case .refused: return "refused (\(status.rawValue)): \(detail)"
        case .notStarted: return "PCast is not started"
        case .offline: return "offline: reconnecting to the platform"
        case .invalidTransport: return "invalid media transport: \(detail)"
        case .invalidRequest: return "invalid request: \(detail)"
        case .certificateRejected: return "the platform's certificate was rejected: \(detail)"
        default: return detail.isEmpty ? code.description : detail
        }
    }

    /// Equal when code, status and detail are (the underlying error is described by the detail).
    public static func == (lhs: PCastError, rhs: PCastError) -> Bool {
        lhs.code == rhs.code && lhs.status == rhs.status && lhs.detail == rhs.detail
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(status)
        hasher.combine(detail)
    }
}

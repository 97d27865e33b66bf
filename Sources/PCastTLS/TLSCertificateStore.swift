import Foundation
import NIOCore
import NIOSSL
import PCastContracts
import Synchronization

/// A TLS listener's certificate chain and key (HTTPS/WSS, RTMPS), read from their PEM files, and
/// read again on ``reload()`` (SIGHUP for `pcast serve`).
///
/// Each connection takes the context current when it is accepted: a reload changes what later
/// connections are shown and leaves open ones (a WebSocket, a WHEP session's HTTP keep-alive) as
/// they are. A reload that fails (a half-written file, a key that does not match) keeps the
/// previous certificate.
package final class TLSCertificateStore: Sendable {
    package let files: TLSFiles
    private struct Loaded {
        var context: NIOSSLContext
        /// The leaf's expiry, seconds since 1970 (`pcast_tls_certificate_expiry_timestamp_seconds`).
        var notValidAfter: Int
    }
    private let loaded: Mutex<Loaded>

    package init(files: TLSFiles) throws(TLSSetupError) {
        self.files = files
        loaded = Mutex(try Self.load(files))
    }

    /// The context new connections get.
    package var context: NIOSSLContext { loaded.withLock { $0.context } }

    /// When the leaf certificate in use expires, seconds since 1970.
    package var notValidAfter: Int { loaded.withLock { $0.notValidAfter } }

    /// Reads the files again; on failure the certificate in use stays.
    package func reload() throws(TLSSetupError) {
        let fresh = try Self.load(files)
        loaded.withLock { $0 = fresh }
    }

    private static func load(_ files: TLSFiles) throws(TLSSetupError) -> Loaded {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(files.certificateChain)
        } catch {
            throw TLSSetupError(path: files.certificateChain, reason: readable(error, what: "a PEM certificate chain"))
        }
        guard let leaf = chain.first else {
            throw TLSSetupError(path: files.certificateChain, reason: "no certificate in the file")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: files.privateKey, format: .pem)
        } catch {
            throw TLSSetupError(path: files.privateKey, reason: readable(error, what: "an unencrypted PEM private key"))
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["http/1.1"]
        // The context refuses a key that is not the leaf's (KEY_VALUES_MISMATCH): caught here
        // rather than by every client's failed handshake.
        do {
            return Loaded(context: try NIOSSLContext(configuration: configuration), notValidAfter: Int(leaf.notValidAfter))
        } catch {
            // The key itself was read above: a key refused now is one that does not match.
            if case NIOSSLError.failedToLoadPrivateKey = error {
                throw TLSSetupError(path: files.privateKey, reason: "the key does not belong to the certificate in \(files.certificateChain)")
            }
            throw TLSSetupError(path: files.certificateChain, reason: "\(error)")
        }
    }

    private static func readable(_ error: any Error, what: String) -> String {
        if case NIOSSLError.failedToLoadCertificate = error { return "not \(what)" }
        if case NIOSSLError.failedToLoadPrivateKey = error { return "not \(what)" }
        if let posix = error as? IOError { return posix.description }
        let text = "\(error)"
        if text.contains("No such file") || text.contains("errno: 2") { return "no such file" }
        return "not \(what) (\(text))"
    }
}

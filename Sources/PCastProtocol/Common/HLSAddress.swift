import Foundation

/// Where the platform serves a stream as HLS, and how a token rides in the query, for the
/// platform that answers, the SDK that plays and the benchmark that measures.
///
/// ```swift
/// HLSAddress.playlistPath("news")          // "/hls/news/index.m3u8"
/// HLSAddress.tokenQuery("DIGEST:ab+c==")   // "token=DIGEST%3Aab%2Bc%3D%3D"
/// ```
public enum HLSAddress {
    /// `/hls/<stream id or channel alias>`: where its files are.
    public static func directory(_ name: String) -> String { "/hls/\(name)" }

    /// `/hls/<stream id or channel alias>/<file>`.
    public static func path(_ name: String, _ file: String = "index.m3u8") -> String { directory(name) + "/" + file }

    public static func playlistPath(_ name: String) -> String { path(name) }

    /// `token=<token>`, the token percent-encoded (nothing but unreserved characters left as is:
    /// a token's `+`, `/`, `=` and `:` would be read as other things in a query).
    public static func tokenQuery(_ token: String) -> String {
        "token=" + (token.addingPercentEncoding(withAllowedCharacters: unreserved) ?? token)
    }

    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

//! `--web.config.file`: TLS and basic auth in the format of the Prometheus exporters'
//! exporter-toolkit, so that one file (and `promtool check web-config`) serves both:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # relative paths are relative to this file
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
//!   client_ca_file: clients.crt
//!   min_version: TLS12             # TLS12 (default) or TLS13; max_version likewise
//! http_server_config:
//!   headers: { Strict-Transport-Security: max-age=31536000 }
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')
//! ```
//!
//! A key this reader does not know is an error that names it, as exporter-toolkit's strict
//! parsing is; exporter-toolkit keys numatrace does not implement are refused the same way
//! rather than ignored (a security setting that silently does nothing is worse than none).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use hyper::header::{HeaderName, HeaderValue};
use thiserror::Error;
use tokio_rustls::rustls::{
    self, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};

use super::yaml::{self, Node, Value};
use crate::safe_fs::{self, SafeFsError};

/// Largest web config, certificate or key file read (each is a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Errors name a line and numatrace's own words for what is there, never the file's text: a
/// file the user could not read themselves must not be printed back to them by root.
#[derive(Debug, Error)]
pub enum WebConfigError {
    #[error(transparent)]
    Read(#[from] SafeFsError),
    #[error("not UTF-8 text")]
    NotText,
    #[error("line {line}: not YAML ({what})")]
    Yaml { line: usize, what: String },
    #[error("line {line}: unknown key {within} (exporter-toolkit's web config format)")]
    UnknownKey { line: usize, within: String },
    #[error("line {line}: {key} is not supported by numatrace")]
    Unsupported { line: usize, key: String },
    #[error("line {line}: {key}: {why}")]
    Invalid {
        line: usize,
        key: String,
        why: String,
    },
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
}

type Result<T, E = WebConfigError> = std::result::Result<T, E>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    VerifyIfGiven,
    RequireAndVerify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

#[derive(Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_auth: ClientAuth,
    pub client_ca_file: Option<PathBuf>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

#[derive(Debug, Default)]
pub struct WebConfig {
    pub tls: Option<TlsFiles>,
    /// User → bcrypt hash.
    pub users: BTreeMap<String, String>,
    /// Added to every response (http_server_config.headers).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Response headers exporter-toolkit lets the file set.
const SETTABLE_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// The entries of a mapping at `at` (a missing or empty value reads as an empty one).
fn entries<'a>(y: &'a Node, at: &str) -> Result<Vec<(&'a Node, &'a Node)>> {
    if y.is_null() {
        return Ok(Vec::new());
    }
    match &y.value {
        Value::Map(m) => Ok(m.iter().map(|(k, v)| (k, v)).collect()),
        _ => Err(invalid(y, at, "must be a mapping")),
    }
}

/// A key's text, for matching against the keys numatrace knows (never for printing).
fn key_text(k: &Node) -> &str {
    k.as_str().unwrap_or("")
}

fn invalid(at: &Node, key: &str, why: impl Into<String>) -> WebConfigError {
    WebConfigError::Invalid {
        line: at.line,
        key: key.to_owned(),
        why: why.into(),
    }
}

fn unknown(at: &Node, within: &str) -> WebConfigError {
    WebConfigError::UnknownKey {
        line: at.line,
        within: within.to_owned(),
    }
}

fn unsupported(at: &Node, key: &str) -> WebConfigError {
    WebConfigError::Unsupported {
        line: at.line,
        key: key.to_owned(),
    }
}

fn string<'a>(y: &'a Node, key: &str) -> Result<&'a str> {
    y.as_str()
        .ok_or_else(|| invalid(y, key, "must be a string"))
}

fn version(y: &Node, key: &str) -> Result<TlsVersion> {
    match string(y, key)? {
        "TLS12" => Ok(TlsVersion::Tls12),
        "TLS13" => Ok(TlsVersion::Tls13),
        "TLS10" | "TLS11" => Err(invalid(y, key, "rustls speaks TLS12 and TLS13 only")),
        _ => Err(invalid(y, key, "expected TLS12 or TLS13")),
    }
}

impl WebConfig {
    /// Reads `path` with the invoker's rights under sudo, only if root or its user owns it and
    /// neither group nor others can write it ([`safe_fs::read_trusted`]).
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = safe_fs::read_trusted(path, MAX_FILE_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| WebConfigError::NotText)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base)
    }

    /// Parses the file's text; relative file names are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let root = yaml::load(text).map_err(|e| {
            let (line, what) = yaml::describe(&e);
            WebConfigError::Yaml { line, what }
        })?;
        let mut config = Self::default();
        let Some(root) = root else {
            return Ok(config);
        };
        for (key, value) in entries(&root, "the file")? {
            match key_text(key) {
                "tls_server_config" => config.tls = Some(tls(value, base)?),
                "basic_auth_users" => config.users = users(value)?,
                "http_server_config" => config.headers = http_server(value)?,
                "rate_limit" => return Err(unsupported(key, "rate_limit")),
                _ => return Err(unknown(key, "at the top level")),
            }
        }
        Ok(config)
    }

    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.tls {
            parts.push(format!(
                "TLS ({}{})",
                t.cert_file.display(),
                match t.client_auth {
                    ClientAuth::None => "",
                    ClientAuth::VerifyIfGiven => ", client certificates verified if given",
                    ClientAuth::RequireAndVerify => ", client certificates required",
                }
            ));
        }
        if !self.users.is_empty() {
            let n = self.users.len();
            parts.push(format!(
                "basic auth ({n} user{})",
                if n == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            "neither TLS nor basic auth".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The tls_server_config keys exporter-toolkit has and numatrace does not implement.
const TLS_UNSUPPORTED: [&str; 7] = [
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
    "cert",
    "key",
    "client_ca",
];

fn tls(y: &Node, base: &Path) -> Result<TlsFiles> {
    const AT: &str = "tls_server_config";
    let (mut cert, mut key, mut ca) = (None, None, None);
    let mut auth = ClientAuth::None;
    let mut auth_at = y.line;
    let (mut min, mut max) = (TlsVersion::Tls12, TlsVersion::Tls13);
    let mut min_at = y.line;
    for (k, v) in entries(y, AT)? {
        let name = key_text(k);
        let full = format!("{AT}.{name}");
        let file = |v: &Node| string(v, &full).map(|s| base.join(s));
        match name {
            "cert_file" => cert = Some(file(v)?),
            "key_file" => key = Some(file(v)?),
            "client_ca_file" => ca = Some((file(v)?, k.line)),
            "client_auth_type" => {
                auth_at = k.line;
                auth = match string(v, &full)? {
                    "" | "NoClientCert" => ClientAuth::None,
                    "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
                    "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
                    "RequestClientCert" | "RequireAnyClientCert" => {
                        return Err(invalid(
                            v,
                            &full,
                            "numatrace verifies every client certificate it accepts: use \
                             VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                        ));
                    }
                    _ => return Err(invalid(v, &full, "an unknown type")),
                }
            }
            "min_version" => {
                min_at = k.line;
                min = version(v, &full)?;
            }
            "max_version" => max = version(v, &full)?,
            n if TLS_UNSUPPORTED.contains(&n) => return Err(unsupported(k, &full)),
            _ => return Err(unknown(k, "in tls_server_config")),
        }
    }
    let cert_file = cert.ok_or_else(|| invalid(y, AT, "missing cert_file"))?;
    let key_file = key.ok_or_else(|| invalid(y, AT, "missing key_file"))?;
    match (auth, &ca) {
        (ClientAuth::None, Some((_, line))) => {
            return Err(WebConfigError::Invalid {
                line: *line,
                key: format!("{AT}.client_ca_file"),
                why: "set without a client_auth_type that verifies client certificates".into(),
            });
        }
        (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, None) => {
            return Err(WebConfigError::Invalid {
                line: auth_at,
                key: format!("{AT}.client_auth_type"),
                why: "needs client_ca_file to verify client certificates against".into(),
            });
        }
        _ => {}
    }
    if min > max {
        return Err(WebConfigError::Invalid {
            line: min_at,
            key: format!("{AT}.min_version"),
            why: "above max_version".into(),
        });
    }
    Ok(TlsFiles {
        cert_file,
        key_file,
        client_auth: auth,
        client_ca_file: ca.map(|(p, _)| p),
        min_version: min,
        max_version: max,
    })
}

fn users(y: &Node) -> Result<BTreeMap<String, String>> {
    const AT: &str = "basic_auth_users";
    let mut users = BTreeMap::new();
    for (user, hash) in entries(y, AT)? {
        let name = user.as_str().unwrap_or("");
        if name.is_empty() || name.contains(':') {
            return Err(invalid(
                user,
                AT,
                "a user name is a non-empty string without ':'",
            ));
        }
        // The error names the line, not the user or the hash.
        let hash = hash
            .as_str()
            .filter(|h| h.parse::<bcrypt::HashParts>().is_ok())
            .ok_or_else(|| invalid(user, AT, "the user's password is not a bcrypt hash"))?;
        if users.insert(name.to_owned(), hash.to_owned()).is_some() {
            return Err(invalid(user, AT, "a user named twice"));
        }
    }
    Ok(users)
}

fn http_server(y: &Node) -> Result<Vec<(HeaderName, HeaderValue)>> {
    const AT: &str = "http_server_config";
    let mut headers = Vec::new();
    for (k, v) in entries(y, AT)? {
        match key_text(k) {
            // HTTP/2 is exporter-toolkit's default; serve speaks HTTP/1.1 either way.
            "http2" => {
                v.as_bool().ok_or_else(|| {
                    invalid(v, "http_server_config.http2", "must be true or false")
                })?;
            }
            "headers" => {
                let at = "http_server_config.headers";
                for (name, value) in entries(v, at)? {
                    let Some(known) = SETTABLE_HEADERS
                        .iter()
                        .find(|h| h.eq_ignore_ascii_case(key_text(name)))
                    else {
                        return Err(invalid(
                            name,
                            at,
                            format!("only {} can be set", SETTABLE_HEADERS.join(", ")),
                        ));
                    };
                    let at = format!("{at}.{known}");
                    let value = HeaderValue::from_str(string(value, &at)?)
                        .map_err(|_| invalid(value, &at, "not a valid header value"))?;
                    headers.push((HeaderName::from_static_lower(known), value));
                }
            }
            _ => return Err(unknown(k, "in http_server_config")),
        }
    }
    Ok(headers)
}

trait FromStaticLower {
    fn from_static_lower(name: &str) -> HeaderName;
}

impl FromStaticLower for HeaderName {
    fn from_static_lower(name: &str) -> HeaderName {
        HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .expect("SETTABLE_HEADERS are valid names")
    }
}

fn file_error(path: &Path, why: impl std::fmt::Display) -> WebConfigError {
    WebConfigError::File {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// A PEM error in words of its kind: some kinds quote a line of the file.
fn pem_error(path: &Path, e: rustls::pki_types::pem::Error) -> WebConfigError {
    use rustls::pki_types::pem::Error as E;
    let why = match e {
        E::MissingSectionEnd { .. } => "a PEM section without its END line".to_owned(),
        E::IllegalSectionStart { .. } => "a malformed PEM BEGIN line".to_owned(),
        E::Base64Decode(_) => "bad base64 in a PEM section".to_owned(),
        E::NoItemsFound => "no PEM item of the kind needed".to_owned(),
        E::SectionTooLarge => "a PEM section too large".to_owned(),
        E::Io(e) => e.to_string(),
        _ => "not PEM".to_owned(),
    };
    file_error(path, why)
}

/// A certificate or key file's bytes, read as the web config is.
fn pem_file(path: &Path) -> Result<Vec<u8>> {
    Ok(safe_fs::read_trusted(path, MAX_FILE_BYTES)?)
}

impl TlsFiles {
    /// The rustls configuration (ring provider), reading the certificate and keys now (as the
    /// web config is read: the invoker's rights, trusted owners only).
    pub fn server_config(&self) -> Result<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            (TlsVersion::Tls12, &rustls::version::TLS12),
            (TlsVersion::Tls13, &rustls::version::TLS13),
        ]
        .into_iter()
        .filter(|(v, _)| (self.min_version..=self.max_version).contains(v))
        .map(|(_, p)| p)
        .collect();
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&versions)
            .map_err(|e| file_error(&self.cert_file, format!("TLS versions: {e}")))?;
        let builder = match (&self.client_ca_file, self.client_auth) {
            (Some(ca), ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(&pem_file(ca)?) {
                    roots
                        .add(c.map_err(|e| pem_error(ca, e))?)
                        .map_err(|e| file_error(ca, e))?;
                }
                let v = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                );
                let v = if self.client_auth == ClientAuth::VerifyIfGiven {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                builder.with_client_cert_verifier(v.build().map_err(|e| file_error(ca, e))?)
            }
            _ => builder.with_no_client_auth(),
        };
        let certs = CertificateDer::pem_slice_iter(&pem_file(&self.cert_file)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(&self.cert_file, e))?;
        if certs.is_empty() {
            return Err(file_error(&self.cert_file, "no PEM certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_slice(&pem_file(&self.key_file)?)
            .map_err(|e| pem_error(&self.key_file, e))?;
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| file_error(&self.key_file, e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig> {
        WebConfig::parse(text, Path::new("/etc/numatrace"))
    }

    const HASH: &str = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG";

    #[test]
    fn reads_the_exporter_toolkit_format() {
        let c = parse(&format!(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: /k/a.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             min_version: TLS13\nhttp_server_config:\n  http2: false\n  headers:\n    \
             x-frame-options: deny\nbasic_auth_users:\n  prometheus: {HASH}\n  \
             \"2024\": '{HASH}'\n"
        ))
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(t.cert_file, Path::new("/etc/numatrace/a.crt"));
        assert_eq!(t.key_file, Path::new("/k/a.key"));
        assert_eq!(t.client_auth, ClientAuth::RequireAndVerify);
        assert_eq!(t.min_version, TlsVersion::Tls13);
        assert_eq!(c.users["prometheus"], HASH);
        assert_eq!(c.users["2024"], HASH);
        assert_eq!(c.headers[0].0, "x-frame-options");
        assert!(parse("").unwrap().tls.is_none());
        assert!(parse("basic_auth_users:\n").unwrap().users.is_empty());
    }

    #[test]
    fn unknown_and_unsupported_keys_are_named_by_line_only() {
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fle: c\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 4: unknown key in tls_server_config (exporter-toolkit's web config format)"
        );
        let e = parse("basic_auth_user:\n  a: b\n").unwrap_err().to_string();
        assert!(e.starts_with("line 1: unknown key at the top level"), "{e}");
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: []\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 4: tls_server_config.cipher_suites is not supported by numatrace"
        );
    }

    #[test]
    fn inconsistent_settings_are_refused() {
        for (text, what) in [
            ("tls_server_config:\n  cert_file: a\n", "missing key_file"),
            (
                "basic_auth_users:\n  a: plain\n",
                "line 2: basic_auth_users: the user's password is not a bcrypt hash",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
                "line 4: tls_server_config.client_ca_file: set without a client_auth_type",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
                "TLS12 and TLS13 only",
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                "line 3: http_server_config.headers: only Strict",
            ),
            ("- a\n", "line 1: the file: must be a mapping"),
            (
                &format!("basic_auth_users:\n  a: {HASH}\n  a: {HASH}\n"),
                "line 3: basic_auth_users: a user named twice",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(what), "{text:?}: {e}");
        }
    }

    /// Whatever the file holds — a shadow line, a hash, a password, a header value, a
    /// character YAML cannot scan — an error says where and what kind, never the text.
    #[test]
    fn errors_never_quote_the_file() {
        for (text, secret) in [
            ("root:*:20228:0:99999:7:::\n", "20228"),
            ("root:$6$salt$hashhashhash:20228:0:99999:7:::\n", "hashhash"),
            (
                "basic_auth_users:\n  alice: $1$notbcrypt$s3cret\n",
                "s3cret",
            ),
            ("basic_auth_users:\n  s3cret:user: x\n", "s3cret"),
            ("tls_server_config:\n  s3cret: x\n", "s3cret"),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: s3cret\n",
                "s3cret",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: s3cret\n",
                "s3cret",
            ),
            ("http_server_config:\n  headers:\n    s3cret: x\n", "s3cret"),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: \"s3cret\\n\"\n",
                "s3cret",
            ),
            ("s3cret: `x\n", "s3cret"),
            ("a: b\nc: `s3cret\n", "s3cret"),
            ("s3cret\n", "s3cret"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(!e.contains(secret), "{text:?} quoted: {e}");
            assert!(e.starts_with("line "), "{text:?}: {e}");
        }
    }
}

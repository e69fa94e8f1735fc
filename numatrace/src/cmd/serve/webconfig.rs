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
use yaml_rust2::{Yaml, YamlLoader};

#[derive(Debug, Error)]
pub enum WebConfigError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("not YAML: {0}")]
    Yaml(#[from] yaml_rust2::ScanError),
    #[error("unknown key {0} (exporter-toolkit's web config format)")]
    UnknownKey(String),
    #[error("{0} is not supported by numatrace")]
    Unsupported(String),
    #[error("{key}: {why}")]
    Invalid { key: String, why: String },
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

/// The entries of a mapping (a missing or empty value reads as an empty one).
fn entries<'a>(y: &'a Yaml, at: &str) -> Result<Vec<(&'a str, &'a Yaml)>> {
    match y {
        Yaml::Null | Yaml::BadValue => Ok(Vec::new()),
        Yaml::Hash(h) => h
            .iter()
            .map(|(k, v)| match k.as_str() {
                Some(k) => Ok((k, v)),
                None => Err(invalid(at, "keys must be strings")),
            })
            .collect(),
        _ => Err(invalid(at, "must be a mapping")),
    }
}

fn invalid(key: &str, why: impl Into<String>) -> WebConfigError {
    WebConfigError::Invalid {
        key: key.to_owned(),
        why: why.into(),
    }
}

fn string<'a>(y: &'a Yaml, key: &str) -> Result<&'a str> {
    y.as_str().ok_or_else(|| invalid(key, "must be a string"))
}

fn version(y: &Yaml, key: &str) -> Result<TlsVersion> {
    match string(y, key)? {
        "TLS12" => Ok(TlsVersion::Tls12),
        "TLS13" => Ok(TlsVersion::Tls13),
        "TLS10" | "TLS11" => Err(invalid(key, "rustls speaks TLS12 and TLS13 only")),
        other => Err(invalid(key, format!("{other}: expected TLS12 or TLS13"))),
    }
}

impl WebConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base)
    }

    /// Parses the file's text; relative file names are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let docs = YamlLoader::load_from_str(text)?;
        let mut config = Self::default();
        let Some(root) = docs.first() else {
            return Ok(config);
        };
        for (key, value) in entries(root, "the file")? {
            match key {
                "tls_server_config" => config.tls = Some(tls(value, base)?),
                "basic_auth_users" => config.users = users(value)?,
                "http_server_config" => config.headers = http_server(value)?,
                "rate_limit" => return Err(WebConfigError::Unsupported(key.into())),
                _ => return Err(WebConfigError::UnknownKey(key.into())),
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

fn tls(y: &Yaml, base: &Path) -> Result<TlsFiles> {
    let (mut cert, mut key, mut ca) = (None, None, None);
    let mut auth = ClientAuth::None;
    let (mut min, mut max) = (TlsVersion::Tls12, TlsVersion::Tls13);
    for (k, v) in entries(y, "tls_server_config")? {
        let full = format!("tls_server_config.{k}");
        let file = |v: &Yaml| string(v, &full).map(|s| base.join(s));
        match k {
            "cert_file" => cert = Some(file(v)?),
            "key_file" => key = Some(file(v)?),
            "client_ca_file" => ca = Some(file(v)?),
            "client_auth_type" => {
                auth = match string(v, &full)? {
                    "" | "NoClientCert" => ClientAuth::None,
                    "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
                    "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
                    "RequestClientCert" | "RequireAnyClientCert" => {
                        return Err(invalid(
                            &full,
                            "numatrace verifies every client certificate it accepts: use \
                             VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                        ));
                    }
                    other => return Err(invalid(&full, format!("unknown type {other}"))),
                }
            }
            "min_version" => min = version(v, &full)?,
            "max_version" => max = version(v, &full)?,
            "cipher_suites"
            | "curve_preferences"
            | "prefer_server_cipher_suites"
            | "client_allowed_sans"
            | "cert"
            | "key"
            | "client_ca" => return Err(WebConfigError::Unsupported(full)),
            _ => return Err(WebConfigError::UnknownKey(full)),
        }
    }
    let cert_file = cert.ok_or_else(|| invalid("tls_server_config", "missing cert_file"))?;
    let key_file = key.ok_or_else(|| invalid("tls_server_config", "missing key_file"))?;
    match (auth, &ca) {
        (ClientAuth::None, Some(_)) => {
            return Err(invalid(
                "tls_server_config.client_ca_file",
                "set without a client_auth_type that verifies client certificates",
            ));
        }
        (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, None) => {
            return Err(invalid(
                "tls_server_config.client_auth_type",
                "needs client_ca_file to verify client certificates against",
            ));
        }
        _ => {}
    }
    if min > max {
        return Err(invalid(
            "tls_server_config.min_version",
            "above max_version",
        ));
    }
    Ok(TlsFiles {
        cert_file,
        key_file,
        client_auth: auth,
        client_ca_file: ca,
        min_version: min,
        max_version: max,
    })
}

fn users(y: &Yaml) -> Result<BTreeMap<String, String>> {
    let mut users = BTreeMap::new();
    for (user, hash) in entries(y, "basic_auth_users")? {
        let key = format!("basic_auth_users.{user}");
        if user.is_empty() || user.contains(':') {
            return Err(invalid(&key, "a user name is not empty and has no ':'"));
        }
        let hash = string(hash, &key)?;
        hash.parse::<bcrypt::HashParts>()
            .map_err(|e| invalid(&key, format!("not a bcrypt hash ({e})")))?;
        users.insert(user.to_owned(), hash.to_owned());
    }
    Ok(users)
}

fn http_server(y: &Yaml) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let mut headers = Vec::new();
    for (k, v) in entries(y, "http_server_config")? {
        let full = format!("http_server_config.{k}");
        match k {
            // HTTP/2 is exporter-toolkit's default; serve speaks HTTP/1.1 either way.
            "http2" => {
                v.as_bool()
                    .ok_or_else(|| invalid(&full, "must be true or false"))?;
            }
            "headers" => {
                for (name, value) in entries(v, &full)? {
                    let at = format!("{full}.{name}");
                    let Some(known) = SETTABLE_HEADERS
                        .iter()
                        .find(|h| h.eq_ignore_ascii_case(name))
                    else {
                        return Err(invalid(
                            &at,
                            format!("only {} can be set", SETTABLE_HEADERS.join(", ")),
                        ));
                    };
                    let value = HeaderValue::from_str(string(value, &at)?)
                        .map_err(|e| invalid(&at, e.to_string()))?;
                    headers.push((HeaderName::from_static_lower(known), value));
                }
            }
            _ => return Err(WebConfigError::UnknownKey(full)),
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

impl TlsFiles {
    /// The rustls configuration (ring provider), reading the certificate and keys now.
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
            .map_err(|e| invalid("tls_server_config.min_version", e.to_string()))?;
        let builder = match (&self.client_ca_file, self.client_auth) {
            (Some(ca), ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca).map_err(|e| file_error(ca, e))? {
                    roots
                        .add(c.map_err(|e| file_error(ca, e))?)
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
        let certs = CertificateDer::pem_file_iter(&self.cert_file)
            .map_err(|e| file_error(&self.cert_file, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| file_error(&self.cert_file, e))?;
        if certs.is_empty() {
            return Err(file_error(&self.cert_file, "no PEM certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key_file)
            .map_err(|e| file_error(&self.key_file, e))?;
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
             x-frame-options: deny\nbasic_auth_users:\n  prometheus: {HASH}\n"
        ))
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(t.cert_file, Path::new("/etc/numatrace/a.crt"));
        assert_eq!(t.key_file, Path::new("/k/a.key"));
        assert_eq!(t.client_auth, ClientAuth::RequireAndVerify);
        assert_eq!(t.min_version, TlsVersion::Tls13);
        assert_eq!(c.users["prometheus"], HASH);
        assert_eq!(c.headers[0].0, "x-frame-options");
        assert!(parse("").unwrap().tls.is_none());
    }

    #[test]
    fn unknown_and_unsupported_keys_are_named() {
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fle: c\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls_server_config.cert_fle"), "{e}");
        let e = parse("basic_auth_user:\n  a: b\n").unwrap_err().to_string();
        assert!(e.contains("unknown key basic_auth_user"), "{e}");
        let e = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cipher_suites is not supported"), "{e}");
    }

    #[test]
    fn inconsistent_settings_are_refused() {
        for (text, what) in [
            ("tls_server_config:\n  cert_file: a\n", "missing key_file"),
            ("basic_auth_users:\n  a: plain\n", "not a bcrypt hash"),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
                "without a client_auth_type",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
                "TLS12 and TLS13 only",
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                "only Strict",
            ),
            ("- a\n", "must be a mapping"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(what), "{text:?}: {e}");
        }
    }
}

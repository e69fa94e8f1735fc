//! HTTP basic auth against the web config's bcrypt hashes.
//!
//! bcrypt is slow on purpose (tens of milliseconds at cost 10), so nothing may queue behind it:
//! a flood of wrong passwords would otherwise hold every connection slot while it waits, and
//! lock the right password out (issue 33). So
//! - a verification runs off the async threads, one at a time, and a request that finds one
//!   running is refused (401) at once instead of waiting: a flood costs at most one core and
//!   never holds a connection;
//! - a result is remembered, success and failure alike, as an HMAC of user and password under
//!   a key made at start (never the password; up to 256 successes and 4096 failures, then
//!   each set is forgotten at once and rebuilt): a scraper's right password costs one
//!   verification (the users cannot change while serve runs), and a flood repeating a wrong
//!   one costs one too;
//! - a client address whose last guess was wrong waits a second before its next new guess is
//!   checked (answered 401 meanwhile): a guesser from one address keeps bcrypt busy for a few
//!   percent of the time, leaving it free for a credential not yet remembered. Guessers from
//!   many addresses at once can still keep it busy; a remembered credential gets in whatever
//!   they do;
//! - an unknown user is checked against a real hash too, so timing does not tell which users
//!   exist.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use base64::Engine as _;
use hyper::{HeaderMap, header};
use ring::{hmac, rand::SystemRandom};
use tokio::sync::Semaphore;

/// Remembered successes at most (then forgotten all at once; they are re-verified).
const CACHE_MAX: usize = 256;

/// Remembered failures at most (then forgotten all at once).
const REFUSED_MAX: usize = 4096;

/// How long an address whose guess was wrong waits before its next new guess is checked.
const PENALTY: Duration = Duration::from_secs(1);

/// Addresses remembered with a recent failure at most (older ones are forgotten first).
const PENALIZED_MAX: usize = 4096;

pub struct Auth {
    users: BTreeMap<String, String>,
    key: hmac::Key,
    verified: Mutex<HashSet<Vec<u8>>>,
    refused: Mutex<HashSet<Vec<u8>>>,
    /// When each address last failed a verification.
    penalized: Mutex<HashMap<IpAddr, Instant>>,
    bcrypt: Semaphore,
}

impl Auth {
    /// None when there are no users (no auth).
    pub fn new(users: BTreeMap<String, String>) -> anyhow::Result<Option<Arc<Self>>> {
        if users.is_empty() {
            return Ok(None);
        }
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| anyhow::anyhow!("no randomness for the auth cache key"))?;
        Ok(Some(Arc::new(Self {
            users,
            key,
            verified: Mutex::new(HashSet::new()),
            refused: Mutex::new(HashSet::new()),
            penalized: Mutex::new(HashMap::new()),
            bcrypt: Semaphore::new(1),
        })))
    }

    /// Whether the request's `Authorization: Basic` credentials, from `peer`, are a user's.
    #[cfg(test)]
    pub async fn allows(self: &Arc<Self>, headers: &HeaderMap, peer: IpAddr) -> bool {
        self.check(headers, peer, || ()).await.0
    }

    /// As `allows`, and `hold()` is called when bcrypt runs, its result kept until bcrypt is
    /// done and returned: the server marks the one connection being checked so that it is
    /// not evicted mid-check (one at a time, so it can hold one slot at most).
    pub async fn check<H>(
        self: &Arc<Self>,
        headers: &HeaderMap,
        peer: IpAddr,
        hold: impl FnOnce() -> H,
    ) -> (bool, Option<H>) {
        let Some((user, password)) = basic_credentials(headers) else {
            return (false, None);
        };
        let tag = self.tag(&user, &password);
        if self.verified.lock().unwrap().contains(tag.as_ref()) {
            return (true, None);
        }
        if self.refused.lock().unwrap().contains(tag.as_ref()) {
            return (false, None);
        }
        if self
            .penalized
            .lock()
            .unwrap()
            .get(&peer)
            .is_some_and(|t| t.elapsed() < PENALTY)
        {
            return (false, None);
        }
        // An unknown user is verified against some user's hash: the same cost, then refused.
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => (
                false,
                self.users.values().next().cloned().unwrap_or_default(),
            ),
        };
        // One at a time, and no queue: busy means refused now (the client may retry).
        let Ok(_one_at_a_time) = self.bcrypt.try_acquire() else {
            return (false, None);
        };
        let held = hold();
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .is_ok_and(|r| r.unwrap_or(false))
            && known;
        let (cache, max) = if ok {
            (&self.verified, CACHE_MAX)
        } else {
            (&self.refused, REFUSED_MAX)
        };
        {
            let mut c = cache.lock().unwrap();
            if c.len() >= max {
                c.clear();
            }
            c.insert(tag.as_ref().to_vec());
        }
        if !ok {
            let mut p = self.penalized.lock().unwrap();
            if p.len() >= PENALIZED_MAX {
                p.retain(|_, t| t.elapsed() < PENALTY);
                if p.len() >= PENALIZED_MAX {
                    p.clear();
                }
            }
            p.insert(peer, Instant::now());
        }
        (ok, Some(held))
    }

    fn tag(&self, user: &str, password: &str) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_le_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password.as_bytes());
        ctx.sign()
    }
}

/// User and password of an `Authorization: Basic` header.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, n])
    }

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn reads_basic_credentials() {
        // "prometheus:s3cr:et"
        let h = with_auth("Basic cHJvbWV0aGV1czpzM2NyOmV0");
        assert_eq!(
            basic_credentials(&h),
            Some(("prometheus".into(), "s3cr:et".into()))
        );
        assert_eq!(basic_credentials(&with_auth("Bearer abc")), None);
        assert_eq!(basic_credentials(&with_auth("Basic !!!")), None);
        assert_eq!(basic_credentials(&HeaderMap::new()), None);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn right_password_only() {
        let hash = bcrypt::hash("s3cr:et", 4).unwrap();
        let auth = Auth::new([("prometheus".to_owned(), hash)].into())
            .unwrap()
            .unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for (creds, ok) in [
            ("prometheus:s3cr:et", true),
            ("prometheus:s3cr:et", true), // from the cache
            ("prometheus:wrong", false),
            ("other:s3cr:et", false),
            ("prometheus:", false),
        ] {
            let h = with_auth(&format!("Basic {}", b64(creds)));
            assert_eq!(auth.allows(&h, ip(creds.len() as u8)).await, ok, "{creds}");
        }
        assert_eq!(auth.verified.lock().unwrap().len(), 1);
        assert_eq!(auth.refused.lock().unwrap().len(), 3);
    }

    /// While one verification runs, another new credential is refused at once rather than
    /// queued; remembered ones are answered without bcrypt either way.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_running_verification_refuses_new_ones_without_waiting() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let auth = Auth::new([("prom".to_owned(), hash)].into())
            .unwrap()
            .unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let h = |c: &str| with_auth(&format!("Basic {}", b64(c)));
        assert!(auth.allows(&h("prom:right"), ip(1)).await);
        assert!(!auth.allows(&h("prom:wrong"), ip(2)).await);
        let busy = auth.bcrypt.try_acquire().unwrap();
        let t = std::time::Instant::now();
        assert!(
            !auth.allows(&h("prom:new guess"), ip(3)).await,
            "refused while busy"
        );
        assert!(auth.allows(&h("prom:right"), ip(2)).await, "remembered");
        assert!(!auth.allows(&h("prom:wrong"), ip(3)).await, "remembered");
        assert!(t.elapsed() < std::time::Duration::from_millis(500));
        drop(busy);
        // Refused for being busy is not remembered as wrong.
        assert_eq!(auth.refused.lock().unwrap().len(), 1);
    }

    /// An address that just failed waits before its next new guess is checked; other
    /// addresses, and remembered credentials from any address, do not.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_address_waits_before_its_next_guess() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let auth = Auth::new([("prom".to_owned(), hash)].into())
            .unwrap()
            .unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let h = |c: &str| with_auth(&format!("Basic {}", b64(c)));
        assert!(auth.allows(&h("prom:right"), ip(1)).await);
        assert!(!auth.allows(&h("prom:guess 1"), ip(9)).await);
        assert_eq!(auth.refused.lock().unwrap().len(), 1);
        // Not checked, so not remembered either.
        assert!(!auth.allows(&h("prom:guess 2"), ip(9)).await);
        assert_eq!(auth.refused.lock().unwrap().len(), 1);
        assert!(auth.allows(&h("prom:right"), ip(9)).await, "remembered");
        assert!(!auth.allows(&h("prom:guess 3"), ip(8)).await);
        assert_eq!(auth.refused.lock().unwrap().len(), 2, "another address");
        tokio::time::sleep(PENALTY).await;
        assert!(!auth.allows(&h("prom:guess 2"), ip(9)).await);
        assert_eq!(
            auth.refused.lock().unwrap().len(),
            3,
            "checked after the wait"
        );
    }
}

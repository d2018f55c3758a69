//! Calls to peers: every request carries this server's name and the pair's secret and has a
//! time limit; a peer that fails is marked unavailable with exponential back-off
//! ([`Availability`]) and left out of decisions until then, never waited on.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Header naming the calling server.
pub const PEER_HEADER: &str = "X-Koalesce-Peer";

/// Whether a peer is worth asking, with back-off after failures: after the k-th failure in a
/// row it is skipped for `initial × 2^(k-1)` ms, at most `max`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Availability {
    pub failures: u32,
    /// Unavailable until then (Unix ms); 0: available.
    pub until_ms: u64,
    pub last_error: Option<String>,
}

impl Availability {
    pub fn available(&self, now: u64) -> bool {
        now >= self.until_ms
    }

    pub fn failed(&mut self, now: u64, initial_ms: u64, max_ms: u64, error: String) {
        let shift = self.failures.min(30);
        let wait = initial_ms.saturating_mul(1u64 << shift).min(max_ms);
        self.failures = self.failures.saturating_add(1);
        self.until_ms = now.saturating_add(wait);
        self.last_error = Some(error);
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
        self.until_ms = 0;
        self.last_error = None;
    }
}

/// What a call to a peer came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No answer (connection refused, timeout, broken answer): the peer's fault or the
    /// network's; it is backed off.
    Unreachable(String),
    /// The peer answered with an error status and message: it is up, and said no.
    Refused(u16, String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(m) => write!(f, "no answer: {m}"),
            CallError::Refused(code, m) => write!(f, "refused ({code}): {m}"),
        }
    }
}

/// One peer's endpoint as this server calls it.
#[derive(Debug, Clone)]
pub struct PeerClient {
    pub name: String,
    pub url: String,
    secret: String,
    me: String,
    agent: ureq::Agent,
    timeout_ms: u64,
}

/// The slowest transfer of file bytes between peers that is still waited for (bits/s): a body
/// of `n` bytes may take `peer_timeout + n·8 / MIN_RATE_BPS`.
pub const MIN_RATE_BPS: u64 = 256_000;

impl PeerClient {
    pub fn new(me: &str, name: &str, url: &str, secret: String, timeout_ms: u64) -> PeerClient {
        let t = Some(Duration::from_millis(timeout_ms));
        let agent: ureq::Agent = crate::http_agent::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(t)
                .timeout_connect(t)
                .build(),
        );
        PeerClient {
            name: name.to_string(),
            url: url.trim_end_matches('/').to_string(),
            secret,
            me: me.to_string(),
            agent,
            timeout_ms,
        }
    }

    /// A GET of `bytes` bytes of file content from `offset` on (`Range: bytes=offset-` when
    /// not 0), blocking; the answer as it is (the caller checks status and headers). The
    /// headers must come within the peer timeout, the body within that plus `bytes` at
    /// [`MIN_RATE_BPS`].
    pub fn get_bytes(&self, path: &str, offset: u64, bytes: u64) -> Result<ureq::http::Response<ureq::Body>, CallError> {
        let t = Duration::from_millis(self.timeout_ms);
        let body_ms = self
            .timeout_ms
            .saturating_add(bytes.saturating_mul(8).saturating_mul(1000) / MIN_RATE_BPS);
        let agent: ureq::Agent = crate::http_agent::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(t))
                .timeout_recv_response(Some(t))
                .timeout_recv_body(Some(Duration::from_millis(body_ms)))
                .build(),
        );
        let url = format!("{}{path}", self.url);
        let mut req = agent
            .get(&url)
            .header("Authorization", &format!("Bearer {}", self.secret))
            .header(PEER_HEADER, &self.me);
        if offset > 0 {
            req = req.header("Range", &format!("bytes={offset}-"));
        }
        req.call().map_err(|e| CallError::Unreachable(e.to_string()))
    }

    /// Whether `presented` is this pair's secret (constant time).
    pub fn secret_matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq;
        self.secret.len() == presented.len() && bool::from(self.secret.as_bytes().ct_eq(presented.as_bytes()))
    }

    /// A JSON call (blocking). `body` None: GET.
    pub fn call<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: Option<&B>) -> Result<T, CallError> {
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {}", self.secret);
        let result = match body {
            Some(b) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .header(PEER_HEADER, &self.me)
                .send_json(b),
            None => self
                .agent
                .get(&url)
                .header("Authorization", &auth)
                .header(PEER_HEADER, &self.me)
                .call(),
        };
        let mut resp = result.map_err(|e| CallError::Unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(4 << 20)
            .read_to_string()
            .map_err(|e| CallError::Unreachable(format!("reading the answer: {e}")))?;
        if !(200..300).contains(&status) {
            let msg = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or(text);
            // A peer's text reaches users' terminals and job reasons: plain and bounded here,
            // once for every caller.
            return Err(CallError::Refused(status, super::wire::plain(&msg, 2000)));
        }
        serde_json::from_str(&text).map_err(|e| CallError::Unreachable(format!("answer is not the expected JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_up_to_the_maximum_and_resets() {
        let mut a = Availability::default();
        assert!(a.available(0));
        a.failed(1_000, 500, 3_000, "refused".into());
        assert!(!a.available(1_499) && a.available(1_500));
        a.failed(2_000, 500, 3_000, "refused".into());
        assert_eq!(a.until_ms, 3_000);
        a.failed(3_000, 500, 3_000, "refused".into());
        assert_eq!(a.until_ms, 5_000);
        for _ in 0..40 {
            a.failed(10_000, 500, 3_000, "x".into());
        }
        assert_eq!(a.until_ms, 13_000);
        a.succeeded();
        assert!(a.available(0) && a.failures == 0 && a.last_error.is_none());
    }

    #[test]
    fn an_unreachable_peer_is_an_error_within_the_time_limit() {
        // A port nobody listens on: refused at once. A listener that never answers: timeout.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let c = PeerClient::new("me", "p", &url, "s".repeat(16), 300);
        let t = std::time::Instant::now();
        let r: Result<serde_json::Value, _> = c.call::<(), _>("/api/v1/peer/offer", None);
        assert!(matches!(r, Err(CallError::Unreachable(_))), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
        drop(l);
        assert!(c.secret_matches(&"s".repeat(16)));
        assert!(!c.secret_matches("s") && !c.secret_matches(&"t".repeat(16)));
    }
}

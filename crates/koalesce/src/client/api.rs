//! A small blocking client for the server's HTTP API (`docs/server-contract.md`).
//!
//! Every call returns `anyhow::Result`; failures carry an [`ApiError`] that callers can
//! downcast to tell a server answer (HTTP status + the server's `{"error": ...}` message,
//! printed verbatim) from a connection failure (which names the URL).

use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// The server answered with a non-2xx status. `message` is the server's `error` field
    /// (or the raw body when it is not the documented JSON shape).
    Status { status: u16, message: String },
    /// The server could not be reached (connection refused, reset, timeout, ...).
    Connect { url: String, reason: String },
    /// The answer was not what the contract says (bad JSON, missing field).
    Protocol { url: String, reason: String },
}

impl ApiError {
    /// True for failures where retrying later may help (server down or restarting).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Connect { .. } => true,
            ApiError::Status { status, .. } => *status == 502 || *status == 503 || *status == 504,
            ApiError::Protocol { .. } => false,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status { status, message } => {
                write!(f, "server answered HTTP {status}")?;
                if let Some(reason) = http_reason(*status) {
                    write!(f, " {reason}")?;
                }
                write!(f, ": {message}")
            }
            ApiError::Connect { url, reason } => write!(f, "cannot reach the koalesce server at {url}: {reason}"),
            ApiError::Protocol { url, reason } => write!(f, "unexpected answer from {url}: {reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// Whether an `anyhow::Error` is an [`ApiError`] worth retrying.
pub fn error_is_transient(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ApiError>().is_some_and(ApiError::is_transient)
}

fn http_reason(status: u16) -> Option<&'static str> {
    Some(match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return None,
    })
}

// The API's bodies are defined once, in koalesce-api, and shared with the server.
pub use koalesce_api::dto::{is_final_state, ArrayTask, BagStatus, FileInfo, JobDetail, JobSummary, NetworkMatrix, SiteInfo};

/// A connection to one koalesce server.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
    /// Query string every submission carries (`hold=true&dependency=...`).
    submit_query: String,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the server at `url` (e.g. `http://127.0.0.1:8080`), authenticating with
    /// `token` when given. Requests time out after `timeout`.
    pub fn new(url: &str, token: Option<String>, timeout: Duration) -> Self {
        let agent: ureq::Agent = koalesce_server::http_agent::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .user_agent(concat!("koalesce/", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        let mut base = url.trim().trim_end_matches('/').to_string();
        if !base.contains("://") {
            base = format!("http://{base}");
        }
        Client {
            agent,
            base,
            token,
            submit_query: String::new(),
        }
    }

    /// Submissions through this client are held (`submit --hold`) and/or depend on other jobs
    /// (`--dependency afterok:12`, Slurm's syntax).
    pub fn with_submit_options(mut self, hold: bool, dependency: Option<&str>, array: Option<&str>) -> Self {
        let mut q = Vec::new();
        if let Some(a) = array {
            q.push(format!("array={}", encode_path_segment(a)));
        }
        if hold {
            q.push("hold=true".to_string());
        }
        if let Some(d) = dependency {
            q.push(format!("dependency={}", encode_path_segment(d)));
        }
        self.submit_query = q.join("&");
        self
    }

    /// Submissions run in this advance reservation of the user's (the API's `reservation=`).
    pub fn with_reservation(mut self, reservation: Option<&str>) -> Self {
        if let Some(r) = reservation {
            if !self.submit_query.is_empty() {
                self.submit_query.push('&');
            }
            self.submit_query.push_str(&format!("reservation={}", encode_path_segment(r)));
        }
        self
    }

    /// Submissions make one bag of `tasks` tasks (`tasks=N`), at least `min_tasks` of which
    /// must succeed, with KOALESCE_PARAM = `param_start` + `param_increment` × task index.
    pub fn with_bag(mut self, tasks: u32, min_tasks: Option<u32>, param_start: i64, param_increment: i64) -> Self {
        let mut q: Vec<String> = (!self.submit_query.is_empty())
            .then(|| self.submit_query.clone())
            .into_iter()
            .collect();
        q.push(format!("tasks={tasks}"));
        if let Some(k) = min_tasks {
            q.push(format!("min_tasks={k}"));
        }
        q.push(format!("param_start={param_start}&param_increment={param_increment}"));
        self.submit_query = q.join("&");
        self
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    fn finish(&self, url: &str, result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> anyhow::Result<(u16, String)> {
        let mut resp = result.map_err(|e| connect_error(url, e))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| connect_error(url, e))?;
        if (200..300).contains(&status) {
            Ok((status, body))
        } else {
            Err(ApiError::Status {
                status,
                message: error_message(&body),
            }
            .into())
        }
    }

    /// GET `path`, returning the body text of a 2xx answer.
    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let url = self.url(path);
        let mut req = self.agent.get(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Ok(self.finish(&url, req.call())?.1)
    }

    /// GET `path` and parse the JSON answer.
    pub fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        let url = self.url(path);
        let text = self.get_text(path)?;
        parse_json(&url, &text)
    }

    /// A request with a body (POST, PUT) or DELETE; the status and body of a 2xx answer.
    pub fn send(&self, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> anyhow::Result<(u16, String)> {
        let url = self.url(path);
        let builder = match method {
            "POST" => self.agent.post(&url),
            "PUT" => self.agent.put(&url),
            "DELETE" => {
                let mut req = self.agent.delete(&url);
                if let Some(a) = self.auth() {
                    req = req.header("Authorization", a);
                }
                return self.finish(&url, req.call());
            }
            other => anyhow::bail!("unsupported method {other}"),
        };
        let mut req = builder;
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        self.finish(&url, req.send(body))
    }

    /// Sends `body` (JSON) with `method` to `path` and returns the status and body of any
    /// answer, 2xx or not (for answers whose error bodies carry data, such as a reservation's
    /// `t_next_ms`).
    pub fn exchange(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        let url = self.url(path);
        let result = match (method, body) {
            ("GET", _) => {
                let mut req = self.agent.get(&url);
                if let Some(a) = self.auth() {
                    req = req.header("Authorization", a);
                }
                req.call()
            }
            ("DELETE", _) => {
                let mut req = self.agent.delete(&url);
                if let Some(a) = self.auth() {
                    req = req.header("Authorization", a);
                }
                req.call()
            }
            (m, b) => {
                let mut req = if m == "PUT" { self.agent.put(&url) } else { self.agent.post(&url) };
                if let Some(a) = self.auth() {
                    req = req.header("Authorization", a);
                }
                req.header("Content-Type", "application/json")
                    .send(b.map(|v| v.to_string()).unwrap_or_default())
            }
        };
        let mut resp = result.map_err(|e| connect_error(&url, e))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().map_err(|e| connect_error(&url, e))?;
        let v = if text.trim().is_empty() {
            Value::Null
        } else {
            parse_json(&url, &text)?
        };
        Ok((status, v))
    }

    /// The server's URL (`http://host:port`, no trailing slash).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /healthz`.
    pub fn health(&self) -> anyhow::Result<()> {
        self.get_text("/healthz").map(|_| ())
    }

    /// `POST /api/v1/jobs` with a job description; returns the new job's id.
    pub fn submit(&self, toml_text: &str) -> anyhow::Result<u64> {
        let path = if self.submit_query.is_empty() {
            "/api/v1/jobs".to_string()
        } else {
            format!("/api/v1/jobs?{}", self.submit_query)
        };
        let (_, body) = self.send("POST", &path, Some("application/toml"), toml_text.as_bytes())?;
        let url = self.url("/api/v1/jobs");
        let v = parse_json(&url, &body)?;
        v.get("id").and_then(Value::as_u64).ok_or_else(|| {
            ApiError::Protocol {
                url,
                reason: format!("no numeric \"id\" in {body}"),
            }
            .into()
        })
    }

    /// `GET /api/v1/jobs`, every page (of [`JOBS_PAGE`] jobs), raw JSON (one array).
    pub fn jobs_json(&self, state: Option<&str>, all: bool) -> anyhow::Result<Value> {
        let mut query = Vec::new();
        if let Some(s) = state {
            query.push(("state", s.to_string()));
        }
        if all {
            query.push(("all", "true".to_string()));
        }
        self.jobs_pages(&query, None)
    }

    /// `GET /api/v1/jobs?QUERY` from `after` on, following the server's pages (of
    /// [`JOBS_PAGE`] jobs) to the last: raw JSON (one array).
    pub fn jobs_pages(&self, filter: &[(&str, String)], mut after: Option<u64>) -> anyhow::Result<Value> {
        let mut jobs = Vec::new();
        loop {
            let mut query = filter.to_vec();
            query.push(("limit", JOBS_PAGE.to_string()));
            if let Some(a) = after {
                query.push(("after", a.to_string()));
            }
            let (page, next) = self.jobs_query(&query)?;
            match page {
                Value::Array(items) => jobs.extend(items),
                other => return Ok(other),
            }
            match next {
                Some(n) if Some(n) != after => after = Some(n),
                _ => return Ok(Value::Array(jobs)),
            }
        }
    }

    /// `GET /api/v1/jobs?KEY=VALUE&...` (values percent-encoded), raw JSON, and the `after`
    /// of the next page when `limit` cut the list.
    pub fn jobs_query(&self, query: &[(&str, String)]) -> anyhow::Result<(Value, Option<u64>)> {
        let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode_path_segment(v))).collect();
        let path = if q.is_empty() {
            "/api/v1/jobs".to_string()
        } else {
            format!("/api/v1/jobs?{}", q.join("&"))
        };
        let url = self.url(&path);
        let mut resp = self.get_stream(&path)?;
        let next = resp
            .headers()
            .get("x-koalesce-next-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let text = resp
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| connect_error(&url, e))?;
        Ok((parse_json(&url, &text)?, next))
    }

    /// `GET /api/v1/jobs`.
    pub fn jobs(&self, state: Option<&str>, all: bool) -> anyhow::Result<Vec<JobSummary>> {
        typed(&self.url("/api/v1/jobs"), self.jobs_json(state, all)?)
    }

    /// `GET /api/v1/jobs/{id}`, raw JSON.
    pub fn job_json(&self, id: u64) -> anyhow::Result<Value> {
        self.get_json(&format!("/api/v1/jobs/{id}"))
    }

    /// `GET /api/v1/jobs/{id}`.
    pub fn job(&self, id: u64) -> anyhow::Result<JobDetail> {
        typed(&self.url(&format!("/api/v1/jobs/{id}")), self.job_json(id)?)
    }

    /// `POST /api/v1/jobs/{id}/cancel`, raw JSON of the job summary.
    pub fn cancel_json(&self, id: u64) -> anyhow::Result<Value> {
        let path = format!("/api/v1/jobs/{id}/cancel");
        let (_, body) = self.send("POST", &path, None, b"")?;
        if body.trim().is_empty() {
            return Ok(Value::Null);
        }
        parse_json(&self.url(&path), &body)
    }

    /// `POST /api/v1/jobs/{id}/hold` or `.../release`, raw JSON of the job summary.
    pub fn hold_json(&self, id: u64, hold: bool) -> anyhow::Result<Value> {
        let path = format!("/api/v1/jobs/{id}/{}", if hold { "hold" } else { "release" });
        let (_, body) = self.send("POST", &path, None, b"")?;
        parse_json(&self.url(&path), &body)
    }

    /// `GET /api/v1/sites`, raw JSON.
    pub fn sites_json(&self) -> anyhow::Result<Value> {
        self.get_json("/api/v1/sites")
    }

    /// `GET /api/v1/network`, raw JSON.
    pub fn network_json(&self) -> anyhow::Result<Value> {
        self.get_json("/api/v1/network")
    }

    /// `GET /api/v1/sites?blacklisted=true`, raw JSON.
    pub fn blacklisted_sites_json(&self) -> anyhow::Result<Value> {
        self.get_json("/api/v1/sites?blacklisted=true")
    }

    /// `GET /api/v1/sites`.
    pub fn sites(&self) -> anyhow::Result<Vec<SiteInfo>> {
        typed(&self.url("/api/v1/sites"), self.sites_json()?)
    }

    /// `GET /api/v1/files`, every page (the server answers a page at a time), raw JSON.
    pub fn files_json(&self) -> anyhow::Result<Value> {
        self.every_page("/api/v1/files")
    }

    /// `GET /api/v1/reservations`, every page, raw JSON.
    pub fn reservations_json(&self) -> anyhow::Result<Value> {
        self.every_page("/api/v1/reservations")
    }

    /// Every page of a list the server answers a page at a time (`limit`, `after`, and the
    /// next page's cursor in `X-Koalesce-Next-After`), as one JSON array.
    fn every_page(&self, base: &str) -> anyhow::Result<Value> {
        let mut files = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let path = match &after {
                // The server's cursor comes percent-encoded, ready for the query.
                Some(a) => format!("{base}?limit={JOBS_PAGE}&after={a}"),
                None => format!("{base}?limit={JOBS_PAGE}"),
            };
            let url = self.url(&path);
            let mut resp = self.get_stream(&path)?;
            let next = resp
                .headers()
                .get("x-koalesce-next-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let text = resp
                .body_mut()
                .with_config()
                .limit(256 * 1024 * 1024)
                .read_to_string()
                .map_err(|e| connect_error(&url, e))?;
            match parse_json(&url, &text)? {
                Value::Array(items) => files.extend(items),
                other => return Ok(other),
            }
            match next {
                Some(n) if Some(&n) != after.as_ref() => after = Some(n),
                _ => return Ok(Value::Array(files)),
            }
        }
    }

    /// `GET /api/v1/files`.
    pub fn files(&self) -> anyhow::Result<Vec<FileInfo>> {
        typed(&self.url("/api/v1/files"), self.files_json()?)
    }

    /// `POST /api/v1/files`: the server copies the file at `path` (absolute, on the server's
    /// machine; admins, or inside the caller's `[files] import_dirs`) into the storage of
    /// `site` and registers it under `name`. Returns the raw JSON entry.
    pub fn add_file_json(&self, name: &str, path: &str, site: &str) -> anyhow::Result<Value> {
        let req = serde_json::json!({ "name": name, "path": path, "site": site });
        let (_, body) = self.send("POST", "/api/v1/files", Some("application/json"), req.to_string().as_bytes())?;
        if body.trim().is_empty() {
            return Ok(Value::Null);
        }
        parse_json(&self.url("/api/v1/files"), &body)
    }

    /// `PUT /api/v1/files/{name}?site=S&sha256=H`: uploads the local file at `path` (streamed;
    /// its SHA-256 computed first, which the server checks) into the storage of `site`.
    /// Returns the raw JSON entry.
    pub fn upload_file_json(&self, name: &str, path: &std::path::Path, site: &str) -> anyhow::Result<Value> {
        use anyhow::Context;
        let (sha, _) = koalesce_server::transfer::checksum(path).with_context(|| format!("reading {}", path.display()))?;
        let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let route = format!(
            "/api/v1/files/{}?site={}&sha256={sha}",
            encode_path_segment(name),
            encode_path_segment(site)
        );
        let url = self.url(&route);
        let mut req = self.agent.put(&url).header("Content-Type", "application/octet-stream");
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        let (_, body) = self.finish(&url, req.send(&file))?;
        parse_json(&url, &body)
    }

    /// `POST /api/v1/sites/{name}/readmit` (admins): takes a site off the blacklist.
    pub fn readmit_site_json(&self, name: &str) -> anyhow::Result<Value> {
        let path = format!("/api/v1/sites/{}/readmit", encode_path_segment(name));
        let (_, body) = self.send("POST", &path, None, b"")?;
        parse_json(&self.url(&path), &body)
    }

    /// `GET /api/v1/tokens` (`all=true`: every user's, admins only), raw JSON.
    pub fn tokens_json(&self, all: bool) -> anyhow::Result<Value> {
        self.get_json(if all { "/api/v1/tokens?all=true" } else { "/api/v1/tokens" })
    }

    /// `DELETE /api/v1/tokens/{id}`: revokes a token; returns the revoked token's entry.
    pub fn revoke_token_json(&self, id: &str) -> anyhow::Result<Value> {
        let path = format!("/api/v1/tokens/{}", encode_path_segment(id));
        let (_, body) = self.send("DELETE", &path, None, b"")?;
        parse_json(&self.url(&path), &body)
    }

    /// GET `path` answered with a 2xx status: the response, its body not read yet (for
    /// streaming a log or a file). Other statuses are errors as for every call.
    pub fn get_stream(&self, path: &str) -> anyhow::Result<ureq::http::Response<ureq::Body>> {
        let url = self.url(path);
        let mut req = self.agent.get(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        let mut resp = req.call().map_err(|e| connect_error(&url, e))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let body = resp.body_mut().with_config().limit(1 << 20).read_to_string().unwrap_or_default();
        Err(ApiError::Status {
            status,
            message: error_message(&body),
        }
        .into())
    }

    /// `GET /api/v1/jobs/{id}/logs`: component `component`'s stdout (or stderr) from byte
    /// `offset`, or its last `tail` lines, copied to `out`.
    pub fn logs_to(&self, id: u64, q: &LogRequest, out: &mut dyn std::io::Write) -> anyhow::Result<LogChunk> {
        self.logs_of(&format!("/api/v1/jobs/{id}"), q, out)
    }

    /// As [`Client::logs_to`] for the job at `job_path` (`/api/v1/jobs/N` or
    /// `/api/v1/grid/jobs/N`, a grid job wherever it ran).
    pub fn logs_of(&self, job_path: &str, q: &LogRequest, out: &mut dyn std::io::Write) -> anyhow::Result<LogChunk> {
        let mut path = format!(
            "{job_path}/logs?component={}&stream={}",
            q.component,
            if q.stderr { "stderr" } else { "stdout" }
        );
        match q.tail {
            Some(t) => path.push_str(&format!("&tail={t}")),
            None => path.push_str(&format!("&offset={}", q.offset)),
        }
        let url = self.url(&path);
        let mut resp = self.get_stream(&path)?;
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let size = header("x-koalesce-log-size").and_then(|v| v.parse().ok()).unwrap_or(0);
        let lines_cut = header("x-koalesce-lines-cut").and_then(|v| v.parse().ok()).unwrap_or(0);
        let state = header("x-koalesce-job-state").unwrap_or_default();
        let mut reader = resp.body_mut().with_config().limit(u64::MAX).reader();
        let written = std::io::copy(&mut reader, out).map_err(|e| connect_error(&url, ureq::Error::Io(e)))?;
        Ok(LogChunk {
            written,
            size,
            lines_cut,
            state,
        })
    }

    /// `DELETE /api/v1/files/{name}`.
    pub fn remove_file(&self, name: &str) -> anyhow::Result<()> {
        self.send("DELETE", &format!("/api/v1/files/{}", encode_path_segment(name)), None, b"")?;
        Ok(())
    }
}

/// Which part of a component's output [`Client::logs_to`] asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogRequest {
    pub component: u64,
    pub stderr: bool,
    /// From this byte on (ignored with `tail`).
    pub offset: u64,
    /// Only the last this many lines.
    pub tail: Option<usize>,
}

/// What [`Client::logs_to`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    /// Bytes copied.
    pub written: u64,
    /// The log's size when the server answered (the next offset).
    pub size: u64,
    /// Lines before a `tail` answer's.
    pub lines_cut: u64,
    /// The job's state when the server answered.
    pub state: String,
}

/// Jobs per request when the client walks the whole list.
pub const JOBS_PAGE: usize = 1000;

fn typed<T: serde::de::DeserializeOwned>(url: &str, v: Value) -> anyhow::Result<T> {
    serde_json::from_value(v).map_err(|e| {
        ApiError::Protocol {
            url: url.to_string(),
            reason: e.to_string(),
        }
        .into()
    })
}

fn parse_json(url: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| {
        let shown: String = text.chars().take(200).collect();
        ApiError::Protocol {
            url: url.to_string(),
            reason: format!("not JSON ({e}): {shown}"),
        }
        .into()
    })
}

fn connect_error(url: &str, e: ureq::Error) -> anyhow::Error {
    let reason = match &e {
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    };
    ApiError::Connect {
        url: url.to_string(),
        reason,
    }
    .into()
}

/// The `error` field of a `{"error": ...}` body, or the trimmed body itself.
pub fn error_message(body: &str) -> String {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(body) {
        if let Some(e) = map.get("error") {
            return match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
        }
    }
    let t = body.trim();
    if t.is_empty() {
        "(empty body)".to_string()
    } else {
        t.to_string()
    }
}

/// Percent-encodes a logical file name for use as one path segment (names may contain '/').
pub fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_takes_the_error_field_verbatim() {
        assert_eq!(error_message(r#"{"error": "unknown key `foo`"}"#), "unknown key `foo`");
        assert_eq!(error_message("plain text\n"), "plain text");
        assert_eq!(error_message(""), "(empty body)");
    }

    #[test]
    fn status_error_shows_status_and_message() {
        let e = ApiError::Status {
            status: 422,
            message: "components[0].site: no site named 'x'".into(),
        };
        assert_eq!(
            e.to_string(),
            "server answered HTTP 422 Unprocessable Entity: components[0].site: no site named 'x'"
        );
        let e = ApiError::Connect {
            url: "http://127.0.0.1:1/api/v1/jobs".into(),
            reason: "Connection refused".into(),
        };
        assert!(e.to_string().contains("http://127.0.0.1:1/api/v1/jobs"));
        assert!(e.is_transient());
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode_path_segment("17/result.txt"), "17%2Fresult.txt");
        assert_eq!(encode_path_segment("a b"), "a%20b");
    }

    #[test]
    fn job_detail_parses_contract_shape() {
        let v = serde_json::json!({
            "id": 3, "name": "x", "user": "u", "state": "succeeded", "priority": "high",
            "components": [{"index": 0, "processors": 2, "site": "vu", "state": "succeeded",
                             "exit_code": 0, "stdout": "", "stderr": ""}],
            "size": 2, "sites": ["vu"], "submitted_ms": 1000, "started_ms": 2000,
            "finished_ms": 3000, "exit_ok": true,
            "timeline": {"submitted": 1000, "placed": 1100, "claimed": 1200, "started": 2000,
                          "finished": 3000, "ftt_ms": 900, "pgt_ms": 100, "pwt_ms": 800, "twt_ms": 1000},
            "placement_tries": 1, "claiming_tries": 1, "failure": null, "outputs": []
        });
        let d: JobDetail = serde_json::from_value(v).unwrap();
        assert_eq!(d.components.len(), 1);
        assert_eq!(d.timeline.twt_ms, Some(1000));
        assert_eq!(d.components[0].site.as_deref(), Some("vu"));
    }
}

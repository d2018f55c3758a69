//! The transfer client: downloads with resume and verification, uploads with resume,
//! third-party pushes and probes, and the small calls around them (stat, list, delete).
//!
//! Blocking (ureq): every transfer moves file bytes through blocking disk I/O anyway, and a
//! blocking client runs the same in the daemon (`spawn_blocking`), inside an agent that pushes
//! to another, and in tools. Redirects are never followed (a bearer secret must not go to
//! another host) and proxies from the environment are ignored (agents sit on private links).
//!
//! [`http`] holds the URL, header and error-mapping helpers; [`source`] what an upload reads
//! from and the hashing request body.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::Digest;
use ureq::http::StatusCode;
use ureq::SendBody;

use super::partial::{self, Partial};
use super::wire::{
    encode_path, AgentStats, ErrorBody, Expected, ListEntry, Listing, ProbeRequest, PushRequest, PushTarget, TransferReport, UploadReceipt,
    UploadStatus, API, OFFSET_HEADER, SHA256_HEADER,
};
use super::{Endpoint, Role, TransferError};

mod http;
mod source;

pub(crate) use http::parse_content_range;
use http::{bearer, error_message, file_url, header, local_error, protocol, read_json, refused, unreachable};
use source::{hash_reader, Body, Origin, Source};

/// Timeouts of the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Waiting for the headers of an answer (a push's answer gets more, see `push_min_rate_bps`).
    pub response_timeout: Duration,
    /// A stall: no byte read or written for this long ends the transfer (it can resume).
    pub io_timeout: Duration,
    /// A push or probe of `n` bytes may take `response_timeout + n·8 / push_min_rate_bps`
    /// before its source agent must have answered.
    pub push_min_rate_bps: f64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(30),
            push_min_rate_bps: 100_000.0,
        }
    }
}

/// A client of storage agents (cheap to clone; connections are pooled).
#[derive(Clone)]
pub struct AgentClient {
    http: ureq::Agent,
    config: ClientConfig,
}

type Result<T> = std::result::Result<T, TransferError>;

/// Buffer of one read or write while streaming.
const CHUNK: usize = 256 << 10;

impl AgentClient {
    pub fn new(config: ClientConfig) -> Self {
        let http: ureq::Agent = crate::http_agent::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .proxy(None)
                .user_agent(concat!("koalesce-dataplane/", env!("CARGO_PKG_VERSION")))
                .timeout_connect(Some(config.connect_timeout))
                .timeout_recv_response(Some(config.response_timeout))
                .timeout_per_read(Some(config.io_timeout))
                .timeout_per_write(Some(config.io_timeout))
                .build(),
        );
        AgentClient { http, config }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    // ----- small calls -------------------------------------------------------------------

    /// Size and SHA-256 of a file at an agent (`None` when it has none).
    pub fn stat(&self, ep: &Endpoint, path: &str, role: Role) -> Result<Option<Expected>> {
        let url = file_url(ep, path);
        let resp = self
            .http
            .head(&url)
            .header("authorization", bearer(ep))
            .call()
            .map_err(|e| unreachable(role, &url, e))?;
        match resp.status() {
            StatusCode::OK => {
                let size = header(&resp, "content-length").and_then(|v| v.parse().ok());
                let sha = header(&resp, SHA256_HEADER);
                match (size, sha) {
                    (Some(size), Some(sha256)) => Ok(Some(Expected { sha256, size })),
                    _ => Err(protocol(role, &url, "HEAD answer without size or sha256")),
                }
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(refused(role, &url, resp)),
        }
    }

    /// Every file at an agent under `prefix` (a directory; "" for all).
    pub fn list(&self, ep: &Endpoint, prefix: &str, role: Role) -> Result<Vec<ListEntry>> {
        let url = format!("{}{API}/list", ep.url);
        let mut resp = self
            .http
            .get(&url)
            .query("prefix", prefix)
            .header("authorization", bearer(ep))
            .call()
            .map_err(|e| unreachable(role, &url, e))?;
        if resp.status() != StatusCode::OK {
            return Err(refused(role, &url, resp));
        }
        let listing: Listing = read_json(&mut resp, role, &url)?;
        Ok(listing.files)
    }

    /// Deletes a file at an agent; `false` when there was none.
    pub fn delete(&self, ep: &Endpoint, path: &str, role: Role) -> Result<bool> {
        let url = file_url(ep, path);
        let resp = self
            .http
            .delete(&url)
            .header("authorization", bearer(ep))
            .call()
            .map_err(|e| unreachable(role, &url, e))?;
        match resp.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(refused(role, &url, resp)),
        }
    }

    /// The agent's counters.
    pub fn stats(&self, ep: &Endpoint, role: Role) -> Result<AgentStats> {
        let url = format!("{}{API}/stats", ep.url);
        let mut resp = self
            .http
            .get(&url)
            .header("authorization", bearer(ep))
            .call()
            .map_err(|e| unreachable(role, &url, e))?;
        if resp.status() != StatusCode::OK {
            return Err(refused(role, &url, resp));
        }
        read_json(&mut resp, role, &url)
    }

    /// How much of content `sha256` the agent already holds for `path`.
    pub fn upload_status(&self, ep: &Endpoint, path: &str, sha256: &str) -> Result<UploadStatus> {
        let url = format!("{}{API}/uploads/{}", ep.url, encode_path(path));
        let mut resp = self
            .http
            .get(&url)
            .query("sha256", sha256)
            .header("authorization", bearer(ep))
            .call()
            .map_err(|e| unreachable(Role::Destination, &url, e))?;
        if resp.status() != StatusCode::OK {
            return Err(refused(Role::Destination, &url, resp));
        }
        read_json(&mut resp, Role::Destination, &url)
    }

    // ----- download ----------------------------------------------------------------------

    /// Downloads `path` from `src` into `dest` (a local file), resuming what an interrupted
    /// download of the same content left in `dest`'s partial file, and verifying the whole
    /// file's SHA-256 before it appears under `dest`. A resumed download whose result does not
    /// match is retried once from the start before the source is blamed.
    pub fn download(&self, src: &Endpoint, path: &str, dest: &Path, expect: &Expected) -> Result<TransferReport> {
        match self.download_once(src, path, dest, expect) {
            Err(Retry::FromStart) => self.download_once(src, path, dest, expect).map_err(Retry::into_error),
            other => other.map_err(Retry::into_error),
        }
    }

    fn download_once(&self, src: &Endpoint, path: &str, dest: &Path, expect: &Expected) -> std::result::Result<TransferReport, Retry> {
        let part_path = partial_path(dest, &expect.sha256);
        let local = |e: io::Error| Retry::Fail(local_error(&part_path, e));
        let mut part = Partial::open(part_path.clone(), &expect.sha256).map_err(local)?;
        if part.len() > expect.size {
            part.restart().map_err(local)?;
        }
        let resumed_from = part.len();
        let url = file_url(src, path);
        let corrupt = |actual_sha256: String, actual_size: u64| TransferError::SourceCorrupt {
            url: src.url.clone(),
            path: path.to_string(),
            expected_sha256: expect.sha256.clone(),
            expected_size: expect.size,
            actual_sha256,
            actual_size,
        };
        let started = Instant::now();
        if part.len() < expect.size {
            let mut req = self.http.get(&url).header("authorization", bearer(src));
            if resumed_from > 0 {
                req = req.header("range", format!("bytes={resumed_from}-"));
            }
            let mut resp = req.call().map_err(|e| Retry::Fail(unreachable(Role::Source, &url, e)))?;
            let total = match resp.status() {
                StatusCode::OK => {
                    if resumed_from > 0 {
                        part.restart().map_err(local)?;
                    }
                    header(&resp, "content-length").and_then(|v| v.parse::<u64>().ok())
                }
                StatusCode::PARTIAL_CONTENT => {
                    let range = header(&resp, "content-range").and_then(|v| parse_content_range(&v));
                    match range {
                        Some((start, _, total)) if start == resumed_from => Some(total),
                        _ => return Err(Retry::Fail(protocol(Role::Source, &url, "206 answer for another range"))),
                    }
                }
                // The source holds fewer bytes than we already have: another content.
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    part.discard();
                    return Err(Retry::FromStart);
                }
                StatusCode::NOT_FOUND => {
                    return Err(Retry::Fail(TransferError::SourceMissing {
                        url: src.url.clone(),
                        path: path.to_string(),
                    }))
                }
                _ => return Err(Retry::Fail(refused(Role::Source, &url, resp))),
            };
            let announced = header(&resp, SHA256_HEADER);
            if total.is_some_and(|t| t != expect.size) || announced.as_ref().is_some_and(|s| !s.eq_ignore_ascii_case(&expect.sha256)) {
                // The source says itself that it holds other content: do not fetch it.
                part.discard();
                let actual = announced.unwrap_or_else(|| "unknown".into());
                return Err(Retry::Fail(corrupt(actual, total.unwrap_or(0))));
            }
            let mut reader = resp.body_mut().as_reader();
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        // Interrupted: keep what arrived for the next try.
                        let _ = part.checkpoint();
                        return Err(Retry::Fail(TransferError::Unreachable {
                            role: Role::Source,
                            url: url.clone(),
                            reason: format!("download interrupted after {} of {} bytes: {e}", part.len(), expect.size),
                        }));
                    }
                };
                if part.len() + n as u64 > expect.size {
                    part.discard();
                    return Err(Retry::Fail(corrupt("unknown".into(), expect.size + n as u64)));
                }
                part.write_all(&buf[..n]).map_err(local)?;
            }
        }
        let done = part.complete().map_err(local)?;
        let elapsed = started.elapsed();
        if done.len != expect.size || !done.sha256.eq_ignore_ascii_case(&expect.sha256) {
            partial::remove(&done.path);
            if resumed_from > 0 {
                return Err(Retry::FromStart);
            }
            return Err(Retry::Fail(corrupt(done.sha256, done.len)));
        }
        install(&done.path, dest).map_err(|e| Retry::Fail(local_error(dest, e)))?;
        Ok(report(
            expect.size,
            expect.size - resumed_from,
            resumed_from,
            elapsed,
            None,
            done.sha256,
        ))
    }

    // ----- upload ------------------------------------------------------------------------

    /// Uploads the local file `src` to `path` at `dest`, resuming what the agent already holds
    /// of this content. With `expect` the content must be that (else the source is corrupt);
    /// without, the file's SHA-256 is computed first.
    pub fn upload(&self, dest: &Endpoint, path: &str, src: &Path, expect: Option<&Expected>) -> Result<TransferReport> {
        let file = File::open(src).map_err(|e| local_error(src, e))?;
        self.upload_open(dest, path, file, src, expect)
    }

    /// [`Self::upload`] from a file already open (`src` names it in errors): a job's output,
    /// opened without following links, is sent without being opened again by name.
    pub fn upload_open(
        &self,
        dest: &Endpoint,
        path: &str,
        mut file: File,
        src: &Path,
        expect: Option<&Expected>,
    ) -> Result<TransferReport> {
        let size = file.metadata().map_err(|e| local_error(src, e))?.len();
        let expect = match expect {
            Some(e) => e.clone(),
            None => Expected {
                sha256: hash_reader(&mut file).map_err(|e| local_error(src, e))?,
                size,
            },
        };
        let source = Source {
            file,
            origin: Origin::Local(src.to_path_buf()),
        };
        self.send(dest, path, source, size, &expect)
    }

    /// Streams `source` (of `size` bytes) to `path` at `dest` as content `expect`.
    fn send(&self, dest: &Endpoint, path: &str, mut source: Source, size: u64, expect: &Expected) -> Result<TransferReport> {
        if size != expect.size {
            let actual_sha256 = source.hash_all().unwrap_or_else(|_| "unknown".into());
            return Err(source.origin.corrupt(expect, actual_sha256, size));
        }
        let probe = Instant::now();
        let status = self.upload_status(dest, path, &expect.sha256)?;
        let latency_ms = probe.elapsed().as_secs_f64() * 1e3;
        if status.complete {
            return Ok(report(size, 0, size, Duration::ZERO, Some(latency_ms), expect.sha256.clone()));
        }
        let mut offset = status.offset.min(size);
        let mut retried = false;
        loop {
            match self.put_from(dest, path, &mut source, offset, size, expect) {
                Ok((elapsed, receipt)) => {
                    let mut r = report(size, size - offset, offset, elapsed, Some(latency_ms), receipt.sha256);
                    if let Some(bps) = receipt.network_bps {
                        r.throughput_bps = bps;
                    }
                    return Ok(r);
                }
                // The agent holds another offset (a concurrent or superseded upload): once.
                Err(Retry::At(held)) if !retried && held <= size => offset = held,
                // Its partial did not verify and was dropped: send everything, once.
                Err(Retry::FromStart) if !retried && offset > 0 => offset = 0,
                Err(e) => return Err(e.into_error()),
            }
            retried = true;
        }
    }

    /// One PUT of `source[offset..]`; the time the body took and the receiver's receipt.
    fn put_from(
        &self,
        dest: &Endpoint,
        path: &str,
        source: &mut Source,
        offset: u64,
        size: u64,
        expect: &Expected,
    ) -> std::result::Result<(Duration, UploadReceipt), Retry> {
        let url = file_url(dest, path);
        let origin = &source.origin;
        let mut body = match Source::body_from_parts(&mut source.file, offset) {
            Ok(b) => b,
            Err(e) => return Err(Retry::Fail(origin.read_error(dest, e))),
        };
        let mut req = self
            .http
            .put(&url)
            .header("authorization", bearer(dest))
            .header(SHA256_HEADER, expect.sha256.as_str())
            .header("content-length", size - offset)
            .header("expect", "100-continue");
        if offset > 0 {
            req = req.header("content-range", format!("bytes {offset}-{}/{size}", size - 1));
        }
        let result = req.send(SendBody::from_reader(&mut body));
        let elapsed = body.started.map(|t| t.elapsed()).unwrap_or_default();
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => {
                if let Some(err) = body.error.take() {
                    return Err(Retry::Fail(origin.read_error(dest, err)));
                }
                return Err(Retry::Fail(unreachable(Role::Destination, &url, e)));
            }
        };
        let status = resp.status();
        if status.is_success() {
            let receipt: UploadReceipt = read_json(&mut resp, Role::Destination, &url).map_err(Retry::Fail)?;
            if receipt.size != size || !receipt.sha256.eq_ignore_ascii_case(&expect.sha256) {
                return Err(Retry::Fail(protocol(Role::Destination, &url, "the receipt names other content")));
            }
            return Ok((elapsed, receipt));
        }
        let held = header(&resp, OFFSET_HEADER).and_then(|v| v.parse::<u64>().ok());
        if let (StatusCode::CONFLICT, Some(at)) = (status, held) {
            return Err(Retry::At(at));
        }
        match status {
            StatusCode::UNPROCESSABLE_ENTITY => {
                let answer: Option<ErrorBody> = resp.body_mut().with_config().limit(64 << 10).read_json().ok();
                let received = answer
                    .as_ref()
                    .and_then(|a| a.actual_sha256.clone())
                    .unwrap_or_else(|| "unknown".into());
                let complete = body.sent == size - offset;
                let sent_sha = if complete {
                    Some(crate::store::hex(&body.hasher.clone().finalize()))
                } else {
                    None
                };
                match sent_sha {
                    // The sender's own bytes are not the content: the source is corrupt.
                    Some(sha) if !sha.eq_ignore_ascii_case(&expect.sha256) => Err(Retry::Fail(origin.corrupt(expect, sha, size))),
                    // The sender's bytes were right: damaged on the way or in the partial.
                    Some(_) if offset > 0 => Err(Retry::FromStart),
                    _ => Err(Retry::Fail(TransferError::DamagedInTransit {
                        url: dest.url.clone(),
                        path: path.to_string(),
                        expected_sha256: expect.sha256.clone(),
                        actual_sha256: received,
                    })),
                }
            }
            StatusCode::INSUFFICIENT_STORAGE => Err(Retry::Fail(TransferError::DestinationFull {
                url: dest.url.clone(),
                message: error_message(&mut resp),
            })),
            _ => Err(Retry::Fail(refused(Role::Destination, &url, resp))),
        }
    }

    // ----- third-party transfers ------------------------------------------------------------

    /// Asks the agent `src` to push its file `path` to `dest` (whose URL is the one `src`
    /// reaches it by, and whose secret the caller passes along) at `dest_path`. The
    /// destination verifies `expect` and never exposes other content; an interrupted push
    /// resumes when asked again. Errors say whose fault the failure is.
    pub fn push(&self, src: &Endpoint, path: &str, dest: &Endpoint, dest_path: &str, expect: &Expected) -> Result<TransferReport> {
        let req = PushRequest {
            path: path.to_string(),
            sha256: expect.sha256.clone(),
            size: expect.size,
            dest: target(dest, dest_path),
        };
        self.third_party(src, "push", &req, expect.size)
    }

    /// Asks `src` to send `bytes` generated bytes to `dest`'s sink: a throughput sample of
    /// the path from `src` to `dest` that stores nothing.
    pub fn probe(&self, src: &Endpoint, dest: &Endpoint, bytes: u64) -> Result<TransferReport> {
        let req = ProbeRequest {
            bytes,
            dest: target(dest, ""),
        };
        self.third_party(src, "probe", &req, bytes)
    }

    fn third_party(&self, src: &Endpoint, what: &str, req: &impl serde::Serialize, bytes: u64) -> Result<TransferReport> {
        let url = format!("{}{API}/{what}", src.url);
        let budget = self.config.response_timeout + Duration::from_secs_f64(bytes as f64 * 8.0 / self.config.push_min_rate_bps.max(1.0));
        let mut resp = self
            .http
            .post(&url)
            .config()
            .timeout_per_read(None)
            .timeout_recv_response(Some(budget))
            .build()
            .header("authorization", bearer(src))
            .send_json(req)
            .map_err(|e| unreachable(Role::Source, &url, e))?;
        if resp.status() == StatusCode::OK {
            return read_json(&mut resp, Role::Source, &url);
        }
        let status = resp.status().as_u16();
        let body: Option<ErrorBody> = resp.body_mut().with_config().limit(64 << 10).read_json().ok();
        match body {
            Some(ErrorBody { fault: Some(fault), .. }) => Err(fault),
            Some(b) => Err(TransferError::Refused {
                role: Role::Source,
                url,
                status,
                message: b.error,
            }),
            None => Err(TransferError::Refused {
                role: Role::Source,
                url,
                status,
                message: "no error body".into(),
            }),
        }
    }

    /// For the agent's push: send a local file to `target` as `expect`; failures are the
    /// agent's view (its own disk is `SourceUnreadable`/`SourceCorrupt` at `self_url`).
    pub(crate) fn push_local(
        &self,
        self_url: &str,
        file: File,
        local_path: &str,
        target: &Endpoint,
        dest_path: &str,
        expect: &Expected,
    ) -> Result<TransferReport> {
        let size = file.metadata().map(|m| m.len()).map_err(|e| TransferError::SourceUnreadable {
            url: self_url.to_string(),
            path: local_path.to_string(),
            reason: e.to_string(),
        })?;
        let source = Source {
            file,
            origin: Origin::Agent {
                url: self_url.to_string(),
                path: local_path.to_string(),
            },
        };
        self.send(target, dest_path, source, size, expect)
    }

    /// For the agent's probe: `bytes` generated bytes to `target`'s sink.
    pub(crate) fn probe_local(&self, target: &Endpoint, bytes: u64) -> Result<TransferReport> {
        let url = format!("{}{API}/sink", target.url);
        let probe = Instant::now();
        let resp = self.http.head(&url).header("authorization", bearer(target)).call();
        let latency_ms = probe.elapsed().as_secs_f64() * 1e3;
        resp.map_err(|e| unreachable(Role::Destination, &url, e))?;
        let mut body = Body::new(io::repeat(0x6b).take(bytes), 0);
        let resp = self
            .http
            .put(&url)
            .header("authorization", bearer(target))
            .header("content-length", bytes)
            .send(SendBody::from_reader(&mut body))
            .map_err(|e| unreachable(Role::Destination, &url, e))?;
        let elapsed = body.started.map(|t| t.elapsed()).unwrap_or_default();
        if !resp.status().is_success() {
            return Err(refused(Role::Destination, &url, resp));
        }
        Ok(report(bytes, bytes, 0, elapsed, Some(latency_ms), String::new()))
    }
}

/// Why one attempt ended.
enum Retry {
    /// Final.
    Fail(TransferError),
    /// Start over from byte 0 (once).
    FromStart,
    /// The receiver holds this offset (once).
    At(u64),
}

impl Retry {
    fn into_error(self) -> TransferError {
        match self {
            Retry::Fail(e) => e,
            Retry::FromStart => TransferError::Protocol {
                role: Role::Destination,
                url: String::new(),
                message: "the transfer did not verify after a restart from byte 0".into(),
            },
            Retry::At(n) => TransferError::Protocol {
                role: Role::Destination,
                url: String::new(),
                message: format!("the receiver keeps asking for another offset ({n})"),
            },
        }
    }
}

fn target(ep: &Endpoint, path: &str) -> PushTarget {
    PushTarget {
        url: ep.url.clone(),
        token: ep.token.clone(),
        path: path.to_string(),
    }
}

fn report(size: u64, bytes: u64, resumed_from: u64, elapsed: Duration, latency_ms: Option<f64>, sha256: String) -> TransferReport {
    let secs = elapsed.as_secs_f64();
    TransferReport {
        size,
        bytes,
        resumed_from,
        duration_ms: secs * 1e3,
        throughput_bps: if bytes > 0 && secs > 0.0 { bytes as f64 * 8.0 / secs } else { 0.0 },
        latency_ms,
        sha256,
    }
}

/// Where a download of content `sha256` to `dest` keeps its bytes until verified.
pub fn partial_path(dest: &Path, sha256: &str) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.part", &sha256[..sha256.len().min(16)]));
    dest.with_file_name(name)
}

/// Renames a verified file into place and makes the rename durable.
fn install(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)?;
    if let Some(parent) = to.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_keep_contents_apart() {
        let a = partial_path(Path::new("/x/data.bin"), &"a".repeat(64));
        let b = partial_path(Path::new("/x/data.bin"), &"b".repeat(64));
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(Path::new("/x")));
    }
}

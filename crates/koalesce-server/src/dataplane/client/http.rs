//! The HTTP side of the client: agent URLs and the bearer header, reading answers, and
//! mapping failed requests and refusals onto [`TransferError`]s that name the role at fault.

use std::io;
use std::path::Path;

use super::super::wire::{encode_path, ErrorBody, API};
use super::super::{Endpoint, Role, TransferError};
use super::Result;

pub(super) fn bearer(ep: &Endpoint) -> String {
    format!("Bearer {}", ep.token)
}

pub(super) fn file_url(ep: &Endpoint, path: &str) -> String {
    format!("{}{API}/files/{}", ep.url, encode_path(path))
}

pub(super) fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

pub(super) fn local_error(path: &Path, e: io::Error) -> TransferError {
    TransferError::Local {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

pub(super) fn unreachable(role: Role, url: &str, e: ureq::Error) -> TransferError {
    TransferError::Unreachable {
        role,
        url: url.to_string(),
        reason: e.to_string(),
    }
}

pub(super) fn protocol(role: Role, url: &str, message: &str) -> TransferError {
    TransferError::Protocol {
        role,
        url: url.to_string(),
        message: message.to_string(),
    }
}

pub(super) fn error_message(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    let text = resp.body_mut().with_config().limit(64 << 10).read_to_string().unwrap_or_default();
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => b.error,
        Err(_) => text.chars().take(300).collect(),
    }
}

pub(super) fn refused(role: Role, url: &str, mut resp: ureq::http::Response<ureq::Body>) -> TransferError {
    TransferError::Refused {
        role,
        url: url.to_string(),
        status: resp.status().as_u16(),
        message: error_message(&mut resp),
    }
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(resp: &mut ureq::http::Response<ureq::Body>, role: Role, url: &str) -> Result<T> {
    resp.body_mut()
        .with_config()
        .limit(64 << 20)
        .read_json()
        .map_err(|e| protocol(role, url, &format!("unreadable answer: {e}")))
}

/// `bytes START-END/TOTAL` → (start, end, total).
pub(crate) fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let (start, end, total) = (start.trim().parse().ok()?, end.trim().parse().ok()?, total.trim().parse().ok()?);
    (start <= end && end < total).then_some((start, end, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_parsing() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0, 9, 10)));
        assert_eq!(parse_content_range("bytes 5-9/10"), Some((5, 9, 10)));
        assert_eq!(parse_content_range("bytes 5-10/10"), None);
        assert_eq!(parse_content_range("bytes 9-5/10"), None);
        assert_eq!(parse_content_range("bytes */10"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }
}

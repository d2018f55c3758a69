//! Signing in and out, and the defences of every form.
//!
//! - The session cookie (`koalesce_session`) holds the koalesce token itself, `HttpOnly` (no
//!   script reads it), `SameSite=Strict` (no other site's page or link sends it), `Path=/`.
//!   Every request looks the token up in the store, like the API does with a bearer token: a
//!   revoked or expired token signs its pages out at once, and a wrong token never shows data.
//! - Every form carries a CSRF token: for a signed-in viewer, HMAC-SHA256 of the session token
//!   under a key drawn at random when the process starts; for the sign-in form (login CSRF), a
//!   random value that must equal the `koalesce_signin` cookie set with the form (double
//!   submit). Compared in constant time.
//! - Every post must come from this origin: an `Origin` header naming another host, or
//!   `Sec-Fetch-Site: cross-site`, is refused (403) before anything else.

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use hmac::{Hmac, Mac};
use maud::html;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{html_response, secure, W};
use crate::daemon::Shared;
use crate::{now_ms, store};

/// The session cookie.
pub const SESSION_COOKIE: &str = "koalesce_session";
/// The sign-in form's double-submit cookie.
pub const SIGNIN_COOKIE: &str = "koalesce_signin";
/// Largest form body read (a token and a CSRF value are far smaller).
const FORM_LIMIT: usize = 4096;

/// Who is looking: the token's user and role, and the CSRF token of their forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub user: String,
    pub admin: bool,
    pub csrf: String,
}

impl Viewer {
    /// Whether the viewer may see a job of `user`.
    pub fn sees(&self, user: &str) -> bool {
        self.admin || self.user == user
    }
}

fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        let mut filled = 0;
        while filled < k.len() {
            match rustix::rand::getrandom(&mut k[filled..], rustix::rand::GetRandomFlags::empty()) {
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("no randomness for the dashboard's CSRF key: {e}"),
            }
        }
        k
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Random hex (16 bytes).
fn random_hex() -> String {
    let mut b = [0u8; 16];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    hex(&b)
}

/// The CSRF token of a session.
pub fn csrf_for(token: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key()).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(b"koalesce dashboard csrf\0");
    mac.update(token.as_bytes());
    hex(&mac.finalize().into_bytes())
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_string())
}

/// The viewer of a request, if its session cookie holds a valid token.
pub fn viewer(s: &Shared, headers: &HeaderMap) -> Option<Viewer> {
    let token = cookie_value(headers, SESSION_COOKIE)?;
    viewer_of_token(s, &token)
}

/// The viewer a token signs in, if it is valid now.
pub fn viewer_of_token(s: &Shared, token: &str) -> Option<Viewer> {
    if token.is_empty() || token.len() > 200 {
        return None;
    }
    match s.store.check_token(token, now_ms()) {
        Ok(store::TokenCheck::Valid { user, admin }) => Some(Viewer {
            user,
            admin,
            csrf: csrf_for(token),
        }),
        _ => None,
    }
}

/// Refuses a post from another origin (403).
pub fn check_origin(headers: &HeaderMap) -> Result<(), Response> {
    let refuse = |why: &str| Err(super::error_page(StatusCode::FORBIDDEN, None, why));
    if headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("cross-site") {
        return refuse("cross-site form posts are refused");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        let origin = origin.to_str().unwrap_or("");
        let ok = !host.is_empty() && (origin == format!("http://{host}") || origin == format!("https://{host}"));
        if !ok {
            return refuse("form posted from another origin");
        }
    }
    Ok(())
}

/// The fields of an `application/x-www-form-urlencoded` body.
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Checks the origin and the CSRF field of a signed-in viewer's post.
pub fn check_post(v: &Viewer, headers: &HeaderMap, fields: &[(String, String)]) -> Result<(), Response> {
    check_origin(headers)?;
    match field(fields, "csrf") {
        Some(c) if same(c, &v.csrf) => Ok(()),
        _ => Err(super::error_page(
            StatusCode::FORBIDDEN,
            Some(v),
            "the form's CSRF token is missing or wrong: reload the page and try again",
        )),
    }
}

/// Reads a small form body.
pub async fn read_form(body: axum::body::Body) -> Result<Vec<(String, String)>, Response> {
    let b: Bytes = axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|_| super::error_page(StatusCode::PAYLOAD_TOO_LARGE, None, "form too large"))?;
    Ok(form_fields(&b))
}

/// Percent-encodes a path for a query parameter.
pub fn url_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Where to go after signing in: a local path only (no `//host`, no scheme).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') && !n.chars().any(char::is_control) => n.to_string(),
        _ => "/".to_string(),
    }
}

fn signin_page(csrf: &str, next: &str, error: Option<&str>) -> String {
    let body = html! {
        section.signin {
            h1 { "Sign in" }
            p.lead { "Paste a koalesce token (" code { "koalesce token create --user NAME" } ")." }
            @if let Some(e) = error { (koalesce_web::html::notice(e, true)) }
            form method="post" action="/signin" id="signin" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input type="password" name="token" id="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    koalesce_web::html::app_page("Sign in", &[], None, body).into_string()
}

fn signin_cookie(value: &str) -> String {
    Cookie::build((SIGNIN_COOKIE, value.to_string()))
        .path("/signin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .build()
        .to_string()
}

/// `GET /signin`: the form, with a fresh double-submit value.
pub async fn signin_form(headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let fields = form_fields(uri.query().unwrap_or("").as_bytes());
    let next = safe_next(field(&fields, "next"));
    let csrf = cookie_value(&headers, SIGNIN_COOKIE)
        .filter(|c| c.len() == 32)
        .unwrap_or_else(random_hex);
    let mut r = html_response(StatusCode::OK, signin_page(&csrf, &next, None));
    if let Ok(v) = signin_cookie(&csrf).parse() {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `POST /signin`: a valid token sets the session cookie and goes on to `next`; anything else
/// shows the form again with the reason (and no data).
pub async fn signin(AxState(w): AxState<W>, headers: HeaderMap, body: axum::body::Body) -> Response {
    if let Err(r) = check_origin(&headers) {
        return r;
    }
    let fields = match read_form(body).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let next = safe_next(field(&fields, "next"));
    let pre = cookie_value(&headers, SIGNIN_COOKIE).unwrap_or_default();
    let fresh = random_hex();
    let again = |status: StatusCode, msg: &str| {
        let mut r = html_response(status, signin_page(&fresh, &next, Some(msg)));
        if let Ok(v) = signin_cookie(&fresh).parse() {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
        r
    };
    match field(&fields, "csrf") {
        Some(c) if !pre.is_empty() && same(c, &pre) => {}
        _ => return again(StatusCode::FORBIDDEN, "The form expired: sign in again."),
    }
    let token = field(&fields, "token").unwrap_or("").trim().to_string();
    let valid = token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') && viewer_of_token(&w.shared, &token).is_some();
    if !valid {
        return again(StatusCode::UNAUTHORIZED, "Unknown, revoked or expired token.");
    }
    let session = Cookie::build((SESSION_COOKIE, token))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .build()
        .to_string();
    let mut r = secure(Redirect::to(&next).into_response());
    if let Ok(v) = session.parse() {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `POST /signout`: clears the cookie (the token itself stays valid; revoke it with
/// `koalesce token revoke`).
pub async fn signout(AxState(w): AxState<W>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let fields = match read_form(body).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    if let Some(v) = viewer(&w.shared, &headers) {
        if let Err(r) = check_post(&v, &headers, &fields) {
            return r;
        }
    }
    let gone = Cookie::build((SESSION_COOKIE, ""))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::ZERO)
        .build()
        .to_string();
    let mut r = secure(Redirect::to("/signin").into_response());
    if let Ok(v) = gone.parse() {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_depends_on_the_token() {
        assert_eq!(csrf_for("koa_a"), csrf_for("koa_a"));
        assert_ne!(csrf_for("koa_a"), csrf_for("koa_b"));
        assert_eq!(csrf_for("x").len(), 64);
    }

    #[test]
    fn next_is_a_local_path_only() {
        assert_eq!(safe_next(Some("/jobs?state=queued")), "/jobs?state=queued");
        for bad in ["//evil.example/", "https://evil.example/", "/\\evil", "jobs", "/a\nb"] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; koalesce_session=koa_x".parse().unwrap());
        assert_eq!(cookie_value(&h, SESSION_COOKIE).as_deref(), Some("koa_x"));
        assert_eq!(cookie_value(&h, SIGNIN_COOKIE), None);
    }

    #[test]
    fn posts_from_other_origins_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(check_origin(&h).is_err());
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(check_origin(&h).is_err());
    }
}

//! Headless Chromium for tests, driven over the DevTools protocol (feature `browser`).
//!
//! ```no_run
//! # fn main() -> Result<(), koalesce_web::browser::BrowserError> {
//! use std::time::Duration;
//! let mut b = koalesce_web::browser::Browser::launch()?;
//! b.goto("http://127.0.0.1:7878/")?;
//! b.wait_for("#jobs tr", Duration::from_secs(5))?;
//! b.click("a[href='/jobs/1']")?;
//! let text = b.text("h1")?;
//! let png = b.screenshot("jobs")?; // target/screenshots/jobs.png
//! assert!(b.console_errors().is_empty());
//! # Ok(()) }
//! ```
//!
//! Why an own client of ~400 lines instead of `chromiumoxide` or `headless_chrome`: both carry
//! the whole protocol as generated Rust (hundreds of thousands of lines: minutes of compiling
//! on a shared 2-core machine, in every CI run), chromiumoxide needs an async runtime in every
//! test, and headless_chrome starts Chromium with its own set of flags (this machine's closed
//! network needs ours) and can download a browser. The tests need a dozen commands; they are
//! plain JSON over a WebSocket (tungstenite).
//!
//! Chromium runs in a process group of its own with a fresh profile directory; dropping the
//! [`Browser`] kills the group and removes the profile, also when a test fails.

mod cdp;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use cdp::Cdp;

/// What can go wrong driving the browser.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("no Chromium found ({0}); install it (Debian: apt-get install chromium) or set KOALESCE_CHROMIUM")]
    NotFound(String),
    #[error("Chromium did not start: {0}")]
    Launch(String),
    #[error("DevTools protocol: {0}")]
    Protocol(String),
    #[error("timed out after {ms} ms waiting for {what}")]
    Timeout { what: String, ms: u64 },
    #[error("loading {url} failed: {reason}")]
    Navigation { url: String, reason: String },
    #[error("script error: {0}")]
    Script(String),
    #[error("no element matches {0}")]
    NoElement(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, BrowserError>;

/// The flags Chromium gets: headless, no sandbox (tests run as root), and no background
/// connections (this machine's closed network refuses them, which stalls the browser).
pub const FLAGS: [&str; 14] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
];

/// Viewport of the page (CSS px).
pub const VIEWPORT: (u32, u32) = (1280, 900);

/// Time a single protocol command may take (generous: machines running tests are loaded).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Time Chromium may take to start and name its DevTools endpoint.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);

/// A console message or an uncaught exception of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleMessage {
    /// "error", "warning", "log", "info", "debug" (exceptions are "error").
    pub level: String,
    pub text: String,
}

/// A box in CSS px, as `getBoundingClientRect` gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// The Chromium to run: `$KOALESCE_CHROMIUM`, else the first of chromium, chromium-browser,
/// google-chrome on the PATH.
pub fn find_chromium() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KOALESCE_CHROMIUM") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(BrowserError::NotFound(format!("KOALESCE_CHROMIUM={} is not a file", p.display())))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(BrowserError::NotFound(
        "none of chromium, chromium-browser, google-chrome on the PATH".into(),
    ))
}

/// Where screenshots go: `$KOALESCE_SCREENSHOTS`, else `screenshots/` in Cargo's target
/// directory (found from the running test binary: the directory with `CACHEDIR.TAG`), else
/// the temporary directory.
pub fn screenshot_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KOALESCE_SCREENSHOTS") {
        return PathBuf::from(d);
    }
    if let Some(target) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file()).map(Path::to_path_buf))
    {
        return target.join("screenshots");
    }
    std::env::temp_dir().join("koalesce-screenshots")
}

/// A headless Chromium with one page open.
pub struct Browser {
    child: Child,
    cdp: Cdp,
    session: String,
    console: Vec<ConsoleMessage>,
    stderr: Arc<Mutex<Vec<String>>>,
    profile: Option<tempfile::TempDir>,
}

impl Browser {
    /// Starts Chromium ([`find_chromium`], [`FLAGS`], a fresh profile) and opens a blank page.
    pub fn launch() -> Result<Browser> {
        Browser::launch_with(&find_chromium()?)
    }

    /// Starts the given Chromium executable.
    pub fn launch_with(exe: &Path) -> Result<Browser> {
        use std::os::unix::process::CommandExt as _;
        let profile = tempfile::Builder::new().prefix("koalesce-chromium-").tempdir()?;
        let mut child = Command::new(exe)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| BrowserError::Launch(format!("{}: {e}", exe.display())))?;
        // Chromium names its DevTools endpoint on stderr; the rest of stderr is kept for errors.
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr is piped");
        let lines = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(std::result::Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
                if let Ok(mut l) = lines.lock() {
                    if l.len() < 200 {
                        l.push(line);
                    }
                }
            }
        });
        let mut guard = Launching {
            child: Some(child),
            stderr: Arc::clone(&stderr),
        };
        // A Chromium that exits says so at once (its stderr closes); one that is slow to
        // start on a loaded machine gets a generous while.
        let url = match rx.recv_timeout(LAUNCH_TIMEOUT) {
            Ok(url) => url,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BrowserError::Launch(format!(
                    "it exited without naming a DevTools endpoint; stderr: {}",
                    guard.stderr_tail()
                )))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(BrowserError::Launch(format!(
                    "it named no DevTools endpoint within {} s; stderr: {}",
                    LAUNCH_TIMEOUT.as_secs(),
                    guard.stderr_tail()
                )))
            }
        };
        let mut cdp = Cdp::connect(&url, COMMAND_TIMEOUT)?;
        let target = cdp.call(None, "Target.createTarget", json!({ "url": "about:blank" }), COMMAND_TIMEOUT)?;
        let target_id = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached = cdp.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
            COMMAND_TIMEOUT,
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| BrowserError::Protocol("attachToTarget gave no session".into()))?
            .to_string();
        let mut browser = Browser {
            child: guard.child.take().expect("still owned"),
            cdp,
            session,
            console: Vec::new(),
            stderr,
            profile: Some(profile),
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable", "Network.enable"] {
            browser.call(domain, json!({}))?;
        }
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": VIEWPORT.0, "height": VIEWPORT.1, "deviceScaleFactor": 1, "mobile": false }),
        )?;
        Ok(browser)
    }

    /// A command to the page's session.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let session = self.session.clone();
        let r = self.cdp.call(Some(&session), method, params, COMMAND_TIMEOUT);
        self.collect_console();
        r
    }

    /// Moves console messages and exceptions from the event queue to `self.console`.
    fn collect_console(&mut self) {
        let mut keep = std::collections::VecDeque::new();
        while let Some(ev) = self.cdp.events.pop_front() {
            let p = &ev["params"];
            match ev["method"].as_str().unwrap_or("") {
                "Runtime.consoleAPICalled" => {
                    let text: Vec<String> = p["args"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|v| match &v["value"] {
                                    Value::String(s) => s.clone(),
                                    Value::Null => v["description"].as_str().unwrap_or("").to_string(),
                                    other => other.to_string(),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let level = match p["type"].as_str().unwrap_or("log") {
                        "assert" => "error",
                        "warning" => "warning",
                        other => other,
                    };
                    self.console.push(ConsoleMessage {
                        level: level.to_string(),
                        text: text.join(" "),
                    });
                }
                "Runtime.exceptionThrown" => {
                    let d = &p["exceptionDetails"];
                    let text = d["exception"]["description"].as_str().or(d["text"].as_str()).unwrap_or("exception");
                    self.console.push(ConsoleMessage {
                        level: "error".into(),
                        text: text.to_string(),
                    });
                }
                "Log.entryAdded" => {
                    let e = &p["entry"];
                    self.console.push(ConsoleMessage {
                        level: e["level"].as_str().unwrap_or("info").to_string(),
                        text: format!("{} {}", e["text"].as_str().unwrap_or(""), e["url"].as_str().unwrap_or(""))
                            .trim()
                            .to_string(),
                    });
                }
                _ => keep.push_back(ev),
            }
        }
        self.cdp.events = keep;
    }

    /// Everything the page logged so far.
    pub fn console(&self) -> &[ConsoleMessage] {
        &self.console
    }

    /// Console errors, uncaught exceptions and failed loads the page reported so far.
    pub fn console_errors(&mut self) -> Vec<String> {
        self.collect_console();
        self.console.iter().filter(|m| m.level == "error").map(|m| m.text.clone()).collect()
    }

    /// How `confirm()` dialogs are answered (default: accepted).
    pub fn accept_dialogs(&mut self, accept: bool) {
        self.cdp.accept_dialogs = accept;
    }

    /// Loads `url` and waits for its load event (at most 20 s).
    pub fn goto(&mut self, url: &str) -> Result<()> {
        self.cdp.events.retain(|e| e["method"] != "Page.loadEventFired");
        let r = self.call("Page.navigate", json!({ "url": url }))?;
        if let Some(err) = r["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(BrowserError::Navigation {
                url: url.to_string(),
                reason: err.to_string(),
            });
        }
        self.wait_load(url)
    }

    /// Waits for the next load event (after a click that navigates, or a form sent).
    pub fn wait_load(&mut self, what: &str) -> Result<()> {
        let r = self
            .cdp
            .wait_event(
                |e| e["method"] == "Page.loadEventFired",
                &format!("{what} to load"),
                COMMAND_TIMEOUT,
            )
            .map(|_| ());
        self.collect_console();
        r
    }

    /// Evaluates `js` in the page (awaiting a promise) and returns its value as JSON.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": js, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(d) = r.get("exceptionDetails") {
            let text = d["exception"]["description"].as_str().or(d["text"].as_str()).unwrap_or("exception");
            return Err(BrowserError::Script(text.to_string()));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until `js` evaluates to a truthy value, checking every 50 ms.
    pub fn wait_until(&mut self, js: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(&format!("!!({js})"))?;
            if v == Value::Bool(true) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BrowserError::Timeout {
                    what: js.to_string(),
                    ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until an element matches the CSS `selector`.
    pub fn wait_for(&mut self, selector: &str, timeout: Duration) -> Result<()> {
        self.wait_until(&format!("document.querySelector({}) !== null", js_str(selector)), timeout)
    }

    /// Clicks the first element matching `selector` the way a user does: scrolled into view,
    /// the mouse pressed and released at its centre (so what is on top there gets the click).
    pub fn click(&mut self, selector: &str) -> Result<()> {
        let c = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            js_str(selector)
        ))?;
        let (Some(x), Some(y)) = (c[0].as_f64(), c[1].as_f64()) else {
            return Err(BrowserError::NoElement(selector.to_string()));
        };
        for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1 }),
            )?;
        }
        Ok(())
    }

    /// Focuses the element matching `selector`, clears it and types `text` into it.
    pub fn type_into(&mut self, selector: &str, text: &str) -> Result<()> {
        let found = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return false; e.focus(); if ('value' in e) e.value = ''; return true; }})()",
            js_str(selector)
        ))?;
        if found != Value::Bool(true) {
            return Err(BrowserError::NoElement(selector.to_string()));
        }
        self.call("Input.insertText", json!({ "text": text }))?;
        Ok(())
    }

    /// The rendered text (`innerText`) of the first element matching `selector`.
    pub fn text(&mut self, selector: &str) -> Result<String> {
        let v = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : null; }})()",
            js_str(selector)
        ))?;
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| BrowserError::NoElement(selector.to_string()))
    }

    /// The document as the browser has it now (`outerHTML` of the root).
    pub fn html(&mut self) -> Result<String> {
        Ok(self
            .eval("document.documentElement.outerHTML")?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// The current URL.
    pub fn url(&mut self) -> Result<String> {
        Ok(self.eval("location.href")?.as_str().unwrap_or_default().to_string())
    }

    /// The bounding boxes of every element matching `selector`.
    pub fn rects(&mut self, selector: &str) -> Result<Vec<Rect>> {
        let v = self.eval(&format!(
            "Array.from(document.querySelectorAll({})).map(e => {{ const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }})",
            js_str(selector)
        ))?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .map(|r| Rect {
                        x: r[0].as_f64().unwrap_or(0.0),
                        y: r[1].as_f64().unwrap_or(0.0),
                        width: r[2].as_f64().unwrap_or(0.0),
                        height: r[3].as_f64().unwrap_or(0.0),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The browser's cookies for the page (as the protocol gives them: name, value, httpOnly,
    /// sameSite, …).
    pub fn cookies(&mut self) -> Result<Vec<Value>> {
        Ok(self.call("Network.getCookies", json!({}))?["cookies"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// A PNG of the whole page (up to 16,384 px tall) written to `screenshot_dir()/NAME.png`;
    /// returns its path.
    pub fn screenshot(&mut self, name: &str) -> Result<PathBuf> {
        let m = self.call("Page.getLayoutMetrics", json!({}))?;
        let size = &m["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(VIEWPORT.0 as f64).ceil().max(1.0);
        let height = size["height"].as_f64().unwrap_or(VIEWPORT.1 as f64).ceil().clamp(1.0, 16_384.0);
        self.capture(name, 0.0, 0.0, width, height)
    }

    /// A PNG of the first element matching `selector` (e.g. one chart) written to
    /// `screenshot_dir()/NAME.png`; returns its path.
    pub fn screenshot_of(&mut self, selector: &str, name: &str) -> Result<PathBuf> {
        let v = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return null; const r = e.getBoundingClientRect(); \
             return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; }})()",
            js_str(selector)
        ))?;
        let n = |i: usize| v[i].as_f64();
        let (Some(x), Some(y), Some(w), Some(h)) = (n(0), n(1), n(2), n(3)) else {
            return Err(BrowserError::NoElement(selector.to_string()));
        };
        self.capture(name, x, y, w.max(1.0), h.clamp(1.0, 16_384.0))
    }

    fn capture(&mut self, name: &str, x: f64, y: f64, width: f64, height: f64) -> Result<PathBuf> {
        let r = self.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true,
                    "clip": { "x": x, "y": y, "width": width, "height": height, "scale": 1 } }),
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap_or_default())
            .map_err(|e| BrowserError::Protocol(format!("screenshot: {e}")))?;
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir)?;
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{safe}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }

    /// The process id of the browser (its process group has the same id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines Chromium wrote to stderr (for error messages).
    pub fn stderr_tail(&self) -> String {
        tail(&self.stderr)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.child);
        if let Some(p) = self.profile.take() {
            let _ = p.close();
        }
    }
}

/// Kills the browser's whole process group (renderers, GPU and utility processes included)
/// and reaps the browser.
fn kill_group(child: &mut Child) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

fn tail(lines: &Mutex<Vec<String>>) -> String {
    lines
        .lock()
        .map(|l| l.iter().rev().take(8).rev().cloned().collect::<Vec<_>>().join(" | "))
        .unwrap_or_default()
}

/// Owns the child while the browser is being set up: an error on the way kills it.
struct Launching {
    child: Option<Child>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Launching {
    fn stderr_tail(&self) -> String {
        tail(&self.stderr)
    }
}

impl Drop for Launching {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&mut c);
        }
    }
}

/// A JavaScript string literal of `s`.
fn js_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

//! A minimal client of the Chrome DevTools Protocol: JSON messages over one WebSocket to the
//! browser, pages reached through flattened target sessions.
//!
//! Commands are answered by id; everything else is an event, queued for the caller. JavaScript
//! dialogs (`confirm()`) block the page until answered, so they are answered here, as soon as
//! they open, whatever call is waiting.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use super::BrowserError;

pub(crate) struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events not yet looked at, oldest first.
    pub events: VecDeque<Value>,
    /// How to answer `confirm()` / `alert()` dialogs.
    pub accept_dialogs: bool,
}

fn protocol(e: impl std::fmt::Display) -> BrowserError {
    BrowserError::Protocol(e.to_string())
}

impl Cdp {
    /// Connects to the browser's endpoint `ws://HOST:PORT/devtools/browser/ID`.
    pub fn connect(url: &str, timeout: Duration) -> Result<Cdp, BrowserError> {
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| protocol(format!("unexpected DevTools URL {url}")))?;
        let host = rest.split('/').next().unwrap_or(rest);
        let stream = TcpStream::connect(host)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        // Full-page screenshots come as one large message.
        let config = WebSocketConfig::default()
            .max_message_size(Some(512 << 20))
            .max_frame_size(Some(512 << 20));
        let (ws, _) = tungstenite::client::client_with_config(url, stream, Some(config)).map_err(protocol)?;
        // From now on reads wake up often, so that deadlines are kept.
        ws.get_ref().set_read_timeout(Some(Duration::from_millis(50)))?;
        Ok(Cdp {
            ws,
            next_id: 1,
            events: VecDeque::new(),
            accept_dialogs: true,
        })
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<u64, BrowserError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = Value::String(s.to_string());
        }
        self.ws.send(Message::text(msg.to_string())).map_err(protocol)?;
        Ok(id)
    }

    /// The next message, or `None` when `deadline` passes first.
    fn read(&mut self, deadline: Instant) -> Result<Option<Value>, BrowserError> {
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => return serde_json::from_str(t.as_str()).map(Some).map_err(protocol),
                Ok(Message::Binary(b)) => return serde_json::from_slice(&b).map(Some).map_err(protocol),
                Ok(Message::Close(_)) => return Err(protocol("the browser closed the connection")),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(protocol(e)),
            }
        }
    }

    /// Looks at an incoming event: dialogs are answered at once; every event is queued.
    fn on_event(&mut self, ev: Value) -> Result<(), BrowserError> {
        if ev["method"] == "Page.javascriptDialogOpening" {
            let session = ev["sessionId"].as_str().map(str::to_string);
            let accept = self.accept_dialogs;
            self.send(session.as_deref(), "Page.handleJavaScriptDialog", json!({ "accept": accept }))?;
        }
        self.events.push_back(ev);
        Ok(())
    }

    /// Sends a command and waits for its answer (events meanwhile are queued).
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value, timeout: Duration) -> Result<Value, BrowserError> {
        let id = self.send(session, method, params)?;
        let deadline = Instant::now() + timeout;
        loop {
            let Some(msg) = self.read(deadline)? else {
                return Err(BrowserError::Timeout {
                    what: format!("the answer to {method}"),
                    ms: timeout.as_millis() as u64,
                });
            };
            if msg.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(err) = msg.get("error") {
                    return Err(protocol(format!("{method}: {}", err["message"].as_str().unwrap_or("error"))));
                }
                return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
            }
            if msg.get("method").is_some() {
                self.on_event(msg)?;
            }
            // Other answers are to commands nobody waits for (dialog answers).
        }
    }

    /// Waits until an event satisfying `pred` arrives (or is already queued), and removes it.
    pub fn wait_event(&mut self, pred: impl Fn(&Value) -> bool, what: &str, timeout: Duration) -> Result<Value, BrowserError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.events.iter().position(&pred) {
                return Ok(self.events.remove(pos).expect("position is valid"));
            }
            match self.read(deadline)? {
                Some(msg) if msg.get("method").is_some() => self.on_event(msg)?,
                Some(_) => {}
                None => {
                    return Err(BrowserError::Timeout {
                        what: what.to_string(),
                        ms: timeout.as_millis() as u64,
                    })
                }
            }
        }
    }
}

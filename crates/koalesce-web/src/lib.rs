//! # koalesce-web
//!
//! What koalesce shows people in a browser, shared by the dashboard that `koalesce server`
//! serves and the self-contained reports of `koalesce sim --html` / `koalesce experiment
//! --html`, so that the simulator and the live system look the same:
//!
//! - [`chart`]: hand-made SVG charts, pure functions from data to SVG (utilization and queue
//!   lengths over time, Gantt charts of a job and of the machine, per-state and per-site bars,
//!   a bandwidth heat map);
//! - [`views`]: those charts as koalesce shows them (fixed names, units, colours) over plain
//!   job, site and series inputs;
//! - [`html`]: page shells and components rendered with maud;
//! - [`assets`]: the one stylesheet and the one small script, embedded in the binary;
//! - `browser` (feature `browser`, for tests): headless Chromium driven over the DevTools
//!   protocol: load a page, wait for an element, click, type, read the DOM, collect console
//!   errors, take screenshots.
//!
//! The crate depends on no other koalesce crate: callers turn their types (the simulator's
//! records, the API's job details) into the charts' plain inputs.

pub mod assets;
#[cfg(feature = "browser")]
pub mod browser;
pub mod chart;
pub mod html;
pub mod views;

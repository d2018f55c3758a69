//! `koalesce reservations create|list|show|modify|cancel`: advance reservations as a service
//! (001 §2.3) through the REST API.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use koalesce_api::dto::ReservationInfo;
use serde_json::{json, Value};

use super::{format, Connection, Output, OutputArgs};

/// What to reserve: the site, processors, duration and start window.
#[derive(Debug, Args)]
pub struct ReservationRequestArgs {
    /// Site whose processors are reserved.
    #[arg(long, value_name = "SITE")]
    pub site: String,
    /// Processors to reserve.
    #[arg(long, value_name = "N")]
    pub cpus: u32,
    /// How long they are held (`90s`, `2h`, `HH:MM:SS`).
    #[arg(long, value_name = "DURATION")]
    pub duration: String,
    /// Earliest start, from now (`10m`, `1h`; default: now).
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub start: String,
    /// Latest acceptable start, from now (default: the earliest start). The site grants the
    /// earliest start in the window it can.
    #[arg(long, value_name = "DURATION")]
    pub latest: Option<String>,
    /// The site may move the reservation inside [start, latest] later (001 §2.3): later, to
    /// make room for another request, or earlier when processors free up; a job held in it
    /// follows, and `list` shows the moved start. Only sites that move reservations take it
    /// (the local executor); a Slurm site refuses it (422).
    #[arg(long)]
    pub flexible: bool,
}

impl ReservationRequestArgs {
    fn body(&self) -> anyhow::Result<Value> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_millis() as u64;
        let from_now = |flag: &str, v: &str| -> anyhow::Result<u64> {
            Ok(now + koalesce_api::duration::parse_ms(v).with_context(|| format!("--{flag}"))?)
        };
        let earliest = from_now("start", &self.start)?;
        let latest = match &self.latest {
            Some(l) => from_now("latest", l)?,
            None => earliest,
        };
        Ok(json!({
            "site": self.site,
            "processors": self.cpus,
            "duration": self.duration,
            "earliest_start_ms": earliest,
            "latest_start_ms": latest,
            "flexible": self.flexible,
        }))
    }
}

/// `koalesce reservations ...`.
#[derive(Debug, Subcommand)]
pub enum ReservationsCommand {
    /// Ask a site for processors during a time: prints the granted reservation, or exits 1
    /// with "rejected" (and T_next, the earliest later start the site would grant, if any).
    Create {
        #[command(flatten)]
        request: ReservationRequestArgs,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// List your reservations (an admin: everyone's): ID USER SITE CPUS START END STATE
    /// FLEXIBLE (START and END as they are now: a flexible reservation shows where its site
    /// moved it).
    #[command(alias = "ls")]
    List {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Show one reservation.
    Show {
        /// The reservation's id (`R7`).
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Modify = release + create (001 §3.3.2); when the new request is refused the old
    /// reservation is kept if its processors are still free (the answer says so).
    Modify {
        /// The reservation's id (`R7`).
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        request: ReservationRequestArgs,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Cancel a reservation: its processors are free at once.
    Cancel {
        /// The reservation's id (`R7`).
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
}

fn table(rs: &[ReservationInfo]) -> String {
    let mut t = format::Table::new(&["ID", "USER", "SITE", "CPUS", "START", "END", "STATE", "FLEXIBLE"]);
    for r in rs {
        t.push(vec![
            format::escape(&r.id),
            format::escape(&r.user),
            format::escape(&r.site),
            r.processors.to_string(),
            format::format_unix_ms(r.start_ms as i64),
            format::format_unix_ms(r.end_ms as i64),
            format::escape(&r.state),
            if r.flexible { "yes" } else { "no" }.to_string(),
        ]);
    }
    t.render()
}

fn path(id: &str) -> String {
    format!("/api/v1/reservations/{}", super::api::encode_path_segment(id))
}

/// Prints the answer to a create or modify; exit 1 when rejected.
fn answer(status: u16, v: &Value, output: OutputArgs) -> anyhow::Result<ExitCode> {
    let out = Output::from(output);
    if (200..300).contains(&status) {
        let info: ReservationInfo = serde_json::from_value(v["reservation"].clone()).context("reading the reservation")?;
        out.print(v, || {
            Ok(format!(
                "granted {} at {}: {} processor(s) from {} to {}\n",
                info.id,
                format::escape(&info.site),
                info.processors,
                format::format_unix_ms(info.start_ms as i64),
                format::format_unix_ms(info.end_ms as i64)
            ))
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if status != 409 || v.get("answer").and_then(Value::as_str) != Some("rejected") {
        bail!(
            "server answered {status}: {}",
            v.get("error").and_then(Value::as_str).unwrap_or(&v.to_string())
        );
    }
    if out == Output::Json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        let reason = v.get("error").and_then(Value::as_str).unwrap_or("");
        match v.get("t_next_ms").and_then(Value::as_u64) {
            Some(t) => eprintln!("rejected, T_next {} ({})", format::format_unix_ms(t as i64), format::escape(reason)),
            None => eprintln!("rejected ({})", format::escape(reason)),
        }
        if let Some(kept) = v.get("kept").filter(|k| !k.is_null()) {
            let info: ReservationInfo = serde_json::from_value(kept.clone()).context("reading the kept reservation")?;
            eprintln!("the old reservation was kept as {}", info.id);
        }
    }
    Ok(ExitCode::from(1))
}

impl ReservationsCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ReservationsCommand::Create { request, output, conn } => {
                let (status, v) = conn.client().exchange("POST", "/api/v1/reservations", Some(&request.body()?))?;
                answer(status, &v, output)
            }
            ReservationsCommand::Modify { id, request, output, conn } => {
                let (status, v) = conn.client().exchange("PUT", &path(&id), Some(&request.body()?))?;
                answer(status, &v, output)
            }
            ReservationsCommand::List { output, conn } => {
                let v = conn.client().reservations_json()?;
                Output::from(output).print(&v, || {
                    let rs: Vec<ReservationInfo> = serde_json::from_value(v.clone()).context("reading the reservations")?;
                    Ok(table(&rs))
                })?;
                Ok(ExitCode::SUCCESS)
            }
            ReservationsCommand::Show { id, output, conn } => {
                let v = conn.client().get_json(&path(&id))?;
                Output::from(output).print(&v, || {
                    let r: ReservationInfo = serde_json::from_value(v.clone()).context("reading the reservation")?;
                    Ok(table(&[r]))
                })?;
                Ok(ExitCode::SUCCESS)
            }
            ReservationsCommand::Cancel { id, output, conn } => {
                let (status, v) = conn.client().exchange("DELETE", &path(&id), None)?;
                if !(200..300).contains(&status) {
                    bail!(
                        "server answered {status}: {}",
                        v.get("error").and_then(Value::as_str).unwrap_or(&v.to_string())
                    );
                }
                Output::from(output).print(&v, || Ok(format!("cancelled {}\n", format::escape(&id))))?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

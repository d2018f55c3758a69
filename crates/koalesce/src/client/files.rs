//! `koalesce files`: the replica catalogue (add by upload or server path, get with
//! verification, ls, rm).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::{api, download, format};
use crate::client_cmds::{Connection, Output, OutputArgs};

/// `koalesce files ...`: the replica catalogue.
#[derive(Debug, Subcommand)]
pub enum FilesCommand {
    /// Register a file: uploads the local file PATH (streamed, checksummed) into SITE's
    /// storage and registers it as NAME, owned by you. A NAME already registered (yours) gets
    /// one more replica at SITE if PATH has the same content; a different content, or SITE
    /// already holding a replica, answers 409. Names `<job-id>/...` are reserved for job outputs.
    Add {
        /// Logical file name, as jobs name it in `inputs`.
        #[arg(value_name = "NAME")]
        name: String,
        /// The file to upload (with --server-path: a path on the server's machine).
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Site whose storage receives the replica.
        #[arg(long, value_name = "SITE")]
        site: String,
        /// Do not upload: have the server copy PATH from its own machine (admins, and users
        /// inside the directories `[files] import_dirs` gives them).
        #[arg(long)]
        server_path: bool,
        /// `--json`: the server's answer (the catalogue entry).
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Download a file, or a job's output (`JOB/NAME`), streamed and checked against the
    /// server's SHA-256 before it is written to PATH.
    Get {
        /// Logical file name (`koalesce files ls`; a job's outputs are `JOB-ID/NAME`).
        #[arg(value_name = "NAME")]
        name: String,
        /// Where to write it (an existing directory: into it; `-`: standard output). Default:
        /// the last part of NAME in the current directory.
        #[arg(short, long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Print nothing on success.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        conn: Connection,
    },
    /// List the catalogue: name, size, checksum, replica sites.
    Ls {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Remove a file and its replicas from the catalogue (refused while a job needs it).
    Rm {
        /// Logical file name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

impl FilesCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            FilesCommand::Add {
                name,
                path,
                site,
                server_path,
                output,
                conn,
            } => {
                let v = if server_path {
                    let abs = std::path::absolute(&path).with_context(|| format!("resolving {}", path.display()))?;
                    let path_str = abs.to_str().with_context(|| format!("{} is not valid UTF-8", abs.display()))?;
                    conn.client().add_file_json(&name, path_str, &site)?
                } else {
                    conn.client().upload_file_json(&name, &path, &site)?
                };
                Output::from(output).print(&v, || {
                    Ok(match serde_json::from_value::<api::FileInfo>(v.clone()) {
                        Ok(f) if !f.name.is_empty() => format!(
                            "registered {} ({}, sha256 {}) at {}\n",
                            format::escape(&f.name),
                            format::format_bytes(f.size_bytes),
                            format::escape(&f.sha256),
                            format::escape(&f.replicas.join(","))
                        ),
                        _ => format!("registered {} at {}\n", format::escape(&name), format::escape(&site)),
                    })
                })?;
            }
            FilesCommand::Get { name, output, quiet, conn } => {
                let target = match output {
                    Some(p) if p.is_dir() => p.join(download::default_target(&name)),
                    Some(p) => p,
                    None => download::default_target(&name),
                };
                let (bytes, sha) = download::download(&conn.client(), &name, &target)?;
                if !quiet && target != std::path::Path::new("-") {
                    eprintln!(
                        "{} → {} ({}, sha256 {} verified)",
                        format::escape(&name),
                        target.display(),
                        format::format_bytes(bytes),
                        sha
                    );
                }
            }
            FilesCommand::Ls { output, conn } => {
                let v = conn.client().files_json()?;
                Output::from(output).print(&v, || {
                    let files: Vec<api::FileInfo> = serde_json::from_value(v.clone()).context("reading the catalogue")?;
                    Ok(format::files_table(&files))
                })?;
            }
            FilesCommand::Rm { name, conn } => {
                conn.client().remove_file(&name)?;
                println!("removed {}", format::escape(&name));
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

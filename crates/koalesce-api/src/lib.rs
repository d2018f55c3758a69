//! # koalesce-api
//!
//! What the koalesce server and its clients share: the native job description
//! ([`jobdesc::JobDescription`], the TOML of docs/server-contract.md) with its validation and
//! translation to the core's [`koalesce_core::JobSpec`], and the REST API's bodies ([`dto`]).
//! Both sides use these types, so the
//! server, the CLI and the OpenAPI document cannot drift apart.

pub mod broker_fields;
pub mod dto;
pub mod duration;
pub mod fields;
pub mod jobdesc;
pub mod slurm_syntax;
pub mod timing;

pub use jobdesc::{ComponentDescription, DescriptionError, JobDescription, Process, Runner};

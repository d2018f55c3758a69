//! GridWay's matching and priorities (004; GridWay 5's scheduler), as pure policy code the
//! scheduler uses in both drivers.
//!
//! - [`matching`]: REQUIREMENTS and RANK evaluated per site inside the placement scan, with
//!   values cached per (expression, site) and refreshed only where the free count changed.
//! - [`priority`]: the resource priority of 004 Eq. 1 (usage history, fixed site priorities,
//!   the job's rank) and the usage history.
//! - [`policy`]: the `gridway` placement policy built on it.
//! - [`banning`]: banning sites where components failed, for a time growing with each failure.
//! - [`jobprio`]: GridWay's job priority policies (fixed, share, deadline, waiting time) as a
//!   weighted sum: the `queueing = "gridway"` order of a placement scan.
//! - [`cache`]: the bounded, expiring replica-catalogue cache of 004 §3.3, for the daemon.
//! - [`config`]: the parameters, with GridWay's defaults.
//!
//! # How REQUIREMENTS and RANK combine with KOALA's policies
//!
//! - **REQUIREMENTS** restrict the sites *every* policy may use for the job's components: a
//!   site where they do not hold has no capacity in the policy's view (fixed components at such
//!   a site cannot be placed). They are evaluated against the processors the scan still has at
//!   the site, so a load-dependent requirement (`QUEUE_FREENODECOUNT >= 8`) sees the placements
//!   the same scan made before.
//! - A job with a **RANK** and no policy is placed by the `gridway` policy: GridWay users
//!   expect their rank to choose the site ("the job is submitted to the resource with highest
//!   rank", 004 §2.1), and GridWay's own scheduler ranks by the resource priority of Eq. 1,
//!   whose P_rank is the job's RANK.
//! - A job that names a KOALA policy (`wf`, `cf`, `cm`, `fcm`) gets that policy — the user
//!   chose it — and its RANK breaks the policy's ties: between sites with equally many idle
//!   processors (WF, CM, FCM), between file sites with room (CF, before the alphabetical order),
//!   and between pairs of equal estimated transfer time (CF). So `policy = "cf"` with
//!   `rank = CPU_MHZ` still goes close to the files, and to the fastest of the equally close.
//! - `policy = "gridway"` without a rank ranks by fixed priorities and usage only.
//!
//! Banned sites (the failure-rate policy) and sites of fixed priority 0 are left out for jobs
//! placed by the `gridway` policy; KOALA's policies keep KOALA's blacklisting.
//!
//! # Where the data functions' answers come from
//!
//! CLOSE_DATA, HAS_CLOSE_DATA and SIZE_CLOSE_DATA read the core's replica catalogue (the
//! information service's replica provider, 003 §3.1), a site's own storage being its close
//! storage element. The simulator owns that catalogue and writes it directly. The daemon keeps
//! it current from its store; for the files the queued jobs' expressions name
//! ([`crate::Scheduler::expression_files`]) it asks its catalogue through one
//! [`CatalogueCache`] — one query per file per age limit, as 004 §3.3 — and writes the answers
//! with [`crate::Scheduler::set_catalogue_entry`]. Any change to the catalogue invalidates the
//! cached data-function answers of the scan.
//!
//! # The job's environment
//!
//! At launch a component of a job with REQUIREMENTS or RANK gets GW_CLOSE_SE and
//! GW_REMOTE_FILES_i (004 §3.2), computed by [`crate::Scheduler::gridway_environment`] from its
//! site and the catalogue at that moment.

pub mod banning;
pub mod cache;
pub mod config;
pub mod jobprio;
pub mod matching;
pub mod policy;
pub mod priority;

pub use banning::BanTable;
pub use cache::{CacheStats, CatalogueCache};
pub use config::{BanningConfig, GridwayConfig, JobPriorityConfig, Queueing, ResourcePriorityConfig};
pub use matching::{MatchStats, Matcher};
pub use policy::GridwayPolicy;
pub use priority::{resource_priorities, Candidate, UsageHistory};

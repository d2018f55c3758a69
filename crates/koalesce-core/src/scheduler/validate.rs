//! Validation of a submitted job against the grid (every error names what is wrong).

use crate::model::{JobSpec, SiteId};

use super::{Scheduler, SubmitError};

impl Scheduler {
    /// A job into a reservation: one component at the reservation's site, no larger than it.
    fn validate_held(&self, spec: &JobSpec, h: &crate::model::HeldReservation) -> Result<(), String> {
        let r = &h.id;
        let Some(site) = self.sites.get(h.site.index()) else {
            return Err(format!("reservation '{r}': its site does not exist"));
        };
        if spec.flexible.is_some() || spec.components.len() != 1 || spec.min_components.is_some() {
            return Err(format!(
                "reservation '{r}': a job in a reservation has exactly one component (it runs on the reservation's processors at '{}')",
                site.name
            ));
        }
        let c = &spec.components[0];
        if c.fixed_site.is_some_and(|s| s != h.site) {
            return Err(format!(
                "reservation '{r}' is at site '{}', the component names another site",
                site.name
            ));
        }
        if c.processors > h.processors {
            return Err(format!(
                "reservation '{r}' holds {} processor(s), the job asks for {}",
                h.processors, c.processors
            ));
        }
        if h.end <= h.start {
            return Err(format!("reservation '{r}': it ends before it starts"));
        }
        Ok(())
    }

    pub(super) fn validate(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        self.validate_shape(spec)?;
        self.validate_inputs(spec)
    }

    /// Every input file is in the catalogue with a replica.
    pub(super) fn validate_inputs(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        let job = || spec.name.clone();
        for f in &spec.input_files {
            match self.catalogue.get(f) {
                None => {
                    return Err(SubmitError::UnknownFile {
                        job: job(),
                        file: f.clone(),
                    })
                }
                Some(e) if e.replicas.is_empty() => {
                    return Err(SubmitError::NoReplica {
                        job: job(),
                        file: f.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Everything but the input files.
    pub(super) fn validate_shape(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        let job = || spec.name.clone();
        let largest = self.sites.iter().map(|s| s.processors).max().unwrap_or(0);
        if let Some(flex) = &spec.flexible {
            let total_procs: u32 = self.sites.iter().map(|s| s.processors).sum();
            let reason = if flex.total == 0 {
                Some("total must be positive".to_string())
            } else if flex.max_components == 0 {
                Some("max_components must be at least 1".to_string())
            } else if flex.total > total_procs {
                Some(format!("total {} exceeds the grid's {} processors", flex.total, total_procs))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(SubmitError::InvalidFlexible { job: job(), reason });
            }
        } else if spec.components.is_empty() {
            return Err(SubmitError::NoComponents { job: job() });
        }
        for (i, c) in spec.components.iter().enumerate() {
            if c.processors == 0 {
                return Err(SubmitError::ZeroProcessors { job: job(), component: i });
            }
            match c.fixed_site {
                Some(site) => {
                    let Some(s) = self.sites.get(site.index()) else {
                        return Err(SubmitError::UnknownSite {
                            job: job(),
                            component: i,
                            site,
                        });
                    };
                    if c.processors > s.processors {
                        return Err(SubmitError::FixedSiteTooSmall {
                            job: job(),
                            component: i,
                            site: s.name.clone(),
                            processors: c.processors,
                            capacity: s.processors,
                        });
                    }
                }
                None if c.processors > largest => {
                    return Err(SubmitError::ComponentTooLarge {
                        job: job(),
                        component: i,
                        processors: c.processors,
                        largest,
                    });
                }
                None => {}
            }
        }
        if spec.flexible.is_none() {
            let capacity: u64 = self.sites.iter().map(|s| s.processors as u64).sum();
            // A bag needs only its k smallest components to fit.
            let mut sizes: Vec<u64> = spec.components.iter().map(|c| c.processors as u64).collect();
            sizes.sort_unstable();
            let needed = spec.min_components.map_or(sizes.len(), |k| (k as usize).min(sizes.len()));
            let processors: u64 = sizes[..needed].iter().sum();
            if processors > capacity {
                return Err(SubmitError::JobTooLarge {
                    job: job(),
                    processors,
                    capacity,
                });
            }
            for (i, site) in self.sites.iter().enumerate() {
                let fixed: u64 = spec
                    .components
                    .iter()
                    .filter(|c| c.fixed_site == Some(SiteId(i as u32)))
                    .map(|c| c.processors as u64)
                    .sum();
                if fixed > site.processors as u64 {
                    return Err(SubmitError::FixedSiteOverbooked {
                        job: job(),
                        site: site.name.clone(),
                        processors: fixed,
                        capacity: site.processors,
                    });
                }
            }
        }
        if let Some(min) = spec.min_components {
            if min == 0 || min as usize > spec.components.len() {
                return Err(SubmitError::InvalidMinComponents {
                    job: job(),
                    min,
                    components: spec.components.len(),
                });
            }
        }
        // A feature no site publishes can never be had (Slurm: "Invalid feature specification").
        for expr in [&spec.requirements, &spec.rank].into_iter().flatten() {
            let features = expr
                .software()
                .iter()
                .filter_map(|t| t.strip_prefix(crate::expr::FEATURE_TAG_PREFIX));
            for f in features {
                if !self
                    .sites
                    .iter()
                    .any(|s| s.attributes.features.iter().any(|o| o.eq_ignore_ascii_case(f)))
                {
                    return Err(SubmitError::Invalid {
                        job: job(),
                        reason: format!("Invalid feature specification: no site has feature '{f}'"),
                    });
                }
            }
        }
        crate::broker::validate_preferences(&spec.preferences).map_err(|reason| SubmitError::InvalidPreferences { job: job(), reason })?;
        if let Some(h) = &spec.preferences.held_reservation {
            self.validate_held(spec, h)
                .map_err(|reason| SubmitError::Invalid { job: job(), reason })?;
        }
        Ok(())
    }
}

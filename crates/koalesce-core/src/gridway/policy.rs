//! The `gridway` placement policy: GridWay's dispatch rule (`gw_sched_dispatch`) applied to
//! each component of a job.
//!
//! The scan gives the policy the job's candidate sites — those meeting its REQUIREMENTS, not
//! banned, with a fixed priority above 0 (every other site has no capacity in its view) — and
//! each candidate's resource priority (004 Eq. 1, [`super::priority`]) as the context's
//! preference. Components, largest first, each go to the candidate of highest priority that
//! still has room (ties: more free processors, then the lowest site id), as GridWay sends a job
//! to the first host of its priority-sorted list with free slots. Input files come from their
//! fastest replica. The priorities are those of the start of the placement try: the components
//! of one job all see the same ranking.

use crate::model::PolicyKind;
use crate::placement::{place_one_by_one, Capacity, ComponentPlacement, PlacementContext, PlacementPolicy, PlacementRequest};

/// GridWay's resource prioritization as a placement policy.
#[derive(Debug, Default, Clone)]
pub struct GridwayPolicy;

impl PlacementPolicy for GridwayPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Gridway
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        place_one_by_one(req, capacity, ctx, |trial, index, procs, needs| {
            let site = trial
                .sites()
                .filter(|&s| trial.available(s) > 0 && trial.fits(s, procs))
                .max_by_key(|&s| (ctx.preference(s), trial.available(s), std::cmp::Reverse(s)))?;
            Some(ctx.component(index, procs, site, needs, None))
        })
    }
}

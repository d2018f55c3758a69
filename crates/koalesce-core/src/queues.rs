//! The four priority placement queues and their weighted round-robin selection (003 §4.2.1).

use std::collections::VecDeque;

use crate::config::QueueWeights;
use crate::model::{JobId, Priority};

/// Four FCFS queues, one per priority, and the cursor of the weighted round-robin.
///
/// The round is: N_h times { super-high n1 times, high n2 times }, then N_l times { low n3
/// times, super-low n4 times }. [`PlacementQueues::next_queue`] walks this cyclic schedule and
/// skips empty queues.
#[derive(Debug, Clone)]
pub struct PlacementQueues {
    queues: [VecDeque<JobId>; 4],
    schedule: Vec<Priority>,
    cursor: usize,
    /// Jobs pushed so far (a scan checks whether any was pushed while it ran).
    pushes: u64,
}

impl PlacementQueues {
    pub fn new(weights: QueueWeights) -> Self {
        let mut schedule = Vec::new();
        for _ in 0..weights.n_high_group {
            schedule.extend(std::iter::repeat_n(Priority::SuperHigh, weights.n1 as usize));
            schedule.extend(std::iter::repeat_n(Priority::High, weights.n2 as usize));
        }
        for _ in 0..weights.n_low_group {
            schedule.extend(std::iter::repeat_n(Priority::Low, weights.n3 as usize));
            schedule.extend(std::iter::repeat_n(Priority::SuperLow, weights.n4 as usize));
        }
        if schedule.is_empty() {
            schedule = Priority::ALL.to_vec();
        }
        PlacementQueues {
            queues: Default::default(),
            schedule,
            cursor: 0,
            pushes: 0,
        }
    }

    pub fn push(&mut self, priority: Priority, job: JobId) {
        self.queues[priority.rank()].push_back(job);
        self.pushes += 1;
    }

    /// How many jobs were pushed so far.
    pub fn pushes(&self) -> u64 {
        self.pushes
    }

    /// Removes a job wherever it is; returns whether it was queued.
    pub fn remove(&mut self, job: JobId) -> bool {
        for q in &mut self.queues {
            if let Some(pos) = q.iter().position(|&j| j == job) {
                q.remove(pos);
                return true;
            }
        }
        false
    }

    /// The queue the next scan should walk, advancing the round-robin; `None` when all are empty.
    pub fn next_queue(&mut self) -> Option<Priority> {
        if self.is_empty() {
            return None;
        }
        loop {
            let p = self.schedule[self.cursor];
            self.cursor = (self.cursor + 1) % self.schedule.len();
            if !self.queues[p.rank()].is_empty() {
                return Some(p);
            }
        }
    }

    pub fn queue(&self, priority: Priority) -> &VecDeque<JobId> {
        &self.queues[priority.rank()]
    }

    /// Replaces the content of one queue (after a scan removed placed jobs).
    pub fn set_queue(&mut self, priority: Priority, jobs: VecDeque<JobId>) {
        self.queues[priority.rank()] = jobs;
    }

    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    pub fn iter(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queues.iter().flat_map(|q| q.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(weights: QueueWeights, filled: &[Priority], n: usize) -> Vec<Priority> {
        let mut q = PlacementQueues::new(weights);
        for (i, &p) in filled.iter().enumerate() {
            q.push(p, JobId(i as u64));
        }
        (0..n).map(|_| q.next_queue().unwrap()).collect()
    }

    #[test]
    fn all_weights_one_is_plain_round_robin() {
        use Priority::*;
        let got = selection(QueueWeights::default(), &Priority::ALL, 8);
        assert_eq!(got, vec![SuperHigh, High, Low, SuperLow, SuperHigh, High, Low, SuperLow]);
    }

    #[test]
    fn seed_5_2_weights_scan_high_twice_per_low() {
        use Priority::*;
        // 003 §5.2.1: N_h = N_l = 1, n1 = 1, n2 = 2, n3 = n4 = 1; only high and low jobs.
        let w = QueueWeights {
            n_high_group: 1,
            n_low_group: 1,
            n1: 1,
            n2: 2,
            n3: 1,
            n4: 1,
        };
        let got = selection(w, &[High, Low], 6);
        assert_eq!(got, vec![High, High, Low, High, High, Low]);
    }

    #[test]
    fn higher_group_weight_two() {
        use Priority::*;
        let w = QueueWeights {
            n_high_group: 2,
            ..QueueWeights::default()
        };
        let got = selection(w, &Priority::ALL, 6);
        assert_eq!(got, vec![SuperHigh, High, SuperHigh, High, Low, SuperLow]);
    }

    #[test]
    fn empty_queues_are_skipped_and_none_when_all_empty() {
        let mut q = PlacementQueues::new(QueueWeights::default());
        assert_eq!(q.next_queue(), None);
        q.push(Priority::SuperLow, JobId(1));
        assert_eq!(q.next_queue(), Some(Priority::SuperLow));
        assert_eq!(q.next_queue(), Some(Priority::SuperLow));
        assert!(q.remove(JobId(1)));
        assert_eq!(q.next_queue(), None);
    }
}

//! Where an embed's time goes, stage by stage (`ternflow bench --profile`): a [`Stages`] that
//! reads the monotonic clock at every mark of the forward pass and adds the time since the last
//! one to the stage that just ended. Native only (wasm32 has no `std::time::Instant`); the
//! vectors are the same as without it.

use std::time::{Duration, Instant};

use crate::forward::{Stage, Stages};

/// Time per stage over every embed profiled.
#[derive(Debug, Clone)]
pub struct Profile {
    last: Instant,
    totals: [Duration; Stage::ALL.len()],
    /// Embeds profiled.
    pub embeds: u64,
    /// Tokens they ran over (`[CLS]` and `[SEP]` included).
    pub tokens: u64,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            last: Instant::now(),
            totals: [Duration::ZERO; Stage::ALL.len()],
            embeds: 0,
            tokens: 0,
        }
    }
}

impl Profile {
    /// Starts the clock of the next stage (the next embed's tokenizer).
    pub fn start(&mut self) {
        self.last = Instant::now();
    }

    /// Every stage with its total time, in pass order.
    #[must_use]
    pub fn split(&self) -> Vec<(Stage, Duration)> {
        Stage::ALL
            .iter()
            .map(|&s| (s, self.totals[s as usize]))
            .collect()
    }

    /// The time of all stages.
    #[must_use]
    pub fn total(&self) -> Duration {
        self.totals.iter().sum()
    }
}

impl Stages for Profile {
    fn end(&mut self, stage: Stage) {
        let now = Instant::now();
        self.totals[stage as usize] += now - self.last;
        self.last = now;
    }
}

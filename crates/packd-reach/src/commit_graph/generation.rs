//! Generation numbers, as git's `compute_topological_levels` and `compute_generation_numbers`
//! define them:
//!
//! ```text
//! topological level (v1, in CDAT)  1 + the largest parent level (1 for a root),
//!                                  at most 0x3fffffff
//! corrected commit date (v2, GDA2) max(date, 1 + the largest parent corrected date)
//!                                  (1 + the parents' for a commit dated 0), in u64 arithmetic
//! GDA2 stores corrected - date: above 0x7fffffff it goes to GDO2 as a u64
//! ```
//!
//! Both are computed parents first with an explicit stack (no recursion: histories are deep).

use super::{CommitGraphError, Commits};

/// git's largest topological level.
pub const MAX_TOPO_LEVEL: u32 = 0x3fff_ffff;
/// The largest corrected-date offset GDA2 holds; larger ones overflow into GDO2.
pub const MAX_GDA2_OFFSET: u64 = 0x7fff_ffff;

/// Each commit's topological level and, for generation v2, its corrected commit date.
#[derive(Debug)]
pub struct Generations {
    levels: Vec<u32>,
    corrected: Option<Vec<u64>>,
}

impl Generations {
    /// Computes the levels, and the corrected dates when `v2`. A history that loops (possible
    /// only with damaged objects) is an error naming a commit on the loop.
    pub fn compute(commits: &Commits, v2: bool) -> Result<Generations, CommitGraphError> {
        let n = commits.len();
        // 0: not reached yet, 1: on the stack, 2: done.
        let mut state = vec![0u8; n];
        let mut levels = vec![0u32; n];
        let mut corrected = vec![0u64; if v2 { n } else { 0 }];
        // (commit, how many of its parents are done).
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            state[start] = 1;
            stack.push((start as u32, 0));
            while let Some(top) = stack.last_mut() {
                let (pos, next) = (top.0 as usize, top.1 as usize);
                let parents = commits.parents(pos);
                if let Some(&p) = parents.get(next) {
                    top.1 += 1;
                    match state[p as usize] {
                        0 => {
                            state[p as usize] = 1;
                            stack.push((p, 0));
                        }
                        1 => {
                            return Err(CommitGraphError::BadCommit {
                                id: commits.ids()[p as usize],
                                child: None,
                                what: "its history loops back to it (damaged objects)".into(),
                            })
                        }
                        _ => {}
                    }
                    continue;
                }
                stack.pop();
                state[pos] = 2;
                let max_level = parents
                    .iter()
                    .map(|&p| levels[p as usize])
                    .max()
                    .unwrap_or(0);
                levels[pos] = max_level.min(MAX_TOPO_LEVEL - 1) + 1;
                if v2 {
                    let mut max = parents
                        .iter()
                        .map(|&p| corrected[p as usize])
                        .max()
                        .unwrap_or(0);
                    let date = commits.date(pos);
                    if date != 0 && date > max {
                        max = date - 1;
                    }
                    corrected[pos] = max.wrapping_add(1);
                }
            }
        }
        Ok(Generations {
            levels,
            corrected: v2.then_some(corrected),
        })
    }

    /// The topological level of the commit at `pos`.
    pub fn level(&self, pos: usize) -> u32 {
        self.levels[pos]
    }

    /// The corrected commit date of the commit at `pos` (generation v2 only).
    pub fn corrected_date(&self, pos: usize) -> Option<u64> {
        self.corrected.as_ref().map(|c| c[pos])
    }

    /// Whether corrected dates were computed (GDA2 is written).
    pub fn has_corrected_dates(&self) -> bool {
        self.corrected.is_some()
    }
}

//! Progress of long work (counting, compressing and writing objects, building bitmaps and
//! commit-graphs), reported stage after stage to whatever shows it: a terminal's bar in the
//! CLI, or git's progress lines on side-band 2 to a fetching client.
//!
//! One trait for every writer in packd, shaped as git's own progress API (`start_progress`,
//! `display_progress`, `stop_progress`): a stage starts with a label and a total, updates say
//! how much is done, and finishing it is what prints git's `, done.` line. It lives here, in
//! the lowest crate that reports progress (bitmaps and commit-graphs), so that the pack writer
//! and repack above it take the same thing.

/// Receives progress reports, from any thread.
///
/// A caller calls [`start`](Progress::start) for each stage, [`update`](Progress::update) as
/// work is done, and [`finish`](Progress::finish) when the stage is complete where git prints
/// a `, done.` line (a stage not finished ends at the next `start`). The stage labels
/// are the text git shows ("Counting objects", "Compressing objects", "Writing objects", ...),
/// so that clients and terminals see what they would see from git.
pub trait Progress: Sync {
    /// `stage` begins, with `total` units of work; 0 when the total is not known (git then
    /// shows a count without a percentage).
    fn start(&self, stage: &str, total: u64);
    /// `done` units of the current stage are done.
    fn update(&self, done: u64);
    /// The current stage is complete with `done` units. By default a last update; a display
    /// that prints git's `, done.` line prints it here.
    fn finish(&self, done: u64) {
        self.update(done);
    }
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: u64) {}
    fn update(&self, _: u64) {}
    fn finish(&self, _: u64) {}
}

//! Maintenance after pushes: each push that updated a ref asks for a maintenance of its
//! repository (`packd_maint::maintenance::run_auto`: a geometric repack with a
//! multi-pack-index and its bitmap), which runs later on a small pool of threads of its own,
//! at a low priority, so that serving is never starved and the push's answer never waits.
//!
//! ```text
//! push done ──> after_push(repo): absent  -> queued, sent to the pool
//!                                 queued  -> nothing (coalesced into the queued run)
//!                                 running -> "again": one more run after this one
//! pool (N threads, nice +10) ──> running -> run_auto(repo) -> again? queued : absent
//! ```
//!
//! At most one maintenance of a repository runs at a time: here by the table above, and
//! across processes by the maintenance lock `run_auto` takes (a `packd repack` by hand is
//! then refused, and one running by hand makes the server's skip that run: a later push asks
//! again). A stop ([`Maintenance::finish`]) drops the queued runs and waits a bounded time for
//! the running ones; one still running then is abandoned with the process, which is safe: its
//! files appear only whole, and deletions come after what replaces them is durable.
//!
//! Readers see the new packs by themselves: the repository cache's stamp (the pack directory's
//! names and the multi-pack-index's checksum, see [`crate::stamp`]) changes, and the next
//! request opens the repository again.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `nice` increment of the maintenance threads (as the Argon2 threads': see
/// [`crate::credentials::ARGON2_NICE`]).
pub const MAINTENANCE_NICE: i32 = 10;

/// What runs for a repository (the real one is [`run_logged`]).
pub type Job = Arc<dyn Fn(&Path) + Send + Sync>;

/// Where a repository's maintenance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a thread.
    Queued,
    /// Running; `again`: a push arrived meanwhile, so one more run follows.
    Running { again: bool },
}

struct Inner {
    states: Mutex<HashMap<PathBuf, State>>,
    /// Notified whenever a run ends.
    ended: Condvar,
    jobs: Mutex<Sender<PathBuf>>,
    stopping: AtomicBool,
    runs: AtomicU64,
    job: Job,
}

/// The maintenance pool of a server.
pub struct Maintenance {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("states", &*self.inner.states.lock())
            .finish()
    }
}

/// Runs the maintenance after pushes of `git_dir` and logs what went wrong (what went right
/// `run_auto` logs itself).
pub fn run_logged(git_dir: &Path) {
    match packd_maint::maintenance::run_auto(git_dir) {
        Ok(_) => {}
        Err(e) if e.is_busy() => tracing::info!(
            target: packd_maint::maintenance::TARGET,
            "{}: maintenance skipped: {e}",
            git_dir.display()
        ),
        Err(e) => tracing::warn!(
            target: packd_maint::maintenance::TARGET,
            "{}: maintenance failed: {e}",
            git_dir.display()
        ),
    }
}

impl Maintenance {
    /// A pool of `threads` threads (at least 1) running [`run_logged`].
    pub fn start(threads: usize) -> Maintenance {
        Maintenance::with_job(threads, Arc::new(run_logged))
    }

    /// A pool of `threads` threads (at least 1) running `job` for each repository asked for.
    pub fn with_job(threads: usize, job: Job) -> Maintenance {
        let (tx, rx) = channel::<PathBuf>();
        let inner = Arc::new(Inner {
            states: Mutex::new(HashMap::new()),
            ended: Condvar::new(),
            jobs: Mutex::new(tx),
            stopping: AtomicBool::new(false),
            runs: AtomicU64::new(0),
            job,
        });
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..threads.max(1) {
            let inner = inner.clone();
            let rx = rx.clone();
            let started = std::thread::Builder::new()
                .name(format!("packd-maint-{n}"))
                .spawn(move || work(&inner, &rx));
            if let Err(e) = started {
                tracing::warn!("cannot start a maintenance thread: {e}");
            }
        }
        Maintenance { inner }
    }

    /// Asks for a maintenance of `git_dir` after a push that updated its refs. Never blocks
    /// beyond a short lock.
    pub fn after_push(&self, git_dir: &Path) {
        if self.inner.stopping.load(Ordering::Relaxed) {
            return;
        }
        let mut states = self.inner.states.lock();
        match states.get_mut(git_dir) {
            None => {
                states.insert(git_dir.to_path_buf(), State::Queued);
                let _ = self.inner.jobs.lock().send(git_dir.to_path_buf());
            }
            Some(State::Queued) => {}
            Some(State::Running { again }) => *again = true,
        }
    }

    /// How many maintenances have run to their end.
    pub fn runs(&self) -> u64 {
        self.inner.runs.load(Ordering::Relaxed)
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.inner.states.lock().is_empty()
    }

    /// Stops: queued runs are dropped, no new ones are taken, and the running ones are
    /// waited for at most `grace`. Returns the repositories whose maintenance was still
    /// running then (abandoned: safe, see the module documentation).
    pub fn finish(&self, grace: Duration) -> Vec<PathBuf> {
        self.inner.stopping.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + grace;
        let mut states = self.inner.states.lock();
        states.retain(|_, s| *s != State::Queued);
        while !states.is_empty() {
            if self
                .inner
                .ended
                .wait_until(&mut states, deadline)
                .timed_out()
            {
                break;
            }
            states.retain(|_, s| *s != State::Queued);
        }
        states.keys().cloned().collect()
    }
}

/// A maintenance thread: takes repositories off the queue until the pool is dropped.
fn work(inner: &Inner, rx: &Mutex<Receiver<PathBuf>>) {
    crate::stopping::block_stop_signals_here();
    crate::credentials::lower_this_threads_priority(MAINTENANCE_NICE);
    loop {
        let Ok(git_dir) = rx.lock().recv() else {
            return;
        };
        {
            let mut states = inner.states.lock();
            if inner.stopping.load(Ordering::Relaxed) {
                states.remove(&git_dir);
                inner.ended.notify_all();
                continue;
            }
            states.insert(git_dir.clone(), State::Running { again: false });
        }
        let job = inner.job.clone();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&git_dir)));
        if ran.is_err() {
            tracing::error!("{}: maintenance panicked", git_dir.display());
        }
        inner.runs.fetch_add(1, Ordering::Relaxed);
        let mut states = inner.states.lock();
        let again = matches!(states.get(&git_dir), Some(State::Running { again: true }));
        if again && !inner.stopping.load(Ordering::Relaxed) {
            states.insert(git_dir.clone(), State::Queued);
            let _ = inner.jobs.lock().send(git_dir);
        } else {
            states.remove(&git_dir);
        }
        inner.ended.notify_all();
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        // The threads end when the queue's last sender goes: replace it by one of a closed
        // channel.
        self.inner.stopping.store(true, Ordering::Relaxed);
        *self.inner.jobs.lock() = channel().0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A job that counts its runs by repository, with each run held until `release` opens.
    struct Gate {
        open: Mutex<bool>,
        changed: Condvar,
        runs: Mutex<HashMap<PathBuf, usize>>,
        at_once: AtomicUsize,
        most_at_once: AtomicUsize,
    }

    impl Gate {
        fn new() -> Arc<Gate> {
            Arc::new(Gate {
                open: Mutex::new(false),
                changed: Condvar::new(),
                runs: Mutex::new(HashMap::new()),
                at_once: AtomicUsize::new(0),
                most_at_once: AtomicUsize::new(0),
            })
        }
        fn job(self: &Arc<Gate>) -> Job {
            let gate = self.clone();
            Arc::new(move |dir: &Path| {
                let now = gate.at_once.fetch_add(1, Ordering::SeqCst) + 1;
                gate.most_at_once.fetch_max(now, Ordering::SeqCst);
                let mut open = gate.open.lock();
                while !*open {
                    gate.changed.wait(&mut open);
                }
                drop(open);
                *gate.runs.lock().entry(dir.to_path_buf()).or_default() += 1;
                gate.at_once.fetch_sub(1, Ordering::SeqCst);
            })
        }
        fn release(&self) {
            *self.open.lock() = true;
            self.changed.notify_all();
        }
    }

    fn wait_idle(m: &Maintenance) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.is_idle() {
            assert!(Instant::now() < deadline, "maintenance never went idle");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn pushes_during_a_run_coalesce_into_one_more_run() {
        let gate = Gate::new();
        let m = Maintenance::with_job(2, gate.job());
        let a = Path::new("/repos/a.git");
        m.after_push(a);
        // Wait until it runs (held at the gate), then push five more times.
        let deadline = Instant::now() + Duration::from_secs(10);
        while gate.at_once.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        for _ in 0..5 {
            m.after_push(a);
        }
        gate.release();
        wait_idle(&m);
        assert_eq!(
            gate.runs.lock()[a],
            2,
            "one run, then one for the five pushes"
        );
        assert_eq!(
            gate.most_at_once.load(Ordering::SeqCst),
            1,
            "never two at once for one repository, with two threads"
        );
    }

    #[test]
    fn repositories_run_side_by_side_up_to_the_pool_size() {
        let gate = Gate::new();
        let m = Maintenance::with_job(2, gate.job());
        for name in ["a", "b", "c"] {
            m.after_push(&PathBuf::from(format!("/repos/{name}.git")));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while gate.at_once.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            gate.at_once.load(Ordering::SeqCst),
            2,
            "bounded by the pool"
        );
        gate.release();
        wait_idle(&m);
        assert_eq!(gate.runs.lock().len(), 3);
        assert_eq!(m.runs(), 3);
    }

    #[test]
    fn a_stop_drops_the_queue_and_waits_a_bounded_time_for_the_running() {
        let gate = Gate::new();
        let m = Maintenance::with_job(1, gate.job());
        let (a, b) = (Path::new("/repos/a.git"), Path::new("/repos/b.git"));
        m.after_push(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        while gate.at_once.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        m.after_push(b);
        let abandoned = m.finish(Duration::from_millis(100));
        assert_eq!(
            abandoned,
            vec![a.to_path_buf()],
            "the running one is abandoned"
        );
        gate.release();
        assert!(m.finish(Duration::from_secs(10)).is_empty());
        assert_eq!(gate.runs.lock().get(b), None, "the queued one never ran");
        m.after_push(b);
        assert!(m.is_idle(), "nothing is taken after a stop");
    }
}

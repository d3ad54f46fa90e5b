//! Maintenance after pushes: each push that updated a ref asks for a maintenance of its
//! repository (`packd_maint::maintenance::run_auto`: the push's packs rolled up, or past a
//! threshold the objects outside the bitmap appended to the bitmapped pack), which runs later
//! on a small pool of threads of its own, at a low priority, so that serving is never starved
//! and the push's answer never waits. Once a repository has had no push for the settle time
//! (`--maintenance-settle`), one more run (`run_settled`) appends whatever still lies outside
//! the bitmapped pack to it, so that a quiet repository is one pack with bitmaps again: a
//! mirror clone is then that file as it is, and fetches count from bitmaps.
//!
//! ```text
//! push done ──> after_push(repo): absent    -> queued, sent to the pool
//!                                 settling  -> queued (the settle time starts again later)
//!                                 queued    -> nothing (coalesced into the queued run)
//!                                 running   -> "again": one more run after this one
//! pool (N threads, nice +10) ──> running -> run_auto(repo) -> again?  queued
//!                                                            settle?  settling until now+settle
//!                                                            else     absent
//! timer thread ──> settling and due -> queued (settled) -> run_settled(repo) -> absent
//! ```
//!
//! A settled run rewrites the bitmapped pack (a copy of its bytes with the new objects after
//! them), so its cost grows with the repository, not with the pushes: it comes at most once
//! per quiet period, and never sooner after the last settled run than
//! [`SETTLED_SPACING`] times that run's duration (a repository pushed just often enough to
//! settle between pushes spends at most 1/20 of its time on it).
//!
//! At most one maintenance of a repository runs at a time: here by the table above, and
//! across processes by the maintenance lock `run_auto` takes (a `packd repack` by hand is
//! then refused, and one running by hand makes the server's skip that run: a later push asks
//! again). A stop ([`Maintenance::finish`]) drops the queued and settling runs and waits a
//! bounded time for the running ones; one still running then is abandoned with the process,
//! which is safe: its files appear only whole, and deletions come after what replaces them is
//! durable.
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

/// A settled run of a repository starts no sooner after the end of its last one than this
/// many times that run's duration.
pub const SETTLED_SPACING: u32 = 20;

/// Why a maintenance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Pushes updated the repository's refs.
    Push,
    /// The repository had no push for the settle time.
    Settled,
}

/// What runs for a repository (the real one is [`run_logged`]).
pub type Job = Arc<dyn Fn(&Path, Trigger) + Send + Sync>;

/// Where a repository's maintenance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a thread.
    Queued(Trigger),
    /// Running; `again`: a push arrived meanwhile, so one more run follows.
    Running { again: bool },
    /// Waiting for the settle time to pass with no push.
    Settling { due: Instant },
}

struct Inner {
    states: Mutex<HashMap<PathBuf, State>>,
    /// Notified whenever a run ends.
    ended: Condvar,
    /// Notified when a repository starts settling, and at a stop (wakes the timer).
    settling: Condvar,
    /// When each repository's last settled run ended, and how long it took.
    last_settled: Mutex<HashMap<PathBuf, (Instant, Duration)>>,
    jobs: Mutex<Sender<(PathBuf, Trigger)>>,
    stopping: AtomicBool,
    runs: AtomicU64,
    settle: Option<Duration>,
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

/// Runs the maintenance of `git_dir` that `trigger` asks for and logs what went wrong (what
/// went right `packd_maint::maintenance` logs itself).
pub fn run_logged(git_dir: &Path, trigger: Trigger) {
    let ran = match trigger {
        Trigger::Push => packd_maint::maintenance::run_auto(git_dir).map(|_| ()),
        Trigger::Settled => packd_maint::maintenance::run_settled(git_dir).map(|_| ()),
    };
    match ran {
        Ok(()) => {}
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
    /// A pool of `threads` threads (at least 1) running [`run_logged`], with a settled run
    /// after `settle` without pushes (`None`: never).
    pub fn start(threads: usize, settle: Option<Duration>) -> Maintenance {
        Maintenance::with_job(threads, settle, Arc::new(run_logged))
    }

    /// A pool of `threads` threads (at least 1) running `job` for each repository asked for,
    /// and once more with [`Trigger::Settled`] after `settle` without pushes.
    pub fn with_job(threads: usize, settle: Option<Duration>, job: Job) -> Maintenance {
        let (tx, rx) = channel::<(PathBuf, Trigger)>();
        let inner = Arc::new(Inner {
            states: Mutex::new(HashMap::new()),
            ended: Condvar::new(),
            settling: Condvar::new(),
            last_settled: Mutex::new(HashMap::new()),
            jobs: Mutex::new(tx),
            stopping: AtomicBool::new(false),
            runs: AtomicU64::new(0),
            settle,
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
        if settle.is_some() {
            let inner = inner.clone();
            let started = std::thread::Builder::new()
                .name("packd-maint-timer".into())
                .spawn(move || timer(&inner));
            if let Err(e) = started {
                tracing::warn!("cannot start the maintenance timer: {e}");
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
            None | Some(State::Settling { .. }) => {
                states.insert(git_dir.to_path_buf(), State::Queued(Trigger::Push));
                let _ = self
                    .inner
                    .jobs
                    .lock()
                    .send((git_dir.to_path_buf(), Trigger::Push));
            }
            Some(State::Queued(Trigger::Push)) => {}
            Some(state @ State::Queued(Trigger::Settled)) => {
                // The settled run has not started: a push's run takes its place (the queued
                // entry is then stale and skipped), and settling starts again after it.
                *state = State::Queued(Trigger::Push);
                let _ = self
                    .inner
                    .jobs
                    .lock()
                    .send((git_dir.to_path_buf(), Trigger::Push));
            }
            Some(State::Running { again }) => *again = true,
        }
    }

    /// How many maintenances have run to their end.
    pub fn runs(&self) -> u64 {
        self.inner.runs.load(Ordering::Relaxed)
    }

    /// Whether nothing is queued, running or settling.
    pub fn is_idle(&self) -> bool {
        self.inner.states.lock().is_empty()
    }

    /// Stops: queued and settling runs are dropped, no new ones are taken, and the running
    /// ones are waited for at most `grace`. Returns the repositories whose maintenance was
    /// still running then (abandoned: safe, see the module documentation).
    pub fn finish(&self, grace: Duration) -> Vec<PathBuf> {
        self.inner.stopping.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + grace;
        let mut states = self.inner.states.lock();
        self.inner.settling.notify_all();
        states.retain(|_, s| matches!(s, State::Running { .. }));
        while !states.is_empty() {
            if self
                .inner
                .ended
                .wait_until(&mut states, deadline)
                .timed_out()
            {
                break;
            }
            states.retain(|_, s| matches!(s, State::Running { .. }));
        }
        states.keys().cloned().collect()
    }
}

/// A maintenance thread: takes repositories off the queue until the pool is dropped.
fn work(inner: &Inner, rx: &Mutex<Receiver<(PathBuf, Trigger)>>) {
    crate::stopping::block_stop_signals_here();
    crate::credentials::lower_this_threads_priority(MAINTENANCE_NICE);
    loop {
        let Ok((git_dir, trigger)) = rx.lock().recv() else {
            return;
        };
        {
            let mut states = inner.states.lock();
            // A push that came while a settled run waited in the queue turned it into a
            // push's run (`after_push` sent that one too): this entry is then stale.
            if states.get(&git_dir) != Some(&State::Queued(trigger)) {
                continue;
            }
            if inner.stopping.load(Ordering::Relaxed) {
                states.remove(&git_dir);
                inner.ended.notify_all();
                continue;
            }
            states.insert(git_dir.clone(), State::Running { again: false });
        }
        let job = inner.job.clone();
        let started = Instant::now();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&git_dir, trigger)));
        if ran.is_err() {
            tracing::error!("{}: maintenance panicked", git_dir.display());
        }
        let ended = Instant::now();
        if trigger == Trigger::Settled {
            inner
                .last_settled
                .lock()
                .insert(git_dir.clone(), (ended, ended - started));
        }
        inner.runs.fetch_add(1, Ordering::Relaxed);
        let mut states = inner.states.lock();
        let again = matches!(states.get(&git_dir), Some(State::Running { again: true }));
        let stopping = inner.stopping.load(Ordering::Relaxed);
        if again && !stopping {
            states.insert(git_dir.clone(), State::Queued(Trigger::Push));
            let _ = inner.jobs.lock().send((git_dir, Trigger::Push));
        } else if let (Some(settle), Trigger::Push, false) = (inner.settle, trigger, stopping) {
            states.insert(
                git_dir,
                State::Settling {
                    due: ended + settle,
                },
            );
            inner.settling.notify_all();
        } else {
            states.remove(&git_dir);
        }
        inner.ended.notify_all();
    }
}

/// The timer thread: queues the settled run of each repository whose settle time passed,
/// spaced from its last settled run (see [`SETTLED_SPACING`]).
fn timer(inner: &Inner) {
    crate::stopping::block_stop_signals_here();
    let mut states = inner.states.lock();
    loop {
        if inner.stopping.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let last = inner.last_settled.lock();
        let mut due_now = Vec::new();
        for (dir, state) in states.iter() {
            let State::Settling { due } = *state else {
                continue;
            };
            let spaced = last
                .get(dir)
                .map(|(end, took)| *end + *took * SETTLED_SPACING)
                .map_or(due, |earliest| earliest.max(due));
            if spaced <= now {
                due_now.push(dir.clone());
            } else {
                next = Some(next.map_or(spaced, |n| n.min(spaced)));
            }
        }
        drop(last);
        for dir in due_now {
            states.insert(dir.clone(), State::Queued(Trigger::Settled));
            let _ = inner.jobs.lock().send((dir, Trigger::Settled));
        }
        match next {
            Some(at) => {
                inner.settling.wait_until(&mut states, at);
            }
            None => inner.settling.wait(&mut states),
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        // The threads end when the queue's last sender goes: replace it by one of a closed
        // channel; the timer when it sees the stop.
        self.inner.stopping.store(true, Ordering::Relaxed);
        *self.inner.jobs.lock() = channel().0;
        let _states = self.inner.states.lock();
        self.inner.settling.notify_all();
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
        /// Each run's trigger and when it started and ended, in order of ending.
        log: Mutex<Vec<(PathBuf, Trigger, Instant, Instant)>>,
        /// How long a settled run takes.
        settled_takes: Duration,
        at_once: AtomicUsize,
        most_at_once: AtomicUsize,
    }

    impl Gate {
        fn new() -> Arc<Gate> {
            Arc::new(Gate {
                open: Mutex::new(false),
                changed: Condvar::new(),
                runs: Mutex::new(HashMap::new()),
                log: Mutex::new(Vec::new()),
                settled_takes: Duration::ZERO,
                at_once: AtomicUsize::new(0),
                most_at_once: AtomicUsize::new(0),
            })
        }
        fn job(self: &Arc<Gate>) -> Job {
            let gate = self.clone();
            Arc::new(move |dir: &Path, trigger: Trigger| {
                let started = Instant::now();
                let now = gate.at_once.fetch_add(1, Ordering::SeqCst) + 1;
                gate.most_at_once.fetch_max(now, Ordering::SeqCst);
                let mut open = gate.open.lock();
                while !*open {
                    gate.changed.wait(&mut open);
                }
                drop(open);
                if trigger == Trigger::Settled {
                    std::thread::sleep(gate.settled_takes);
                }
                *gate.runs.lock().entry(dir.to_path_buf()).or_default() += 1;
                gate.log
                    .lock()
                    .push((dir.to_path_buf(), trigger, started, Instant::now()));
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
        let m = Maintenance::with_job(2, None, gate.job());
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
        let m = Maintenance::with_job(2, None, gate.job());
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
        let m = Maintenance::with_job(1, None, gate.job());
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

    /// The triggers of the runs of `dir` so far, in order.
    fn triggers(gate: &Gate, dir: &Path) -> Vec<Trigger> {
        gate.log
            .lock()
            .iter()
            .filter(|(d, ..)| d == dir)
            .map(|(_, t, ..)| *t)
            .collect()
    }

    /// Waits until `dir` has had `n` runs.
    fn wait_runs(gate: &Gate, dir: &Path, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while triggers(gate, dir).len() < n {
            assert!(
                Instant::now() < deadline,
                "{n} runs never came: {:?}",
                triggers(gate, dir)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_quiet_repository_gets_one_settled_run_after_its_pushes_run() {
        let gate = Gate::new();
        gate.release();
        let m = Maintenance::with_job(1, Some(Duration::from_millis(30)), gate.job());
        let a = Path::new("/repos/a.git");
        m.after_push(a);
        wait_runs(&gate, a, 2);
        wait_idle(&m);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            triggers(&gate, a),
            vec![Trigger::Push, Trigger::Settled],
            "one push run, then one settled run, and nothing after"
        );
        let log = gate.log.lock();
        assert!(
            log[1].2 >= log[0].3 + Duration::from_millis(30),
            "the settled run waited the settle time after the push's run"
        );
    }

    #[test]
    fn a_push_while_settling_starts_the_settle_time_again() {
        let gate = Gate::new();
        gate.release();
        let m = Maintenance::with_job(1, Some(Duration::from_millis(300)), gate.job());
        let a = Path::new("/repos/a.git");
        m.after_push(a);
        wait_runs(&gate, a, 1);
        std::thread::sleep(Duration::from_millis(100));
        m.after_push(a);
        wait_runs(&gate, a, 3);
        assert_eq!(
            triggers(&gate, a),
            vec![Trigger::Push, Trigger::Push, Trigger::Settled]
        );
        let log = gate.log.lock();
        assert!(
            log[2].2 >= log[1].3 + Duration::from_millis(300),
            "settled 300 ms after the second push's run, not the first's"
        );
    }

    #[test]
    fn settled_runs_are_spaced_by_their_cost() {
        let mut gate = Gate::new();
        Arc::get_mut(&mut gate).unwrap().settled_takes = Duration::from_millis(40);
        gate.release();
        let m = Maintenance::with_job(1, Some(Duration::from_millis(10)), gate.job());
        let a = Path::new("/repos/a.git");
        m.after_push(a);
        wait_runs(&gate, a, 2);
        m.after_push(a);
        wait_runs(&gate, a, 4);
        let log = gate.log.lock();
        let (first_settled, second_settled) = (&log[1], &log[3]);
        assert_eq!(
            (first_settled.1, second_settled.1),
            (Trigger::Settled, Trigger::Settled)
        );
        let took = first_settled.3 - first_settled.2;
        assert!(
            second_settled.2 >= first_settled.3 + took * SETTLED_SPACING,
            "the second settled run started {:?} after the first ended, which took {took:?}",
            second_settled.2 - first_settled.3
        );
    }

    #[test]
    fn a_push_before_a_queued_settled_run_starts_takes_its_place() {
        let gate = Gate::new();
        let m = Maintenance::with_job(1, Some(Duration::from_millis(50)), gate.job());
        let (a, b) = (Path::new("/repos/a.git"), Path::new("/repos/b.git"));
        // b's run holds the only thread at the gate while a's settled run gets queued.
        gate.release();
        m.after_push(a);
        wait_runs(&gate, a, 1);
        *gate.open.lock() = false;
        m.after_push(b);
        let deadline = Instant::now() + Duration::from_secs(10);
        while m.inner.states.lock().get(a) != Some(&State::Queued(Trigger::Settled)) {
            assert!(
                Instant::now() < deadline,
                "a's settled run was never queued"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        m.after_push(a);
        gate.release();
        wait_runs(&gate, a, 3);
        assert_eq!(
            triggers(&gate, a),
            vec![Trigger::Push, Trigger::Push, Trigger::Settled],
            "the push ran instead of the queued settled run, which came after it"
        );
    }
}

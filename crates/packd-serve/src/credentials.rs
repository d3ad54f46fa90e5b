//! Checking HTTP basic-auth credentials at a bounded cost, whoever sends them.
//!
//! Argon2 costs about 33 ms of CPU and 19 MiB per verification, by design. So that clients
//! sending wrong passwords cannot take the server's CPU and memory from everyone else:
//! - a credential that verified is remembered for [`CACHE_TTL`], keyed by a keyed hash of
//!   the user and token (a key drawn at start, never written anywhere; the plain token is
//!   never kept), so a user's next requests cost no Argon2 at all;
//! - at most [`Verifier::argon2_at_once`] verifications run at once (half the CPUs, at
//!   least one); the others wait their turn without holding a thread. They run on threads of
//!   their own at a lower scheduling priority ([`ARGON2_NICE`]), so that on a busy machine a
//!   flood of verifications takes only CPU that serving does not want;
//! - each client address (an IPv6 /64 counts as one) may fail [`FAILURE_BURST`] times, then
//!   once per [`FAILURE_REFILL`]; past that its requests are answered 429 without any
//!   verification. A success gives its attempt back.
//!
//! Memory stays bounded: the cache and the failure table hold at most [`MAX_ENTRIES`] entries
//! each (expired and recovered entries go first; if none did, the table is emptied).

use crate::auth::AuthFile;
use blake2::{Blake2b512, Digest};
use parking_lot::Mutex;
use password_hash::rand_core::{OsRng, RngCore};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The `nice` increment of the threads that run Argon2: a verification yields the CPU to
/// requests being served (a good user's fetch) rather than sharing it evenly with them.
pub const ARGON2_NICE: i32 = 10;

/// How long a verified credential is taken without running Argon2 again.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Failed verifications an address may have in a row before it is slowed down.
pub const FAILURE_BURST: u32 = 10;
/// After the burst, an address may fail once per this long.
pub const FAILURE_REFILL: Duration = Duration::from_secs(3);
/// Most entries in the credential cache, and in the table of failures.
pub const MAX_ENTRIES: usize = 65_536;

/// What checking a credential found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The token is the named user's.
    User(String),
    /// Unknown user or wrong token.
    Wrong,
    /// The client's address failed too often lately: nothing was checked.
    Throttled,
}

/// A client address as the failure table counts it: IPv4 whole, IPv6 by its /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressKey {
    /// An IPv4 address (or an IPv4-mapped IPv6 one).
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl AddressKey {
    /// The key of `ip`.
    pub fn of(ip: IpAddr) -> AddressKey {
        match ip {
            IpAddr::V4(v4) => AddressKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddressKey::V4(u32::from(v4)),
                None => AddressKey::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// An address's failure allowance: a token bucket.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    tokens: f64,
    at: Instant,
}

impl Allowance {
    fn refilled(self, now: Instant) -> f64 {
        let earned = now.duration_since(self.at).as_secs_f64() / FAILURE_REFILL.as_secs_f64();
        (self.tokens + earned).min(f64::from(FAILURE_BURST))
    }
}

/// The failure allowances of client addresses.
#[derive(Debug, Default)]
pub struct FailureTable {
    entries: Mutex<HashMap<AddressKey, Allowance>>,
}

impl FailureTable {
    /// Takes one attempt from `key`'s allowance; `false` when it has none left.
    pub fn take(&self, key: AddressKey, now: Instant) -> bool {
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            let full = f64::from(FAILURE_BURST);
            entries.retain(|_, a| a.refilled(now) < full);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        let allowance = entries.entry(key).or_insert(Allowance {
            tokens: f64::from(FAILURE_BURST),
            at: now,
        });
        let tokens = allowance.refilled(now);
        if tokens < 1.0 {
            return false;
        }
        *allowance = Allowance {
            tokens: tokens - 1.0,
            at: now,
        };
        true
    }

    /// Gives `key` back the attempt a success took.
    pub fn give_back(&self, key: AddressKey, now: Instant) {
        let mut entries = self.entries.lock();
        if let Some(a) = entries.get_mut(&key) {
            *a = Allowance {
                tokens: (a.refilled(now) + 1.0).min(f64::from(FAILURE_BURST)),
                at: now,
            };
        }
    }
}

/// Checks credentials against an auth file, with the cache, the limit on Argon2 runs at once
/// and the per-address failure allowance described above.
pub struct Verifier {
    users: Arc<AuthFile>,
    key: [u8; 32],
    cache: Mutex<HashMap<[u8; 32], (String, Instant)>>,
    argon2: Arc<Semaphore>,
    argon2_at_once: usize,
    /// Where verifications run.
    argon2_threads: Argon2Threads,
    /// Argon2 verifications run so far.
    argon2_runs: std::sync::atomic::AtomicU64,
    failures: FailureTable,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("users", &self.users.len())
            .field("argon2_at_once", &self.argon2_at_once)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `users`, with a fresh random cache key.
    pub fn new(users: Arc<AuthFile>) -> Verifier {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let at_once = (cpus / 2).max(1);
        Verifier {
            users,
            key,
            cache: Mutex::new(HashMap::new()),
            argon2: Arc::new(Semaphore::new(at_once)),
            argon2_at_once: at_once,
            argon2_threads: Argon2Threads::start(at_once),
            argon2_runs: Default::default(),
            failures: FailureTable::default(),
        }
    }

    /// How many Argon2 verifications may run at once.
    pub fn argon2_at_once(&self) -> usize {
        self.argon2_at_once
    }

    /// Argon2 verifications run so far.
    pub fn argon2_runs(&self) -> u64 {
        self.argon2_runs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The users checked against.
    pub fn users(&self) -> &Arc<AuthFile> {
        &self.users
    }

    /// The cache key of a credential: a keyed hash, so the token cannot be recovered from it,
    /// nor the key guessed from outside.
    fn cache_key(&self, name: &str, token: &str) -> [u8; 32] {
        let mut h = Blake2b512::new();
        h.update(self.key);
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(token.as_bytes());
        let digest = h.finalize();
        let mut key = [0u8; 32];
        key.copy_from_slice(&digest[..32]);
        key
    }

    fn cached(&self, key: &[u8; 32], now: Instant) -> Option<String> {
        let mut cache = self.cache.lock();
        match cache.get(key) {
            Some((name, until)) if *until > now => Some(name.clone()),
            Some(_) => {
                cache.remove(key);
                None
            }
            None => None,
        }
    }

    fn remember(&self, key: [u8; 32], name: &str, now: Instant) {
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_ENTRIES {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= MAX_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (name.to_string(), now + CACHE_TTL));
    }

    /// Checks `name`'s `token`, sent from `from`.
    pub async fn verify(&self, from: IpAddr, name: String, token: String) -> Verdict {
        let key = self.cache_key(&name, &token);
        if let Some(user) = self.cached(&key, Instant::now()) {
            return Verdict::User(user);
        }
        let address = AddressKey::of(from);
        if !self.failures.take(address, Instant::now()) {
            return Verdict::Throttled;
        }
        let Ok(_permit) = self.argon2.clone().acquire_owned().await else {
            return Verdict::Wrong;
        };
        // The same credential may have been verified while this one waited.
        if let Some(user) = self.cached(&key, Instant::now()) {
            self.failures.give_back(address, Instant::now());
            return Verdict::User(user);
        }
        self.argon2_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let users = self.users.clone();
        let checked = self
            .argon2_threads
            .run(move || {
                users
                    .authenticate(&name, &token)
                    .map(|u| u.name().to_string())
            })
            .await;
        match checked {
            Some(Some(user)) => {
                self.failures.give_back(address, Instant::now());
                self.remember(key, &user, Instant::now());
                Verdict::User(user)
            }
            _ => Verdict::Wrong,
        }
    }
}

/// Lowers the scheduling priority of the calling thread by `nice` (Linux applies a thread's
/// own id to that thread alone): for threads whose work must only take CPU that serving does
/// not want. A failure leaves it at the server's priority.
pub(crate) fn lower_this_threads_priority(nice: i32) {
    // SAFETY: plain system calls on this thread's own id.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

/// A verification for one of [`Argon2Threads`]' threads.
type Argon2Job = Box<dyn FnOnce() + Send>;

/// The threads that run Argon2, each at [`ARGON2_NICE`]: as many as may run at once (the
/// verifier's semaphore admits no more), started with the verifier.
struct Argon2Threads {
    jobs: Mutex<std::sync::mpsc::Sender<Argon2Job>>,
}

impl Argon2Threads {
    fn start(count: usize) -> Argon2Threads {
        let (tx, rx) = std::sync::mpsc::channel::<Argon2Job>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..count {
            let rx = rx.clone();
            let started = std::thread::Builder::new()
                .name(format!("packd-argon2-{n}"))
                .spawn(move || {
                    crate::stopping::block_stop_signals_here();
                    lower_this_threads_priority(ARGON2_NICE);
                    loop {
                        let job = rx.lock().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    }
                });
            if let Err(e) = started {
                tracing::warn!("cannot start an Argon2 thread: {e}");
            }
        }
        Argon2Threads {
            jobs: Mutex::new(tx),
        }
    }

    /// Runs `work` on one of the threads; `None` if it could not run.
    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Argon2Job = Box::new(move || {
            let _ = tx.send(work());
        });
        self.jobs.lock().send(job).ok()?;
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Arc<AuthFile> {
        let hash = crate::auth::hash_token("s3cret").unwrap();
        Arc::new(AuthFile::parse(&format!("alice:{hash}:read:*\n"), "test").unwrap())
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_verified_credential_is_cached_by_its_hash_only() {
        let v = Verifier::new(users());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..21 {
            assert_eq!(
                run(v.verify(ip, "alice".into(), "s3cret".into())),
                Verdict::User("alice".into())
            );
        }
        assert_eq!(v.argon2_runs(), 1);
        let cache = v.cache.lock();
        assert_eq!(cache.len(), 1);
        let key = cache.keys().next().unwrap();
        assert!(!key.windows(6).any(|w| w == b"s3cret"));
        assert_ne!(
            v.cache_key("alice", "s3cret"),
            v.cache_key("alice", "s3cres")
        );
        assert_ne!(
            v.cache_key("alic", "es3cret"),
            v.cache_key("alice", "s3cret")
        );
    }

    #[test]
    fn wrong_tokens_are_not_cached() {
        let v = Verifier::new(users());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            run(v.verify(ip, "alice".into(), "nope".into())),
            Verdict::Wrong
        );
        assert!(v.cache.lock().is_empty());
        run(v.verify(ip, "alice".into(), "nope".into()));
        assert_eq!(v.argon2_runs(), 2);
    }

    #[test]
    fn an_address_that_keeps_failing_is_throttled() {
        let v = Verifier::new(users());
        let bad: IpAddr = "127.0.0.9".parse().unwrap();
        for _ in 0..FAILURE_BURST {
            assert_eq!(
                run(v.verify(bad, "alice".into(), "nope".into())),
                Verdict::Wrong
            );
        }
        assert_eq!(
            run(v.verify(bad, "alice".into(), "nope".into())),
            Verdict::Throttled
        );
        assert_eq!(v.argon2_runs(), u64::from(FAILURE_BURST));
        // Another address is not affected.
        let good: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(
            run(v.verify(good, "alice".into(), "s3cret".into())),
            Verdict::User("alice".into())
        );
    }

    #[test]
    fn allowances_refill_and_successes_give_back() {
        let t = FailureTable::default();
        let k = AddressKey::of("10.0.0.1".parse().unwrap());
        let now = Instant::now();
        for _ in 0..FAILURE_BURST {
            assert!(t.take(k, now));
        }
        assert!(!t.take(k, now));
        t.give_back(k, now);
        assert!(t.take(k, now));
        assert!(!t.take(k, now));
        assert!(t.take(k, now + FAILURE_REFILL));
    }

    #[test]
    fn ipv6_counts_by_its_64_prefix() {
        let a = AddressKey::of("2001:db8::1".parse().unwrap());
        let b = AddressKey::of("2001:db8::ffff:1".parse().unwrap());
        let c = AddressKey::of("2001:db8:0:1::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            AddressKey::of("::ffff:10.0.0.1".parse().unwrap()),
            AddressKey::of("10.0.0.1".parse().unwrap())
        );
    }
}

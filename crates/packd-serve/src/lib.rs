//! Transports for packd: git's smart HTTP protocol and the git:// daemon protocol, serving
//! every repository under one root directory.
//!
//! ```text
//! Server::bind ── HTTP listener ──> http::serve_connection (hyper, one task per connection)
//!             └─ git:// listener ─> daemon::serve_connection (one blocking thread each)
//!                      both ──> paths::Root::resolve (confinement) ──> repos::RepoCache
//!                           ──> packd_protocol::UploadPack::{advertise, serve}
//! ```
//!
//! The protocol itself (pkt-lines, negotiation, the pack) is `packd-protocol`'s; this crate owns
//! sockets, URLs, path checks, limits, timeouts and the access log.

pub mod access_log;
pub mod admission;
pub mod auth;
pub mod conn;
pub mod create;
pub mod credentials;
pub mod daemon;
pub mod http;
pub mod maintenance;
pub mod memory;
pub mod pace;
pub mod paths;
pub mod push_head;
pub mod repos;
mod sendfile;
pub mod stamp;
pub mod stopping;
pub mod store;
pub mod wants;

pub use packd_odb::RepositoryOptions;
use packd_protocol::UploadPackOptions;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The root directory is missing or unreadable.
    #[error("root directory {path}: {source}")]
    Root {
        /// The root as given.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// An address could not be parsed, resolved or bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address as given.
        addr: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The async runtime could not be started.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// How to run the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory whose repositories are served.
    pub root: PathBuf,
    /// The store whose repositories are served instead, when given (`--store`; then `root`
    /// is not read): see [`store`].
    pub store: Option<Arc<store::StoreRoot>>,
    /// Address of the smart HTTP listener (`host:port`; port 0 picks one).
    pub listen: String,
    /// Address of the git:// listener, if any.
    pub git_daemon: Option<String>,
    /// Limits and timeouts.
    pub limits: Limits,
    /// Most repositories kept open.
    pub cache_capacity: usize,
    /// upload-pack policy.
    pub upload_pack: UploadPackOptions,
    /// Budget of each repository's clone cache (`--clone-cache-bytes`; 0: none).
    pub clone_cache_bytes: u64,
    /// How each served repository is opened (its delta base cache budget).
    pub repository: RepositoryOptions,
    /// Accept pushes (receive-pack) from anyone who can reach the server; otherwise they are
    /// refused (HTTP 403, git:// ERR).
    pub allow_push: bool,
    /// A push to a path with no repository creates an empty bare one there
    /// (`--create-on-push`; pushes must be allowed too), never inside another repository, and
    /// removed again when that first push takes no ref (see [`create`]); otherwise it gets 404.
    pub create_on_push: bool,
    /// Users allowed in (`--auth-file`): every HTTP request then needs basic auth and the
    /// user's right on the repository, pushes are open to users with a write right, and
    /// git:// (which cannot authenticate) refuses everything.
    pub auth: Option<Arc<auth::AuthFile>>,
    /// Whether pushes run the repository's hooks, and their timeout (`--no-hooks`,
    /// `--hook-timeout`).
    pub hooks: packd_protocol::hooks::HookOptions,
    /// Threads of the maintenance run after pushes (`--maintenance-threads`; 0, as with
    /// `--no-maintenance`: none, and no maintenance): see [`maintenance`].
    pub maintenance_threads: usize,
    /// After this long without a push, a repository's objects outside its bitmapped pack
    /// are appended to it (`--maintenance-settle`; `None`: never): see [`maintenance`].
    pub maintenance_settle: Option<Duration>,
}

/// Limits that protect the server from slow, idle or greedy clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A connection with no traffic for this long is closed; each read and write of a request
    /// in flight must progress within it.
    pub idle_timeout: Duration,
    /// Connections served at once (HTTP and git:// together); more get 503 or are closed.
    pub max_connections: usize,
    /// Largest request body accepted, before and after gzip. For a push this bounds the
    /// commands and push options that precede the pack; the pack has its own limit.
    pub max_request_bytes: u64,
    /// Largest pack one push may send (after gzip). The pack is streamed to receive-pack as it
    /// arrives, so this bounds disk use, not memory; a larger one is refused with git's
    /// `unpack` report and nothing is kept.
    pub max_push_bytes: u64,
    /// Bytes a second a request must arrive at on average, after an allowance of one idle
    /// timeout (see [`pace`]); 0: only the idle timeout bounds each wait. Request heads
    /// must arrive whole within the idle timeout.
    pub min_request_rate: u64,
    /// Connections served at once from one address (an IPv6 /64 counts as one); 0: no limit
    /// but `max_connections`.
    pub max_connections_per_address: usize,
    /// On SIGTERM or SIGINT, how long requests in flight may take to finish before the
    /// server exits anyway.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_request_bytes: 100 * 1024 * 1024,
            max_push_bytes: 4 * 1024 * 1024 * 1024,
            min_request_rate: 1024,
            max_connections_per_address: 0,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// What every connection shares: the root, the repository cache and the limits.
pub struct Shared {
    /// The served root.
    pub root: paths::Root,
    /// Opened repositories.
    pub cache: repos::RepoCache,
    /// Limits in force.
    pub limits: Limits,
    /// Whether pushes are accepted.
    pub allow_push: bool,
    /// Whether a push may create its repository.
    pub create_on_push: bool,
    /// Repositories pushes are creating (see [`create`]).
    pub creations: Arc<create::Creations>,
    /// Users allowed in, when access is controlled (see [`Config::auth`]).
    pub auth: Option<Arc<auth::AuthFile>>,
    /// How pushes run hooks (see [`Config::hooks`]).
    pub hooks: packd_protocol::hooks::HookOptions,
    /// Checks their credentials at a bounded cost (see [`credentials`]).
    pub verifier: Option<credentials::Verifier>,
    /// Connection slots (see [`admission`]).
    pub slots: Arc<admission::Slots>,
    /// The stages of a graceful stop (see [`stopping`]).
    pub stopping: stopping::Stopping,
    /// The maintenance after pushes, unless disabled (see [`maintenance`]).
    pub maintenance: Option<maintenance::Maintenance>,
}

impl Shared {
    /// Tells the maintenance pool that a push to `git_dir` updated refs.
    pub fn pushed(&self, git_dir: &std::path::Path, stats: &packd_protocol::PushStats) {
        if stats.updated > 0 && stats.unpack_error.is_none() {
            if let Some(m) = &self.maintenance {
                m.after_push(git_dir);
            }
        }
    }
}

/// A bound server, not yet accepting.
pub struct Server {
    http: TcpListener,
    daemon: Option<TcpListener>,
    shared: Arc<Shared>,
}

fn bind(addr: &str) -> Result<TcpListener, ServeError> {
    let err = |source| ServeError::Listen {
        addr: addr.to_string(),
        source,
    };
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(err)?.collect();
    let listener = TcpListener::bind(&addrs[..]).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

impl Server {
    /// Checks the root and binds the listeners.
    pub fn bind(config: &Config) -> Result<Server, ServeError> {
        let root = match &config.store {
            Some(store) => paths::Root::in_store(store.clone()),
            None => paths::Root::new(&config.root).map_err(|source| ServeError::Root {
                path: config.root.display().to_string(),
                source,
            })?,
        };
        let mut cache = repos::RepoCache::new(
            config.cache_capacity,
            config.upload_pack.clone(),
            config.clone_cache_bytes,
            config.repository.clone(),
        );
        if let Some(store) = &config.store {
            cache = cache.with_store(store.clone());
        }
        let http = bind(&config.listen)?;
        let daemon = config.git_daemon.as_deref().map(bind).transpose()?;
        Ok(Server {
            http,
            daemon,
            shared: Arc::new(Shared {
                root,
                cache,
                limits: config.limits,
                allow_push: config.allow_push,
                create_on_push: config.create_on_push,
                creations: Arc::default(),
                auth: config.auth.clone(),
                hooks: config.hooks.clone(),
                verifier: config.auth.clone().map(credentials::Verifier::new),
                slots: admission::Slots::new(
                    config.limits.max_connections,
                    config.limits.max_connections_per_address,
                ),
                stopping: stopping::Stopping::default(),
                maintenance: (config.maintenance_threads > 0).then(|| {
                    maintenance::Maintenance::start(
                        config.maintenance_threads,
                        config.maintenance_settle,
                    )
                }),
            }),
        })
    }

    /// The address the HTTP listener is bound to.
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    /// The address the git:// listener is bound to, if there is one.
    pub fn daemon_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.daemon.as_ref().map(|l| l.local_addr())
    }

    /// Accepts and serves connections until SIGTERM or SIGINT, then stops gracefully (see
    /// [`stopping`]: this blocks both signals in the calling thread and takes them in a thread
    /// of its own). Returns once the server stopped.
    pub fn run(self) -> Result<(), ServeError> {
        memory::tune_for_serving();
        let shared = self.shared.clone();
        stopping::take_signals(move |name| {
            tracing::info!(
                target: LIFECYCLE,
                "{name}: stopping; no new connections, waiting up to {:?} for {} in flight",
                shared.limits.shutdown_grace,
                shared.slots.in_use()
            );
            shared.stopping.stop();
        });
        let max = self.shared.limits.max_connections.max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .max_blocking_threads(max.saturating_add(64))
            .thread_name("packd-serve")
            .build()
            .map_err(ServeError::Runtime)?;
        let shared = self.shared.clone();
        let result = runtime.block_on(async move {
            let http = tokio::net::TcpListener::from_std(self.http).map_err(|source| {
                ServeError::Listen {
                    addr: "http".into(),
                    source,
                }
            })?;
            let daemon = match self.daemon {
                Some(l) => Some(tokio::net::TcpListener::from_std(l).map_err(|source| {
                    ServeError::Listen {
                        addr: "git".into(),
                        source,
                    }
                })?),
                None => None,
            };
            let shared = self.shared;
            let daemon_loop = async {
                if let Some(daemon) = daemon {
                    accept_daemon(daemon, shared.clone()).await;
                }
            };
            tokio::join!(accept_http(http, shared.clone()), daemon_loop);
            finish_in_flight(&shared).await;
            Ok(())
        });
        // Threads still blocked on a client after the cut are not waited for.
        runtime.shutdown_background();
        if let Some(m) = &shared.maintenance {
            for git_dir in m.finish(shared.limits.shutdown_grace) {
                tracing::warn!(
                    target: LIFECYCLE,
                    "{}: maintenance still running after {:?}, abandoned (safe: it leaves no partial file)",
                    git_dir.display(),
                    shared.limits.shutdown_grace
                );
            }
        }
        if result.is_ok() {
            tracing::info!(
                target: LIFECYCLE,
                "stopped ({} connections were cut off)",
                shared.slots.in_use()
            );
        }
        result
    }
}

/// The tracing target of the server's start and stop lines, which `packd serve` shows by
/// default (as the access log's), so that a stop is always logged.
pub const LIFECYCLE: &str = "packd_serve::lifecycle";

/// Once the listeners are closed: waits for the connections in flight to end, at most the
/// shutdown grace, then cuts those left and gives them a moment to clean up (a cut push removes
/// its quarantine).
async fn finish_in_flight(shared: &Shared) {
    let all_done = async {
        while shared.slots.in_use() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(shared.limits.shutdown_grace, all_done)
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        "shutdown grace of {:?} over: cutting off {} connections",
        shared.limits.shutdown_grace,
        shared.slots.in_use()
    );
    shared.stopping.cut();
    let cleaned = async {
        while shared.slots.in_use() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), cleaned).await;
}

/// Waits a little after a failed accept (out of file descriptors, usually) so as not to spin.
async fn accept_failed(e: std::io::Error) {
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Accepts connections on `listener` until the server stops, handing each to `serve` with its
/// slot, or to `refuse` (at most [`admission::MAX_REFUSALS`] at once; beyond, it is closed)
/// when there is none for it.
async fn accept_loop<R>(
    listener: tokio::net::TcpListener,
    shared: &Shared,
    kind: &str,
    serve: impl Fn(tokio::net::TcpStream, SocketAddr, admission::Slot),
    refuse: impl Fn(tokio::net::TcpStream, admission::Busy) -> R,
) where
    R: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shared.stopping.stopped() => return,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(e).await;
                continue;
            }
        };
        match shared.slots.take(remote.ip()) {
            Ok(slot) => serve(stream, remote, slot),
            Err(busy) => {
                tracing::warn!(target: access_log::TARGET, "{remote}: {kind}: {}", busy.message());
                if let Some(permit) = shared.slots.refusal() {
                    let refusal = refuse(stream, busy);
                    tokio::spawn(async move {
                        refusal.await;
                        drop(permit);
                    });
                }
            }
        }
    }
}

async fn accept_http(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let serve = |stream, remote, slot| {
        let shared = shared.clone();
        tokio::spawn(async move {
            http::serve_connection(shared, stream, remote).await;
            drop(slot);
        });
    };
    accept_loop(listener, &shared, "http", serve, admission::refuse_http).await;
}

async fn accept_daemon(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let serve = |stream: tokio::net::TcpStream, remote, slot| {
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("{remote}: {e}");
                return;
            }
        };
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            daemon::serve_connection(shared, stream, remote);
            drop(slot);
        });
    };
    accept_loop(listener, &shared, "git", serve, admission::refuse_git).await;
}

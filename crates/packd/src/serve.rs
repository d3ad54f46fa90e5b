//! `packd serve`: every repository under a directory, to git clients over smart HTTP (and,
//! with `--git-daemon`, git://). The bound addresses are printed first on stdout (one line
//! each, flushed), so that scripts can start it on port 0 and read where it listens.

use anyhow::{Context, Result};
use packd_protocol::UploadPackOptions;
use packd_serve::auth::AuthFile;
use packd_serve::{Config, Limits, RepositoryOptions, Server};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `packd serve`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Repositories: a request for /NAME serves ROOT/NAME, else ROOT/NAME.git \
    (bare, or a work tree with .git); paths that leave ROOT (.., absolute, symlinks out) are \
    refused. Clone with: git clone http://ADDR/NAME.git. Dumb HTTP is refused, and pushes unless --allow-push is given \
    (or --auth-file, to users with a write right). \
    One access log line per request goes to stderr, stamped with its RFC 3339 UTC time \
    (PACKD_LOG sets the filter; default warn,packd_serve::access=info,packd_serve::lifecycle=info)."
)]
pub struct Args {
    /// Directory whose repositories are served.
    #[arg(long, value_name = "DIR", required_unless_present_any = ["hash_token", "store"])]
    root: Option<PathBuf>,

    /// Serve the repositories under a prefix of S3-compatible object storage instead
    /// (s3://BUCKET/PREFIX, as `packd import` put them; endpoint, region and credentials
    /// from the usual AWS environment variables). Fetches only: pushes are refused.
    #[arg(long, value_name = "URL", conflicts_with = "root")]
    store: Option<String>,

    /// With --store: this server's directory of what it derives from the repositories
    /// (`repos/NAME/`: clone packs, kept walks) and of the block cache's disk tier
    /// (`blocks/`). Default: $XDG_CACHE_HOME/packd/store, else ~/.cache/packd/store.
    #[arg(long, value_name = "DIR", requires = "store")]
    cache_dir: Option<PathBuf>,

    /// With --store: the memory of the block cache that every repository's reads from the
    /// store go through (64 KiB blocks of packs, indexes, bitmaps and reftables).
    #[arg(long, value_name = "BYTES", default_value = "256m", value_parser = crate::parse_size,
          requires = "store")]
    block_cache_bytes: u64,

    /// With --store: a second tier of the block cache on local disk, of at most BYTES, in
    /// the cache directory's `blocks/` (0: none).
    #[arg(long, value_name = "BYTES", default_value = "0", value_parser = crate::parse_size,
          requires = "store")]
    block_cache_disk_bytes: u64,

    /// With --store: how a batch of ranged reads becomes requests to the store: `merge`
    /// neighbours whose gap costs less than a round trip (seed 004's rule, with the latency
    /// and bandwidth measured as the server runs), `sort` them and join only touching ones,
    /// or `off`: a GET per range (for comparing them).
    #[arg(long, value_name = "MODE", default_value = "merge", value_parser = ["merge", "sort", "off"],
          requires = "store")]
    store_coalescing: String,

    /// Address for smart HTTP (port 0 picks a free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,

    /// Also serve the git:// protocol on ADDR (git's port is 9418).
    #[arg(long, value_name = "ADDR")]
    git_daemon: Option<String>,

    /// Close connections with no traffic for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    idle_timeout: u64,

    /// Most connections served at once (HTTP and git:// together); more are answered git's
    /// way: HTTP 503 (after the request is read), git:// an ERR line.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_connections: usize,

    /// Most connections served at once from one client address (an IPv6 /64 counts as one),
    /// answered like those past --max-connections; 0: no limit of its own.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_connections_per_address: usize,

    /// A request (HTTP body, git:// request and push) must arrive at this many bytes a second
    /// on average after its first --idle-timeout (k/m suffixes; 0: only --idle-timeout, per
    /// read, bounds it). A request's headers must arrive whole within --idle-timeout.
    #[arg(long, value_name = "BYTES", default_value = "1k", value_parser = crate::parse_size)]
    min_request_rate: u64,

    /// On SIGTERM or SIGINT stop accepting and give requests in flight this long to finish,
    /// then exit 0; a second signal stops at once.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    shutdown_grace: u64,

    /// Largest request body accepted, compressed and inflated (k/m/g suffixes); for a push,
    /// the commands and push options before the pack (see --max-push-bytes).
    #[arg(long, value_name = "BYTES", default_value = "100m", value_parser = crate::parse_size)]
    max_request_bytes: u64,

    /// Largest pack one push may send, over HTTP or git:// (k/m/g suffixes). The pack is streamed into
    /// receive-pack as it arrives (memory stays bounded whatever its size); a larger one is
    /// refused with git's "unpack" error and nothing is kept. The commands before the pack stay
    /// bounded by --max-request-bytes.
    #[arg(long, value_name = "BYTES", default_value = "4g", value_parser = crate::parse_size)]
    max_push_bytes: u64,

    /// Room for clone packs in each repository (k/m/g suffixes; 0 turns it off). The pack sent
    /// to a clone (no haves, not shallow) of 10,000 objects or more is kept in
    /// `<git dir>/packd-cache/clone/`, and an identical clone later (same wants, filter and
    /// tags) is sent from it as a file copy; the least recently used go first. A clone that is
    /// a pack's entries as they are, then pushed objects, is kept as a recipe of the pack's
    /// ranges instead, a few hundred bytes.
    #[arg(long, value_name = "BYTES", default_value = "1g", value_parser = crate::parse_size)]
    clone_cache_bytes: u64,

    /// Accept pushes (git-receive-pack over HTTP and git://) from anyone who can reach the
    /// server: for loopback use. Without it pushes are refused.
    #[arg(long)]
    allow_push: bool,

    /// A push to a path under the root with no repository creates an empty bare repository
    /// there (otherwise: 404), over HTTP and git://, with --allow-push (or --auth-file over
    /// HTTP). Never inside another repository; a first push that takes no ref leaves nothing.
    #[arg(long)]
    create_on_push: bool,

    /// Control access: every HTTP request needs basic auth of a user of FILE (lines
    /// `user:PHC-hash:rights`, rights `read:PREFIX`/`write:PREFIX` comma-separated, `*` for
    /// all; see `--hash-token`). Users with a write right may push; git:// refuses everything.
    #[arg(long, value_name = "FILE")]
    auth_file: Option<PathBuf>,

    /// Read a token on stdin, print its PHC hash (the middle field of an --auth-file line)
    /// and exit.
    #[arg(long, hide = true)]
    hash_token: bool,

    /// Do not run the repositories' hooks on push (pre-receive, update, post-receive, ...):
    /// for repositories whose owners the server does not trust, since a hook runs as the
    /// server's user. By default they run, as git's receive-pack runs them.
    #[arg(long)]
    no_hooks: bool,

    /// A push's hook still running after this many seconds is killed, with its process
    /// group, and the push refused as by a failed hook.
    #[arg(long, value_name = "SECS", default_value_t = packd_protocol::hooks::DEFAULT_HOOK_TIMEOUT_SECS)]
    hook_timeout: u64,

    /// Run no maintenance after pushes. By default each push that updated refs is followed,
    /// in the background, by a geometric repack of its repository (factor 2): while the
    /// objects outside the bitmapped pack stay under 1/20 of those in it, only the packs
    /// outside and loose objects are rolled up; past that, they are appended to the
    /// bitmapped pack, with bitmaps for the new commits (a repository with no bitmapped pack
    /// gets a multi-pack-index, its bitmap and the commit-graph instead). At most one per
    /// repository at a time; pushes arriving meanwhile coalesce into one more run.
    #[arg(long)]
    no_maintenance: bool,

    /// Threads running maintenance after pushes (at nice +10, so that serving comes first;
    /// 0: none, as --no-maintenance).
    #[arg(long, value_name = "N", default_value_t = 1)]
    maintenance_threads: usize,

    /// Seconds without a push after which a repository's objects outside its bitmapped pack
    /// are appended to it, so that a quiet repository is one pack with bitmaps (a mirror
    /// clone is then that file as it is). It rewrites the pack, so it runs at most once per
    /// quiet period and never sooner after the last one than 20 times its duration. 0: never.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    maintenance_settle: u64,

    /// Most repositories kept open (indexes and bitmaps loaded) between requests.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_open_repos: usize,
}

/// The repositories under the store `url`, their derived data in `--cache-dir` (or the
/// default), every read of them through one block cache.
fn store_root(url: &str, args: &Args) -> Result<packd_serve::store::StoreRoot> {
    let coalescing = match args.store_coalescing.as_str() {
        "off" => packd_storage::Coalescing::Off,
        "sort" => packd_storage::Coalescing::SortOnly,
        _ => packd_storage::Coalescing::Merge,
    };
    let reads = packd_storage::ReadOptions {
        coalescing,
        ..packd_storage::ReadOptions::default()
    };
    let storage = crate::bucket::open_s3_with(url, reads)?;
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .context("no --cache-dir, and neither XDG_CACHE_HOME nor HOME is set")?
            .join("packd/store"),
    };
    let blocks = Arc::new(
        packd_storage::BlockCache::new(&packd_storage::BlockCacheConfig {
            memory_bytes: args.block_cache_bytes,
            disk: (args.block_cache_disk_bytes > 0)
                .then(|| (cache.join("blocks"), args.block_cache_disk_bytes)),
            ..packd_storage::BlockCacheConfig::default()
        })
        .context("the block cache")?,
    );
    let at = move |sub: &str| -> Arc<dyn packd_storage::Storage> {
        Arc::new(packd_storage::CachedStorage::new(
            Arc::new(storage.at(sub)),
            blocks.clone(),
        ))
    };
    let repos = cache.join("repos");
    packd_serve::store::StoreRoot::new(Box::new(at), url.to_string(), &repos)
        .with_context(|| format!("the cache directory {}", repos.display()))
}

/// Runs `packd serve` until the process is stopped.
pub fn run(args: &Args, repository: RepositoryOptions) -> Result<ExitCode> {
    if args.hash_token {
        let mut token = String::new();
        std::io::stdin()
            .read_line(&mut token)
            .context("reading the token on stdin")?;
        let token = token.trim_end_matches(['\n', '\r']);
        anyhow::ensure!(!token.is_empty(), "no token on stdin");
        println!("{}", packd_serve::auth::hash_token(token)?);
        return Ok(ExitCode::SUCCESS);
    }
    let store = match &args.store {
        Some(url) => Some(Arc::new(store_root(url, args)?)),
        None => None,
    };
    let root = match (&args.root, &store) {
        (Some(root), _) => root.clone(),
        (None, Some(store)) => store.cache().to_path_buf(),
        (None, None) => anyhow::bail!("--root or --store is required"),
    };
    let auth = match &args.auth_file {
        Some(path) => Some(Arc::new(AuthFile::load(path)?)),
        None => None,
    };
    let config = Config {
        root,
        store,
        listen: args.listen.clone(),
        git_daemon: args.git_daemon.clone(),
        limits: Limits {
            idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
            max_connections: args.max_connections.max(1),
            max_request_bytes: args.max_request_bytes,
            max_push_bytes: args.max_push_bytes,
            min_request_rate: args.min_request_rate,
            max_connections_per_address: args.max_connections_per_address,
            shutdown_grace: Duration::from_secs(args.shutdown_grace),
        },
        cache_capacity: args.max_open_repos.max(1),
        upload_pack: UploadPackOptions::default(),
        clone_cache_bytes: args.clone_cache_bytes,
        repository,
        allow_push: args.allow_push,
        create_on_push: args.create_on_push,
        auth,
        hooks: packd_protocol::hooks::HookOptions {
            enabled: !args.no_hooks,
            timeout: Duration::from_secs(args.hook_timeout.max(1)),
        },
        maintenance_threads: if args.no_maintenance {
            0
        } else {
            args.maintenance_threads
        },
        maintenance_settle: (args.maintenance_settle > 0)
            .then(|| Duration::from_secs(args.maintenance_settle)),
    };
    let server = Server::bind(&config)?;
    let mut out = std::io::stdout().lock();
    let http = server.http_addr().context("reading the HTTP address")?;
    writeln!(out, "listening on http://{http}")?;
    if let Some(addr) = server.daemon_addr() {
        writeln!(
            out,
            "listening on git://{}",
            addr.context("reading the git:// address")?
        )?;
    }
    out.flush()?;
    drop(out);
    server.run()?;
    Ok(ExitCode::SUCCESS)
}

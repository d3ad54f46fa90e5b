//! A real S3-compatible server for packd's tests: the Versity S3 gateway (versitygw), installed
//! at a pinned version by `scripts/install-s3-server.sh` and started on 127.0.0.1 at a free
//! port, over a temporary directory, with keys of its own; killed when dropped.
//!
//! ```text
//! let server = S3Server::start();          // installs once per cache, starts, waits until ready
//! server.create_bucket("packd");           // a bucket is a directory of the server's root
//! server.endpoint()                        // http://127.0.0.1:PORT, path-style, us-east-1
//! server.access_key_id(), server.secret_access_key()
//! ```
//!
//! Any crate's integration tests can use it as a dev-dependency; it depends on nothing of
//! packd, so that the storage crate's own tests can use it. The gateway keeps each object as a
//! file under `ROOT/BUCKET/KEY` and its metadata (the ETag) in the file's extended attributes,
//! which the temporary directory's filesystem must support (ext4 does). It is a gateway over
//! one filesystem, not a distributed store, and tests treat it as "an S3 server": what they
//! check is what S3's protocol promises (conditional writes decided atomically, ranged reads).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the server may take to answer after it was started (it takes about 0.1 s).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the install script may take (a build from the module proxy: about 3 minutes on
/// two busy cores).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);

/// The region the server answers for (it accepts requests signed for it).
pub const REGION: &str = "us-east-1";

/// The workspace's root directory (for the install script).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cache the install script uses: `$PACKD_TEST_S3_DIR`, else `~/.cache/packd-test-s3`.
fn cache_dir() -> PathBuf {
    match std::env::var_os("PACKD_TEST_S3_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".cache/packd-test-s3"),
            None => std::env::temp_dir().join("packd-test-s3"),
        },
    }
}

/// The versitygw binary, installed (once per test binary; the script itself caches across
/// runs) by `scripts/install-s3-server.sh`. Panics with the script's output if it failed.
pub fn server_binary() -> PathBuf {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let script = repo_root().join("scripts/install-s3-server.sh");
            let mut child = Command::new("bash")
                .arg(&script)
                .arg(cache_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            let start = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                    break status;
                }
                if start.elapsed() > INSTALL_TIMEOUT {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{} took more than {INSTALL_TIMEOUT:?}",
                        script.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let mut out = String::new();
            let mut err = String::new();
            let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
            let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
            let binary = out.lines().last().map(PathBuf::from);
            match binary {
                Some(path) if status.success() && path.is_file() => Ok(path),
                _ => Err(format!(
                    "{} failed ({status}):\n{out}{err}",
                    script.display()
                )),
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("the S3 test server could not be installed: {e}"))
}

/// A running versitygw over a temporary directory; killed (and the directory removed) when
/// dropped.
#[derive(Debug)]
pub struct S3Server {
    child: Option<Child>,
    /// The server's root: one directory per bucket; also holds the server's log.
    dir: tempfile::TempDir,
    port: u16,
    access_key_id: String,
    secret_access_key: String,
}

impl S3Server {
    /// Installs (if needed) and starts a server at a free port of 127.0.0.1 and waits until
    /// it answers. Panics, with the server's log, if it does not.
    pub fn start() -> S3Server {
        let binary = server_binary();
        let dir = tempfile::Builder::new()
            .prefix("packd-s3-")
            .tempdir()
            .expect("a temporary directory for the S3 server");
        std::fs::create_dir(dir.path().join("root")).expect("the S3 server's root");
        let mut server = S3Server {
            child: None,
            dir,
            port: 0,
            access_key_id: "packdtest".to_string(),
            // Distinct per server, so that a test signing for one server is refused by another.
            secret_access_key: format!("packd-secret-{}-{}", std::process::id(), unique()),
        };
        // A port picked by binding port 0 may be taken by someone else before the server binds
        // it: then the server exits at once, and another port is tried.
        let mut last_log = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn(&binary) {
                Ok(()) => return server,
                Err(log) => last_log = log,
            }
        }
        panic!("the S3 test server did not start; its last log:\n{last_log}");
    }

    /// Starts the binary at `self.port` and waits until it answers; the log if it exits first
    /// or never answers.
    fn spawn(&mut self, binary: &Path) -> Result<(), String> {
        let log_path = self.dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .arg("--port")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("posix")
            .arg(self.dir.path().join("root"))
            .env("ROOT_ACCESS_KEY_ID", &self.access_key_id)
            .env("ROOT_SECRET_ACCESS_KEY", &self.secret_access_key)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("exited with {status}:\n{log}"));
            }
            if answers(self.port) {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                self.stop();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("no answer within {READY_TIMEOUT:?}:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (its data stays): requests fail until [`S3Server::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again at the same port over the same data (after
    /// [`S3Server::stop`], or at once: it is stopped first). Panics if it does not answer.
    pub fn restart(&mut self) {
        self.stop();
        let binary = server_binary();
        if let Err(log) = self.spawn(&binary) {
            panic!(
                "the S3 test server did not restart on port {}:\n{log}",
                self.port
            );
        }
    }

    /// Creates bucket `name` (lowercase letters, digits and `-`, as S3 names them): on this
    /// gateway a bucket is a directory of the root, which it then serves.
    pub fn create_bucket(&self, name: &str) {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "not a bucket name: {name:?}"
        );
        std::fs::create_dir(self.dir.path().join("root").join(name))
            .unwrap_or_else(|e| panic!("cannot create bucket {name}: {e}"));
    }

    /// The server's URL: `http://127.0.0.1:PORT` (path-style requests).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The access key it accepts.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The secret key that goes with [`S3Server::access_key_id`].
    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }

    /// The directory holding bucket `bucket`'s objects, one file per key (for tests that look
    /// behind the protocol, or break things on purpose).
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.dir.path().join("root").join(bucket)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A number distinct for each call in this process.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Whether an S3 server answers at `port`: an unsigned `GET /` is refused with 403 (which
/// only a server that parsed the request sends).
fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 403")
}

/// A TCP proxy on 127.0.0.1 in front of a server, which can lose what passes through it on
/// demand: the faults a client of object storage must survive without corrupting anything
/// (a request cut before the server saw it, an answer lost after the server acted on it).
/// Connections are relayed byte for byte otherwise. Stops accepting when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    faults: std::sync::Arc<Faults>,
}

/// The faults a [`FaultProxy`] is armed with: counters consumed by the next requests or
/// answers that pass.
#[derive(Debug, Default)]
struct Faults {
    stop: std::sync::atomic::AtomicBool,
    cut_requests: std::sync::atomic::AtomicU32,
    lose_answers: std::sync::atomic::AtomicU32,
    /// Answers to cut short, and after how many of their bytes.
    short_answers: std::sync::atomic::AtomicU32,
    short_after: std::sync::atomic::AtomicU64,
}

impl Faults {
    /// Takes one fault from `counter` if it holds any.
    fn take(counter: &std::sync::atomic::AtomicU32) -> bool {
        use std::sync::atomic::Ordering;
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

impl FaultProxy {
    /// A proxy at a free port of 127.0.0.1 relaying to `upstream_port` of 127.0.0.1.
    pub fn start(upstream_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        let port = listener.local_addr().expect("the proxy's port").port();
        let faults = std::sync::Arc::new(Faults::default());
        let shared = faults.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let (Ok(client), Ok(server)) =
                    (client, TcpStream::connect(("127.0.0.1", upstream_port)))
                else {
                    continue;
                };
                relay(client, server, shared.clone());
            }
        });
        FaultProxy { port, faults }
    }

    /// The proxy's URL, to give the client instead of the server's.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The next `n` requests (the first bytes a client sends on a connection after this)
    /// are cut: their connection is closed before the server sees anything of them.
    pub fn cut_next_requests(&self, n: u32) {
        self.faults
            .cut_requests
            .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// The next `n` answers are lost: the server got the whole request and acted on it, and
    /// its answer's connection is closed before the client gets a byte of it.
    pub fn lose_next_answers(&self, n: u32) {
        self.faults
            .lose_answers
            .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }
}

impl FaultProxy {
    /// The next `n` answers are cut short: their connection is closed after `bytes` bytes of
    /// the answer (its head included) reached the client.
    pub fn cut_next_answers_after(&self, n: u32, bytes: u64) {
        use std::sync::atomic::Ordering;
        self.faults.short_after.store(bytes, Ordering::SeqCst);
        self.faults.short_answers.fetch_add(n, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.faults
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Relays one connection both ways on two threads, applying `faults`.
fn relay(client: TcpStream, server: TcpStream, faults: std::sync::Arc<Faults>) {
    let pipe =
        |mut from: TcpStream, mut to: TcpStream, faults: std::sync::Arc<Faults>, requests: bool| {
            move || {
                let mut buf = vec![0u8; 64 * 1024];
                // Bytes this answer may still pass, once it is being cut short.
                let mut allowed: Option<u64> = None;
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let counter = if requests {
                        &faults.cut_requests
                    } else {
                        &faults.lose_answers
                    };
                    if Faults::take(counter) {
                        break;
                    }
                    if !requests && allowed.is_none() && Faults::take(&faults.short_answers) {
                        allowed =
                            Some(faults.short_after.load(std::sync::atomic::Ordering::SeqCst));
                    }
                    let pass = allowed.map_or(n, |a| n.min(a as usize));
                    if to.write_all(&buf[..pass]).is_err() {
                        break;
                    }
                    if let Some(a) = allowed.as_mut() {
                        *a -= pass as u64;
                        if *a == 0 {
                            break;
                        }
                    }
                }
                let _ = from.shutdown(std::net::Shutdown::Both);
                let _ = to.shutdown(std::net::Shutdown::Both);
            }
        };
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(pipe(client, server, faults.clone(), true));
    std::thread::spawn(pipe(server2, client2, faults, false));
}

/// A TCP proxy on 127.0.0.1 in front of a server that makes the link slow the way a distant
/// store is: every byte reaches the other side `round_trip / 2` after it was sent (so that a
/// request and its answer cost `round_trip` more than without the proxy, and a new
/// connection costs one more for its handshake), at most `bytes_per_second` bytes per second
/// each way on each connection if a limit is given. Bytes are relayed unchanged, in order.
/// Stops accepting when dropped.
///
/// Benchmarks compare read strategies through it; tests count requests through it, never
/// time them.
#[derive(Debug)]
pub struct DelayProxy {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How much a [`DelayProxy`] relay reads at once, and how many such pieces may wait in one
/// direction of a connection: what one direction holds is bounded (16 MiB).
const DELAY_PIECE: usize = 64 * 1024;
const DELAY_QUEUE: usize = 256;

impl DelayProxy {
    /// A proxy at a free port of 127.0.0.1 relaying to `upstream_port` of 127.0.0.1, adding
    /// `round_trip` to each round trip and limiting each direction of each connection to
    /// `bytes_per_second` (`None`: no limit).
    pub fn start(
        upstream_port: u16,
        round_trip: Duration,
        bytes_per_second: Option<u64>,
    ) -> DelayProxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        let port = listener.local_addr().expect("the proxy's port").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stopping, counted) = (stop.clone(), connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    // The handshake's round trip.
                    std::thread::sleep(round_trip);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone())
                    else {
                        return;
                    };
                    let one_way = round_trip / 2;
                    delayed_pipe(client, server, one_way, bytes_per_second);
                    delayed_pipe(server2, client2, one_way, bytes_per_second);
                });
            }
        });
        DelayProxy {
            port,
            stop,
            connections,
        }
    }

    /// The proxy's URL, to give the client instead of the server's.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The connections it has accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Relays `from` to `to`, each piece `delay` after it was read and no faster than
/// `bytes_per_second`: a reader thread stamps what it reads, a writer thread sends it when due.
/// Both ends are shut down when either side closes.
fn delayed_pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Duration,
    bytes_per_second: Option<u64>,
) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Instant, Vec<u8>)>(DELAY_QUEUE);
    let (from2, to2) = (from.try_clone().ok(), to.try_clone().ok());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; DELAY_PIECE];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // The writer sends what is queued, then shuts both down.
    });
    std::thread::spawn(move || {
        // When the link is free again (for the bandwidth limit).
        let mut free_at = Instant::now();
        for (due, piece) in rx {
            let at = due.max(free_at);
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            if let Some(rate) = bytes_per_second.filter(|&r| r > 0) {
                free_at =
                    Instant::now() + Duration::from_secs_f64(piece.len() as f64 / rate as f64);
            }
            if to.write_all(&piece).is_err() {
                break;
            }
        }
        if let Some(s) = from2 {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(s) = to2 {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    });
}

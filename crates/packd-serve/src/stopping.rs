//! Stopping the server gracefully on SIGTERM or SIGINT.
//!
//! ```text
//! 1st signal ─> stop: listeners closed, idle HTTP connections closed, git:// connections that
//!               sent no request yet shut; requests in flight go on   ("stopping: ...")
//!   all done, or --shutdown-grace later ─> cut: request bodies and responses still in flight
//!               fail (a push then fails like any broken one: its quarantine is removed and no
//!               ref moves), git:// sockets are shut; a moment for that, then exit 0 ("stopped")
//! 2nd signal ─> exit at once (status 130 for SIGINT, 143 for SIGTERM), with a log line
//! ```
//!
//! The signals are taken by a thread of their own (`sigwait`), so they are blocked in every
//! other thread of the process; child processes (hooks) get the usual mask back, as
//! `std::process::Command` resets it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

/// The two stages of a stop, each a flag that turns true once, and the git:// sockets to shut.
#[derive(Debug)]
pub struct Stopping {
    stop: watch::Sender<bool>,
    cut: watch::Sender<bool>,
    next_id: AtomicU64,
    /// git:// sockets open now, and whether each has sent its request.
    sockets: Mutex<HashMap<u64, (TcpStream, bool)>>,
}

impl Default for Stopping {
    fn default() -> Self {
        Stopping {
            stop: watch::channel(false).0,
            cut: watch::channel(false).0,
            next_id: AtomicU64::new(0),
            sockets: Mutex::new(HashMap::new()),
        }
    }
}

/// A git:// socket known to [`Stopping`] while this lives.
#[derive(Debug)]
pub struct Registered<'a> {
    stopping: &'a Stopping,
    id: u64,
}

impl Registered<'_> {
    /// Records that the connection's request arrived: the first stage leaves it to finish.
    pub fn requested(&self) {
        if let Some(entry) = self.stopping.sockets.lock().get_mut(&self.id) {
            entry.1 = true;
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.stopping.sockets.lock().remove(&self.id);
    }
}

impl Stopping {
    /// Resolves once the server is stopping (first stage).
    pub async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// A receiver of the second stage: requests still in flight must end.
    pub fn cut_signal(&self) -> watch::Receiver<bool> {
        self.cut.subscribe()
    }

    /// Whether the server is stopping.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Starts the first stage.
    pub fn stop(&self) {
        self.stop.send_replace(true);
        for (socket, requested) in self.sockets.lock().values() {
            if !requested {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }

    /// Starts the second stage.
    pub fn cut(&self) {
        self.cut.send_replace(true);
        for (socket, _) in self.sockets.lock().values() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Registers a git:// socket (a clone of it), shut when the server stops.
    pub fn register(&self, socket: &TcpStream) -> Registered<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = socket.try_clone() {
            if self.is_stopping() {
                let _ = clone.shutdown(Shutdown::Both);
            }
            self.sockets.lock().insert(id, (clone, false));
        }
        Registered { stopping: self, id }
    }
}

/// Resolves once `cut` turns true (never, if its sender is gone without it).
pub async fn until_cut(cut: &mut watch::Receiver<bool>) {
    if cut.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread: for threads started before
/// [`take_signals`] (the maintenance and Argon2 pools, started when the server is bound),
/// which would otherwise take a signal meant for the signal thread and die of it.
pub fn block_stop_signals_here() {
    #[cfg(unix)]
    // SAFETY: the sigset is initialised by sigemptyset before use; pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts from now on) and takes
/// them in a thread of their own: the first calls `first`, the second exits the process.
pub fn take_signals(first: impl FnOnce(&'static str) + Send + 'static) {
    #[cfg(unix)]
    // SAFETY: the sigset is initialised by sigemptyset before use; pthread_sigmask and sigwait
    // only read it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            tracing::warn!("cannot block SIGTERM and SIGINT: a signal will stop at once");
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("packd-signals".into())
            .spawn(move || {
                let mut first = Some(first);
                loop {
                    let mut signal: libc::c_int = 0;
                    if libc::sigwait(&set, &mut signal) != 0 {
                        continue;
                    }
                    let name = if signal == libc::SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    };
                    match first.take() {
                        Some(first) => first(name),
                        None => {
                            tracing::warn!("{name} again: stopping at once");
                            std::process::exit(128 + signal);
                        }
                    }
                }
            });
        if spawned.is_err() {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

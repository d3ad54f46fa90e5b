//! Runs one hook process as git's `run-command` does for receive-pack's hooks: its stdout
//! and stderr share one pipe (git's `stdout_to_stderr`), whose bytes are relayed as they come;
//! its stdin is fed from a thread of its own (so that a hook that writes before it reads
//! cannot deadlock with us), a hook that stops reading early is no error (git ignores
//! `SIGPIPE` there); and, beyond git, a hook still running after the timeout is killed with
//! its whole process group (it runs as the leader of a new one), so that a hung hook or its
//! children cannot hold a push, or the pipe, forever.

use super::Relay;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// How a hook process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookExit {
    /// It exited with this status (0: success).
    Exited(i32),
    /// It was ended by this signal (not ours).
    Signalled(i32),
    /// It ran longer than the timeout and was killed, with its process group.
    TimedOut,
    /// It could not be started (the reason).
    NotStarted(String),
}

impl HookExit {
    /// Whether the hook succeeded (exited 0).
    pub fn success(&self) -> bool {
        *self == HookExit::Exited(0)
    }
}

/// One hook invocation.
pub(super) struct Invocation<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    /// The working directory (the git directory, as git's receive-pack runs hooks).
    pub cwd: &'a Path,
    /// Variables set, and (value `None`) removed.
    pub env: &'a [(String, Option<String>)],
    /// Writes its stdin, as the hook reads it (nothing is held beyond a buffer's worth);
    /// `None`: stdin is /dev/null.
    pub stdin: Option<&'a Feed<'a>>,
    pub timeout: Duration,
}

/// What writes a hook's stdin.
pub type Feed<'a> = dyn Fn(&mut dyn Write) -> std::io::Result<()> + Sync + 'a;

/// Size of the reads relayed from the hook's output: each becomes at most one side-band
/// message, so memory stays bounded however much a hook prints.
const CHUNK: usize = 8192;

/// Runs `call`, relaying its output to `relay` as it comes, and returns how it ended.
pub(super) fn run(call: &Invocation<'_>, relay: &mut dyn Relay) -> HookExit {
    let (mut output, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(e) => return HookExit::NotStarted(format!("cannot make a pipe: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return HookExit::NotStarted(format!("cannot make a pipe: {e}")),
    };
    let mut command = command(call);
    command
        .stdout(writer)
        .stderr(writer_err)
        .stdin(if call.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return HookExit::NotStarted(e.to_string()),
    };
    // The command held the pipe's write ends; they are closed now that the child has them,
    // so the read below ends when the hook (and every child it left) closes its copies.
    drop(command);
    let stdin = child.stdin.take();
    supervise(&mut child, call.timeout, || {
        std::thread::scope(|scope| {
            if let (Some(pipe), Some(feed)) = (stdin, call.stdin) {
                scope.spawn(move || {
                    // A hook that does not read its input is no error, as with git.
                    let mut out = std::io::BufWriter::new(pipe);
                    let _ = feed(&mut out).and_then(|()| out.flush());
                });
            }
            relay_all(&mut output, relay);
        })
    })
}

/// The command of `call`, in a process group of its own; its stdio is the caller's to set.
pub(super) fn command(call: &Invocation<'_>) -> Command {
    let mut command = Command::new(call.program);
    command
        .args(call.args)
        .current_dir(call.cwd)
        .process_group(0);
    for (key, value) in call.env {
        match value {
            Some(v) => command.env(key, v),
            None => command.env_remove(key),
        };
    }
    command
}

/// Passes on everything read from `output` until it ends (every writer closed it), with a
/// keepalive whenever the hook was silent for the relay's interval (git's copy_to_sideband).
pub(super) fn relay_all(output: &mut std::io::PipeReader, relay: &mut dyn Relay) {
    use std::os::fd::AsRawFd;
    let every = relay
        .keepalive_every()
        .map(|d| d.as_millis().clamp(1, i32::MAX as u128) as i32);
    let mut buf = [0u8; CHUNK];
    loop {
        if let Some(ms) = every {
            let mut fd = libc::pollfd {
                fd: output.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll(2) on one valid descriptor, which `output` keeps open.
            let ready = unsafe { libc::poll(&mut fd, 1, ms) };
            if ready == 0 {
                relay.keepalive();
                continue;
            }
            if ready < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
        }
        match output.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => relay.relay(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// Runs `work` (the conversation with the hook, ending when its output does), then waits for
/// `child`, the leader of its own process group; if that takes longer than `timeout` in all,
/// the group is killed. Returns how the child ended.
pub(super) fn supervise(child: &mut Child, timeout: Duration, work: impl FnOnce()) -> HookExit {
    let pid = child.id() as libc::pid_t;
    // Set once the child is reaped: the watchdog must not signal a group id that may be
    // reused after that.
    let reaped = Mutex::new(false);
    let timed_out = Mutex::new(false);
    let (done, finished) = mpsc::channel::<()>();
    let status = std::thread::scope(|scope| {
        let (reaped, timed_out) = (&reaped, &timed_out);
        scope.spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(timeout) {
                let reaped = reaped.lock().unwrap_or_else(|e| e.into_inner());
                if !*reaped {
                    *timed_out.lock().unwrap_or_else(|e| e.into_inner()) = true;
                    // SAFETY: kill(2) with a negative pid signals that process group; the
                    // group is the child's own (process_group(0)) and the child is not reaped.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
            }
        });
        work();
        let status = child.wait();
        *reaped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let _ = done.send(());
        status
    });
    if *timed_out.lock().unwrap_or_else(|e| e.into_inner()) {
        return HookExit::TimedOut;
    }
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => HookExit::Exited(code),
            (None, Some(signal)) => HookExit::Signalled(signal),
            (None, None) => HookExit::Exited(-1),
        },
        Err(e) => HookExit::NotStarted(format!("cannot wait for it: {e}")),
    }
}

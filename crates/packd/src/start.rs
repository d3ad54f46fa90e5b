//! packd's process entry point, in place of std's.
//!
//! Before calling a Rust `main`, std's start-up places a guard page under the main thread's
//! stack, which on Linux has glibc read and parse `/proc/self/maps`. That is about a tenth of a
//! millisecond, a few percent of a small push served by `packd receive-pack` (one process per
//! push). packd starts here instead and does itself the parts of std's start-up it relies on:
//! SIGPIPE ignored (a client that hangs up is an error to report, not a silent death), file
//! descriptors 0 to 2 open (so that no file packd opens can take stdout's number and receive
//! its output), panics reported with exit code 101, and stdout flushed at the end. What is
//! left out is the message std prints when the main thread overflows its stack: such a crash
//! is then a plain SIGSEGV.

use std::ffi::{c_char, c_int};
use std::io::Write;
use std::process::ExitCode;

/// The C entry point: prepares the process, runs the command line and returns its exit code.
#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    prepare();
    let code = match std::panic::catch_unwind(crate::run) {
        Ok(code) => status(code),
        // The panic hook has printed the message; 101 is what std's start-up returns.
        Err(_) => 101,
    };
    let _ = std::io::stdout().flush();
    code
}

/// SIGPIPE ignored and descriptors 0, 1 and 2 open (on /dev/null if they were closed).
fn prepare() {
    // SAFETY: setting a signal's disposition to SIG_IGN and probing and opening descriptors
    // touch no memory of ours; nothing else runs yet.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        for fd in 0..=2 {
            if libc::fcntl(fd, libc::F_GETFD) == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
            {
                let opened = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if opened != fd {
                    // Descriptors are taken lowest first, so this only fails if /dev/null
                    // cannot be opened; std aborts then, and so does packd.
                    libc::abort();
                }
            }
        }
    }
}

/// The number an `ExitCode` stands for (it has no accessor: compared against each of 0-255).
fn status(code: ExitCode) -> c_int {
    (0..=255u8)
        .find(|&v| ExitCode::from(v) == code)
        .map_or(1, c_int::from)
}

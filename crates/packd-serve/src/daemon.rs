//! The git:// transport (`gitprotocol-pack`, "Git Transport"): the client's first pkt-line
//! names the service and repository (`git-upload-pack /path\0host=...\0[\0version=2\0]`), then
//! upload-pack talks over the same connection ([`Mode::Stateful`]). Each connection is served
//! on a blocking thread: its request line must arrive whole within the idle timeout, what
//! follows at the request pace ([`crate::pace`]), and each write must go within the idle
//! timeout. Pushes
//! (`git-receive-pack`, unless the server allows them) and anything else are refused with an
//! `ERR` pkt-line. With `--auth-file` every request is refused that way: git:// carries no
//! credentials.

use crate::access_log::{self, LogLine};
use crate::pace::Pace;
use crate::paths::PathError;
use crate::push_head::{read_head, HeadError};
use crate::Shared;
use packd_protocol::{Mode, ProtocolVersion, ReceivePack, ReceivePackOptions};
use packd_storage::RequestReads;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Largest pkt-line (git's LARGE_PACKET_MAX), which bounds the request line.
const MAX_PKT: usize = 65520;

/// The parsed first line of a git:// connection.
#[derive(Debug, PartialEq, Eq)]
pub struct DaemonRequest {
    /// `git-upload-pack`, `git-receive-pack`, ...
    pub service: String,
    /// The repository path as sent (`/repo.git`).
    pub path: String,
    /// The `host=` parameter, if any.
    pub host: Option<String>,
    /// Extra parameters (`version=2`), joined with `:` as in `GIT_PROTOCOL`.
    pub extra: String,
}

/// Parses the payload of the first pkt-line.
pub fn parse_request(payload: &[u8]) -> Result<DaemonRequest, String> {
    let text = std::str::from_utf8(payload).map_err(|_| "request is not UTF-8".to_string())?;
    let mut parts = text.split('\0');
    let first = parts.next().unwrap_or("").trim_end_matches('\n');
    let (service, path) = first
        .split_once(' ')
        .ok_or_else(|| format!("malformed request '{}'", first.escape_debug()))?;
    let mut host = None;
    let mut extra = Vec::new();
    for item in parts {
        if let Some(h) = item.strip_prefix("host=") {
            if host.is_none() {
                host = Some(h.to_string());
                continue;
            }
        }
        if item.contains('=') {
            extra.push(item);
        }
    }
    Ok(DaemonRequest {
        service: service.to_string(),
        path: path.to_string(),
        host,
        extra: extra.join(":"),
    })
}

/// Reads one pkt-line's payload (bounded), or `None` for a flush or end of input.
fn read_pkt(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = [0u8; 4];
    match input.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = std::str::from_utf8(&head)
        .ok()
        .and_then(|h| usize::from_str_radix(h, 16).ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "bad pkt-line length")
        })?;
    if len == 0 {
        return Ok(None);
    }
    if !(4..=MAX_PKT).contains(&len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad pkt-line length {len}"),
        ));
    }
    let mut payload = vec![0u8; len - 4];
    input.read_exact(&mut payload)?;
    Ok(Some(payload))
}

/// Sends `ERR <message>` as a pkt-line.
fn send_err(out: &mut impl Write, message: &str) {
    let mut line = format!("ERR {message}");
    // The message may quote the client's path: cut it (at a character boundary) to fit.
    let mut end = line.len().min(MAX_PKT - 5);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line.truncate(end);
    line.push('\n');
    let _ = write!(out, "{:04x}{line}", line.len() + 4);
    let _ = out.flush();
}

/// A writer that counts the bytes it passes on.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

/// A git:// connection sends file ranges itself: the kernel copies them to the socket
/// (`sendfile`), after what is buffered.
#[cfg(unix)]
impl packd_pack::PackSink for Counting<BufWriter<TcpStream>> {
    fn takes_file_ranges(&self) -> bool {
        packd_pack::FileRange::SENT_BY_KERNEL
    }

    fn send_file_range(&mut self, range: &packd_pack::FileRange) -> std::io::Result<()> {
        self.inner.flush()?;
        range.send_to(self.inner.get_mut())?;
        self.bytes += range.len;
        Ok(())
    }
}

#[cfg(not(unix))]
impl packd_pack::PackSink for Counting<BufWriter<TcpStream>> {}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(data)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The reading half of a git:// connection, at the request pace ([`Pace`]): before each read
/// the socket's read timeout is set to what the pace still allows.
pub struct PacedSocket {
    stream: TcpStream,
    pace: Pace,
}

impl PacedSocket {
    /// Reads `stream` at `pace`.
    pub fn new(stream: TcpStream, pace: Pace) -> PacedSocket {
        PacedSocket { stream, pace }
    }
}

impl Read for PacedSocket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let wait = self.pace.next_wait();
        if wait.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                self.pace.too_slow(),
            ));
        }
        self.stream.set_read_timeout(Some(wait))?;
        let start = Instant::now();
        match self.stream.read(buf) {
            Ok(n) => {
                self.pace.record(start.elapsed(), n);
                Ok(n)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                self.pace.record(start.elapsed().max(wait), 0);
                Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    self.pace.too_slow(),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

/// Serves a push (`--allow-push`): advertisement, then one receive-pack conversation. With
/// `--create-on-push` a path with no repository is advertised as an empty repository and the
/// repository made once the client's commands arrived (see [`crate::create`]); the push's
/// answer then waits until it is kept, or removed when the push took no ref.
fn serve_push(
    shared: &Shared,
    path: &str,
    reader: PacedSocket,
    writer: &mut Counting<BufWriter<TcpStream>>,
    log: &mut LogLine,
) {
    let refuse = |writer: &mut Counting<BufWriter<TcpStream>>, log: &mut LogLine, e: PathError| {
        let message = format!("{}: {e}", path.escape_debug());
        send_err(writer, &message);
        log.note = message;
    };
    let existing = match shared.root.push_destination(path, shared.create_on_push) {
        Ok(d) => d,
        Err(e) => return refuse(writer, log, e),
    };
    let advertised = match &existing {
        Some(git_dir) => {
            let options = ReceivePackOptions {
                store: shared.root.push_store(git_dir),
                ..ReceivePackOptions::default()
            };
            ReceivePack::new(git_dir, options).advertise(writer)
        }
        None => ReceivePack::advertise_empty(writer),
    };
    let advertised = advertised.and_then(|()| writer.flush().map_err(Into::into));
    if let Err(e) = advertised {
        log.status = "failed".into();
        log.note = e.to_string();
        return;
    }
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let head = match read_head(&mut reader, shared.limits.max_request_bytes) {
        Ok(head) => head,
        Err(HeadError::TooLarge(limit)) => {
            let message = format!(
                "push commands and options larger than the server's limit of {limit} bytes"
            );
            send_err(writer, &message);
            log.note = message;
            return;
        }
        Err(HeadError::Io(e)) => {
            log.status = "failed".into();
            log.note = format!("reading the commands: {e}");
            return;
        }
    };
    if head.is_empty() || head == b"0000" {
        // Nothing to push (git hangs up after the advertisement when it is up to date).
        log.status = "ok".into();
        log.bytes = writer.bytes;
        return;
    }
    let target = match shared
        .creations
        .push_target(&shared.root, path, shared.create_on_push)
    {
        Ok(target) => target,
        Err(e) => return refuse(writer, log, e),
    };
    // The same bound on the pack as over HTTP (`--max-push-bytes`).
    let options = ReceivePackOptions {
        limits: packd_odb::pack::data::input::InputLimits {
            max_bytes: shared.limits.max_push_bytes,
            ..Default::default()
        },
        hooks: shared.hooks.clone(),
        store: shared.root.push_store(target.git_dir()),
        ..Default::default()
    };
    let created = target.is_created();
    let mut held = Vec::new();
    let result = {
        let mut stream = Read::chain(&head[..], &mut reader);
        let out: &mut dyn Write = if created { &mut held } else { &mut *writer };
        ReceivePack::new(target.git_dir(), options).serve(&mut stream, out)
    };
    // A repository made for this push is kept or removed before the client reads the report.
    let git_dir = target.git_dir().to_path_buf();
    drop(target);
    if created {
        let _ = writer.write_all(&held);
    }
    let _ = writer.flush();
    log.bytes = writer.bytes;
    match result {
        Ok(stats) => {
            log.status = "ok".into();
            log.objects = stats.objects;
            shared.pushed(&git_dir, &stats);
            if let Some(e) = stats.unpack_error {
                log.note = format!("push refused: {e}");
            }
        }
        Err(e) => {
            log.status = "failed".into();
            log.note = e.to_string();
        }
    }
}

/// Serves one git:// connection to its end (blocking).
pub fn serve_connection(shared: Arc<Shared>, stream: TcpStream, remote: SocketAddr) {
    let idle = shared.limits.idle_timeout;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(idle));
    let _ = stream.set_write_timeout(Some(idle));
    let _ = stream.set_nodelay(true);
    let mut log = LogLine {
        remote,
        method: "git".into(),
        repo: String::new(),
        service: String::new(),
        status: "refused".into(),
        bytes: 0,
        objects: 0,
        note: String::new(),
        start: Instant::now(),
        reads: RequestReads::new(),
    };
    // Everything this connection's thread asks of a store counts toward its log line.
    let _in = log.reads.enter();
    let reader = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("{remote}: cannot clone the socket: {e}");
            return;
        }
    };
    // Shut when the server stops: at once while no request came, else after the grace.
    let registered = shared.stopping.register(&stream);
    // The request line must arrive whole within the idle timeout; the rest at the pace.
    let mut reader = PacedSocket::new(reader, Pace::new(idle, u64::MAX));
    let mut writer = Counting {
        inner: BufWriter::with_capacity(64 * 1024, stream),
        bytes: 0,
    };
    let request = match read_pkt(&mut reader) {
        Ok(Some(payload)) => parse_request(&payload),
        Ok(None) => Err("no request".to_string()),
        Err(e) => Err(format!("reading the request: {e}")),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            send_err(&mut writer, &e);
            log.note = e;
            access_log::write(&log);
            return;
        }
    };
    registered.requested();
    reader.pace = Pace::new(idle, shared.limits.min_request_rate);
    log.repo = request.path.clone();
    log.service = request.service.clone();
    if shared.auth.is_some() {
        let message = "authentication required: this server controls access (--auth-file), \
                       which git:// cannot do; use its HTTP address";
        send_err(&mut writer, message);
        log.note = message.into();
        access_log::write(&log);
        return;
    }
    match request.service.as_str() {
        "git-upload-pack" => {}
        "git-receive-pack" if shared.allow_push => {
            serve_push(&shared, &request.path, reader, &mut writer, &mut log);
            access_log::write(&log);
            return;
        }
        "git-receive-pack" => {
            let message = "pushing is not enabled on this server";
            send_err(&mut writer, message);
            log.note = message.into();
            access_log::write(&log);
            return;
        }
        other => {
            let message = format!("service '{}' is not enabled", other.escape_debug());
            send_err(&mut writer, &message);
            log.note = message;
            access_log::write(&log);
            return;
        }
    }
    let git_dir = match shared.root.resolve(&request.path) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("{}: {e}", request.path.escape_debug());
            send_err(&mut writer, &message);
            log.note = message;
            access_log::write(&log);
            return;
        }
    };
    let upload = match shared.cache.get(&git_dir) {
        Ok(u) => u,
        Err(e) => {
            let message = format!("cannot open the repository: {e}");
            send_err(
                &mut writer,
                &packd_protocol::told_to_client(message.clone(), &[&git_dir]),
            );
            log.status = "failed".into();
            log.note = message;
            access_log::write(&log);
            return;
        }
    };
    let version = ProtocolVersion::from_git_protocol(Some(&request.extra));
    let cancel = AtomicBool::new(false);
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let result = upload
        .advertise(version, Mode::Stateful, &mut writer)
        .and_then(|shown| {
            upload.serve(
                version,
                Mode::Stateful,
                &shown,
                &mut reader,
                &mut writer,
                &cancel,
            )
        });
    let flushed = writer.flush();
    log.bytes = writer.bytes;
    match result {
        Ok(stats) => {
            log.status = "ok".into();
            log.service = stats.command.to_string();
            log.objects = stats.objects;
            if let Err(e) = flushed {
                log.status = "failed".into();
                log.note = format!("client gone: {e}");
            }
        }
        Err(e) => {
            log.status = "failed".into();
            log.note = e.to_string();
        }
    }
    access_log::write(&log);
    crate::memory::release_after(log.objects);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let r = parse_request(b"git-upload-pack /a.git\0host=h:9418\0\0version=2\0").unwrap();
        assert_eq!(r.service, "git-upload-pack");
        assert_eq!(r.path, "/a.git");
        assert_eq!(r.host.as_deref(), Some("h:9418"));
        assert_eq!(r.extra, "version=2");
        assert_eq!(
            ProtocolVersion::from_git_protocol(Some(&r.extra)),
            ProtocolVersion::V2
        );
        let r = parse_request(b"git-upload-pack /b\0host=h\0").unwrap();
        assert_eq!(r.extra, "");
        let r = parse_request(b"git-upload-pack /c\n").unwrap();
        assert_eq!(r.path, "/c");
        assert!(parse_request(b"nonsense").is_err());
        assert!(parse_request(&[0xff, 0x20]).is_err());
    }

    #[test]
    fn long_err_fits_one_pkt() {
        let mut out = Vec::new();
        send_err(&mut out, &"é".repeat(40_000));
        assert!(out.len() <= MAX_PKT);
        let len = usize::from_str_radix(std::str::from_utf8(&out[..4]).unwrap(), 16).unwrap();
        assert_eq!(len, out.len());
        assert!(std::str::from_utf8(&out).is_ok());
    }

    #[test]
    fn pkt_bounds() {
        assert_eq!(read_pkt(&mut &b"0000"[..]).unwrap(), None);
        assert_eq!(read_pkt(&mut &b""[..]).unwrap(), None);
        assert_eq!(
            read_pkt(&mut &b"0008abcd"[..]).unwrap(),
            Some(b"abcd".to_vec())
        );
        assert!(read_pkt(&mut &b"0003"[..]).is_err());
        assert!(read_pkt(&mut &b"ffff"[..]).is_err());
        assert!(read_pkt(&mut &b"zzzz"[..]).is_err());
        assert!(read_pkt(&mut &b"0010abc"[..]).is_err());
    }
}

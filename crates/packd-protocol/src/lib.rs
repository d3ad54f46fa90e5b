//! git's wire protocol for upload-pack: pkt-line, the ref and capability advertisements,
//! ls-refs, want/have negotiation (protocol v0, v1 and v2), and the pack sent over side-band.
//!
//! Transports (`packd-serve` for smart HTTP and git://, the CLI for stdin/stdout) own the
//! sockets, timeouts and path checks; they hand this crate a reader and a writer. One
//! [`UploadPack`] serves one repository and is shared by every request to it, so that indexes
//! and bitmaps stay loaded between requests.
//!
//! ```text
//! transport ──> UploadPack::advertise   (v0/v1: refs + capabilities; v2: capabilities)
//!           ──> UploadPack::serve       (v0/v1: negotiation then pack; v2: ls-refs / fetch)
//!                   └─ packd_pack::PackServer::{plan, write}
//! ```
//!
//! Modules, each opening with its wire layout:
//! - [`pkt_line`]: packet framing; [`sideband`]: multiplexing and progress lines;
//! - `advertise`: the v0/v1 ref advertisement and the v2 capabilities;
//! - `negotiate_v0`: v0/v1 want list, shallow list, have rounds;
//! - `ls_refs`, `fetch_v2`: the v2 commands; `request`: want/shallow/have handling both share;
//! - `filter`: partial-clone filter specs; `pack`: counting and sending the pack;
//! - `receive_pack`: [`ReceivePack`], pushes (v0); `receive_rules`: receive.deny* rules.

mod advertise;
mod fetch_v2;
pub mod filter;
pub mod hooks;
mod ls_refs;
mod negotiate_v0;
mod object_info;
mod pack;
pub mod pkt_line;
mod receive_pack;
mod receive_progress;
mod receive_rules;
pub mod receive_store;
mod request;
pub mod sideband;

pub use advertise::{agent, Advertised};
pub use receive_pack::{PushStats, ReceivePack, ReceivePackOptions};

use packd_odb::hide_refs::HiddenRefs;
use packd_pack::{PackServer, PackSink};
use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Why a conversation with a client failed.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The client sent something that is not valid protocol; the message names the line.
    #[error("protocol error: {0}")]
    Invalid(String),
    /// The client asked for something the server refuses (told to the client as `ERR`).
    #[error("{0}")]
    Refused(String),
    /// Pack generation failed.
    #[error(transparent)]
    Pack(#[from] packd_pack::PackError),
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Reading from or writing to the client failed (it hung up, or timed out).
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// Not built yet.
    #[error("upload-pack is not implemented yet")]
    Unimplemented,
}

/// The protocol version a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolVersion {
    /// Version 0 (no version requested).
    V0,
    /// Version 1: version 0 with a `version 1` line first.
    V1,
    /// Version 2: commands (`ls-refs`, `fetch`) after a capability advertisement.
    V2,
}

impl ProtocolVersion {
    /// The version asked for in the `GIT_PROTOCOL` environment variable, the `Git-Protocol` HTTP
    /// header, or the extra parameters of a git:// request (colon-separated `key=value` items,
    /// e.g. `version=2`); the highest one named, V0 when none is.
    pub fn from_git_protocol(value: Option<&str>) -> ProtocolVersion {
        let mut best = ProtocolVersion::V0;
        for item in value.unwrap_or("").split(':') {
            match item.trim() {
                "version=2" => best = ProtocolVersion::V2,
                "version=1" if best == ProtocolVersion::V0 => best = ProtocolVersion::V1,
                _ => {}
            }
        }
        best
    }
}

/// How a transport carries the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One connection for the whole conversation (stdin/stdout, git://).
    Stateful,
    /// One request per HTTP POST (git's `--stateless-rpc`): the reader holds exactly one request.
    Stateless,
}

/// Server policy for upload-pack.
#[derive(Debug, Clone)]
pub struct UploadPackOptions {
    /// Allow wants of objects that are not advertised ref tips but are the tip of some ref
    /// (`uploadpack.allowTipSHA1InWant`).
    pub allow_tip_sha1_in_want: bool,
    /// Allow wants of any object reachable from a ref (`uploadpack.allowReachableSHA1InWant`).
    pub allow_reachable_sha1_in_want: bool,
    /// Allow partial-clone filters (`uploadpack.allowFilter`).
    pub allow_filter: bool,
    /// Most `want` lines accepted in one request.
    pub max_wants: usize,
    /// Most `have` lines accepted in one request (over all rounds).
    pub max_haves: usize,
    /// Send a keepalive on side-band this often while counting (git: 5 s).
    pub keepalive: std::time::Duration,
    /// Send progress on side-band 2 (the client may still turn it off with `no-progress`).
    pub progress: bool,
}

impl Default for UploadPackOptions {
    fn default() -> Self {
        UploadPackOptions {
            allow_tip_sha1_in_want: true,
            allow_reachable_sha1_in_want: true,
            allow_filter: true,
            max_wants: 1_000_000,
            max_haves: 1_000_000,
            keepalive: std::time::Duration::from_secs(5),
            progress: true,
        }
    }
}

/// A boolean `uploadpack.*` key and what it sets (see [`UploadPackOptions::with_config`]).
type Setting = (&'static str, fn(&mut UploadPackOptions, bool));

impl UploadPackOptions {
    /// `self` with what a repository's configuration sets explicitly, as git's upload-pack
    /// reads it, in the order the files give the settings: `uploadpack.allowFilter`,
    /// `uploadpack.allowTipSHA1InWant`, `uploadpack.allowReachableSHA1InWant`, and
    /// `uploadpack.allowAnySHA1InWant`, which turns both of the last two on or off (packd
    /// still requires a ref to reach what is wanted). What the configuration does not set
    /// keeps packd's default, which allows all three where git's allows none: a server that
    /// hosts partial clones and mirrors wants them on. A value git refuses is warned about and
    /// left out.
    pub fn with_config(mut self, config: &packd_odb::config::Config) -> UploadPackOptions {
        // Each key with what it sets.
        let settings: [Setting; 4] = [
            ("uploadpack.allowFilter", |o, on| o.allow_filter = on),
            ("uploadpack.allowTipSHA1InWant", |o, on| {
                o.allow_tip_sha1_in_want = on
            }),
            ("uploadpack.allowReachableSHA1InWant", |o, on| {
                o.allow_reachable_sha1_in_want = on
            }),
            ("uploadpack.allowAnySHA1InWant", |o, on| {
                o.allow_tip_sha1_in_want = on;
                o.allow_reachable_sha1_in_want = on;
            }),
        ];
        let keys = settings.map(|(key, _)| key);
        for (i, value) in config.get_all_of(&keys) {
            let (key, set) = settings[i];
            match packd_odb::config::parse_bool(value) {
                Some(on) => set(&mut self, on),
                None => tracing::warn!("bad boolean config value '{value}' for '{key}': left out"),
            }
        }
        self
    }
}

/// What one request did, for access logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeStats {
    /// The command served (`"ls-refs"`, `"fetch"`, or `"upload-pack"` for v0/v1).
    pub command: &'static str,
    /// Objects in the pack sent (0 when none was).
    pub objects: u64,
    /// Bytes written to the client.
    pub bytes: u64,
}

/// What a conversation reports back to [`UploadPack::serve`] as it goes: what it did, for the
/// access log, and where an error must go once a pack has started (its side-band;
/// `Sideband::None` until then, and without one: an ERR packet).
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) stats: ServeStats,
    pub(crate) err_band: sideband::Sideband,
}

/// upload-pack for one repository, shared by all requests to it.
pub struct UploadPack {
    packs: Arc<PackServer>,
    options: UploadPackOptions,
    /// The refs `uploadpack.hideRefs` and `transfer.hideRefs` hide from clients (the
    /// configuration is read when the repository is opened; a server reopens a repository
    /// whose configuration changed).
    hidden: HiddenRefs,
}

/// Counts the bytes written through it.
struct CountingWriter<'a> {
    inner: &'a mut dyn PackSink,
    bytes: u64,
}

impl PackSink for CountingWriter<'_> {
    fn takes_file_ranges(&self) -> bool {
        self.inner.takes_file_ranges()
    }

    fn send_file_range(&mut self, range: &packd_pack::FileRange) -> std::io::Result<()> {
        self.inner.send_file_range(range)?;
        self.bytes += range.len;
        Ok(())
    }
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(data)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(data)?;
        self.bytes += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl UploadPack {
    /// upload-pack serving `packs`' repository with the policy `options`, as the repository's
    /// configuration amends it (see [`UploadPackOptions::with_config`]).
    pub fn new(packs: Arc<PackServer>, options: UploadPackOptions) -> UploadPack {
        let config = packs.repository().config();
        let options = options.with_config(config);
        let hidden = HiddenRefs::from_config(config, "uploadpack");
        UploadPack {
            packs,
            options,
            hidden,
        }
    }

    /// The pack generator (and through it the repository) served.
    pub fn pack_server(&self) -> &Arc<PackServer> {
        &self.packs
    }

    /// The policy in force.
    pub fn options(&self) -> &UploadPackOptions {
        &self.options
    }

    /// Writes what the server says first: for v0/v1 the ref advertisement with capabilities
    /// (`version 1` first for v1), for v2 the capability advertisement. Over HTTP the transport
    /// writes the `# service=git-upload-pack` line and flush before this, for v0/v1 only.
    /// `out` is flushed. Returns what the client was shown, for [`UploadPack::serve`] in the
    /// same conversation (nothing in [`Mode::Stateless`], where no later request is part of it).
    pub fn advertise(
        &self,
        version: ProtocolVersion,
        mode: Mode,
        out: &mut dyn Write,
    ) -> Result<Advertised, ProtocolError> {
        let advertised = match version {
            ProtocolVersion::V2 => {
                self.advertise_v2(out)?;
                Advertised::default()
            }
            v => self.advertise_refs(v, mode, out)?,
        };
        out.flush()?;
        Ok(advertised)
    }

    /// Serves the client's requests after the advertisement: in [`Mode::Stateful`] until the
    /// client ends the conversation (a flush where a command or want is expected, or end of
    /// input); in [`Mode::Stateless`] the one request in `input`. Errors the client should see
    /// are sent to it as `ERR` lines (or side-band 3) before being returned. Stops promptly when
    /// `cancel` is set or the client hangs up. When `out` takes file ranges (a socket that can
    /// `sendfile`), a pack that goes out whole is sent as ranges of its file. In
    /// [`Mode::Stateful`], v0/v1 wants are checked against `advertised`, what this
    /// conversation's [`UploadPack::advertise`] showed (as git does: a ref a push moves
    /// meanwhile does not make a want of its old tip "not our ref"); given
    /// `Advertised::default()`, against the refs as they are. In [`Mode::Stateless`] the
    /// advertisement was another request's: pass `Advertised::default()`, which is what
    /// `advertise` returns in that mode.
    pub fn serve(
        &self,
        version: ProtocolVersion,
        mode: Mode,
        advertised: &Advertised,
        input: &mut dyn Read,
        out: &mut dyn PackSink,
        cancel: &AtomicBool,
    ) -> Result<ServeStats, ProtocolError> {
        let mut out = CountingWriter {
            inner: out,
            bytes: 0,
        };
        let mut reader = pkt_line::PktReader::new(input);
        let mut served = Served {
            stats: ServeStats {
                command: match version {
                    ProtocolVersion::V2 => "ls-refs",
                    _ => "upload-pack",
                },
                ..ServeStats::default()
            },
            err_band: sideband::Sideband::None,
        };
        let result = match version {
            ProtocolVersion::V2 => self.serve_v2(mode, &mut reader, &mut out, cancel, &mut served),
            _ => self.serve_v0(mode, advertised, &mut reader, &mut out, cancel, &mut served),
        };
        let Served {
            mut stats,
            err_band,
        } = served;
        let result = result.and_then(|()| out.flush().map_err(ProtocolError::Io));
        if let Err(e) = &result {
            let tell = match e {
                ProtocolError::Io(_) => None,
                ProtocolError::Pack(packd_pack::PackError::Io(_))
                | ProtocolError::Pack(packd_pack::PackError::Cancelled) => None,
                ProtocolError::Invalid(_) => Some(format!("upload-pack: {e}")),
                e => Some(e.to_string()),
            };
            if let Some(message) = tell.map(|m| self.for_client(m)) {
                // The client may be gone already: nothing more to do if this fails.
                let _ = match err_band {
                    sideband::Sideband::None => pkt_line::write_err(&mut out, &message),
                    band => sideband::write_band(
                        &mut out,
                        sideband::BAND_ERROR,
                        format!("{message}\n").as_bytes(),
                        band.max_payload(),
                    ),
                }
                .and_then(|()| out.flush());
            }
        }
        stats.bytes = out.bytes;
        result.map(|()| stats)
    }

    /// An error's `message` as the client is told it (see [`told_to_client`]).
    fn for_client(&self, message: String) -> String {
        let repo = self.packs.repository();
        told_to_client(message, &[repo.common_dir(), repo.git_dir()])
    }
}

/// An error's `message` as a client is told it: each of `dirs` (a repository's directories),
/// which an error names in full (a damaged file's path, or the directory itself), becomes
/// `.`, as git's upload-pack, which runs in the repository's directory, names its files. The
/// client is not told where the server keeps its repositories (an alternate's objects
/// directory is still named in full); the server's own log keeps the full path.
pub fn told_to_client(mut message: String, dirs: &[&std::path::Path]) -> String {
    for dir in dirs {
        let dir = dir.display().to_string();
        let dir = dir.trim_end_matches('/');
        if dir.is_empty() {
            continue;
        }
        // The directory as a path's start, or named alone (followed by `:` or ending the
        // text): never a longer name it starts (`a.git` in `a.git2`).
        message = message.replace(&format!("{dir}/"), "./");
        message = message.replace(&format!("{dir}:"), ".:");
        if let Some(head) = message.strip_suffix(dir) {
            message = format!("{head}.");
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_told_paths_from_the_repository() {
        let dirs = [std::path::Path::new("/srv/git/a.git")];
        let told = |m: &str| told_to_client(m.to_string(), &dirs);
        assert_eq!(
            told("/srv/git/a.git/objects/pack/p.pack: offset 12: bad"),
            "./objects/pack/p.pack: offset 12: bad"
        );
        assert_eq!(
            told("/srv/git/a.git: not a repository"),
            ".: not a repository"
        );
        assert_eq!(told("cannot open /srv/git/a.git"), "cannot open .");
        // Another repository whose name starts with this one's is left as it is.
        assert_eq!(told("/srv/git/a.git2/HEAD"), "/srv/git/a.git2/HEAD");
        assert_eq!(
            told_to_client("/srv/git/a.git/x".into(), &[std::path::Path::new("/")]),
            "/srv/git/a.git/x"
        );
    }

    #[test]
    fn version_from_git_protocol() {
        assert_eq!(
            ProtocolVersion::from_git_protocol(None),
            ProtocolVersion::V0
        );
        assert_eq!(
            ProtocolVersion::from_git_protocol(Some("version=2")),
            ProtocolVersion::V2
        );
        assert_eq!(
            ProtocolVersion::from_git_protocol(Some("foo=bar:version=1")),
            ProtocolVersion::V1
        );
        assert_eq!(
            ProtocolVersion::from_git_protocol(Some("version=2:version=1")),
            ProtocolVersion::V2
        );
    }

    #[test]
    fn upload_pack_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<UploadPack>();
    }
}

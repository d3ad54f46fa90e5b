//! What the server says first: the v0/v1 ref advertisement and the v2 capability advertisement.
//!
//! ```text
//! v1 only:   "version 1\n"
//! v0/v1:     "<id> HEAD\0<capabilities>\n"          (capabilities on the first line only)
//!            "<id> refs/heads/main\n"               (then every ref, sorted by name)
//!            "<id> refs/tags/v1\n"
//!            "<peeled id> refs/tags/v1^{}\n"         (after an annotated tag)
//!            "0000"
//! empty:     "0000000000000000000000000000000000000000 capabilities^{}\0<capabilities>\n" "0000"
//!
//! v2:        "version 2\n" "agent=packd/0.1.0\n" "ls-refs=unborn\n"
//!            "fetch=shallow wait-for-done filter ref-in-want\n" "server-option\n"
//!            "object-format=sha1\n" "object-info\n" "0000"
//! ```

use crate::{pkt_line, Mode, ProtocolError, ProtocolVersion, UploadPack};
use packd_odb::hide_refs::HiddenRefs;
use packd_odb::packed_refs::Peeled;
use packd_odb::refs::ListedRef;
use packd_odb::{ObjectId, ObjectKind, Repository};
use std::io::Write;

/// The agent string sent to clients.
pub fn agent() -> String {
    format!("packd/{}", env!("CARGO_PKG_VERSION"))
}

/// What a v0/v1 ref advertisement showed the client: the ids of the refs in it. In a
/// conversation over one connection (ssh, `git://`) the client's wants are checked against
/// these, as git checks them, not against the refs read again: a ref moved or deleted in
/// between (a push meanwhile) must not turn a want of what the client was shown into "not our
/// ref". `Advertised::default()` stands for none to check against: a v2 advertisement, or
/// one over HTTP, whose next request reads the refs as they are then.
#[derive(Debug, Default, Clone)]
pub struct Advertised {
    /// The ids shown, sorted (empty for an empty repository); `None` when there was no v0/v1
    /// advertisement in this conversation ([`Mode::Stateless`] keeps none).
    pub(crate) tips: Option<Vec<ObjectId>>,
}

/// The repository's refs a client is shown, as read at one moment (for an advertisement, or
/// for a request's check of its wants).
#[derive(Debug, Clone)]
pub(crate) struct RefSnapshot {
    /// HEAD's id, when it resolves and is not hidden.
    pub head: Option<ObjectId>,
    /// What HEAD points at, when it is a symbolic ref (even an unborn branch) not hidden.
    pub head_target: Option<String>,
    /// What v0's `symref=HEAD:` capability names: HEAD's target when HEAD resolves, hidden or
    /// not (git names it for a hidden HEAD too).
    pub symref: Option<String>,
    /// Every ref under `refs/` not hidden, sorted by name, with what `packed-refs` says it
    /// peels to.
    pub refs: Vec<ListedRef>,
}

impl RefSnapshot {
    /// Reads the refs of `repo` that `hidden` does not hide (see
    /// [`UploadPack::hidden`]; `HiddenRefs::default()` for all of them). A broken HEAD
    /// (content that is no ref, a chain of symbolic refs through a name git refuses or nested
    /// too deep) is left out with a warning, as git leaves it out, and so is a broken ref
    /// under `refs/`.
    pub fn read(repo: &Repository, hidden: &HiddenRefs) -> Result<RefSnapshot, ProtocolError> {
        let reader = repo.refs();
        let (head, head_target) = match reader.resolve_symbolic("HEAD") {
            Ok(Some(resolved)) => (resolved.id, resolved.target),
            Ok(None) => (None, None),
            Err(e) => {
                tracing::warn!("ignoring broken ref HEAD: {e}");
                (None, None)
            }
        };
        let symref = head.and(head_target.clone());
        let (head, head_target) = if hidden.is_hidden("HEAD") {
            (None, None)
        } else {
            (head, head_target)
        };
        Ok(RefSnapshot {
            head,
            head_target,
            symref,
            refs: reader.list_shown("refs/", hidden)?,
        })
    }

    /// Every id a ref shown points at (HEAD included), sorted.
    pub fn tips(&self) -> Vec<ObjectId> {
        let mut tips: Vec<ObjectId> = self.refs.iter().map(|r| r.id).collect();
        tips.extend(self.head);
        tips.sort_unstable();
        tips.dedup();
        tips
    }
}

/// What listed ref `r` peels to (see [`peeled`]): from `packed-refs` when it says, else by
/// reading the object.
pub(crate) fn peeled_ref(repo: &Repository, r: &ListedRef) -> Option<ObjectId> {
    match r.peeled {
        Peeled::Tag(target) => Some(target),
        Peeled::NotTag => None,
        Peeled::Unknown => peeled(repo, &r.id),
    }
}

/// The object an annotated tag finally points at; `None` for anything that is not a tag (or is
/// missing, or is a broken tag: the advertisement then just has no peeled line).
pub(crate) fn peeled(repo: &Repository, id: &ObjectId) -> Option<ObjectId> {
    match repo.objects().header(id) {
        Ok(Some(h)) if h.kind == ObjectKind::Tag => {}
        _ => return None,
    }
    let mut tags = Vec::new();
    packd_reach::walk::Walker::new(repo)
        .peel(*id, &mut tags)
        .ok()
        .map(|(target, _)| target)
}

impl UploadPack {
    /// The v0/v1 capability list (after the NUL of the first ref line).
    fn v0_capabilities(&self, head_target: Option<&str>) -> String {
        let mut caps = String::from(
            "multi_ack thin-pack side-band side-band-64k ofs-delta shallow deepen-since \
             deepen-not deepen-relative no-progress include-tag multi_ack_detailed",
        );
        if self.options.allow_tip_sha1_in_want {
            caps.push_str(" allow-tip-sha1-in-want");
        }
        if self.options.allow_reachable_sha1_in_want {
            caps.push_str(" allow-reachable-sha1-in-want");
        }
        caps.push_str(" no-done");
        if let Some(target) = head_target {
            caps.push_str(&format!(" symref=HEAD:{target}"));
        }
        if self.options.allow_filter {
            caps.push_str(" filter");
        }
        caps.push_str(&format!(" object-format=sha1 agent={}", agent()));
        caps
    }

    /// Writes the v0/v1 ref advertisement, and returns the ids it showed when `mode` keeps
    /// the conversation going.
    pub(crate) fn advertise_refs(
        &self,
        version: ProtocolVersion,
        mode: Mode,
        out: &mut dyn Write,
    ) -> Result<Advertised, ProtocolError> {
        let repo = self.packs.repository();
        let snapshot = RefSnapshot::read(repo, &self.hidden)?;
        if version == ProtocolVersion::V1 {
            pkt_line::write_text(out, "version 1\n")?;
        }
        let symref = snapshot.symref.as_deref();
        let mut caps = Some(self.v0_capabilities(symref));
        let head = snapshot.head.map(|id| ("HEAD", id, peeled(repo, &id)));
        let refs = snapshot
            .refs
            .iter()
            .map(|r| (r.name.as_str(), r.id, peeled_ref(repo, r)));
        // Each line is put together in one buffer: thousands of refs are common.
        let mut line: Vec<u8> = Vec::with_capacity(256);
        for (name, id, peeled) in head.into_iter().chain(refs) {
            line.clear();
            id.extend_hex(&mut line);
            line.push(b' ');
            line.extend_from_slice(name.as_bytes());
            if let Some(c) = caps.take() {
                line.push(0);
                line.extend_from_slice(c.as_bytes());
            }
            line.push(b'\n');
            pkt_line::write_packet(out, &line)?;
            if let Some(p) = peeled {
                line.clear();
                p.extend_hex(&mut line);
                line.push(b' ');
                line.extend_from_slice(name.as_bytes());
                line.extend_from_slice(b"^{}\n");
                pkt_line::write_packet(out, &line)?;
            }
        }
        if let Some(c) = caps {
            pkt_line::write_text(out, &format!("{} capabilities^{{}}\0{c}\n", ObjectId::NULL))?;
        }
        pkt_line::write_flush(out)?;
        // Over HTTP the next request is another conversation: nothing to keep.
        Ok(Advertised {
            tips: (mode == Mode::Stateful).then(|| snapshot.tips()),
        })
    }

    /// Writes the v2 capability advertisement.
    pub(crate) fn advertise_v2(&self, out: &mut dyn Write) -> Result<(), ProtocolError> {
        let mut fetch = String::from("fetch=shallow wait-for-done");
        if self.options.allow_filter {
            fetch.push_str(" filter");
        }
        fetch.push_str(" ref-in-want");
        for line in [
            "version 2".to_string(),
            format!("agent={}", agent()),
            "ls-refs=unborn".to_string(),
            fetch,
            "server-option".to_string(),
            "object-format=sha1".to_string(),
            // Always, as git 2.39 (see object_info.rs).
            "object-info".to_string(),
        ] {
            pkt_line::write_text(out, &format!("{line}\n"))?;
        }
        pkt_line::write_flush(out)?;
        Ok(())
    }
}

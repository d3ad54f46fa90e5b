//! The parts of a fetch request v0/v1 and v2 share: want, shallow and deepen lines, want
//! validation, and the negotiation state (what the client has, when we are ready).
//!
//! ```text
//! "want <id>"                 an object the client wants (v0: capabilities after the id)
//! "shallow <id>"              a commit the client's history stops at
//! "deepen <n>"                send n commits of history from each want
//! "deepen-since <seconds>"    send history newer than this
//! "deepen-not <ref>"          send history not reachable from this ref
//! "deepen-relative"           (v2; v0: a capability) n counts from the client's boundary
//! "filter <spec>"             partial clone
//! "have <id>"                 an object the client has
//! ```

use crate::advertise::RefSnapshot;
use crate::{filter, pkt_line::show, ProtocolError, UploadPack};
use packd_odb::hide_refs::HiddenRefs;
use packd_odb::{IdSet, ObjectId, ObjectKind, Repository};
use packd_pack::{Deepen, FetchRequest, ShallowUpdate};
use packd_reach::walk::{Query, Walker};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

/// The pkt-line payload announcing one shallow update, byte for byte as git's upload-pack
/// writes it: `shallow <id>` or `unshallow <id>` with no trailing newline (v0 and v2's
/// `shallow-info` alike). git's client takes either form, but libgit2 only this one.
pub(crate) fn shallow_update_line(update: &ShallowUpdate) -> String {
    match update {
        ShallowUpdate::Shallow(id) => format!("shallow {id}"),
        ShallowUpdate::Unshallow(id) => format!("unshallow {id}"),
    }
}

/// Parses a 40-hex id from the client, naming the line when it is not one.
pub(crate) fn parse_id(text: &str, line: &str) -> Result<ObjectId, ProtocolError> {
    text.get(..40)
        .filter(|_| text.len() == 40)
        .and_then(ObjectId::from_hex)
        .ok_or_else(|| {
            ProtocolError::Invalid(format!(
                "expected an object id in '{}'",
                show(line.as_bytes())
            ))
        })
}

/// What a request asked for, as it is being read.
#[derive(Debug, Default)]
pub(crate) struct RequestBuilder {
    pub wants: Vec<ObjectId>,
    want_set: HashSet<ObjectId>,
    pub client_shallow: Vec<ObjectId>,
    shallow_set: HashSet<ObjectId>,
    pub depth: Option<u32>,
    pub since: Option<i64>,
    pub not: Vec<ObjectId>,
    pub relative: bool,
    pub filter: Option<packd_pack::Filter>,
    pub thin: bool,
    pub ofs_delta: bool,
    pub include_tag: bool,
}

impl RequestBuilder {
    /// Adds a want (duplicates are dropped), refusing more than `max` and, as git does as each
    /// line arrives, an object the repository does not have: the wants kept are distinct
    /// objects of the repository, whatever the request.
    pub fn want(
        &mut self,
        repo: &Repository,
        id: ObjectId,
        max: usize,
    ) -> Result<(), ProtocolError> {
        if self.want_set.contains(&id) {
            return Ok(());
        }
        if !repo.objects().contains(&id)? {
            return Err(ProtocolError::Refused(format!(
                "upload-pack: not our ref {id}"
            )));
        }
        if self.want_set.insert(id) {
            if self.wants.len() >= max {
                return Err(ProtocolError::Refused(format!(
                    "upload-pack: too many wants (the limit is {max})"
                )));
            }
            self.wants.push(id);
        }
        Ok(())
    }

    /// Handles a `shallow`, `deepen`, `deepen-since` or `deepen-not` line; `false` when the line
    /// is none of those.
    pub fn shallow_line(&mut self, repo: &Repository, line: &str) -> Result<bool, ProtocolError> {
        if let Some(hex) = line.strip_prefix("shallow ") {
            let id = parse_id(hex, line)?;
            // git ignores shallow lines naming commits it does not have.
            match repo.objects().header(&id)? {
                None => {}
                Some(h) if h.kind == ObjectKind::Commit && self.shallow_set.insert(id) => {
                    if self.client_shallow.len() >= 1_000_000 {
                        return Err(ProtocolError::Refused(
                            "upload-pack: too many shallow lines".into(),
                        ));
                    }
                    self.client_shallow.push(id);
                }
                Some(h) if h.kind == ObjectKind::Commit => {}
                Some(_) => {
                    return Err(ProtocolError::Refused(format!(
                        "upload-pack: invalid shallow object {id}"
                    )))
                }
            }
            return Ok(true);
        }
        if let Some(n) = line.strip_prefix("deepen ") {
            let depth = n
                .parse::<u32>()
                .ok()
                .filter(|d| *d > 0 && *d <= i32::MAX as u32)
                .ok_or_else(|| {
                    ProtocolError::Invalid(format!("Invalid deepen: {}", show(line.as_bytes())))
                })?;
            self.depth = Some(depth);
            return Ok(true);
        }
        if let Some(t) = line.strip_prefix("deepen-since ") {
            let since = t.parse::<i64>().ok().filter(|t| *t > 0).ok_or_else(|| {
                ProtocolError::Invalid(format!("Invalid deepen-since: {}", show(line.as_bytes())))
            })?;
            self.since = Some(since);
            return Ok(true);
        }
        if let Some(name) = line.strip_prefix("deepen-not ") {
            let id = repo.refs().resolve(name)?.ok_or_else(|| {
                ProtocolError::Refused(format!("upload-pack: ambiguous deepen-not: {line}"))
            })?;
            if self.not.len() >= 10_000 {
                return Err(ProtocolError::Refused(
                    "upload-pack: too many deepen-not lines".into(),
                ));
            }
            self.not.push(id);
            return Ok(true);
        }
        Ok(false)
    }

    /// Handles a `filter <spec>` line.
    pub fn filter_line(&mut self, allowed: bool, spec: &str) -> Result<(), ProtocolError> {
        if !allowed {
            return Err(ProtocolError::Refused(
                "upload-pack: filtering capability not negotiated".into(),
            ));
        }
        if self.filter.is_some() {
            return Err(ProtocolError::Refused(
                "upload-pack: multiple filter-specs cannot be combined".into(),
            ));
        }
        self.filter = Some(filter::parse_filter(spec)?);
        Ok(())
    }

    /// Whether the request changes the client's shallow boundary (`deepen*` lines).
    pub fn deepens(&self) -> bool {
        self.depth.is_some() || self.since.is_some() || !self.not.is_empty()
    }

    /// The request for pack generation.
    pub fn build(&self, haves: Vec<ObjectId>) -> Result<FetchRequest, ProtocolError> {
        let deepen = match self.depth {
            _ if !self.deepens() => None,
            Some(_) if self.since.is_some() || !self.not.is_empty() => {
                return Err(ProtocolError::Refused(
                    "upload-pack: deepen and deepen-since (or deepen-not) cannot be used together"
                        .into(),
                ));
            }
            Some(depth) => Some(Deepen::Depth {
                depth,
                relative: self.relative,
            }),
            None => Some(Deepen::SinceNot {
                since: self.since,
                not: self.not.clone(),
            }),
        };
        Ok(FetchRequest {
            wants: self.wants.clone(),
            haves,
            client_shallow: self.client_shallow.clone(),
            deepen,
            filter: self.filter.clone(),
            thin: self.thin,
            ofs_delta: self.ofs_delta,
            include_tag: self.include_tag,
        })
    }
}

impl UploadPack {
    /// [`UploadPack::check_wants`] against the tips of the refs shown: those `shown` (what
    /// this conversation's advertisement showed the client), else those of the refs shown
    /// as they are now. With `allow_hidden`, the tips of the hidden refs count too (git
    /// allows them when `allowTipSHA1InWant` or `allowReachableSHA1InWant` is on). They are
    /// listed only when some want is not a shown tip, and as they are then: git marks them
    /// while advertising, so a hidden ref moved in between is the one place where the two
    /// may answer differently (listing them with every advertisement would cost a host with
    /// hidden `refs/pull/*` a listing of all of them).
    pub(crate) fn check_wants_against_refs(
        &self,
        wants: &[ObjectId],
        shown: Option<&[ObjectId]>,
        allow_hidden: bool,
        reachable: bool,
        cancel: &AtomicBool,
    ) -> Result<(), ProtocolError> {
        let repo = self.packs.repository();
        let mut tips: Cow<'_, [ObjectId]> = match shown {
            Some(tips) => Cow::Borrowed(tips),
            None => Cow::Owned(RefSnapshot::read(repo, &self.hidden)?.tips()),
        };
        if allow_hidden
            && !self.hidden.is_empty()
            && wants.iter().any(|w| tips.binary_search(w).is_err())
        {
            let all = RefSnapshot::read(repo, &HiddenRefs::default())?;
            if shown.is_none() {
                // The refs shown as they are now are among all of them.
                tips = Cow::Owned(all.tips());
            } else {
                let hidden = all.refs.iter().filter(|r| self.hidden.is_hidden(&r.name));
                let tips = tips.to_mut();
                tips.extend(hidden.map(|r| r.id));
                if self.hidden.is_hidden("HEAD") {
                    tips.extend(all.head);
                }
                tips.sort_unstable();
                tips.dedup();
            }
        }
        self.check_wants(wants, &tips, reachable, cancel)
    }

    /// Refuses wants the client may not have: missing objects, and objects that are not among
    /// `tips` (sorted) unless `reachable` lets them be fetched because one of `tips` reaches
    /// them.
    fn check_wants(
        &self,
        wants: &[ObjectId],
        tips: &[ObjectId],
        reachable: bool,
        cancel: &AtomicBool,
    ) -> Result<(), ProtocolError> {
        let repo = self.packs.repository();
        let not_ours =
            |id: &ObjectId| ProtocolError::Refused(format!("upload-pack: not our ref {id}"));
        let mut non_tips: Vec<(ObjectId, ObjectKind)> = Vec::new();
        for id in wants {
            if tips.binary_search(id).is_ok() {
                // A tip need only be there: its header was read for nothing but a kind not
                // needed here (up to a page of the pack each, for the 4,227 wants of
                // git/git's mirror clone). A damaged entry is found when the pack is written,
                // if its bytes are read then; a pack sent whole leaves it to the client.
                if !repo.objects().contains(id)? {
                    return Err(not_ours(id));
                }
                continue;
            }
            let header = repo.objects().header(id)?.ok_or_else(|| not_ours(id))?;
            non_tips.push((*id, header.kind));
        }
        if non_tips.is_empty() {
            return Ok(());
        }
        if !reachable {
            return Err(not_ours(&non_tips[0].0));
        }
        if let Some(id) = self.first_unreachable(&non_tips, tips, cancel)? {
            return Err(not_ours(&id));
        }
        Ok(())
    }

    /// The first of `objects` none of `tips` reaches, if any.
    fn first_unreachable(
        &self,
        objects: &[(ObjectId, ObjectKind)],
        tips: &[ObjectId],
        cancel: &AtomicBool,
    ) -> Result<Option<ObjectId>, ProtocolError> {
        let repo = self.packs.repository();
        let walker = Walker::new(repo);
        let commits: Vec<ObjectId> = objects
            .iter()
            .filter(|(_, k)| *k == ObjectKind::Commit)
            .map(|(id, _)| *id)
            .collect();
        if !commits.is_empty() {
            let query = Query {
                include: commits.clone(),
                exclude: tips.to_vec(),
                objects: false,
                exact: false,
            };
            let left: HashSet<ObjectId> = walker
                .reachable(&query)?
                .into_iter()
                .map(|r| r.id)
                .collect();
            if let Some(id) = commits.iter().find(|id| left.contains(id)) {
                return Ok(Some(*id));
            }
        }
        let others: Vec<ObjectId> = objects
            .iter()
            .filter(|(_, k)| *k != ObjectKind::Commit)
            .map(|(id, _)| *id)
            .collect();
        if others.is_empty() {
            return Ok(None);
        }
        // The bitmap index counting uses, loaded once for both.
        if let Some(bitmap) = self.packs.bitmap() {
            // Tips pushed since the last repack are walked into the bitmapped pack.
            if let Some(answer) =
                bitmap.difference_with_outside(repo, &others, tips, &Default::default(), cancel)?
            {
                let mut left: HashSet<ObjectId> = bitmap.ids(&answer.wanted).into_iter().collect();
                left.extend(answer.outside.iter().map(|(id, _)| *id));
                tracing::debug!(
                    "{} wanted objects that are not ref tips checked with the bitmap",
                    others.len()
                );
                return Ok(others.iter().find(|id| left.contains(id)).copied());
            }
        }
        if cancel.load(Ordering::Relaxed) {
            return Err(ProtocolError::Io(std::io::Error::other("cancelled")));
        }
        tracing::debug!(
            "{} wanted objects that are not ref tips checked by a walk",
            others.len()
        );
        let query = Query {
            include: others.clone(),
            exclude: tips.to_vec(),
            objects: true,
            exact: true,
        };
        let left: HashSet<ObjectId> = walker
            .reachable(&query)?
            .into_iter()
            .map(|r| r.id)
            .collect();
        Ok(others.iter().find(|id| left.contains(id)).copied())
    }
}

/// What negotiation learned of the client's objects (git's THEY_HAVE marks).
#[derive(Default)]
pub(crate) struct Negotiation {
    /// Haves the server has, in the order received (deduplicated): the pack's exclusions.
    pub common: Vec<ObjectId>,
    common_set: IdSet,
    /// Commits the client has: common haves and their parents.
    they_have: IdSet,
    /// The oldest committer date among common commits.
    oldest: Option<i64>,
    /// `have` lines read (all rounds).
    pub haves_read: usize,
}

/// Most commits one readiness check walks before answering "not ready".
const READY_WALK_LIMIT: usize = 20_000;

impl Negotiation {
    /// Records a `have`: `Ok(true)` when the server has the object (it is common).
    pub fn have(
        &mut self,
        repo: &Repository,
        id: ObjectId,
        max: usize,
    ) -> Result<bool, ProtocolError> {
        self.haves_read += 1;
        if self.haves_read > max {
            return Err(ProtocolError::Refused(format!(
                "upload-pack: too many haves (the limit is {max})"
            )));
        }
        let Some(header) = repo.objects().header(&id)? else {
            return Ok(false);
        };
        if self.common_set.insert(id) {
            self.common.push(id);
            if header.kind == ObjectKind::Commit {
                let commit = Walker::new(repo).commit(&id)?;
                self.they_have.insert(id);
                self.they_have.extend(commit.parents.iter().copied());
                self.oldest = Some(self.oldest.map_or(commit.time, |o| o.min(commit.time)));
            }
        }
        Ok(true)
    }

    /// Whether every wanted commit reaches a commit the client has (git's `ok_to_give_up`): the
    /// client then need not send more haves. Conservative: a walk that grows too large answers
    /// no.
    pub fn ready(&self, repo: &Repository, wants: &[ObjectId]) -> bool {
        if self.common.is_empty() {
            return false;
        }
        let oldest = self.oldest.unwrap_or(i64::MIN);
        let walker = Walker::new(repo);
        let mut budget = READY_WALK_LIMIT;
        // Commits known to reach something the client has.
        let mut reaches: HashMap<ObjectId, bool> = HashMap::new();
        for want in wants {
            let mut tags = Vec::new();
            let Ok((id, kind)) = walker.peel(*want, &mut tags) else {
                return false;
            };
            if kind != ObjectKind::Commit {
                continue; // as git: ancestry cannot tell, so it does not hold negotiation up
            }
            let mut found = false;
            let mut stack = vec![id];
            let mut seen = HashSet::new();
            while let Some(c) = stack.pop() {
                if self.they_have.contains(&c) || reaches.get(&c) == Some(&true) {
                    found = true;
                    break;
                }
                if !seen.insert(c) {
                    continue;
                }
                if budget == 0 {
                    return false;
                }
                budget -= 1;
                let Ok(info) = walker.commit(&c) else {
                    return false;
                };
                if info.time < oldest {
                    continue;
                }
                stack.extend(info.parents.iter().copied());
            }
            if !found {
                return false;
            }
            reaches.insert(id, true);
        }
        true
    }
}

//! Which commits get a bitmap.
//!
//! A query is answered from the bitmaps of the commits nearest its tips plus a fill-in walk from
//! each tip down to them; the walk is what costs. So bitmaps belong where queries start (ref
//! tips), near the newest history (where most fetches end), and where the fill-in walks of
//! other refs land. The policy:
//!
//! 1. **Few tips** (at most [`FEW_TIPS`] distinct commits among all refs, whatever their
//!    namespace), or **every tip** asked for: every tip gets a bitmap. Asked for, spikes get
//!    one each too, up to [`MAX_EVERY_TIP`] tips: a file twice as large or more (git/git with
//!    4,282 refs, 4,227 distinct tips: 11.8 MB against git's 4.6 MB), but a mirror clone, or
//!    any fetch of many refs, then takes bitmaps and walks nothing (`bench/fetch.sh`: 0.16 s
//!    of CPU for git/git's, 0.09x git's on the same files, against 0.87 s, 0.33x git's, with
//!    git's bitmaps and a fill-in walk from 3,277 spikes).
//! 2. **Many tips**: the tips of *primary* refs get one, branches (`HEAD`, `refs/heads/`) first,
//!    then tags (`refs/tags/`, peeled), then remote-tracking refs, newest first within each, up to
//!    [`MAX_TIP_BITMAPS`]. Other refs (`refs/pull/*`, `refs/merge-requests/*`,
//!    `refs/changes/*`, `refs/keep-around/*`, notes...) are *spikes*: thousands of them, each
//!    a commit or a few off the main history. A bitmap on each would bloat the file for little;
//!    what their queries need is a bitmap where each spike's walk reaches the main history (its
//!    *fork point*), since from there a walk without one goes on down the main history to the
//!    next bitmap, possibly thousands of commits (see the bitmap connectivity-check discussion
//!    on the git list: spiky refs are where bitmap walks do badly). Each spike's fork points
//!    get a weight: the number of spikes landing there.
//! 3. **History spacing**, over the *main history* (commits the primary tips reach; all tips' in
//!    case 1), newest first by committer date as git does: each of the newest [`MUST_REGION`]
//!    commits gets a bitmap; then one per window of commits, the window [`MIN_GAP`] commits wide
//!    up to [`MIN_REGION`] commits from the newest, then widening with the distance (as wide as
//!    the distance past [`MIN_REGION`]) up to [`MAX_GAP`]. This is git's own spacing; on git.git
//!    (85k commits) it places about 320 bitmaps. Within a window the pick is, in order: nothing
//!    if a tip there already has one; an unbitmapped primary tip (newest); the fork point with
//!    the most spikes; the oldest merge (a merge's bitmap covers both sides); the window's oldest
//!    commit. Unlike git, a last partial window still gets its pick, so the oldest history is
//!    covered too.
//! 4. **`HEAD`'s first-parent line**: every [`FIRST_PARENT_SPACING`]th of its newest
//!    [`FIRST_PARENT_DEPTH`] commits, where most fetches' haves and `--not` revisions sit
//!    (on git.git the walk from `HEAD~k`, k < 400, averages 12 commits, against 69 without and
//!    114 with git's own selection).
//! 5. **Heavy fork points**: the [`MAX_FORK_BITMAPS`] fork points with the most spikes (at
//!    least [`MIN_FORK_WEIGHT`]) that still have no bitmap get one.
//! 6. **Separate histories**: the tips of `refs/notes/*` and every tip whose history shares no
//!    commit with `HEAD`'s (an orphan branch, `refs/meta/config`, an unrelated import) get a
//!    bitmap whatever their number or namespace (up to [`MAX_SEPARATE_TIPS`]). No fill-in walk
//!    from such a tip could ever land on a bitmap of the main history: without one on the tip
//!    itself, `rev-list --all --use-bitmap-index` walks all of it (git.git's `refs/notes/amlog`
//!    alone made git walk some 30k trees). Notes histories are left out of the main history:
//!    their commits would take the spacing's picks from the real history.
//!
//! On git.git with its ~1000 tags this gives roughly 400 bitmaps; with its tens of thousands of
//! `refs/pull/*` refs, a hundred or so more at their fork points.

use super::build::{CommitGraph, NONE};

/// Up to this many distinct tip commits, every tip gets a bitmap.
pub const FEW_TIPS: usize = 100;
/// Asked to give every tip a bitmap, up to this many distinct tip commits (git/git's 4,227
/// took 46 s and 11.8 MB; a host with 100,000 pull-request refs would get a file of hundreds
/// of MB).
pub const MAX_EVERY_TIP: usize = 20_000;
/// With more tips, at most this many primary tips get a bitmap directly (the rest are preferred
/// picks in the history spacing).
pub const MAX_TIP_BITMAPS: usize = 100;
/// The newest commits of the main history that each get a bitmap.
pub const MUST_REGION: usize = 100;
/// Up to this far from the newest commit, windows are [`MIN_GAP`] commits wide.
pub const MIN_REGION: usize = 20_000;
/// The narrowest window past [`MUST_REGION`].
pub const MIN_GAP: usize = 100;
/// The widest window.
pub const MAX_GAP: usize = 5_000;
/// On `HEAD`'s first-parent line, every this many commits gets a bitmap...
pub const FIRST_PARENT_SPACING: usize = 8;
/// ...among its newest this many (at most 64 bitmaps).
pub const FIRST_PARENT_DEPTH: usize = 512;
/// Extra bitmaps for the fork points of the most spikes.
pub const MAX_FORK_BITMAPS: usize = 100;
/// A fork point needs this many spikes to get an extra bitmap.
pub const MIN_FORK_WEIGHT: u32 = 2;
/// At most this many tips of separate histories (notes, histories disjoint from `HEAD`'s) get
/// a bitmap of their own, newest first.
pub const MAX_SEPARATE_TIPS: usize = 1_000;
/// A spike's walk back to the main history stops after this many commits (its fork point is
/// then unknown): spikes are short, and this bounds the work for an unrelated history.
const MAX_SPIKE_WALK: usize = 10_000;

/// The kind of ref a tip comes from, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TipClass {
    /// `HEAD` and `refs/heads/*`.
    Branch,
    /// `refs/tags/*` (peeled to the commit).
    Tag,
    /// `refs/remotes/*`.
    Remote,
    /// `refs/notes/*`: a history of its own (see the module documentation).
    Notes,
    /// Anything else: `refs/pull/*`, `refs/changes/*`, ...
    Other,
}

impl TipClass {
    /// The class of a ref by its full name.
    pub fn of(refname: &str) -> TipClass {
        if refname == "HEAD" || refname.starts_with("refs/heads/") {
            TipClass::Branch
        } else if refname.starts_with("refs/tags/") {
            TipClass::Tag
        } else if refname.starts_with("refs/remotes/") {
            TipClass::Remote
        } else if refname.starts_with("refs/notes/") {
            TipClass::Notes
        } else {
            TipClass::Other
        }
    }
}

/// A ref tip: a commit (by commit number) and where the ref lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tip {
    pub(crate) commit: u32,
    pub(crate) class: TipClass,
    /// Whether the ref is `HEAD` (whose history tells separate histories apart).
    pub(crate) head: bool,
}

/// Why a commit was selected (for logs and the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A ref tip.
    Tip,
    /// One of the newest commits.
    Recent,
    /// A pick of the history spacing.
    Spacing,
    /// A fork point of many spike refs.
    ForkPoint,
}

/// The width of the window starting at main-history index `i` (0: a bitmap for `i` itself).
fn window(i: usize) -> usize {
    if i < MUST_REGION {
        0
    } else if i < MIN_REGION {
        (i - MUST_REGION + 1).min(MIN_GAP)
    } else {
        (i - MIN_REGION).clamp(MIN_GAP, MAX_GAP)
    }
}

/// The commits chosen so far, in order, and as a mask by commit number.
struct Chosen {
    list: Vec<(u32, Reason)>,
    mask: Vec<bool>,
}

impl Chosen {
    fn add(&mut self, c: u32, why: Reason) {
        if !self.mask[c as usize] {
            self.mask[c as usize] = true;
            self.list.push((c, why));
        }
    }
}

/// Selects the commits to bitmap among those of `graph` (see the module documentation); with
/// `every_tip` (and at most [`MAX_EVERY_TIP`] distinct tips), every tip is treated as when
/// there are few. A window of the history spacing with no tip in it picks a commit of
/// `preferred` (by commit number; empty: none) when it has one: the commits an earlier file
/// has bitmaps for, which are then reused rather than built (git's writer prefers them too).
pub(crate) fn select_preferring(
    graph: &CommitGraph,
    tips: &[Tip],
    every_tip: bool,
    preferred: &[bool],
) -> Vec<(u32, Reason)> {
    let is_preferred = |c: u32| preferred.get(c as usize).copied().unwrap_or(false);
    let n = graph.len();
    let mut chosen = Chosen {
        list: Vec::new(),
        mask: vec![false; n],
    };

    // Distinct tip commits, each with its best class.
    let mut best_class: Vec<Option<TipClass>> = vec![None; n];
    for t in tips {
        let slot = &mut best_class[t.commit as usize];
        *slot = Some(slot.map_or(t.class, |c| c.min(t.class)));
    }
    let tip_commits: Vec<u32> = (0..n as u32)
        .filter(|&c| best_class[c as usize].is_some())
        .collect();
    let every_tip = every_tip && {
        let fits = tip_commits.len() <= MAX_EVERY_TIP;
        if !fits {
            tracing::warn!(
                "{} distinct ref tips, more than {MAX_EVERY_TIP}: not every tip gets a bitmap \
                 (spikes get theirs at their fork points)",
                tip_commits.len()
            );
        }
        fits
    };
    let few = every_tip || tip_commits.len() <= FEW_TIPS;
    let any_primary = tip_commits.iter().any(|&c| {
        !matches!(
            best_class[c as usize],
            Some(TipClass::Other | TipClass::Notes)
        )
    });
    let is_primary = |c: u32| match best_class[c as usize] {
        None | Some(TipClass::Notes) => false,
        Some(_) if few || !any_primary => true,
        Some(class) => class != TipClass::Other,
    };
    let mut primary: Vec<u32> = tip_commits
        .iter()
        .copied()
        .filter(|&c| is_primary(c))
        .collect();
    primary.sort_by_key(|&c| {
        (
            best_class[c as usize],
            std::cmp::Reverse(graph.date(c)),
            std::cmp::Reverse(graph.rank(c)),
        )
    });
    let direct = if few { primary.len() } else { MAX_TIP_BITMAPS };
    for &c in primary.iter().take(direct) {
        chosen.add(c, Reason::Tip);
    }

    // The main history: what the primary tips reach.
    let mut main = vec![false; n];
    let mut stack: Vec<u32> = primary.clone();
    for &c in &primary {
        main[c as usize] = true;
    }
    while let Some(c) = stack.pop() {
        for &p in graph.parents(c) {
            if p != NONE && !main[p as usize] {
                main[p as usize] = true;
                stack.push(p);
            }
        }
    }

    // Separate histories: notes, and tips sharing nothing with HEAD's history (or, without
    // HEAD, with the main history).
    let heads: Vec<u32> = tips.iter().filter(|t| t.head).map(|t| t.commit).collect();
    let joins = if heads.is_empty() {
        reaches(graph, &main)
    } else {
        reaches(graph, &ancestors(graph, &heads))
    };
    let mut separate: Vec<u32> = tip_commits
        .iter()
        .copied()
        .filter(|&c| best_class[c as usize] == Some(TipClass::Notes) || !joins[c as usize])
        .collect();
    separate.sort_by_key(|&c| {
        (
            std::cmp::Reverse(graph.date(c)),
            std::cmp::Reverse(graph.rank(c)),
        )
    });
    separate.truncate(MAX_SEPARATE_TIPS);
    for &c in &separate {
        chosen.add(c, Reason::Tip);
    }

    // Spike weights at their fork points.
    let mut weight = vec![0u32; n];
    let spikes: Vec<u32> = tip_commits
        .iter()
        .copied()
        .filter(|&c| !is_primary(c) && !chosen.mask[c as usize])
        .collect();
    fork_weights(graph, &main, &spikes, &mut weight);

    // History spacing over the main history, newest first.
    let mut history: Vec<u32> = (0..n as u32).filter(|&c| main[c as usize]).collect();
    history.sort_by_key(|&c| {
        (
            std::cmp::Reverse(graph.date(c)),
            std::cmp::Reverse(graph.rank(c)),
        )
    });
    let unchosen_tip = |c: u32| is_primary(c);
    let mut i = 0;
    while i < history.len() {
        let w = window(i);
        if w == 0 {
            chosen.add(history[i], Reason::Recent);
            i += 1;
            continue;
        }
        let end = (i + w + 1).min(history.len());
        let span = &history[i..end];
        if span.iter().any(|&c| chosen.mask[c as usize]) {
            i = end;
            continue;
        }
        let pick = span
            .iter()
            .copied()
            .find(|&c| unchosen_tip(c))
            .or_else(|| span.iter().copied().find(|&c| is_preferred(c)))
            .or_else(|| {
                span.iter()
                    .copied()
                    .filter(|&c| weight[c as usize] > 0)
                    // Most spikes; the newest among equals.
                    .min_by_key(|&c| std::cmp::Reverse(weight[c as usize]))
            })
            .or_else(|| {
                span.iter()
                    .copied()
                    .rev()
                    .find(|&c| graph.parents(c).len() > 1)
            })
            .unwrap_or(span[span.len() - 1]);
        chosen.add(pick, Reason::Spacing);
        i = end;
    }

    // HEAD's first-parent line, after the spacing (whose windows it must not empty): where
    // fetches and `--not` queries mostly start (a client's have is the default branch as it
    // pulled it). Spacing by date leaves gaps of up to ~40 merges there on git.git, and a walk
    // from inside a gap reads every topic merged in it (up to ~260 commits); a bitmap on every
    // [`FIRST_PARENT_SPACING`]th commit bounds it to a few merges' topics.
    if let Some(head) = tips.iter().find(|t| t.head) {
        let mut c = head.commit;
        for k in 0..FIRST_PARENT_DEPTH {
            if k % FIRST_PARENT_SPACING == 0 {
                chosen.add(c, Reason::Spacing);
            }
            match graph.parents(c).first() {
                Some(&p) if p != NONE => c = p,
                _ => break,
            }
        }
    }

    // The heaviest fork points.
    let mut forks: Vec<u32> = (0..n as u32)
        .filter(|&c| weight[c as usize] >= MIN_FORK_WEIGHT && !chosen.mask[c as usize])
        .collect();
    forks.sort_by_key(|&c| {
        (
            std::cmp::Reverse(weight[c as usize]),
            std::cmp::Reverse(graph.date(c)),
        )
    });
    for &c in forks.iter().take(MAX_FORK_BITMAPS) {
        chosen.add(c, Reason::ForkPoint);
    }
    chosen.list
}

/// Every commit `starts` reach (themselves included), as a mask by commit number.
fn ancestors(graph: &CommitGraph, starts: &[u32]) -> Vec<bool> {
    let mut seen = vec![false; graph.len()];
    let mut stack: Vec<u32> = Vec::with_capacity(starts.len());
    for &c in starts {
        if !seen[c as usize] {
            seen[c as usize] = true;
            stack.push(c);
        }
    }
    while let Some(c) = stack.pop() {
        for &p in graph.parents(c) {
            if p != NONE && !seen[p as usize] {
                seen[p as usize] = true;
                stack.push(p);
            }
        }
    }
    seen
}

/// For each commit, whether its history (itself included) has a commit of `set`: parents
/// first, by topological rank, so each commit is settled from its parents in one pass.
fn reaches(graph: &CommitGraph, set: &[bool]) -> Vec<bool> {
    let n = graph.len();
    let mut by_rank: Vec<u32> = (0..n as u32).collect();
    by_rank.sort_unstable_by_key(|&c| graph.rank(c));
    let mut out = set.to_vec();
    for c in by_rank {
        if !out[c as usize] {
            out[c as usize] = graph
                .parents(c)
                .iter()
                .any(|&p| p != NONE && out[p as usize]);
        }
    }
    out
}

/// Adds, for each spike tip, one to the weight of the main-history commits its history first
/// reaches (itself, if it is in the main history). Spike commits remember the fork point found
/// through them, so spikes sharing commits are walked once.
fn fork_weights(graph: &CommitGraph, main: &[bool], spikes: &[u32], weight: &mut [u32]) {
    let n = graph.len();
    let mut fork_of: Vec<u32> = vec![NONE; n];
    let mut stamp: Vec<u32> = vec![0; n];
    let mut stack = Vec::new();
    let mut visited = Vec::new();
    for (k, &tip) in spikes.iter().enumerate() {
        let gen = k as u32 + 1;
        if main[tip as usize] {
            weight[tip as usize] += 1;
            continue;
        }
        let mut found: Vec<u32> = Vec::new();
        stack.clear();
        visited.clear();
        stack.push(tip);
        stamp[tip as usize] = gen;
        while let Some(c) = stack.pop() {
            if visited.len() >= MAX_SPIKE_WALK {
                break;
            }
            visited.push(c);
            for &p in graph.parents(c) {
                if p == NONE || stamp[p as usize] == gen {
                    continue;
                }
                stamp[p as usize] = gen;
                if main[p as usize] {
                    found.push(p);
                } else if fork_of[p as usize] != NONE {
                    found.push(fork_of[p as usize]);
                } else {
                    stack.push(p);
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        for &f in &found {
            weight[f as usize] += 1;
        }
        // The newest fork point stands for this spike's commits in later walks.
        if let Some(&f) = found.iter().max_by_key(|&&f| graph.rank(f)) {
            for &c in &visited {
                fork_of[c as usize] = f;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_gits_spacing() {
        assert_eq!(window(0), 0);
        assert_eq!(window(99), 0);
        assert_eq!(window(100), 1);
        assert_eq!(window(150), 51);
        assert_eq!(window(5_000), 100);
        assert_eq!(window(20_050), 100);
        assert_eq!(window(23_000), 3_000);
        assert_eq!(window(80_000), 5_000);
        // The number of windows over git.git's 85k commits is a few hundred.
        let mut i = 0;
        let mut count = 0;
        while i < 85_000 {
            i += window(i) + 1;
            count += 1;
        }
        assert!((250..400).contains(&count), "{count}");
    }

    #[test]
    fn classes() {
        assert_eq!(TipClass::of("HEAD"), TipClass::Branch);
        assert_eq!(TipClass::of("refs/heads/main"), TipClass::Branch);
        assert_eq!(TipClass::of("refs/tags/v1"), TipClass::Tag);
        assert_eq!(TipClass::of("refs/remotes/o/main"), TipClass::Remote);
        assert_eq!(TipClass::of("refs/pull/1/head"), TipClass::Other);
        assert_eq!(TipClass::of("refs/notes/amlog"), TipClass::Notes);
        assert_eq!(TipClass::of("refs/meta/config"), TipClass::Other);
        assert!(TipClass::Branch < TipClass::Tag && TipClass::Remote < TipClass::Other);
    }
}

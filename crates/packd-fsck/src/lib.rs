//! git's fsck checks on received objects, as git 2.39's receive-pack applies them
//! (`receive.fsckObjects`, on by default here), with links and collisions checked as well.
//!
//! ```text
//! check_incoming ── incoming.rs: pass over the pack (all cores), then marked blobs, then tips
//!    ├─ link_kinds.rs                          each link of the kind it says
//!    ├─ early.rs                               the same per-object checks, run as index-pack
//!    │                                         resolves (content in memory), for the pass
//!    ├─ commit.rs, tag.rs ── ident.rs          header, ids, identities
//!    ├─ tree.rs ── dotgit.rs                   modes, names, order, .git aliases, marks
//!    ├─ gitmodules.rs, gitattributes.rs        the marked blobs
//!    └─ options.rs ── msg_id.rs                what refuses, warns or is ignored
//! ```
//! Messages are git's: `error: object <id>: <msgId>: <text>` (or `warning:`), with git's ids
//! and default severities (see [`MsgId`]).

mod commit;
pub mod dotgit;
pub mod early;
mod gitattributes;
pub mod gitmodules;
mod ident;
pub mod incoming;
pub mod link_kinds;
pub mod msg_id;
pub mod options;
mod parsed;
mod tag;
mod tree;

pub use early::{EarlyChecks, EarlyFound};
pub use incoming::{check_incoming, check_incoming_with, CheckError, Checked};
pub use msg_id::{MsgId, Severity};
pub use options::{FsckError, FsckOptions, Unpacker};

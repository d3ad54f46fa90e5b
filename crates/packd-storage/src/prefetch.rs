//! Blocks fetched ahead of their readers ([`crate::Blob::prefetch`]): a caller that knows what
//! it will read (the entries of a pack it is about to send, the next stretch of a pack sent
//! whole) hints it, a background thread fetches the blocks the cache lacks through one
//! coalesced [`crate::Blob::read_many`], and readers that get there first wait for that fetch
//! instead of sending a second request for the same block.
//!
//! ```text
//! hint(ranges)  -> blocks not cached, not in flight  -> registered in flight -> thread:
//!                  inner.read_many(blocks) -> each block: cached, then its waiters woken
//! reader miss   -> in flight?  yes: wait for it (a failed fetch: fetch it itself)
//!                              no:  fetch it itself
//! ```
//!
//! Bounds: one hint fetches at most half of the cache's share for blocks not read yet (more
//! would evict what it fetched before it is read), and a cache runs at most
//! [`MAX_PREFETCHES`] at once; a hint beyond either is cut or dropped (it is only a hint). A
//! waiter waits at most [`WAIT_LIMIT`], then fetches the block itself. Every block registered
//! is finished (cached or failed) even if the thread panics, so no reader waits on a fetch
//! nobody runs.

use crate::cache::BlockKey;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Prefetches one cache runs at once.
pub(crate) const MAX_PREFETCHES: usize = 16;

/// The longest a reader waits for a block fetched ahead before fetching it itself.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// A block being fetched ahead: its bytes once there (`None` inside: the fetch failed).
#[derive(Default)]
pub(crate) struct Pending {
    state: Mutex<Option<Option<Bytes>>>,
    ready: Condvar,
}

impl Pending {
    /// Records the fetch's outcome and wakes the waiters.
    fn finish(&self, got: Option<Bytes>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.is_none() {
            *state = Some(got);
        }
        self.ready.notify_all();
    }

    /// The block's bytes once fetched; `None` when the fetch failed or took longer than
    /// [`WAIT_LIMIT`] (the caller then fetches it itself).
    pub(crate) fn wait(&self) -> Option<Bytes> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (state, _) = self
            .ready
            .wait_timeout_while(state, WAIT_LIMIT, |s| s.is_none())
            .unwrap_or_else(|e| e.into_inner());
        state.clone().flatten()
    }
}

/// The blocks a cache is fetching ahead, and how many prefetches run.
#[derive(Default)]
pub(crate) struct InFlight {
    blocks: Mutex<HashMap<BlockKey, Arc<Pending>>>,
    running: AtomicUsize,
}

impl InFlight {
    /// The fetch in flight of block `key`, if any.
    pub(crate) fn get(&self, key: &BlockKey) -> Option<Arc<Pending>> {
        if self.running.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        blocks.get(key).cloned()
    }

    /// Takes a prefetch slot; `None` when [`MAX_PREFETCHES`] run.
    pub(crate) fn start(self: &Arc<Self>) -> Option<Slot> {
        let taken = self
            .running
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < MAX_PREFETCHES).then_some(n + 1)
            });
        taken.ok().map(|_| Slot {
            in_flight: self.clone(),
            keys: Vec::new(),
            done: 0,
        })
    }
}

/// One prefetch's hold on the cache's in-flight blocks: the blocks it registered, finished in
/// order as they arrive, and the rest (a failure, a panic) finished as failed when it is
/// dropped, which also frees its slot.
pub(crate) struct Slot {
    in_flight: Arc<InFlight>,
    keys: Vec<BlockKey>,
    done: usize,
}

impl Slot {
    /// Registers block `key` as fetched by this prefetch; `false` when another fetch has it.
    pub(crate) fn register(&mut self, key: BlockKey) -> bool {
        let mut blocks = self
            .in_flight
            .blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if blocks.contains_key(&key) {
            return false;
        }
        blocks.insert(key.clone(), Arc::new(Pending::default()));
        self.keys.push(key);
        true
    }

    /// The blocks registered, in order.
    pub(crate) fn keys(&self) -> &[BlockKey] {
        &self.keys
    }

    /// Finishes the next registered block with `got` (already cached when `Some`).
    pub(crate) fn finish_next(&mut self, got: Option<Bytes>) {
        if let Some(key) = self.keys.get(self.done) {
            let pending = self
                .in_flight
                .blocks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
            if let Some(p) = pending {
                p.finish(got);
            }
            self.done += 1;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        while self.done < self.keys.len() {
            self.finish_next(None);
        }
        self.in_flight.running.fetch_sub(1, Ordering::AcqRel);
    }
}

//! What one request (one fetch, one push) cost the store: per-request counters that the
//! storages add to while a thread is inside the request's scope.
//!
//! ```text
//! request's thread        let reads = RequestReads::new();
//!                         let _in = reads.enter();      current on this thread until dropped
//!   CachedBlob::read_many   bytes_used += the ranges asked
//!   S3 HEAD, LIST, PUT ...  counted on this thread once the request returns
//!   S3Blob::start_get       captures the current scope; the GET's future (on the S3
//!                           runtime's threads) adds its bytes to it when it completes
//! another thread          let carried = RequestReads::current();   (before spawning)
//!                         ... carried.as_ref().map(RequestReads::enter) inside it
//! the access log          reads.stats(): gets, heads, lists, puts, deletes and bytes
//! ```
//!
//! Counting outside any scope (a maintenance thread, a test) counts nowhere. The figures are
//! relaxed atomics behind an `Arc`: a scope is cheap to clone and to carry, and a count is one
//! thread-local read and an atomic add, with no lock.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The counters one request's storage calls add to. Clones share the counters.
#[derive(Clone, Debug, Default)]
pub struct RequestReads(Arc<Counters>);

/// The figures behind a [`RequestReads`].
#[derive(Debug, Default)]
struct Counters {
    gets: AtomicU64,
    heads: AtomicU64,
    lists: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    bytes_fetched: AtomicU64,
    bytes_put: AtomicU64,
    bytes_used: AtomicU64,
}

/// What a request cost the store so far (see [`RequestReads::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestReadStats {
    /// `GET` requests sent (ranged and whole), failed ones included.
    pub gets: u64,
    /// `HEAD` requests sent (opening a blob no listing described, `exists`, before a delete).
    pub heads: u64,
    /// `LIST` requests sent.
    pub lists: u64,
    /// `PUT` requests sent (publications and replacements), failed ones included.
    pub puts: u64,
    /// `DELETE` requests sent.
    pub deletes: u64,
    /// Body bytes the `GET`s returned.
    pub bytes_fetched: u64,
    /// Body bytes of the `PUT`s that succeeded.
    pub bytes_put: u64,
    /// Bytes of the (non-empty) ranges the request asked of cached blobs: what it used of
    /// what was fetched, whether the bytes came from the store or the block cache.
    pub bytes_used: u64,
}

impl RequestReadStats {
    /// Whether the request touched a store at all (any figure non-zero).
    pub fn touched_store(&self) -> bool {
        *self != RequestReadStats::default()
    }
}

impl fmt::Display for RequestReadStats {
    /// `store_gets=.. store_heads=.. store_lists=.. store_puts=.. store_deletes=..
    /// store_fetched=.. store_put_bytes=.. store_used=..`, as the access log shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store_gets={} store_heads={} store_lists={} store_puts={} store_deletes={} \
             store_fetched={} store_put_bytes={} store_used={}",
            self.gets,
            self.heads,
            self.lists,
            self.puts,
            self.deletes,
            self.bytes_fetched,
            self.bytes_put,
            self.bytes_used
        )
    }
}

thread_local! {
    /// The scope of the request this thread is serving, if any.
    static CURRENT: RefCell<Option<RequestReads>> = const { RefCell::new(None) };
}

/// Keeps a [`RequestReads`] current on this thread until dropped, then restores the one that
/// was current before. Not `Send`: it restores the thread it was made on.
#[must_use = "the scope is current only while the guard lives"]
#[derive(Debug)]
pub struct Entered {
    previous: Option<RequestReads>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = CURRENT.try_with(|c| *c.borrow_mut() = previous);
    }
}

impl RequestReads {
    /// A new scope, every figure 0.
    pub fn new() -> RequestReads {
        RequestReads::default()
    }

    /// Makes this scope current on this thread until the guard is dropped.
    pub fn enter(&self) -> Entered {
        let previous = CURRENT
            .try_with(|c| c.borrow_mut().replace(self.clone()))
            .ok()
            .flatten();
        Entered {
            previous,
            _not_send: PhantomData,
        }
    }

    /// Runs `f` with this scope current on this thread (for a closure handed to another
    /// thread: `spawn_blocking(move || reads.in_scope(work))`).
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _in = self.enter();
        f()
    }

    /// The scope current on this thread, for code that hands work to another thread.
    pub fn current() -> Option<RequestReads> {
        CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
    }

    /// Whether two handles share the same counters.
    pub fn same(&self, other: &RequestReads) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The figures so far.
    pub fn stats(&self) -> RequestReadStats {
        let c = &*self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RequestReadStats {
            gets: get(&c.gets),
            heads: get(&c.heads),
            lists: get(&c.lists),
            puts: get(&c.puts),
            deletes: get(&c.deletes),
            bytes_fetched: get(&c.bytes_fetched),
            bytes_put: get(&c.bytes_put),
            bytes_used: get(&c.bytes_used),
        }
    }

    /// Counts one `GET` that returned `fetched` body bytes (0 if it failed).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(crate) fn add_get(&self, fetched: u64) {
        self.0.gets.fetch_add(1, Ordering::Relaxed);
        if fetched > 0 {
            self.0.bytes_fetched.fetch_add(fetched, Ordering::Relaxed);
        }
    }

    /// Counts one `HEAD`.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(crate) fn add_head(&self) {
        self.0.heads.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one `DELETE`.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(crate) fn add_delete(&self) {
        self.0.deletes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `f` on the scope current on this thread, if any (a thread-local read, no clone).
fn with_current(f: impl FnOnce(&RequestReads)) {
    let _ = CURRENT.try_with(|c| {
        if let Some(reads) = c.borrow().as_ref() {
            f(reads)
        }
    });
}

/// Counts, in the current scope, one `GET` that returned `fetched` body bytes.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) fn count_get(fetched: u64) {
    with_current(|r| r.add_get(fetched));
}

/// Counts, in the current scope, one `HEAD`.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) fn count_head() {
    with_current(RequestReads::add_head);
}

/// Counts, in the current scope, one `LIST`.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) fn count_list() {
    with_current(|r| {
        r.0.lists.fetch_add(1, Ordering::Relaxed);
    });
}

/// Counts, in the current scope, one `PUT` of `bytes` bytes (`ok`: whether it succeeded).
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) fn count_put(bytes: u64, ok: bool) {
    with_current(|r| {
        r.0.puts.fetch_add(1, Ordering::Relaxed);
        if ok {
            r.0.bytes_put.fetch_add(bytes, Ordering::Relaxed);
        }
    });
}

/// Counts, in the current scope, the non-empty ranges inside a blob of `len` bytes that a
/// caller asked for.
pub(crate) fn count_used(ranges: &[std::ops::Range<u64>], len: u64) {
    with_current(|r| {
        let used: u64 = ranges
            .iter()
            .filter(|x| x.start < x.end && x.end <= len)
            .map(|x| x.end - x.start)
            .sum();
        if used > 0 {
            r.0.bytes_used.fetch_add(used, Ordering::Relaxed);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_counts_on_its_thread_and_nests() {
        let outer = RequestReads::new();
        let inner = RequestReads::new();
        count_head();
        {
            let _o = outer.enter();
            count_head();
            {
                let _i = inner.enter();
                count_list();
                assert!(RequestReads::current().is_some_and(|c| c.same(&inner)));
            }
            count_used(&[0..10, 5..5, 90..110], 100);
            let other = std::thread::spawn(|| {
                count_get(7);
                RequestReads::current().is_none()
            });
            assert!(other.join().unwrap(), "another thread is outside the scope");
        }
        assert!(RequestReads::current().is_none());
        count_put(3, true);
        let o = outer.stats();
        assert_eq!(
            o,
            RequestReadStats {
                heads: 1,
                bytes_used: 10,
                ..RequestReadStats::default()
            }
        );
        assert_eq!(inner.stats().lists, 1);
        assert!(!RequestReadStats::default().touched_store());
        assert!(o.to_string().starts_with("store_gets=0 store_heads=1 "));
    }
}

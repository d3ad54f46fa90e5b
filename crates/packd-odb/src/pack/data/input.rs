//! Reading a pack as it streams in (a push, `index-pack --stdin`): each entry's header, its zlib
//! stream inflated to find where it ends and to check its declared size, the CRC-32 of its bytes,
//! and the id of every whole object; the bytes are copied to `out` as they are read, and the
//! trailer is checked against the SHA-1 of everything before it. Deltas are resolved later
//! ([`crate::pack::index::resolve`]), from the copy.
//!
//! Layout in [`super`]. Nothing is allocated from a declared size or count: sizes are counted as
//! the data inflates, and an entry that inflates to more or less than it declares is refused with
//! its offset.

use super::EntryKind;
use crate::hash::ObjectId;
use crate::pack::index::resolve::ObjectObserver;
use crate::{Error, ObjectKind, Result};
use sha1::Digest;
use std::io::{Read, Write};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TrySendError};

/// One entry of a streamed pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputEntry {
    /// Where the entry starts in the pack.
    pub offset: u64,
    /// What it holds.
    pub kind: EntryKind,
    /// Its data's inflated size (for a delta, the delta's).
    pub size: u64,
    /// The length of its header (the zlib stream starts this far after `offset`).
    pub header_len: u32,
    /// Where the next entry starts.
    pub end: u64,
    /// The CRC-32 of its bytes, header included.
    pub crc32: u32,
    /// The object's id, for whole objects.
    pub id: Option<ObjectId>,
}

/// A pack read from a stream.
#[derive(Debug)]
pub struct InputPack {
    /// The pack format version (2 or 3).
    pub version: u32,
    /// The entries, in stream order.
    pub entries: Vec<InputEntry>,
    /// The trailer: the SHA-1 of the pack's bytes before it.
    pub checksum: [u8; 20],
    /// The pack's length, trailer included.
    pub len: u64,
}

/// Bounds on what a stream may declare.
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    /// Most objects a pack may hold.
    pub max_objects: u32,
    /// Most bytes a pack may have.
    pub max_bytes: u64,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_objects: u32::MAX,
            max_bytes: u64::MAX,
        }
    }
}

const BUFFER: usize = 1 << 20;

/// The input buffer of a pack read on one thread (a small push: its few kilobytes fit).
const INLINE_BUFFER: usize = 32 * 1024;

/// Packs of fewer objects than this are read on the calling thread alone (see [`read_pack`]).
const THREADS_FROM: u32 = crate::PARALLEL_FROM as u32;

/// The input, buffered. Every byte consumed is checksummed (CRC-32 of the current entry) here;
/// the pack's SHA-1 and the copy to the output are left to a writer thread, which is handed each
/// buffer once it is consumed ([`writer`]).
struct Stream<'a> {
    name: &'a str,
    input: &'a mut dyn Read,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    /// `buf[..sent]` has been handed to the writer.
    sent: usize,
    offset: u64,
    crc: crc32fast::Hasher,
    limit: u64,
    /// Where consumed bytes go.
    output: Output<'a>,
}

/// Where the stream's consumed bytes go to be hashed (SHA-1, up to the trailer) and copied.
enum Output<'a> {
    /// The writer thread's queue, and the buffers it hands back.
    Thread {
        writes: SyncSender<WriteJob>,
        spare: Receiver<Vec<u8>>,
    },
    /// Hashed and copied on the parse thread (a small pack: a thread would cost more). The
    /// first write error is kept and reported after the parse, as the writer thread's is.
    Inline {
        out: &'a mut (dyn Write + Send),
        hash: Option<sha1::Sha1>,
        error: Option<std::io::Error>,
    },
}

/// Work for the writer thread.
enum WriteJob {
    /// Bytes of the pack, to hash and copy.
    Bytes(Vec<u8>),
    /// Everything before the trailer has been sent: reply with its SHA-1; later bytes are only
    /// copied.
    Digest(SyncSender<[u8; 20]>),
}

/// The writer thread: hashes the pack's bytes (up to the trailer) and copies them to `out`,
/// handing each buffer back through `spare`. Returns the first write error; after one, it still
/// drains its queue so that the reader never waits on it.
fn writer(
    jobs: Receiver<WriteJob>,
    spare: Sender<Vec<u8>>,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let mut hash = Some(sha1::Sha1::new());
    let mut result = Ok(());
    for job in jobs {
        match job {
            WriteJob::Bytes(bytes) => {
                if let Some(h) = &mut hash {
                    h.update(&bytes);
                }
                if result.is_ok() {
                    result = out.write_all(&bytes);
                }
                let _ = spare.send(bytes);
            }
            WriteJob::Digest(reply) => {
                if let Some(h) = hash.take() {
                    let _ = reply.send(h.finalize().into());
                }
            }
        }
    }
    result?;
    out.flush()
}

impl Stream<'_> {
    fn corrupt(&self, offset: u64, what: impl Into<String>) -> Error {
        Error::corrupt(self.name, offset, what)
    }

    fn writer_gone(&self) -> Error {
        Error::Io {
            path: self.name.to_string(),
            source: std::io::Error::other("the pack's writer thread stopped"),
        }
    }

    /// Hands the bytes consumed and not yet sent to the writer.
    fn send_consumed(&mut self) -> Result<()> {
        if self.sent >= self.pos {
            return Ok(());
        }
        let (writes, spare) = match &mut self.output {
            Output::Thread { writes, spare } => (writes, spare),
            Output::Inline { out, hash, error } => {
                let bytes = &self.buf[self.sent..self.pos];
                if let Some(h) = hash {
                    h.update(bytes);
                }
                if error.is_none() {
                    if let Err(e) = out.write_all(bytes) {
                        *error = Some(e);
                    }
                }
                self.sent = self.pos;
                return Ok(());
            }
        };
        let bytes = if self.sent == 0 && self.pos == self.filled {
            // The whole buffer: hand it over and take a spare one.
            let mut next = spare.try_recv().unwrap_or_default();
            next.resize(BUFFER, 0);
            let mut full = std::mem::replace(&mut self.buf, next);
            full.truncate(self.filled);
            self.pos = 0;
            self.filled = 0;
            full
        } else {
            self.buf[self.sent..self.pos].to_vec()
        };
        self.sent = self.pos;
        if writes.send(WriteJob::Bytes(bytes)).is_err() {
            return Err(self.writer_gone());
        }
        Ok(())
    }

    /// The SHA-1 of every byte consumed so far, from the writer.
    fn digest(&mut self) -> Result<[u8; 20]> {
        self.send_consumed()?;
        match &mut self.output {
            Output::Thread { writes, .. } => {
                let (tx, rx) = sync_channel(1);
                if writes.send(WriteJob::Digest(tx)).is_err() {
                    return Err(self.writer_gone());
                }
                rx.recv().map_err(|_| self.writer_gone())
            }
            Output::Inline { hash, .. } => match hash.take() {
                Some(h) => Ok(h.finalize().into()),
                None => Err(self.writer_gone()),
            },
        }
    }

    /// Ends the output: the first write error of an inline output, after flushing it.
    fn finish_output(self) -> std::io::Result<()> {
        match self.output {
            Output::Thread { .. } => Ok(()),
            Output::Inline { out, error, .. } => match error {
                Some(e) => Err(e),
                None => out.flush(),
            },
        }
    }

    /// Makes at least one unread byte available; false at the end of the input.
    fn fill(&mut self) -> Result<bool> {
        if self.pos < self.filled {
            return Ok(true);
        }
        self.send_consumed()?;
        self.pos = 0;
        self.filled = 0;
        self.sent = 0;
        loop {
            match self.input.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.filled = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Error::Io {
                        path: self.name.to_string(),
                        source,
                    })
                }
            }
        }
    }

    /// Takes `n` unread bytes (checksumming them; the writer hashes and copies them later).
    fn consume(&mut self, n: usize) -> Result<()> {
        let bytes = &self.buf[self.pos..self.pos + n];
        self.crc.update(bytes);
        self.pos += n;
        self.offset += n as u64;
        if self.offset > self.limit {
            return Err(self.corrupt(
                self.offset,
                format!("the pack is larger than the {} bytes allowed", self.limit),
            ));
        }
        Ok(())
    }

    fn byte(&mut self, what: &str) -> Result<u8> {
        if !self.fill()? {
            return Err(self.corrupt(self.offset, format!("the pack ends inside {what}")));
        }
        let b = self.buf[self.pos];
        self.consume(1)?;
        Ok(b)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        for b in out.iter_mut() {
            *b = self.byte(what)?;
        }
        Ok(out)
    }
}

/// Most inflated bytes gathered into one batch of whole objects for a hashing thread; an object
/// declaring more is streamed to one thread in chunks of this size instead.
pub(crate) const BATCH: usize = 1 << 20;

/// Messages a hashing thread's queue holds. With [`BATCH`], this bounds the inflated bytes in
/// flight whatever the pack's size: about `(QUEUE + 2) * 2 * BATCH` per hashing thread.
const QUEUE: usize = 4;

/// Work for a hashing thread. A thread's messages arrive in the order sent, so an object
/// streamed as `Begin`, `Chunk`s and `Finish` is hashed in order.
enum Job {
    /// Whole objects, one after the other in `data`.
    Batch(Batch),
    /// The start of a large object of `kind` declaring `size` bytes, entry `entry`.
    Begin {
        entry: u32,
        kind: ObjectKind,
        size: u64,
    },
    /// The next bytes of the object begun.
    Chunk(Vec<u8>),
    /// The object begun is complete.
    Finish,
}

/// Whole objects inflated back to back.
struct Batch {
    data: Vec<u8>,
    /// (entry, kind, end of its data in `data`); each starts where the previous ends.
    objects: Vec<(u32, ObjectKind, usize)>,
}

/// What a hashing thread found: (entry, its id, or `None` for a collision attack).
type Hashed = Vec<(u32, Option<ObjectId>)>;

/// The git object header, `"<kind> <size>\0"`.
fn object_header(kind: ObjectKind, size: u64) -> Vec<u8> {
    format!("{} {size}\0", kind.name()).into_bytes()
}

fn digest(hasher: sha1dc::Hasher) -> Option<ObjectId> {
    hasher
        .finalize()
        .ok()
        .and_then(|d| ObjectId::from_bytes(d.as_ref()))
}

/// Hashes the objects of a batch into `out`, then hands its buffer back to `pool`.
fn hash_batch(
    batch: Batch,
    out: &mut Hashed,
    pool: &Sender<Vec<u8>>,
    observer: Option<&dyn ObjectObserver>,
) {
    hash_objects(&batch, out, observer);
    let _ = pool.send(batch.data);
}

/// Hashes the objects of a batch into `out`, showing those that are not blobs to `observer`.
fn hash_objects(batch: &Batch, out: &mut Hashed, observer: Option<&dyn ObjectObserver>) {
    let mut start = 0;
    for &(entry, kind, end) in &batch.objects {
        let data = &batch.data[start..end];
        start = end;
        let mut h = sha1dc::Hasher::new();
        h.update(&object_header(kind, data.len() as u64));
        h.update(data);
        let id = digest(h);
        if let (Some(observer), Some(id), false) = (observer, &id, kind == ObjectKind::Blob) {
            observer.observe(id, kind, data);
        }
        out.push((entry, id));
    }
}

/// A hashing thread: computes the ids of the whole objects it is sent until its queue closes.
fn hash_worker(
    jobs: Receiver<Job>,
    pool: Sender<Vec<u8>>,
    observer: Option<&dyn ObjectObserver>,
) -> Hashed {
    let mut out = Vec::new();
    let mut current: Option<(u32, sha1dc::Hasher)> = None;
    for job in jobs {
        match job {
            Job::Batch(batch) => hash_batch(batch, &mut out, &pool, observer),
            Job::Begin { entry, kind, size } => {
                let mut h = sha1dc::Hasher::new();
                h.update(&object_header(kind, size));
                current = Some((entry, h));
            }
            Job::Chunk(chunk) => {
                if let Some((_, h)) = &mut current {
                    h.update(&chunk);
                }
                let _ = pool.send(chunk);
            }
            Job::Finish => {
                if let Some((entry, h)) = current.take() {
                    out.push((entry, digest(h)));
                }
            }
        }
    }
    out
}

/// The parse thread's side of the hashing threads: gathers whole objects into batches and hands
/// them out in turn. When every queue is full, the parse thread hashes a batch itself rather than
/// wait, so no core idles whichever of inflating and hashing is slower.
struct Hashers<'o> {
    queues: Vec<SyncSender<Job>>,
    /// The queue the next batch or large object goes to.
    next: usize,
    /// Buffers handed back by the hashing threads, for reuse.
    pool: Receiver<Vec<u8>>,
    /// For the parse thread's own hashing.
    pool_back: Sender<Vec<u8>>,
    batch: Batch,
    /// Ids hashed on the parse thread.
    own: Hashed,
    /// A hashing thread is gone (it panicked): the ids would be incomplete.
    broken: bool,
    /// Without hashing threads (no queues): the large object being hashed here.
    current: Option<(u32, sha1dc::Hasher)>,
    /// Shown the whole objects of the batches (see [`read_pack_observed`]).
    observer: Option<&'o dyn ObjectObserver>,
}

impl Hashers<'_> {
    fn buffer(&mut self) -> Vec<u8> {
        match self.pool.try_recv() {
            Ok(mut b) => {
                b.clear();
                b
            }
            Err(_) => Vec::with_capacity(BATCH),
        }
    }

    /// Sends `job` to the next queue, waiting for room only when `wait`; gives it back otherwise.
    fn send(&mut self, job: Job, wait: bool) -> Option<Job> {
        let mut job = job;
        for _ in 0..self.queues.len() {
            let q = self.next;
            self.next = (self.next + 1) % self.queues.len();
            match self.queues[q].try_send(job) {
                Ok(()) => return None,
                Err(TrySendError::Full(j)) => job = j,
                Err(TrySendError::Disconnected(j)) => {
                    self.broken = true;
                    job = j;
                }
            }
        }
        if !wait {
            return Some(job);
        }
        let q = self.next;
        self.next = (self.next + 1) % self.queues.len();
        match self.queues[q].send(job) {
            Ok(()) => None,
            Err(e) => {
                self.broken = true;
                Some(e.0)
            }
        }
    }

    /// Hands the current batch out (or hashes it here when every thread is busy).
    fn flush(&mut self) {
        if self.batch.objects.is_empty() {
            return;
        }
        if self.queues.is_empty() {
            // No hashing threads: hashed here, the buffer kept for the next batch.
            hash_objects(&self.batch, &mut self.own, self.observer);
            self.batch.data.clear();
            self.batch.objects.clear();
            return;
        }
        let data = self.buffer();
        let batch = std::mem::replace(
            &mut self.batch,
            Batch {
                data,
                objects: Vec::new(),
            },
        );
        if let Some(Job::Batch(batch)) = self.send(Job::Batch(batch), false) {
            let pool = self.pool_back.clone();
            hash_batch(batch, &mut self.own, &pool, self.observer);
        }
    }

    /// Starts a large object on one thread; it owns it until `Finish`.
    fn begin(&mut self, entry: u32, kind: ObjectKind, size: u64) -> usize {
        self.flush();
        if self.queues.is_empty() {
            let mut h = sha1dc::Hasher::new();
            h.update(&object_header(kind, size));
            self.current = Some((entry, h));
            return 0;
        }
        let q = self.next;
        self.next = (self.next + 1) % self.queues.len();
        self.send_to(q, Job::Begin { entry, kind, size });
        q
    }

    fn send_to(&mut self, q: usize, job: Job) {
        if self.queues.is_empty() {
            // No hashing threads: the object begun is hashed here.
            match job {
                Job::Chunk(chunk) => {
                    if let Some((_, h)) = &mut self.current {
                        h.update(&chunk);
                    }
                    let _ = self.pool_back.send(chunk);
                }
                Job::Finish => {
                    if let Some((entry, h)) = self.current.take() {
                        self.own.push((entry, digest(h)));
                    }
                }
                Job::Batch(batch) => {
                    let pool = self.pool_back.clone();
                    hash_batch(batch, &mut self.own, &pool, self.observer);
                }
                Job::Begin { entry, kind, size } => {
                    self.begin(entry, kind, size);
                }
            }
            return;
        }
        if self.queues[q].send(job).is_err() {
            self.broken = true;
        }
    }
}

/// Reads a whole pack from `input`, copying its bytes to `out`; `name` names it in errors.
/// `progress` is told (entries read, count) as it goes.
///
/// The calling thread reads, inflates (which finds where each entry ends) and computes the CRC-32
/// of each entry; a writer thread computes the pack's SHA-1 and copies the bytes to `out`; the
/// ids of whole objects are computed by hashing threads (all cores but this one, at least one).
/// All are fed through bounded queues, so memory stays bounded whatever the pack's size.
pub fn read_pack(
    input: &mut dyn Read,
    out: &mut (dyn Write + Send),
    name: &str,
    limits: &InputLimits,
    progress: &mut dyn FnMut(u32, u32),
) -> Result<InputPack> {
    read_pack_observed(input, out, name, limits, progress, None)
}

/// [`read_pack`], showing `observer` each whole object that is not a blob, of at most
/// [`BATCH`] bytes (those are inflated whole; larger ones are hashed as they stream), from the
/// hashing threads: checks on their content need not read them again.
pub fn read_pack_observed(
    input: &mut dyn Read,
    out: &mut (dyn Write + Send),
    name: &str,
    limits: &InputLimits,
    progress: &mut dyn FnMut(u32, u32),
    observer: Option<&dyn ObjectObserver>,
) -> Result<InputPack> {
    // The header tells the object count: a small pack is read on this thread alone, as git's
    // index-pack reads every pack (threads would cost more than its few objects).
    let mut head = vec![0u8; INLINE_BUFFER];
    let mut filled = 0;
    while filled < 12 {
        match input.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(Error::Io {
                    path: name.to_string(),
                    source,
                })
            }
        }
    }
    let count = head
        .get(8..12)
        .filter(|_| filled >= 12)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    if count.is_none_or(|c| c < THREADS_FROM) {
        let (pool_back, pool) = channel();
        let mut hashers = Hashers {
            queues: Vec::new(),
            next: 0,
            pool,
            pool_back,
            batch: Batch {
                data: Vec::new(),
                objects: Vec::new(),
            },
            own: Vec::new(),
            broken: false,
            current: None,
            observer,
        };
        let output = Output::Inline {
            out,
            hash: Some(sha1::Sha1::new()),
            error: None,
        };
        let (parsed, written) = parse(
            input,
            (head, filled),
            output,
            name,
            limits,
            progress,
            &mut hashers,
        );
        hashers.flush();
        let written = written.map_err(|source| Error::Io {
            path: name.to_string(),
            source,
        });
        return finish(name, parsed, written, hashers.own, hashers.broken);
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .clamp(1, 16);
    std::thread::scope(|scope| {
        let (pool_back, pool) = channel();
        let mut queues = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (tx, rx) = sync_channel(QUEUE);
            let back = pool_back.clone();
            queues.push(tx);
            workers.push(scope.spawn(move || hash_worker(rx, back, observer)));
        }
        let mut hashers = Hashers {
            queues,
            next: 0,
            pool,
            pool_back,
            batch: Batch {
                data: Vec::with_capacity(BATCH),
                objects: Vec::new(),
            },
            own: Vec::new(),
            broken: false,
            current: None,
            observer,
        };
        let (writes, write_jobs) = sync_channel(QUEUE);
        let (spare_back, spare) = channel();
        let written = scope.spawn(move || writer(write_jobs, spare_back, out));
        let output = Output::Thread { writes, spare };
        let (parsed, _) = parse(
            input,
            (head, filled),
            output,
            name,
            limits,
            progress,
            &mut hashers,
        );
        // The reader's queue is closed (`parse` dropped it): the writer ends.
        let written = match written.join() {
            Ok(r) => r.map_err(|source| Error::Io {
                path: name.to_string(),
                source,
            }),
            Err(_) => Err(Error::Io {
                path: name.to_string(),
                source: std::io::Error::other("the pack's writer thread failed"),
            }),
        };
        // Even after an error: an object read before it may carry a collision attack, which
        // is then the error reported, as when reading on one thread.
        hashers.flush();
        let Hashers {
            queues,
            mut own,
            mut broken,
            ..
        } = hashers;
        drop(queues);
        for w in workers {
            match w.join() {
                Ok(ids) => own.extend(ids),
                Err(_) => broken = true,
            }
        }
        finish(name, parsed, written, own, broken)
    })
}

/// The end of [`read_pack`]: the first problem found (a collision attack, the parse's error, a
/// write error, a missing id), else the pack with the ids of its whole objects.
fn finish(
    name: &str,
    parsed: Parsed,
    written: Result<()>,
    own: Hashed,
    broken: bool,
) -> Result<InputPack> {
    // The first object (in pack order) carrying a collision attack, if any.
    let collision = own
        .iter()
        .filter(|(_, id)| id.is_none())
        .map(|&(entry, _)| entry)
        .min();
    let (mut pack, error) = match parsed {
        Ok(pack) => (pack, None),
        Err((entries, e)) => (
            InputPack {
                version: 0,
                entries,
                checksum: [0; 20],
                len: 0,
            },
            Some(e),
        ),
    };
    if let Some(entry) = collision {
        // Found before any later error would have been, as when reading on one thread.
        if let Some(e) = pack.entries.get(entry as usize) {
            return Err(Error::corrupt(
                name,
                e.offset,
                "the object carries a SHA-1 collision attack",
            ));
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    written?;
    for (entry, id) in own {
        if let Some(e) = pack.entries.get_mut(entry as usize) {
            e.id = id;
        }
    }
    if broken
        || pack
            .entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::Base(_)) && e.id.is_none())
    {
        return Err(Error::corrupt(
            name,
            0,
            "a hashing thread failed: some objects have no id",
        ));
    }
    Ok(pack)
}

/// What [`parse`] returns: the pack, or the entries read before the error and the error.
type Parsed = std::result::Result<InputPack, (Vec<InputEntry>, Error)>;

/// The parse itself (see [`read_pack`]), reading `input` after the first `filled` bytes of
/// `buf` (read from it already): on failure, the entries read so far and the error. Also
/// returns the result of an inline output's writes (always `Ok` for the writer thread, which
/// reports its own).
fn parse<'a>(
    input: &'a mut dyn Read,
    (mut buf, filled): (Vec<u8>, usize),
    output: Output<'a>,
    name: &'a str,
    limits: &InputLimits,
    progress: &mut dyn FnMut(u32, u32),
    hashers: &mut Hashers<'_>,
) -> (Parsed, std::io::Result<()>) {
    let size = match output {
        Output::Thread { .. } => BUFFER,
        Output::Inline { .. } => INLINE_BUFFER,
    };
    if buf.len() < size {
        buf.resize(size, 0);
    }
    let mut s = Stream {
        name,
        input,
        buf,
        pos: 0,
        filled,
        sent: 0,
        offset: 0,
        crc: crc32fast::Hasher::new(),
        limit: limits.max_bytes,
        output,
    };
    let mut entries = Vec::new();
    let parsed = match parse_into(&mut s, limits, progress, hashers, &mut entries) {
        Ok((version, checksum, len)) => Ok(InputPack {
            version,
            entries,
            checksum,
            len,
        }),
        Err(e) => Err((entries, e)),
    };
    (parsed, s.finish_output())
}

/// Parses into `entries`; returns (version, checksum, length).
fn parse_into(
    s: &mut Stream<'_>,
    limits: &InputLimits,
    progress: &mut dyn FnMut(u32, u32),
    hashers: &mut Hashers<'_>,
    entries: &mut Vec<InputEntry>,
) -> Result<(u32, [u8; 20], u64)> {
    let magic: [u8; 4] = s.bytes("the header")?;
    if &magic != b"PACK" {
        return Err(s.corrupt(0, "not a pack: it does not start with PACK"));
    }
    let version = u32::from_be_bytes(s.bytes("the header")?);
    if version != 2 && version != 3 {
        return Err(s.corrupt(4, format!("pack version {version} is not supported")));
    }
    let count = u32::from_be_bytes(s.bytes("the header")?);
    if count > limits.max_objects {
        return Err(s.corrupt(
            8,
            format!(
                "the pack declares {count} objects, more than the {} allowed",
                limits.max_objects
            ),
        ));
    }
    entries.reserve(count.min(1 << 20) as usize);
    let mut inflater = flate2::Decompress::new(true);
    // Where deltas inflate to, to find their ends: 16 KiB serves as well as more, the
    // inflater just goes round more often. Filled through its spare capacity, so only the
    // pages a delta's bytes reach are ever touched (a small push's deltas touch one).
    let mut scratch: Vec<u8> = Vec::with_capacity(16 * 1024);
    for n in 0..count {
        if n % 1024 == 0 {
            progress(n, count);
        }
        let offset = s.offset;
        s.crc = crc32fast::Hasher::new();
        let first = s.byte("an entry header")?;
        let type_num = (first >> 4) & 7;
        let mut size = (first & 0x0f) as u64;
        let mut shift = 4u32;
        let mut c = first;
        while c & 0x80 != 0 {
            c = s.byte("an entry header")?;
            if shift > 60 {
                return Err(s.corrupt(offset, "the entry's size field overflows 64 bits"));
            }
            size |= ((c & 0x7f) as u64) << shift;
            shift += 7;
        }
        let kind = match type_num {
            1..=4 => EntryKind::Base(ObjectKind::from_pack_type(type_num).expect("1..=4")),
            6 => {
                let mut c = s.byte("a delta base offset")?;
                let mut back = (c & 0x7f) as u64;
                while c & 0x80 != 0 {
                    c = s.byte("a delta base offset")?;
                    back = back
                        .checked_add(1)
                        .and_then(|b| b.checked_mul(128))
                        .map(|b| b | (c & 0x7f) as u64)
                        .ok_or_else(|| s.corrupt(offset, "the delta base offset overflows"))?;
                }
                if back == 0 || back > offset || offset - back < 12 {
                    return Err(s.corrupt(offset, "the delta base offset points outside the pack"));
                }
                EntryKind::OfsDelta {
                    base_offset: offset - back,
                }
            }
            7 => {
                let id: [u8; 20] = s.bytes("a delta base id")?;
                EntryKind::RefDelta {
                    base: ObjectId::from_bytes(&id).expect("20 bytes"),
                }
            }
            t => {
                return Err(s.corrupt(offset, format!("the entry has an invalid type ({t})")));
            }
        };
        let header_len = (s.offset - offset) as u32;
        // Where the inflated bytes go: whole objects to the hashers (small ones into the
        // current batch, large ones streamed to one thread in chunks), deltas nowhere.
        let mut sink = match kind {
            EntryKind::Base(_) if size <= BATCH as u64 => Sink::Batch,
            EntryKind::Base(k) => Sink::Stream {
                queue: hashers.begin(n, k, size),
                chunk: hashers.buffer(),
            },
            _ => Sink::Discard,
        };
        let batch_start = hashers.batch.data.len();
        if let Sink::Batch = sink {
            // Room for the declared size and one byte more, to see an entry that inflates to
            // more than it declares. Bounded: size <= BATCH here.
            hashers.batch.data.reserve(size as usize + 1);
        }
        // Inflate to find the stream's end.
        inflater.reset(true);
        let mut produced = 0u64;
        loop {
            if !s.fill()? {
                return Err(s.corrupt(offset, "the pack ends inside an entry's data"));
            }
            let before_in = inflater.total_in();
            let before_out = inflater.total_out();
            let input = &s.buf[s.pos..s.filled];
            let status = match &mut sink {
                Sink::Batch => inflater.decompress_vec(
                    input,
                    &mut hashers.batch.data,
                    flate2::FlushDecompress::None,
                ),
                Sink::Stream { queue, chunk } => {
                    if chunk.len() == chunk.capacity() {
                        let next = hashers.buffer();
                        let full = std::mem::replace(chunk, next);
                        hashers.send_to(*queue, Job::Chunk(full));
                    }
                    inflater.decompress_vec(input, chunk, flate2::FlushDecompress::None)
                }
                Sink::Discard => {
                    scratch.clear();
                    inflater.decompress_vec(input, &mut scratch, flate2::FlushDecompress::None)
                }
            }
            .map_err(|e| s.corrupt(offset, format!("the entry's data is not valid zlib: {e}")))?;
            let used = (inflater.total_in() - before_in) as usize;
            let made = (inflater.total_out() - before_out) as usize;
            s.consume(used)?;
            produced += made as u64;
            if produced > size {
                return Err(s.corrupt(
                    offset,
                    format!("the entry inflates to more than the {size} bytes it declares"),
                ));
            }
            match status {
                flate2::Status::StreamEnd => break,
                _ if used == 0 && made == 0 && s.pos < s.filled => {
                    return Err(s.corrupt(offset, "the entry's zlib stream makes no progress"));
                }
                _ => {}
            }
        }
        if produced != size {
            return Err(s.corrupt(
                offset,
                format!("the entry inflates to {produced} bytes, not the {size} it declares"),
            ));
        }
        match sink {
            Sink::Batch => {
                let end = hashers.batch.data.len();
                debug_assert_eq!((end - batch_start) as u64, size);
                if let EntryKind::Base(k) = kind {
                    hashers.batch.objects.push((n, k, end));
                }
                if end >= BATCH {
                    hashers.flush();
                }
            }
            Sink::Stream { queue, chunk } => {
                hashers.send_to(queue, Job::Chunk(chunk));
                hashers.send_to(queue, Job::Finish);
            }
            Sink::Discard => {}
        }
        let crc32 = std::mem::replace(&mut s.crc, crc32fast::Hasher::new()).finalize();
        entries.push(InputEntry {
            offset,
            kind,
            size,
            header_len,
            end: s.offset,
            crc32,
            id: None,
        });
    }
    progress(count, count);
    let computed = s.digest()?;
    let trailer_at = s.offset;
    let mut trailer = [0u8; 20];
    for b in trailer.iter_mut() {
        if !s.fill()? {
            return Err(s.corrupt(trailer_at, "the pack ends inside its trailing checksum"));
        }
        *b = s.buf[s.pos];
        s.consume(1)?;
    }
    if trailer != computed {
        return Err(s.corrupt(
            trailer_at,
            "the pack's trailing checksum does not match its contents",
        ));
    }
    s.send_consumed()?;
    Ok((version, trailer, s.offset))
}

/// Where an entry's inflated bytes go.
enum Sink {
    /// Into the current batch of small whole objects.
    Batch,
    /// Streamed to hashing thread `queue`, `chunk` being filled.
    Stream { queue: usize, chunk: Vec<u8> },
    /// Nowhere (a delta: resolved later).
    Discard,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pack of `blobs`, whole objects, with its trailer.
    fn pack_of(blobs: &[Vec<u8>]) -> Vec<u8> {
        let mut pack = b"PACK".to_vec();
        pack.extend_from_slice(&2u32.to_be_bytes());
        pack.extend_from_slice(&(blobs.len() as u32).to_be_bytes());
        for blob in blobs {
            super::super::encode_type_and_size(&mut pack, 3, blob.len() as u64);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(blob).unwrap();
            pack.extend_from_slice(&z.finish().unwrap());
        }
        let sum: [u8; 20] = sha1::Sha1::digest(&pack).into();
        pack.extend_from_slice(&sum);
        pack
    }

    /// Reads `pack` as a stream arriving in small pieces, checks the copy and the ids.
    fn check(pack: &[u8], blobs: &[Vec<u8>]) {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7000);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut copy = Vec::new();
        let read = read_pack(
            &mut Trickle(pack),
            &mut copy,
            "test",
            &InputLimits::default(),
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(copy, pack);
        assert_eq!(read.len, pack.len() as u64);
        assert_eq!(read.entries.len(), blobs.len());
        for (e, blob) in read.entries.iter().zip(blobs) {
            assert_eq!(
                e.id,
                Some(ObjectId::compute(ObjectKind::Blob, blob).unwrap())
            );
        }
    }

    #[test]
    fn small_and_large_packs_read_alike_on_one_thread_and_on_many() {
        // A small pack (read on this thread) holding an object larger than a batch (streamed
        // in chunks), and a pack of more objects than THREADS_FROM (read with threads).
        let large: Vec<u8> = (0..3 * BATCH as u32).map(|i| (i % 251) as u8).collect();
        let small = vec![b"one\n".to_vec(), large, b"two\n".to_vec()];
        check(&pack_of(&small), &small);
        let many: Vec<Vec<u8>> = (0..THREADS_FROM + 10)
            .map(|i| format!("blob {i}\n").into_bytes())
            .collect();
        check(&pack_of(&many), &many);
        // A truncated small pack is refused.
        let mut cut = pack_of(&small);
        cut.truncate(cut.len() - 30);
        let err = read_pack(
            &mut &cut[..],
            &mut Vec::new(),
            "cut",
            &InputLimits::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
        assert!(err.to_string().contains("cut"), "{err}");
    }
}

//! Who gets one of the server's connection slots, and how those who do not are told.
//!
//! A connection takes a slot of `--max-connections` and, with `--max-connections-per-address`,
//! one of its address's (an IPv6 /64 counts as one address), so that one client holding many
//! silent sockets cannot take every slot. A connection turned away is answered as git expects,
//! off the served connections' slots:
//! - HTTP: its request head is read, `503 Service Unavailable` (`Retry-After: 1`) is sent,
//!   then what the client still sends of its body is read and dropped (at most
//!   [`DRAIN_BYTES`]) before the connection closes, so that git reads the 503 rather than a
//!   reset connection ("error: RPC failed; HTTP 503");
//! - git://: its request line is read and one `ERR` pkt-line sent ("fatal: remote error: ...").
//!
//! Each refusal takes at most [`REFUSAL_TIME`] and a 16 KiB buffer; at most
//! [`MAX_REFUSALS`] run at once, beyond which connections are closed at once.

use crate::credentials::AddressKey;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Longest a refusal keeps its connection.
pub const REFUSAL_TIME: Duration = Duration::from_secs(2);
/// Most bytes of a refused request read and dropped.
pub const DRAIN_BYTES: u64 = 4 << 20;
/// Most refusals in progress at once.
pub const MAX_REFUSALS: usize = 1024;
/// Largest request head a refusal reads.
const MAX_HEAD: usize = 16 * 1024;

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// `--max-connections` are open.
    Server,
    /// `--max-connections-per-address` are open from the client's address.
    Address,
}

impl Busy {
    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            Busy::Server => "too many connections; try again later",
            Busy::Address => "too many connections from your address; try again later",
        }
    }
}

/// The connection slots, for the whole server and per address.
#[derive(Debug)]
pub struct Slots {
    total: Arc<Semaphore>,
    max: usize,
    per_address_max: usize,
    per_address: Mutex<HashMap<AddressKey, usize>>,
    refusals: Arc<Semaphore>,
}

/// A connection's slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    address: Option<(Arc<Slots>, AddressKey)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((slots, key)) = self.address.take() {
            slots.release(key);
        }
    }
}

impl Slots {
    /// `max` slots in all, `per_address_max` per address (0: no limit of its own).
    pub fn new(max: usize, per_address_max: usize) -> Arc<Slots> {
        let max = max.max(1);
        Arc::new(Slots {
            total: Arc::new(Semaphore::new(max)),
            max,
            per_address_max,
            per_address: Mutex::new(HashMap::new()),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
        })
    }

    /// A slot for a connection from `ip`, or why there is none.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Busy> {
        let address = if self.per_address_max > 0 {
            let key = AddressKey::of(ip);
            let mut counts = self.per_address.lock();
            let n = counts.entry(key).or_insert(0);
            if *n >= self.per_address_max {
                return Err(Busy::Address);
            }
            *n += 1;
            Some((self.clone(), key))
        } else {
            None
        };
        match self.total.clone().try_acquire_owned() {
            // The address's count is given back by the slot's drop.
            Ok(permit) => Ok(Slot {
                _permit: permit,
                address,
            }),
            Err(_) => {
                if let Some((_, key)) = address {
                    self.release(key);
                }
                Err(Busy::Server)
            }
        }
    }

    /// Gives back one of `key`'s connections.
    fn release(&self, key: AddressKey) {
        let mut counts = self.per_address.lock();
        if let Some(n) = counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&key);
            }
        }
    }

    /// Connections holding a slot now.
    pub fn in_use(&self) -> usize {
        self.max - self.total.available_permits()
    }

    /// A permit to run one refusal, or `None` when too many run already.
    pub fn refusal(&self) -> Option<OwnedSemaphorePermit> {
        self.refusals.clone().try_acquire_owned().ok()
    }
}

/// Reads and drops what `stream` sends until it ends or `max` bytes went.
async fn drain(stream: &mut TcpStream, mut max: u64, buf: &mut [u8]) {
    while max > 0 {
        match stream.read(buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => max = max.saturating_sub(n as u64),
        }
    }
}

/// Reads until the end of an HTTP request head (a blank line), at most [`MAX_HEAD`] bytes;
/// what was read, or `None` if the client closed or sent too much.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 2048];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(());
        }
        if buf.len() >= MAX_HEAD {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Answers an HTTP connection that got no slot with a 503 (see the module's comment).
pub async fn refuse_http(mut stream: TcpStream, busy: Busy) {
    let mut head = Vec::new();
    // A client that sends nothing is told all the same, after a moment.
    let complete = tokio::time::timeout(REFUSAL_TIME / 2, read_head(&mut stream, &mut head))
        .await
        .ok()
        .flatten()
        .is_some();
    let _ = tokio::time::timeout(REFUSAL_TIME / 2, async {
        let body = format!("{}\n", busy.message());
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\nServer: packd\r\n\r\n\
             {body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        if complete {
            let mut buf = vec![0u8; 16 * 1024];
            drain(&mut stream, DRAIN_BYTES, &mut buf).await;
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// Answers a git:// connection that got no slot with an `ERR` pkt-line (see the module's
/// comment).
pub async fn refuse_git(mut stream: TcpStream, busy: Busy) {
    // The request line: its length, then that much; a client that sends nothing is told all
    // the same, after a moment.
    let _ = tokio::time::timeout(REFUSAL_TIME / 2, async {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).await.is_ok() {
            let n = std::str::from_utf8(&len)
                .ok()
                .and_then(|h| usize::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            let mut rest = vec![0u8; n.saturating_sub(4).min(MAX_HEAD)];
            let _ = stream.read_exact(&mut rest).await;
        }
    })
    .await;
    let _ = tokio::time::timeout(REFUSAL_TIME / 2, async {
        let line = format!("ERR {}\n", busy.message());
        let pkt = format!("{:04x}{line}", line.len() + 4);
        stream.write_all(pkt.as_bytes()).await?;
        stream.shutdown().await?;
        let mut buf = vec![0u8; 16 * 1024];
        drain(&mut stream, DRAIN_BYTES, &mut buf).await;
        Ok::<(), std::io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_address_slots() {
        let slots = Slots::new(3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let s1 = slots.take(a).unwrap();
        let _s2 = slots.take(a).unwrap();
        assert_eq!(slots.take(a).unwrap_err(), Busy::Address);
        let s3 = slots.take(b).unwrap();
        assert_eq!(slots.in_use(), 3);
        assert_eq!(slots.take(b).unwrap_err(), Busy::Server);
        // The refused attempt took nothing: freeing one slot of each lets each in again.
        drop(s1);
        drop(s3);
        let _s4 = slots.take(a).unwrap();
        let _s5 = slots.take(b).unwrap();
        assert_eq!(slots.per_address.lock().values().sum::<usize>(), 3);
    }

    #[test]
    fn no_per_address_limit() {
        let slots = Slots::new(2, 0);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let _x = slots.take(a).unwrap();
        let _y = slots.take(a).unwrap();
        assert_eq!(slots.take(a).unwrap_err(), Busy::Server);
        assert!(slots.per_address.lock().is_empty());
    }
}

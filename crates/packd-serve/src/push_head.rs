//! The part of a push request before its pack: the command list and, when its first line
//! asks for `push-options`, the options, each section ended by a flush packet.
//!
//! ```text
//! "<old> <new> <ref>\0<capabilities>\n" "<old> <new> <ref>\n" ... "0000"
//! ["<push option>\n" ... "0000"]
//! PACK...
//! ```
//!
//! Both transports read it first, bounded, before receive-pack runs: it tells whether the
//! request carries commands at all (git's probe over HTTP is a lone flush), which decides
//! whether a repository may be created for it (see [`crate::create`]).

use packd_protocol::pkt_line;
use std::io::Read;

/// Most bytes of commands and options one push may send, whatever `--max-request-bytes` says:
/// they are held whole, then parsed, until the push ends. git's receive-pack has no limit; a
/// mirror push of git/git (4,300 refs) sends about 450 KB, so 8 MiB is some 80,000 ref updates.
pub const MAX_PUSH_HEAD_BYTES: u64 = 8 << 20;

/// Why the part of a push body before the pack was not taken.
#[derive(Debug)]
pub enum HeadError {
    /// More than the limit (given) before the pack.
    TooLarge(u64),
    /// Reading failed.
    Io(std::io::Error),
}

/// Reads as much of `input` as fills `buf`; fewer bytes only at its end.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads the pkt-lines that open a push body — the command list and, when its first line asks
/// for `push-options`, the options — through their flush packets, at most `limit` bytes (and
/// never more than [`MAX_PUSH_HEAD_BYTES`]).
/// They are returned as read, for receive-pack to parse; what follows is the pack. Anything
/// that is not a well-formed pkt-line stops the scan early (receive-pack reports it).
pub fn read_head(input: &mut dyn Read, limit: u64) -> Result<Vec<u8>, HeadError> {
    let limit = limit.min(MAX_PUSH_HEAD_BYTES);
    let mut head = Vec::new();
    let mut sections = 1;
    let mut first = true;
    loop {
        let mut len = [0u8; 4];
        let got = read_full(input, &mut len).map_err(HeadError::Io)?;
        head.extend_from_slice(&len[..got]);
        if got < len.len() {
            return Ok(head);
        }
        let Some(n) = pkt_line::parse_length(&len) else {
            return Ok(head);
        };
        match n {
            0 => {
                sections -= 1;
                if sections == 0 {
                    return Ok(head);
                }
            }
            1..=4 => return Ok(head),
            n => {
                let payload = n - 4;
                if head.len() as u64 + payload as u64 > limit {
                    return Err(HeadError::TooLarge(limit));
                }
                let start = head.len();
                head.resize(start + payload, 0);
                let got = read_full(input, &mut head[start..]).map_err(HeadError::Io)?;
                if got < payload {
                    head.truncate(start + got);
                    return Ok(head);
                }
                if first {
                    first = false;
                    let line = &head[start..];
                    let caps = line
                        .iter()
                        .position(|&b| b == 0)
                        .map_or(&line[..0], |nul| &line[nul + 1..]);
                    let asks_options = caps
                        .split(|&b| b == b' ' || b == b'\n')
                        .any(|c| c == b"push-options");
                    if asks_options {
                        sections += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> Vec<u8> {
        format!("{:04x}{s}", s.len() + 4).into_bytes()
    }

    #[test]
    fn head_stops_at_the_pack() {
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let mut body = pkt(&format!("{zero} {one} refs/heads/main\0report-status\n"));
        body.extend_from_slice(b"0000PACKrest");
        let head = read_head(&mut &body[..], 1000).unwrap();
        assert_eq!(head, &body[..body.len() - 8]);
    }

    #[test]
    fn head_includes_push_options() {
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let mut body = pkt(&format!(
            "{zero} {one} refs/heads/main\0push-options quiet\n"
        ));
        body.extend_from_slice(b"0000");
        body.extend(pkt("ci.skip\n"));
        body.extend_from_slice(b"0000PACK");
        let head = read_head(&mut &body[..], 1000).unwrap();
        assert_eq!(head, &body[..body.len() - 4]);
    }

    #[test]
    fn head_bounded_and_probe() {
        let zero = "0".repeat(40);
        let mut body = Vec::new();
        for i in 0..100 {
            body.extend(pkt(&format!("{zero} {zero} refs/heads/b{i}\n")));
        }
        body.extend_from_slice(b"0000");
        assert!(matches!(
            read_head(&mut &body[..], 500),
            Err(HeadError::TooLarge(500))
        ));
        assert_eq!(read_head(&mut &b"0000"[..], 10).unwrap(), b"0000");
        assert_eq!(read_head(&mut &b"00"[..], 10).unwrap(), b"00");
        assert_eq!(read_head(&mut &b"zzzzPACK"[..], 10).unwrap(), b"zzzz");
    }
}

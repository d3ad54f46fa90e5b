//! The objects a fetch request over HTTP wants, read from its body (already whole in memory)
//! before upload-pack runs, so that a cached repository lacking one of them is opened again
//! first ([`crate::repos::RepoCache::reopen_after_miss`]), as git looks at its packs again
//! before it calls an object missing.
//!
//! ```text
//! v0:  "want <id> <capabilities>\n" "want <id>\n" ... "0000" ["have <id>\n" ...] "done\n"
//! v2:  "command=fetch\n" <capabilities> "0001" "want <id>\n" ... "done\n" "0000"
//! ```

use packd_odb::ObjectId;
use packd_protocol::{pkt_line, UploadPack};

/// The ids of the body's `want` lines, in order; the scan stops at the first thing that is
/// not a pkt-line (upload-pack then tells the client what is wrong).
pub fn wanted_ids(body: &[u8]) -> Vec<ObjectId> {
    let mut ids = Vec::new();
    let mut rest = body;
    while let Some(header) = rest.first_chunk::<4>() {
        let Some(len) = pkt_line::parse_length(header) else {
            break;
        };
        if len < 4 {
            // flush, delimiter, response end
            rest = &rest[4..];
            continue;
        }
        let Some(payload) = rest.get(4..len) else {
            break;
        };
        if let Some(id) = payload
            .strip_prefix(b"want ")
            .and_then(|p| p.get(..40))
            .and_then(ObjectId::from_hex_bytes)
        {
            ids.push(id);
        }
        rest = &rest[len..];
    }
    ids
}

/// Whether the repository `upload` serves lacks an object the request `body` wants.
pub fn lacks_a_want(upload: &UploadPack, body: &[u8]) -> bool {
    let objects = upload.pack_server().repository().objects();
    wanted_ids(body)
        .iter()
        .any(|id| !objects.contains(id).unwrap_or(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> Vec<u8> {
        format!("{:04x}{s}", s.len() + 4).into_bytes()
    }

    #[test]
    fn wants_of_v0_and_v2_requests() {
        let a = "1".repeat(40);
        let b = "2".repeat(40);
        let mut v0 = pkt(&format!("want {a} multi_ack side-band-64k\n"));
        v0.extend(pkt(&format!("want {b}\n")));
        v0.extend_from_slice(b"0000");
        v0.extend(pkt(&format!("have {b}\n")));
        v0.extend(pkt("done\n"));
        let ids: Vec<String> = wanted_ids(&v0).iter().map(|i| i.to_hex()).collect();
        assert_eq!(ids, [a.clone(), b.clone()]);
        let mut v2 = pkt("command=fetch\n");
        v2.extend(pkt("agent=git/2.39\n"));
        v2.extend_from_slice(b"0001");
        v2.extend(pkt(&format!("want {a}\n")));
        v2.extend(pkt("done\n"));
        v2.extend_from_slice(b"0000");
        assert_eq!(wanted_ids(&v2).len(), 1);
        // Not pkt-lines, or cut short: what came before.
        let mut cut = pkt(&format!("want {a}\n"));
        cut.extend_from_slice(b"00ffwant ");
        assert_eq!(wanted_ids(&cut).len(), 1);
        assert!(wanted_ids(b"zzzzwant").is_empty());
        assert!(wanted_ids(&pkt("want nothex")).is_empty());
    }
}

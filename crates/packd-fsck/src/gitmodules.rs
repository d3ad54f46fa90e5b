//! `.gitmodules` blobs: read as git reads a configuration blob, each `submodule.<name>.*`
//! setting checked as git's `fsck_gitmodules_fn` checks it.
//!
//! ```text
//! [submodule "<name>"]        name: not empty, no ".." component ('/' or '\' separated)
//!     path = <path>           not starting with '-' (an option to a command)
//!     url = <url>             not starting with '-'; relative ("./", "../") or git:// ones:
//!                             no newline once %-decoded, no "../" run followed by ':' or '/';
//!                             http(s)/ftp(s) ones (also "http::..."): a host, no newline in
//!                             any decoded part
//!     update = <mode>         not "!command"
//! ```
//! The configuration syntax is git's (`git_parse_source`): `[section]`, `[section "sub"]`,
//! `[section.sub]`, `key = value` with quotes, `\t \b \n \\ \"` escapes and line
//! continuations, `#`/`;` comments, a UTF-8 byte order mark at the start. A syntax error ends
//! the reading (settings before it were checked) and is `gitmodulesParse`.

use crate::ident::at;
use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::ObjectId;

/// A `.gitmodules` larger than this is `gitmodulesLarge` (git's default
/// `core.bigFileThreshold`, past which its index-pack does not hold a blob in memory).
pub const GITMODULES_MAX: u64 = 512 << 20;

/// git's `isspace` (ASCII space, tab, line feed, carriage return).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// A syntax error: reading stops.
struct Bad;

/// What [`ConfigReader::read`] calls for each setting: its name and value (`None`: a bare key).
type Setting<'f> = dyn FnMut(&[u8], Option<&[u8]>) + 'f;

/// git's configuration reader over a blob (`get_next_char` and friends).
struct ConfigReader<'a> {
    data: &'a [u8],
    pos: usize,
    eof: bool,
}

impl ConfigReader<'_> {
    /// The next character: CR LF read as LF, the end as LF (with `eof` set).
    fn next(&mut self) -> u8 {
        let Some(&c) = self.data.get(self.pos) else {
            self.eof = true;
            return b'\n';
        };
        self.pos += 1;
        if c == b'\r' && self.data.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
            return b'\n';
        }
        c
    }

    fn value(&mut self) -> Result<Vec<u8>, Bad> {
        let (mut quote, mut comment, mut space) = (false, false, 0usize);
        let mut value = Vec::new();
        loop {
            let mut c = self.next();
            if c == b'\n' {
                return if quote { Err(Bad) } else { Ok(value) };
            }
            if comment {
                continue;
            }
            if is_space(c) && !quote {
                if !value.is_empty() {
                    space += 1;
                }
                continue;
            }
            if !quote && (c == b';' || c == b'#') {
                comment = true;
                continue;
            }
            value.extend(std::iter::repeat_n(b' ', space));
            space = 0;
            if c == b'\\' {
                c = match self.next() {
                    b'\n' => continue,
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'n' => b'\n',
                    c @ (b'\\' | b'"') => c,
                    _ => return Err(Bad),
                };
                value.push(c);
                continue;
            }
            if c == b'"' {
                quote = !quote;
                continue;
            }
            value.push(c);
        }
    }

    /// `[section]`, `[section.sub]` or `[section "sub"]`, after the '['.
    fn section(&mut self, var: &mut Vec<u8>) -> Result<(), Bad> {
        loop {
            let c = self.next();
            if self.eof {
                return Err(Bad);
            }
            if c == b']' {
                return Ok(());
            }
            if is_space(c) {
                return self.subsection(var, c);
            }
            if !is_key_char(c) && c != b'.' {
                return Err(Bad);
            }
            var.push(c.to_ascii_lowercase());
        }
    }

    fn subsection(&mut self, var: &mut Vec<u8>, mut c: u8) -> Result<(), Bad> {
        loop {
            if c == b'\n' {
                return Err(Bad);
            }
            c = self.next();
            if !is_space(c) {
                break;
            }
        }
        if c != b'"' {
            return Err(Bad);
        }
        var.push(b'.');
        loop {
            let mut c = self.next();
            if c == b'\n' {
                return Err(Bad);
            }
            if c == b'"' {
                break;
            }
            if c == b'\\' {
                c = self.next();
                if c == b'\n' {
                    return Err(Bad);
                }
            }
            var.push(c);
        }
        if self.next() != b']' {
            return Err(Bad);
        }
        Ok(())
    }

    /// Reads every setting, calling `setting(name, value)` for each (`None`: a bare key).
    fn read(&mut self, setting: &mut Setting<'_>) -> Result<(), Bad> {
        const BOM: &[u8] = b"\xef\xbb\xbf";
        let mut bom = Some(0);
        let mut comment = false;
        let mut var = Vec::new();
        let mut base = 0;
        loop {
            let c = self.next();
            if let Some(matched) = bom.filter(|&m| m < BOM.len()) {
                if c == BOM[matched] && !self.eof {
                    bom = Some(matched + 1);
                    continue;
                }
                if matched != 0 {
                    return Err(Bad);
                }
                bom = None;
            }
            if c == b'\n' {
                if self.eof {
                    return Ok(());
                }
                comment = false;
                continue;
            }
            if comment || is_space(c) {
                continue;
            }
            if c == b'#' || c == b';' {
                comment = true;
                continue;
            }
            if c == b'[' {
                var.clear();
                self.section(&mut var)?;
                if var.is_empty() {
                    return Err(Bad);
                }
                var.push(b'.');
                base = var.len();
                continue;
            }
            if !c.is_ascii_alphabetic() {
                return Err(Bad);
            }
            var.truncate(base);
            var.push(c.to_ascii_lowercase());
            let mut c;
            loop {
                c = self.next();
                if self.eof || !is_key_char(c) {
                    break;
                }
                var.push(c.to_ascii_lowercase());
            }
            while c == b' ' || c == b'\t' {
                c = self.next();
            }
            let value = if c != b'\n' {
                if c != b'=' {
                    return Err(Bad);
                }
                Some(self.value()?)
            } else {
                None
            };
            setting(c_str(&var), value.as_deref().map(c_str));
        }
    }
}

/// A byte string as C sees it: up to its first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    match s.iter().position(|&b| b == 0) {
        Some(nul) => &s[..nul],
        None => s,
    }
}

fn is_sep(c: u8) -> bool {
    c == b'/' || c == b'\\'
}

/// git's `check_submodule_name`: not empty, no `..` path component.
pub fn submodule_name_ok(name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    let dotdot_at = |i: usize| {
        at(name, i) == b'.'
            && at(name, i + 1) == b'.'
            && (at(name, i + 2) == 0 || is_sep(at(name, i + 2)))
    };
    if dotdot_at(0) {
        return false;
    }
    !(0..name.len()).any(|i| is_sep(name[i]) && dotdot_at(i + 1))
}

fn hex_value(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// git's `url_decode_mem`: what comes before a first ':' (not at the start) is kept as it is,
/// `%XX` decoded after it (not `%00`); a NUL ends the text.
fn url_decode(s: &[u8]) -> Vec<u8> {
    let s = c_str(s);
    let mut out = Vec::with_capacity(s.len());
    let mut i = match s.iter().position(|&b| b == b':') {
        Some(colon) if colon > 0 => {
            out.extend_from_slice(&s[..colon]);
            colon
        }
        _ => 0,
    };
    while i < s.len() {
        if s[i] == b'%' && s.len() - i >= 3 {
            if let (Some(h), Some(l)) = (hex_value(s[i + 1]), hex_value(s[i + 2])) {
                let v = h << 4 | l;
                if v > 0 {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// git's `credential_from_url_gently` (no partial URLs) followed by its check that a host is
/// there: true when git would take `url` as a credential URL with a host.
fn credential_url_ok(url: &[u8]) -> bool {
    let Some(proto_end) = url.windows(3).position(|w| w == b"://") else {
        return false;
    };
    if proto_end == 0 {
        return false;
    }
    let cp = &url[proto_end + 3..];
    let find = |c: u8| cp.iter().position(|&b| b == c);
    let slash = cp
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(cp.len());
    let (at_sign, colon) = (find(b'@'), find(b':'));
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let host_start = match at_sign {
        Some(a) if a < slash => {
            match colon {
                Some(c) if c < a => {
                    parts.push(url_decode(&cp[..c]));
                    parts.push(url_decode(&cp[c + 1..a]));
                }
                _ => parts.push(url_decode(&cp[..a])),
            }
            a + 1
        }
        _ => 0,
    };
    let host = url_decode(&cp[host_start..slash.max(host_start)]);
    let mut path = &cp[slash..];
    while path.first() == Some(&b'/') {
        path = &path[1..];
    }
    if !path.is_empty() {
        parts.push(url_decode(path));
    }
    parts.push(url[..proto_end].to_vec());
    if parts.iter().chain([&host]).any(|p| p.contains(&b'\n')) {
        return false;
    }
    !host.is_empty()
}

/// git's `check_submodule_url`.
pub fn submodule_url_ok(url: &[u8]) -> bool {
    if url.first() == Some(&b'-') {
        return false;
    }
    let dot_slash = |s: &[u8]| at(s, 0) == b'.' && is_sep(at(s, 1));
    let dot_dot_slash = |s: &[u8]| at(s, 0) == b'.' && at(s, 1) == b'.' && is_sep(at(s, 2));
    if dot_slash(url) || dot_dot_slash(url) || url.starts_with(b"git://") {
        if url_decode(url).contains(&b'\n') {
            return false;
        }
        let (mut rest, mut dotdots) = (url, 0);
        loop {
            if dot_dot_slash(rest) {
                dotdots += 1;
                rest = &rest[3..];
            } else if dot_slash(rest) {
                rest = &rest[2..];
            } else {
                break;
            }
        }
        return !(dotdots > 0 && matches!(at(rest, 0), b':' | b'/'));
    }
    for prefix in [&b"http::"[..], b"https::", b"ftp::", b"ftps::"] {
        if let Some(rest) = url.strip_prefix(prefix) {
            return credential_url_ok(rest);
        }
    }
    for prefix in [&b"http://"[..], b"https://", b"ftp://", b"ftps://"] {
        if url.starts_with(prefix) {
            return credential_url_ok(url);
        }
    }
    true
}

/// Checks a `.gitmodules` blob. True when an error was reported.
pub(crate) fn check_gitmodules(id: &ObjectId, data: &[u8], report: &mut Report<'_>) -> bool {
    let mut err = false;
    let show = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
    let mut reader = ConfigReader {
        data,
        pos: 0,
        eof: false,
    };
    let parsed = reader.read(&mut |var, value| {
        let Some(rest) = var.strip_prefix(b"submodule.") else {
            return;
        };
        let Some(dot) = rest.iter().rposition(|&b| b == b'.') else {
            return;
        };
        let (name, key) = (&rest[..dot], &rest[dot + 1..]);
        if !submodule_name_ok(name) {
            err |= report.report(
                id,
                MsgId::GitmodulesName,
                &format!("disallowed submodule name: {}", show(name)),
            );
        }
        let Some(value) = value else { return };
        if key == b"url" && !submodule_url_ok(value) {
            err |= report.report(
                id,
                MsgId::GitmodulesUrl,
                &format!("disallowed submodule url: {}", show(value)),
            );
        }
        if key == b"path" && value.first() == Some(&b'-') {
            err |= report.report(
                id,
                MsgId::GitmodulesPath,
                &format!("disallowed submodule path: {}", show(value)),
            );
        }
        if key == b"update" && value.first() == Some(&b'!') {
            err |= report.report(
                id,
                MsgId::GitmodulesUpdate,
                &format!("disallowed submodule update setting: {}", show(value)),
            );
        }
    });
    if parsed.is_err() {
        err |= report.report(
            id,
            MsgId::GitmodulesParse,
            "could not parse gitmodules blob",
        );
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::FsckOptions;

    fn ids(text: &[u8]) -> Vec<String> {
        let options = FsckOptions::strict();
        let mut report = Report::new(&options);
        check_gitmodules(&ObjectId::NULL, text, &mut report);
        report
            .lines
            .iter()
            .map(|l| l.split(": ").nth(2).unwrap().to_string())
            .collect()
    }

    #[test]
    fn gitmodules_as_git_checks_them() {
        assert!(ids(b"[submodule \"a\"]\n\tpath = a\n\turl = https://example.com/a\n").is_empty());
        assert_eq!(
            ids(b"[submodule \"../../hooks\"]\n\tpath = x\n\turl = ./x\n"),
            ["gitmodulesName", "gitmodulesName"]
        );
        assert_eq!(
            ids(b"[submodule \"x\"]\nurl = -upload-pack=evil\n"),
            ["gitmodulesUrl"]
        );
        assert_eq!(
            ids(b"[submodule \"x\"]\nurl = ../../:x\n"),
            ["gitmodulesUrl"]
        );
        assert_eq!(ids(b"[submodule \"x\"]\nurl = ./%0ax\n"), ["gitmodulesUrl"]);
        assert_eq!(
            ids(b"[submodule \"x\"]\nurl = https://x%0ay/z\n"),
            ["gitmodulesUrl"]
        );
        assert_eq!(
            ids(b"[submodule \"x\"]\nurl = http::https:///x\n"),
            ["gitmodulesUrl"]
        );
        assert!(ids(b"[submodule \"x\"]\nurl = ../x\n").is_empty());
        assert_eq!(ids(b"[submodule \"x\"]\npath = -x\n"), ["gitmodulesPath"]);
        assert_eq!(
            ids(b"[submodule \"x\"]\nupdate = !rm -rf /\n"),
            ["gitmodulesUpdate"]
        );
        assert!(ids(b"[submodule \"x\"]\nupdate = rebase\n").is_empty());
        assert_eq!(ids(b"[submodule \"x\"\nurl = y\n"), ["gitmodulesParse"]);
        assert_eq!(ids(b"[submodule \"x\"]\nurl = \"y\n"), ["gitmodulesParse"]);
        assert!(ids(b"\xef\xbb\xbf[submodule \"x\"]\r\n url = \"./a\" ; comment\n").is_empty());
        assert_eq!(ids(b"[submodule.x]\n\turl = -x\n"), ["gitmodulesUrl"]);
        assert_eq!(ids(b"[submodule \"..\"]\nurl\n"), ["gitmodulesName"]);
    }
}

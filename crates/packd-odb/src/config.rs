//! Reading git's configuration files: just enough of the format for the keys packd honours.
//!
//! ```text
//! [section]              # comment
//! [section "subsection"] ; comment
//!     key = value
//!     flag                 (a key without "=" is true)
//! ```
//! Files are read in git's order (system, global, repository), a later value replacing an earlier
//! one. Section and key names are case-insensitive, subsection names are not.

use crate::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Configuration values, keyed `section.key` or `section.subsection.key` (section and key lower
/// case).
#[derive(Debug, Default, Clone)]
pub struct Config {
    values: HashMap<String, String>,
    /// Every (key, value) in file order, for settings whose values under several keys form
    /// one list (git's `transfer.hideRefs` and `uploadpack.hideRefs`).
    order: Vec<(String, String)>,
}

impl Config {
    /// The files git reads for a repository whose directory is `git_dir`, in order.
    pub fn standard_files(git_dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if std::env::var_os("GIT_CONFIG_NOSYSTEM").is_none() {
            files.push(PathBuf::from("/etc/gitconfig"));
        }
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
        if let Some(xdg) = xdg {
            files.push(xdg.join("git").join("config"));
        }
        if let Some(home) = std::env::var_os("HOME") {
            files.push(Path::new(&home).join(".gitconfig"));
        }
        files.push(git_dir.join("config"));
        files
    }

    /// Reads `files` in order; missing files are skipped.
    pub fn read(files: &[PathBuf]) -> Result<Config> {
        let mut config = Config::default();
        for file in files {
            match std::fs::read(file) {
                Ok(bytes) => config.parse(
                    &String::from_utf8_lossy(&bytes),
                    &file.display().to_string(),
                )?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: file.display().to_string(),
                        source,
                    })
                }
            }
        }
        Ok(config)
    }

    /// Adds the settings of one file's text.
    pub fn parse(&mut self, text: &str, file: &str) -> Result<()> {
        let mut section = String::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut rest = line;
            if let Some(after) = line.strip_prefix('[') {
                let end = after.find(']').ok_or_else(|| {
                    Error::corrupt(
                        file,
                        n as u64 + 1,
                        "a section header has no closing ']' (offset is the line number)",
                    )
                })?;
                let header = &after[..end];
                section = match header.find('"') {
                    Some(q) => {
                        let name = header[..q].trim().to_ascii_lowercase();
                        let sub = header[q + 1..]
                            .trim_end_matches('"')
                            .replace("\\\"", "\"")
                            .replace("\\\\", "\\");
                        format!("{name}.{sub}")
                    }
                    None => header.trim().to_ascii_lowercase(),
                };
                rest = after[end + 1..].trim();
                if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                    continue;
                }
            }
            let (key, value) = match rest.find('=') {
                Some(eq) => (rest[..eq].trim(), parse_value(&rest[eq + 1..])),
                None => (rest, "true".to_string()),
            };
            let full = format!("{section}.{}", key.to_ascii_lowercase());
            self.order.push((full.clone(), value.clone()));
            self.values.insert(full, value);
        }
        Ok(())
    }

    /// The value of `key` (`section.key`, case-insensitive in section and key).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(&Self::normalize(key)).map(|s| s.as_str())
    }

    /// The value of `key` as a git boolean (see [`parse_bool`]); `None` when it is not set or
    /// is set to something git refuses.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        parse_bool(self.get(key)?)
    }

    /// Every value of any of `keys`, with the index in `keys` of the key it was set under, in
    /// the order the files give them: git reads such settings as one list, whose last matching
    /// value wins whichever key it came under.
    pub fn get_all_of(&self, keys: &[&str]) -> Vec<(usize, &str)> {
        let keys: Vec<String> = keys.iter().map(|k| Self::normalize(k)).collect();
        self.order
            .iter()
            .filter_map(|(k, v)| Some((keys.iter().position(|key| key == k)?, v.as_str())))
            .collect()
    }

    /// `key` with its section and name lower-cased (a subsection keeps its case).
    fn normalize(key: &str) -> String {
        match key.rfind('.') {
            Some(dot) => {
                let (head, name) = key.split_at(dot);
                let head = match head.find('.') {
                    Some(d) => format!("{}{}", head[..d].to_ascii_lowercase(), &head[d..]),
                    None => head.to_ascii_lowercase(),
                };
                format!("{head}{}", name.to_ascii_lowercase())
            }
            None => key.to_ascii_lowercase(),
        }
    }

    /// A size value with git's optional `k`, `m`, `g` suffix.
    pub fn get_size(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse_size(v)
                .map(Some)
                .ok_or_else(|| Error::BadName(format!("bad size for config {key}: '{v}'"))),
        }
    }
}

/// Strips comments and quotes from a value.
fn parse_value(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// A number as git reads one in its configuration: an optional sign, digits in decimal, `0x`
/// hex or `0` octal, then an optional `k`, `m` or `g` (either case) multiplying it by 1024,
/// 1024² or 1024³. `None` for anything else, or beyond 64 bits.
fn git_number(value: &str) -> Option<i128> {
    let (sign, rest) = match value.strip_prefix('-') {
        Some(rest) => (-1i128, rest),
        None => (1, value.strip_prefix('+').unwrap_or(value)),
    };
    let (digits, shift) = match rest.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&rest[..rest.len() - 1], 10),
        b'm' => (&rest[..rest.len() - 1], 20),
        b'g' => (&rest[..rest.len() - 1], 30),
        _ => (rest, 0),
    };
    let n = if let Some(hex) = digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse::<u64>()
    };
    (n.ok()? as i128).checked_mul(1 << shift).map(|n| n * sign)
}

/// A size as git reads one (`96m`, `1g`, `512k`, `1000`, `0x10`: the numbers
/// [`parse_bool`] also reads, within 64 bits): `None` when it is negative or beyond.
pub fn parse_size(value: &str) -> Option<u64> {
    u64::try_from(git_number(value.trim())?).ok()
}

/// A configuration value as git reads an integer (`git_config_int`): decimal, `0x` hex or `0`
/// octal, times 1024, 1024² or 1024³ for a `k`, `m` or `g`, within 32 bits. `None` for
/// anything else, which git refuses with "bad numeric config value".
pub fn parse_int(value: &str) -> Option<i32> {
    i32::try_from(git_number(value.trim())?).ok()
}

/// A configuration value as git reads a boolean: `true`, `yes`, `on` (and a key with no `=`,
/// which [`Config`] stores as `true`) are true; `false`, `no`, `off` and an empty value are
/// false; otherwise a number as git reads one (decimal, `0x` hex or `0` octal, times 1024,
/// 1024² or 1024³ for a `k`, `m` or `g`, within 32 bits) is true when it is not zero. `None`
/// for anything else, which git refuses with "bad boolean config value".
pub fn parse_bool(value: &str) -> Option<bool> {
    let is = |word: &str| value.eq_ignore_ascii_case(word);
    match () {
        _ if is("true") || is("yes") || is("on") => Some(true),
        _ if is("false") || is("no") || is("off") || value.is_empty() => Some(false),
        _ => {
            let n = git_number(value)?;
            (i32::MIN as i128..=i32::MAX as i128)
                .contains(&n)
                .then_some(n != 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sections_keys_and_sizes() {
        let mut c = Config::default();
        c.parse(
            "[core]\n\tdeltaBaseCacheLimit = 64m ; comment\n\tbare\n[remote \"Origin\"]\n\turl = \"a b\"\n[Extensions]\nobjectformat=sha256\n",
            "test",
        )
        .unwrap();
        assert_eq!(
            c.get_size("core.deltabasecachelimit").unwrap(),
            Some(64 << 20)
        );
        assert_eq!(c.get("core.bare"), Some("true"));
        assert_eq!(c.get("remote.Origin.url"), Some("a b"));
        assert_eq!(c.get("extensions.objectFormat"), Some("sha256"));
        assert_eq!(parse_size("2k"), Some(2048));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn booleans_read_as_git_reads_them() {
        let mut c = Config::default();
        c.parse(
            "[a]\n\tbare\n\tyes = Yes\n\toff = off\n\tempty =\n\ttwo = 2\n\tzero = 0\n\tjunk = maybe\n",
            "test",
        )
        .unwrap();
        for (key, want) in [
            ("a.bare", Some(true)),
            ("a.yes", Some(true)),
            ("a.off", Some(false)),
            ("a.empty", Some(false)),
            ("a.two", Some(true)),
            ("a.zero", Some(false)),
            ("a.junk", None),
            ("a.unset", None),
        ] {
            assert_eq!(c.get_bool(key), want, "{key}");
        }
        for (value, want) in [
            ("TRUE", Some(true)),
            ("No", Some(false)),
            ("1k", Some(true)),
            ("010", Some(true)),
            ("0x0", Some(false)),
            ("0x10", Some(true)),
            ("-1", Some(true)),
            ("00", Some(false)),
            ("3g", None),
            ("99999999999", None),
            ("flase", None),
            ("1x", None),
        ] {
            assert_eq!(parse_bool(value), want, "{value}");
        }
    }
}

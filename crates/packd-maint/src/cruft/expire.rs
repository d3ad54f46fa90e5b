//! When unreachable objects expire: `gc.pruneExpire` (default `2.weeks.ago`) or a
//! `--cruft-expiration` value, in the forms of git's approxidate that such settings use.
//!
//! ```text
//! now                         everything unreachable expires
//! never | false               nothing expires (git reads both as time 0: no expiry)
//! N.unit[s][.ago]             N seconds, minutes, hours, days, weeks, months, years before now
//!                             (dots or spaces between the words; months and years are
//!                             calendar ones)
//! YYYY-MM-DD[( |T)HH:MM[:SS]][ Z|+HHMM|-HHMM]
//!                             an absolute date, UTC unless a zone is given
//! @SECONDS | SECONDS          seconds since the epoch (a bare number of at least 9 digits)
//! ```
//!
//! An object expires when its mtime is at or before the expiry time (git keeps an object only
//! when its mtime is strictly after it: reachable.c's `obj_is_recent`).

use super::CruftError;
use packd_odb::odb::ObjectDb;
use packd_odb::{parse, ObjectId, ObjectKind};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The config key git's `gc` reads.
pub const PRUNE_EXPIRE_KEY: &str = "gc.pruneExpire";
/// Its default.
pub const DEFAULT_PRUNE_EXPIRE: &str = "2.weeks.ago";

/// A value of `gc.pruneExpire` or `--cruft-expiration` that is not a date packd reads.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: '{value}' is not a date (use now, never, N.days.ago or YYYY-MM-DD)")]
pub struct ExpiryError {
    /// Where the value came from (`gc.pruneExpire`, `--cruft-expiration`).
    pub setting: String,
    /// The value.
    pub value: String,
}

/// The expiry time `gc.pruneExpire` sets in `config` (its default when unset), relative to
/// `now`: `None` means nothing expires.
pub fn from_config(
    config: &packd_odb::config::Config,
    now: SystemTime,
) -> Result<Option<SystemTime>, ExpiryError> {
    let value = config.get(PRUNE_EXPIRE_KEY).unwrap_or(DEFAULT_PRUNE_EXPIRE);
    parse(PRUNE_EXPIRE_KEY, value, now)
}

/// The expiry time `value` (of `setting`, named in the error) means relative to `now`: `None`
/// for `never`.
pub fn parse(
    setting: &str,
    value: &str,
    now: SystemTime,
) -> Result<Option<SystemTime>, ExpiryError> {
    let error = || ExpiryError {
        setting: setting.to_string(),
        value: value.to_string(),
    };
    let text = value.trim().to_ascii_lowercase();
    match text.as_str() {
        "now" => return Ok(Some(now)),
        "never" | "false" => return Ok(None),
        _ => {}
    }
    if let Some(seconds) = epoch_seconds(&text) {
        return Ok(Some(UNIX_EPOCH + Duration::from_secs(seconds)));
    }
    if let Some(time) = relative(&text, now) {
        return Ok(Some(time));
    }
    absolute(&text).map(Some).ok_or_else(error)
}

/// `@SECONDS`, or a bare number of at least 9 digits (git's approxidate reads those as a
/// timestamp too).
fn epoch_seconds(text: &str) -> Option<u64> {
    let (digits, bare) = match text.strip_prefix('@') {
        Some(rest) => (rest, false),
        None => (text, true),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if bare && digits.len() < 9 {
        return None;
    }
    digits.parse().ok()
}

/// `N.unit[s][.ago]`, words split by dots or spaces.
fn relative(text: &str, now: SystemTime) -> Option<SystemTime> {
    let words: Vec<&str> = text
        .split(['.', ' ', '_'])
        .filter(|w| !w.is_empty())
        .collect();
    let (count, unit) = match words.as_slice() {
        [n, unit] | [n, unit, "ago"] => (n.parse::<u64>().ok()?, *unit),
        _ => return None,
    };
    let unit = unit.strip_suffix('s').unwrap_or(unit);
    let seconds = match unit {
        "second" | "sec" => 1,
        "minute" | "min" => 60,
        "hour" => 3600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => return months_before(now, count),
        "year" => return months_before(now, count.checked_mul(12)?),
        _ => return None,
    };
    now.checked_sub(Duration::from_secs(count.checked_mul(seconds)?))
}

/// `now` moved back `months` calendar months (UTC), the day clamped to the month's length.
fn months_before(now: SystemTime, months: u64) -> Option<SystemTime> {
    let secs = now.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    let (days, time_of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let total = y * 12 + (m as i64 - 1) - i64::try_from(months).ok()?;
    let (y, m) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
    let d = d.min(days_in_month(y, m));
    let secs = days_from_civil(y, m, d) * 86_400 + time_of_day;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// `YYYY-MM-DD[( |T)HH:MM[:SS]][ Z|+HHMM|-HHMM]`.
fn absolute(text: &str) -> Option<SystemTime> {
    let (date, rest) = text.split_at(text.find([' ', 't']).unwrap_or(text.len()));
    let mut parts = date.split('-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let mut rest = rest.trim_start_matches([' ', 't']);
    let mut seconds = 0i64;
    if !rest.is_empty() && !rest.starts_with(['+', '-', 'z']) {
        let end = rest.find([' ', '+', '-', 'z']).unwrap_or(rest.len());
        let fields: Vec<i64> = rest[..end]
            .split(':')
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let (h, min, s) = match fields.as_slice() {
            [h, min] => (*h, *min, 0),
            [h, min, s] => (*h, *min, *s),
            _ => return None,
        };
        if h > 23 || min > 59 || s > 60 {
            return None;
        }
        seconds = h * 3600 + min * 60 + s;
        rest = rest[end..].trim_start();
    }
    let offset = match rest {
        "" | "z" | "utc" => 0,
        zone => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let digits = &zone[1..];
            if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let hhmm: i64 = digits.parse().ok()?;
            sign * ((hhmm / 100) * 3600 + (hhmm % 100) * 60)
        }
    };
    let secs = days_from_civil(y, m, d) * 86_400 + seconds - offset;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Whether an object last written at `mtime` (seconds since the epoch) has expired by
/// `expire` (`None`: nothing expires).
pub fn is_expired(mtime: u32, expire: Option<SystemTime>) -> bool {
    expire.is_some_and(|e| u64::from(mtime) <= seconds(e))
}

/// Seconds since the epoch of `time` (0 before it).
pub fn seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The unreachable objects split by the expiry: kept (with the mtime they keep) and dropped.
#[derive(Debug, Default)]
pub struct Selection {
    /// Objects for the cruft pack, sorted by id, with their mtimes.
    pub kept: Vec<(ObjectId, u32)>,
    /// Objects to drop, sorted by id.
    pub dropped: Vec<ObjectId>,
}

/// Splits `unreachable` (sorted by id, with mtimes) by `expire`: an object is kept when it is
/// recent (newer than `expire`) or when a recent one reaches it, as git keeps it (pack-objects'
/// cruft traversal), so that a kept commit or tree never lacks what it names. An old object
/// kept that way gets the expiry time as its mtime, as git gives it: it expires with the
/// next run whose expiry is later, unless a recent object still reaches it then.
pub fn select(
    objects: &ObjectDb,
    unreachable: Vec<(ObjectId, u32)>,
    expire: Option<SystemTime>,
) -> Result<Selection, CruftError> {
    if expire.is_none() {
        return Ok(Selection {
            kept: unreachable,
            dropped: Vec::new(),
        });
    }
    let expiry = u32::try_from(expire.map_or(0, seconds)).unwrap_or(u32::MAX);
    let mut times: HashMap<ObjectId, (u32, bool)> = unreachable
        .iter()
        .map(|&(id, t)| (id, (t, !is_expired(t, expire))))
        .collect();
    let mut todo: Vec<ObjectId> = unreachable
        .iter()
        .filter(|(_, t)| !is_expired(*t, expire))
        .map(|(id, _)| *id)
        .collect();
    while let Some(id) = todo.pop() {
        for link in links(objects, &id)? {
            if let Some((t, kept)) = times.get_mut(&link) {
                if !*kept {
                    *kept = true;
                    *t = (*t).max(expiry);
                    todo.push(link);
                }
            }
        }
    }
    let mut selection = Selection::default();
    for (id, _) in unreachable {
        match times[&id] {
            (t, true) => selection.kept.push((id, t)),
            (_, false) => selection.dropped.push(id),
        }
    }
    Ok(selection)
}

/// The objects `id` names: a commit's tree and parents, a tree's entries (not its gitlinks,
/// which name commits of another repository), a tag's target; none for a blob or an object
/// that is missing (git's cruft traversal ignores missing links too).
pub(crate) fn links(objects: &ObjectDb, id: &ObjectId) -> Result<Vec<ObjectId>, CruftError> {
    const GITLINK: u32 = 0o160000;
    match objects.header(id)? {
        None => return Ok(Vec::new()),
        Some(h) if h.kind == ObjectKind::Blob => return Ok(Vec::new()),
        Some(_) => {}
    }
    let Some(object) = objects.read(id)? else {
        return Ok(Vec::new());
    };
    Ok(match object.kind {
        ObjectKind::Commit => {
            let info = parse::parse_commit(id, &object.data)?;
            let mut out = info.parents;
            out.push(info.tree);
            out
        }
        ObjectKind::Tree => {
            let mut out = Vec::new();
            for entry in parse::tree_entries(id, &object.data) {
                let (mode, _, link) = entry?;
                if mode != GITLINK {
                    out.push(link);
                }
            }
            out
        }
        ObjectKind::Tag => vec![parse::tag_target(id, &object.data)?],
        ObjectKind::Blob => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn p(text: &str, now: u64) -> Option<u64> {
        parse("test", text, at(now)).unwrap().map(seconds)
    }

    #[test]
    fn git_forms_of_expiry() {
        // 2026-12-02T04:00:00Z
        let now = 1_796_184_000;
        assert_eq!(p("now", now), Some(now));
        assert_eq!(p("never", now), None);
        assert_eq!(p("2.weeks.ago", now), Some(now - 14 * 86_400));
        assert_eq!(p("2 weeks ago", now), Some(now - 14 * 86_400));
        assert_eq!(p("1.day", now), Some(now - 86_400));
        assert_eq!(p("90.minutes.ago", now), Some(now - 5400));
        // 2026-11-02T04:00:00Z and 2025-12-02T04:00:00Z
        assert_eq!(p("1.month.ago", now), Some(now - 30 * 86_400));
        assert_eq!(p("1.year.ago", now), Some(now - 365 * 86_400));
        assert_eq!(p("2026-12-01", now), Some(now - 4 * 3600 - 86_400));
        assert_eq!(p("2026-12-02 03:00:00", now), Some(now - 3600));
        assert_eq!(p("2026-12-02T05:00:00 +0200", now), Some(now - 3600));
        assert_eq!(p("@1700000000", now), Some(1_700_000_000));
        assert_eq!(p("1700000000", now), Some(1_700_000_000));
        for bad in [
            "soon",
            "2.fortnights.ago",
            "2026-13-01",
            "2026-02-30",
            "",
            "12",
        ] {
            assert!(parse("gc.pruneExpire", bad, at(now)).is_err(), "{bad}");
        }
        let e = parse("gc.pruneExpire", "soon", at(now)).unwrap_err();
        assert!(e.to_string().starts_with("gc.pruneExpire: 'soon'"), "{e}");
    }

    #[test]
    fn gc_prune_expire_from_config() {
        let now = 1_796_184_000;
        let config = |text: &str| {
            let mut c = packd_odb::config::Config::default();
            c.parse(text, "config").unwrap();
            from_config(&c, at(now)).map(|t| t.map(seconds))
        };
        assert_eq!(config("").unwrap(), Some(now - 14 * 86_400));
        assert_eq!(config("[gc]\n\tpruneExpire = never\n").unwrap(), None);
        assert_eq!(config("[gc]\n\tpruneexpire = now\n").unwrap(), Some(now));
        let e = config("[gc]\n\tpruneExpire = later\n").unwrap_err();
        assert!(e.to_string().contains("gc.pruneExpire: 'later'"), "{e}");
    }

    #[test]
    fn expired_means_at_or_before() {
        assert!(is_expired(100, Some(at(100))));
        assert!(!is_expired(101, Some(at(100))));
        assert!(!is_expired(0, None));
    }

    #[test]
    fn month_arithmetic_clamps_the_day() {
        // 2024-03-31T00:00:00Z one month back: 2024-02-29.
        let mar31 = days_from_civil(2024, 3, 31) as u64 * 86_400;
        let feb29 = days_from_civil(2024, 2, 29) as u64 * 86_400;
        assert_eq!(p("1.month.ago", mar31), Some(feb29));
        assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
    }
}

//! The `proc-receive` hook: commands for the refs `receive.procReceiveRefs` names are handed to
//! it instead of being applied (git's way of serving `refs/for/<branch>` review pushes). It
//! speaks pkt-lines on its stdin and stdout (its stderr goes to the client like other hooks'):
//!
//! ```text
//! receive-pack: "version=1\0[atomic ][push-options]" flush   (capabilities the client asked)
//! hook:         "version=1[\0push-options]" flush            (version 0 or 1)
//! receive-pack: "<old> <new> <ref>" ... flush                (the commands it takes)
//!               [push option ... flush]                      (when the hook asked for them)
//! hook:         "ok <ref>" | "ng <ref> [<reason>]"           (per command, any order)
//!               "option refname <ref>" | "option old-oid <id>" | "option new-oid <id>"
//!               | "option forced-update" | "option fall-through"   (about the last ok)
//!               ... flush
//! ```
//!
//! An `ok` followed by options is one report of what the hook did for the command (it may give
//! several, each after an `ok`); `fall-through` hands the command back to receive-pack.
//! `receive.procReceiveRefs` values are `[<modifiers>:]<ref prefix>`: modifiers `a` (creations),
//! `m` (updates), `d` (deletions) restrict which commands match (none: all), `!` makes the
//! pattern match the refs outside the prefix.

use super::run::{self, HookExit, Invocation};
use super::{Hooks, Relay};
use crate::pkt_line;
use packd_odb::config::Config;
use packd_odb::ObjectId;
use packd_refs::RefUpdate;
use std::process::Stdio;

/// One pattern of `receive.procReceiveRefs`.
#[derive(Debug, Clone)]
struct Pattern {
    prefix: String,
    add: bool,
    delete: bool,
    modify: bool,
    negative: bool,
}

/// The refs whose commands go to `proc-receive` (`receive.procReceiveRefs`, every value).
#[derive(Debug, Clone, Default)]
pub struct ProcReceiveRefs(Vec<Pattern>);

impl ProcReceiveRefs {
    /// The patterns `config` sets.
    pub fn from_config(config: &Config) -> ProcReceiveRefs {
        let patterns = config
            .get_all_of(&["receive.procReceiveRefs"])
            .into_iter()
            .map(|(_, value)| {
                let (modifiers, prefix) = match value.split_once(':') {
                    Some((m, p)) => (Some(m), p),
                    None => (None, value),
                };
                let has = |c: char| modifiers.is_none_or(|m| m.contains(c));
                Pattern {
                    prefix: prefix.trim_end_matches('/').to_string(),
                    add: has('a'),
                    delete: has('d'),
                    modify: has('m'),
                    negative: modifiers.is_some_and(|m| m.contains('!')),
                }
            })
            .collect();
        ProcReceiveRefs(patterns)
    }

    /// Whether no pattern is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `update` goes to `proc-receive`.
    pub fn matches(&self, update: &RefUpdate) -> bool {
        self.0.iter().any(|p| {
            let kind_wanted = match (update.old, update.new) {
                (None, _) => p.add,
                (_, None) => p.delete,
                _ => p.modify,
            };
            if !kind_wanted {
                return false;
            }
            let under = update
                .name
                .strip_prefix(p.prefix.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
            under != p.negative
        })
    }
}

/// One report of what `proc-receive` did for a command: what differs from the command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefReport {
    /// The ref it updated instead (`option refname`).
    pub ref_name: Option<String>,
    /// `option old-oid`.
    pub old: Option<ObjectId>,
    /// `option new-oid`.
    pub new: Option<ObjectId>,
    /// `option forced-update`.
    pub forced_update: bool,
}

/// What `proc-receive` answered for one command it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcOutcome {
    /// `ok`, with the reports that followed (none: the command as it was).
    Done(Vec<RefReport>),
    /// `ng`, with git's reason.
    Refused(String),
    /// `option fall-through`: receive-pack applies it as any other.
    FallThrough,
}

/// What one run of `proc-receive` answered.
#[derive(Debug)]
pub struct ProcAnswer {
    /// Per command given, in order.
    pub outcomes: Vec<ProcOutcome>,
    /// Whether the hook failed as git counts it (an `ng`, a bad line, a command without an
    /// answer, a failed conversation or exit): the commands without an answer, and with an
    /// atomic push all others, are then refused with `fail to run proc-receive hook`.
    pub failed: bool,
}

/// Most lines one `proc-receive` answer may have, beyond which it counts as failed.
const MAX_REPORT_LINES: usize = 1_000_000;

/// The conversation's state for one command.
struct Command<'a> {
    update: &'a RefUpdate,
    /// Still the hook's (not fallen through).
    taken: bool,
    returned: bool,
    error: Option<String>,
    reports: Vec<RefReport>,
}

impl Hooks {
    /// Runs `proc-receive` for `commands` (those [`ProcReceiveRefs::matches`]); `atomic` and
    /// `push_options` say whether the client asked for those capabilities (the options are
    /// those of [`Hooks::set_push_options`]). `None` when there is no such hook: git then refuses the
    /// commands (`fail to run proc-receive hook`), after telling the client
    /// `cannot find hook 'proc-receive'`.
    pub fn proc_receive(
        &mut self,
        commands: &[&RefUpdate],
        atomic: bool,
        push_options: bool,
        relay: &mut dyn Relay,
    ) -> ProcAnswer {
        let options = self.push_options.clone();
        let push_options = push_options.then_some(&options[..]);
        let Some(program) = self.find("proc-receive") else {
            relay.relay(b"error: cannot find hook 'proc-receive'\n");
            return ProcAnswer {
                outcomes: commands
                    .iter()
                    .map(|_| ProcOutcome::Refused("fail to run proc-receive hook".into()))
                    .collect(),
                failed: true,
            };
        };
        let env = super::common_env();
        let call = Invocation {
            program: &program,
            args: &[],
            cwd: &self.git_dir,
            env: &env,
            stdin: None,
            timeout: self.timeout,
        };
        let mut state: Vec<Command<'_>> = commands
            .iter()
            .map(|u| Command {
                update: u,
                taken: true,
                returned: false,
                error: None,
                reports: Vec::new(),
            })
            .collect();
        let mut errors = String::new();
        let mut failed = false;
        let exit = match converse(&call, &mut state, atomic, push_options, &mut errors, relay) {
            Ok((exit, code_ok)) => {
                failed |= !code_ok;
                exit
            }
            Err(why) => {
                failed = true;
                relay.relay(format!("error: {why}\n").as_bytes());
                HookExit::NotStarted(why)
            }
        };
        if !exit.success() {
            failed = true;
        }
        if let HookExit::TimedOut = exit {
            relay.relay(
                format!(
                    "error: the proc-receive hook ran longer than {} s and was ended\n",
                    self.timeout.as_secs_f64()
                )
                .as_bytes(),
            );
        }
        if !errors.is_empty() {
            let text = errors.strip_suffix('\n').unwrap_or(&errors);
            relay.relay(format!("error: {text}\n").as_bytes());
        }
        let outcomes = state
            .into_iter()
            .map(|c| match (c.taken, c.error) {
                (false, _) => ProcOutcome::FallThrough,
                (true, Some(why)) => ProcOutcome::Refused(why),
                (true, None) if c.returned => ProcOutcome::Done(c.reports),
                (true, None) => ProcOutcome::Refused("fail to run proc-receive hook".into()),
            })
            .collect();
        ProcAnswer { outcomes, failed }
    }
}

/// Starts the hook and holds the conversation (on a thread of its own, while this one relays
/// the hook's stderr). Returns how the hook ended and whether the answer was sound.
fn converse(
    call: &Invocation<'_>,
    state: &mut [Command<'_>],
    atomic: bool,
    push_options: Option<&[String]>,
    errors: &mut String,
    relay: &mut dyn Relay,
) -> Result<(HookExit, bool), String> {
    let (mut stderr, writer) = std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let mut command = run::command(call);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(writer);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run hooks/proc-receive: {e}"))?;
    drop(command);
    let (Some(mut to_hook), Some(mut from_hook)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("cannot talk to the proc-receive hook".into());
    };
    let mut sound = false;
    let exit = run::supervise(&mut child, call.timeout, || {
        std::thread::scope(|scope| {
            // Both pipes are the thread's, closed when it ends: a hook that still reads or
            // writes then finishes instead of waiting for us.
            let conversation = scope.spawn(move || {
                let mut reader = pkt_line::PktReader::new(&mut from_hook);
                talk(
                    &mut to_hook,
                    &mut reader,
                    state,
                    atomic,
                    push_options,
                    errors,
                )
            });
            run::relay_all(&mut stderr, relay);
            sound = conversation.join().unwrap_or(false);
        });
    });
    Ok((exit, sound))
}

/// The conversation itself (git's run_proc_receive_hook and read_proc_receive_report); its
/// complaints are added to `errors`, one per line. Returns whether all went well.
fn talk(
    to_hook: &mut dyn std::io::Write,
    reader: &mut pkt_line::PktReader<'_>,
    state: &mut [Command<'_>],
    atomic: bool,
    push_options: Option<&[String]>,
    errors: &mut String,
) -> bool {
    let mut caps = Vec::new();
    if atomic {
        caps.push("atomic");
    }
    if push_options.is_some() {
        caps.push("push-options");
    }
    let hello = if caps.is_empty() {
        "version=1\n".to_string()
    } else {
        format!("version=1\0{}\n", caps.join(" "))
    };
    let sent = pkt_line::write_text(to_hook, &hello).and_then(|()| pkt_line::write_flush(to_hook));
    let mut version = 0u64;
    let mut hook_wants_options = false;
    let negotiated = sent.is_ok()
        && loop {
            match reader.read_line() {
                Ok(pkt_line::Line::Text(line)) => {
                    if let Some(rest) = line.strip_prefix("version=").filter(|_| line.len() > 8) {
                        let (number, features) = rest.split_once('\0').unwrap_or((rest, ""));
                        let digits: String =
                            number.chars().take_while(|c| c.is_ascii_digit()).collect();
                        version = digits.parse().unwrap_or(0);
                        hook_wants_options = features
                            .split(' ')
                            .any(|f| f == "push-options" || f.starts_with("push-options="));
                    }
                }
                Ok(pkt_line::Line::Eof) | Err(_) => break false,
                Ok(_) => break true,
            }
        };
    if !negotiated {
        errors.push_str("fail to negotiate version with proc-receive hook");
        return false;
    }
    if version > 1 {
        errors.push_str(&format!(
            "proc-receive version '{version}' is not supported"
        ));
        return false;
    }
    let hex = |id: Option<ObjectId>| id.unwrap_or(ObjectId::NULL).to_hex();
    let mut written: std::io::Result<()> = Ok(());
    for c in state.iter() {
        let u = c.update;
        written = written.and_then(|()| {
            pkt_line::write_text(
                to_hook,
                &format!("{} {} {}", hex(u.old), hex(u.new), u.name),
            )
        });
    }
    if written
        .and_then(|()| pkt_line::write_flush(to_hook))
        .is_err()
    {
        errors.push_str("fail to write commands to proc-receive hook");
        return false;
    }
    if hook_wants_options {
        let mut written: std::io::Result<()> = Ok(());
        for option in push_options.unwrap_or_default() {
            written = written.and_then(|()| pkt_line::write_text(to_hook, option));
        }
        if written
            .and_then(|()| pkt_line::write_flush(to_hook))
            .is_err()
        {
            errors.push_str("fail to write push-options to proc-receive hook");
            return false;
        }
    }
    let _ = to_hook.flush();
    read_report(reader, state, errors)
}

/// Reads the hook's answer into `state`, as git's read_proc_receive_report does.
fn read_report(
    reader: &mut pkt_line::PktReader<'_>,
    state: &mut [Command<'_>],
    errors: &mut String,
) -> bool {
    let mut sound = true;
    // The command the last ok/ng named, and whether an `option` starts a new report of it.
    let mut hint: Option<usize> = None;
    let mut in_report = false;
    let mut new_report = false;
    let mut said_option_without_ok = false;
    let mut lines = 0usize;
    loop {
        let line = match reader.read_line() {
            Ok(pkt_line::Line::Text(line)) => line,
            Ok(pkt_line::Line::Eof) if lines == 0 => {
                errors.push_str("proc-receive exited abnormally");
                return false;
            }
            Ok(_) => break,
            Err(e) => {
                errors.push_str(&format!("proc-receive sent a bad line: {e}\n"));
                sound = false;
                break;
            }
        };
        lines += 1;
        if lines > MAX_REPORT_LINES {
            errors.push_str("proc-receive reported too many lines\n");
            return false;
        }
        let Some((head, rest)) = line.split_once(' ') else {
            errors.push_str(&format!(
                "proc-receive reported incomplete status line: '{line}'\n"
            ));
            sound = false;
            continue;
        };
        if head == "option" {
            let Some(i) = hint.filter(|_| in_report || new_report) else {
                if !said_option_without_ok {
                    said_option_without_ok = true;
                    errors.push_str(
                        "proc-receive reported 'option' without a matching 'ok/ng' directive\n",
                    );
                }
                sound = false;
                continue;
            };
            if new_report {
                state[i].reports.push(RefReport::default());
                new_report = false;
                in_report = true;
            }
            let (key, value) = match rest.split_once(' ') {
                Some((k, v)) => (k, Some(v)),
                None => (rest, None),
            };
            let id = || value.and_then(|v| ObjectId::from_hex(v.get(..40)?));
            let report = state[i].reports.last_mut();
            match (key, report) {
                ("refname", Some(r)) => r.ref_name = value.map(str::to_string),
                ("old-oid", Some(r)) => r.old = id().or(r.old),
                ("new-oid", Some(r)) => r.new = id().or(r.new),
                ("forced-update", Some(r)) => r.forced_update = true,
                ("fall-through", _) => {
                    state[i].taken = false;
                    state[i].returned = false;
                }
                _ => {}
            }
            continue;
        }
        in_report = false;
        new_report = false;
        let (name, reason) = match rest.split_once(' ') {
            Some((n, r)) => (n, Some(r)),
            None => (rest, None),
        };
        if head != "ok" && head != "ng" {
            errors.push_str(&format!(
                "proc-receive reported bad status '{head}' on ref '{name}'\n"
            ));
            sound = false;
            continue;
        }
        let from_hint = hint.and_then(|h| (h..state.len()).find(|&j| state[j].update.name == name));
        let found = from_hint.or_else(|| state.iter().position(|c| c.update.name == name));
        hint = found;
        let Some(i) = found else {
            errors.push_str(&format!(
                "proc-receive reported status on unknown ref: {name}\n"
            ));
            sound = false;
            continue;
        };
        if !state[i].taken {
            errors.push_str(&format!(
                "proc-receive reported status on unexpected ref: {name}\n"
            ));
            sound = false;
            continue;
        }
        state[i].returned = true;
        if head == "ng" {
            state[i].error = Some(reason.unwrap_or("failed").to_string());
            sound = false;
            continue;
        }
        new_report = true;
    }
    for c in state.iter_mut() {
        if c.taken && c.error.is_none() && !c.returned {
            c.error = Some("proc-receive failed to report status".into());
            sound = false;
        }
    }
    sound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(name: &str, old: bool, new: bool) -> RefUpdate {
        let id = ObjectId::from_hex("1111111111111111111111111111111111111111");
        RefUpdate {
            name: name.into(),
            old: if old { id } else { None },
            new: if new { id } else { None },
        }
    }

    #[test]
    fn patterns_as_git_reads_them() {
        let mut config = Config::default();
        config
            .parse(
                "[receive]\n\tprocReceiveRefs = refs/for/\n\tprocReceiveRefs = ad:refs/review\n\
                 \tprocReceiveRefs = a!:refs/heads\n",
                "test",
            )
            .unwrap();
        let refs = ProcReceiveRefs::from_config(&config);
        assert!(refs.matches(&update("refs/for/main", true, true)));
        assert!(!refs.matches(&update("refs/form", true, true)));
        assert!(refs.matches(&update("refs/review/x", false, true)));
        assert!(!refs.matches(&update("refs/review/x", true, true)));
        // Created outside refs/heads: the negative pattern takes it.
        assert!(refs.matches(&update("refs/tags/v1", false, true)));
        assert!(!refs.matches(&update("refs/heads/main", false, true)));
        assert!(ProcReceiveRefs::from_config(&Config::default()).is_empty());
    }
}

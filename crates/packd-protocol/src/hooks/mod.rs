//! receive-pack's hooks, found and run as git 2.39's receive-pack runs them.
//!
//! ```text
//! hook                   when                                args                 stdin
//! pre-receive            objects received and checked,       -                    "<old> <new> <ref>\n"
//!                        before any ref moves                                     for every command
//! update                 per ref, after the repository's     <ref> <old> <new>    /dev/null
//!                        rules passed, objects migrated
//! reference-transaction  around the ref updates              prepared|committed   "<old> <new> <ref>\n"
//!                                                            |aborted             per ref in the update,
//!                                                                                 then HEAD's if its
//!                                                                                 branch is one
//! post-receive           after the report, refs updated      -                    "<old> <new> <ref>\n"
//!                                                                                 per updated ref
//! post-update            after post-receive                  <ref>...             /dev/null
//! ```
//!
//! Where a hook is: `<common dir>/hooks/<name>`, or `core.hooksPath/<name>` (`~/` is the home
//! directory; a relative path starts at the git directory, where hooks run). Only a file that is
//! executable is run; one that is not is ignored with git's hint on stderr (unless
//! `advice.ignoredHook` is false).
//!
//! Every hook runs in the git directory with `GIT_DIR=.` and, as git runs it, git's exec path
//! (`git --exec-path`) first in `PATH` and in `GIT_EXEC_PATH`; `pre-receive` and `post-receive` also
//! get `GIT_PUSH_OPTION_COUNT` (0 when there are none) and `GIT_PUSH_OPTION_<n>`, and
//! `pre-receive` the quarantine ([`objdir`]): `GIT_QUARANTINE_PATH`, `GIT_OBJECT_DIRECTORY` and
//! `GIT_ALTERNATE_OBJECT_DIRECTORIES`, so that git run by the hook reads the pushed objects. No
//! `GIT_PUSH_CERT*` (packd takes no signed pushes, and git sets none without a certificate).
//!
//! Output (stdout and stderr together) goes to the client as it comes (side-band 2, which git
//! shows as `remote: ...` lines; without a side band, to stderr), except
//! `reference-transaction`'s, which goes to stderr, as with git. A hook running longer than
//! [`HookOptions::timeout`] is killed with its process group and counts as a failure.

pub mod objdir;
pub mod proc_receive;
mod run;

pub use run::{Feed, HookExit};

use packd_odb::config::Config;
use packd_odb::ObjectId;
use packd_refs::RefUpdate;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whether and how long hooks run.
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// Run the repository's hooks (`packd serve --no-hooks` turns them off for repositories
    /// whose owners the server does not trust: a hook runs as the server's user).
    pub enabled: bool,
    /// A hook still running after this long is killed (with its process group) and counts as
    /// failed (`--hook-timeout`).
    pub timeout: Duration,
}

/// The default of [`HookOptions::timeout`] (`--hook-timeout`), in seconds.
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 600;

impl Default for HookOptions {
    fn default() -> Self {
        HookOptions {
            enabled: true,
            timeout: Duration::from_secs(DEFAULT_HOOK_TIMEOUT_SECS),
        }
    }
}

/// Where a hook's output goes.
pub trait Relay {
    /// Passes on `bytes` of a hook's output, as they came.
    fn relay(&mut self, bytes: &[u8]);

    /// After how long without output a keepalive is due (git's `receive.keepAlive`, for a
    /// client on a side band: proxies and clients may give up on a silent connection);
    /// `None`: never.
    fn keepalive_every(&self) -> Option<std::time::Duration> {
        None
    }

    /// Sends a keepalive (git's: an empty band-1 packet, `0005\1`).
    fn keepalive(&mut self) {}
}

/// Output to this process's stderr.
#[derive(Debug, Default)]
pub struct StderrRelay;

impl Relay for StderrRelay {
    fn relay(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let _ = std::io::stderr().write_all(bytes);
    }
}

/// The hooks of one repository, for one push.
#[derive(Debug)]
pub struct Hooks {
    git_dir: PathBuf,
    /// The hooks directory; `None` when hooks are off.
    dir: Option<PathBuf>,
    /// Whether the directory is the default one (the hint names it `hooks/<name>`, as git).
    default_dir: bool,
    hint: bool,
    timeout: Duration,
    push_options: Vec<String>,
    /// Hooks already looked for, and what was found (a push asks for `update` per command).
    found: Vec<(String, Option<PathBuf>)>,
}

/// git's exec path (`git --exec-path`), looked up once: git runs hooks with it first in
/// `PATH` (so that `git-<command>` works in them) and in `GIT_EXEC_PATH`. `None` without git.
fn git_exec_path() -> Option<&'static str> {
    static EXEC_PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    EXEC_PATH
        .get_or_init(|| {
            let out = std::process::Command::new("git")
                .arg("--exec-path")
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            let path = String::from_utf8(out.stdout).ok()?.trim_end().to_string();
            (!path.is_empty()).then_some(path)
        })
        .as_deref()
}

/// The variables every hook gets: `GIT_DIR=.` and git's exec path.
fn common_env() -> Vec<(String, Option<String>)> {
    let mut env: Vec<(String, Option<String>)> = vec![("GIT_DIR".into(), Some(".".into()))];
    if let Some(exec_path) = git_exec_path() {
        let path = match std::env::var("PATH") {
            Ok(path) if !path.is_empty() => format!("{exec_path}:{path}"),
            _ => exec_path.to_string(),
        };
        env.push(("PATH".into(), Some(path)));
        if std::env::var_os("GIT_EXEC_PATH").is_none() {
            env.push(("GIT_EXEC_PATH".into(), Some(exec_path.to_string())));
        }
    }
    env
}

/// Writes the stdin of `pre-receive`, `post-receive` and `reference-transaction`: one
/// `<old> <new> <ref>\n` line per update (zeros for none).
pub fn write_update_lines<'a>(
    out: &mut dyn std::io::Write,
    updates: impl IntoIterator<Item = &'a RefUpdate>,
) -> std::io::Result<()> {
    let hex = |id: Option<ObjectId>| id.unwrap_or(ObjectId::NULL).to_hex();
    for u in updates {
        writeln!(out, "{} {} {}", hex(u.old), hex(u.new), u.name)?;
    }
    Ok(())
}

/// `core.hooksPath` as git resolves a path: `~/` and `~user/` expanded (`None` if they cannot
/// be), a relative path left relative to the git directory.
fn resolve_hooks_path(value: &str, git_dir: &Path) -> Option<PathBuf> {
    let path = if let Some(rest) = value.strip_prefix("~/") {
        PathBuf::from(std::env::var_os("HOME")?).join(rest)
    } else if value == "~" {
        PathBuf::from(std::env::var_os("HOME")?)
    } else if let Some(rest) = value.strip_prefix('~') {
        let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
        home_of(user)?.join(tail)
    } else {
        PathBuf::from(value)
    };
    Some(git_dir.join(path))
}

/// The home directory of `user`, from the password database.
fn home_of(user: &str) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == user).then(|| PathBuf::from(fields[5]))
    })
}

impl Hooks {
    /// The hooks of the repository whose git directory is `git_dir` and common directory
    /// `common_dir`, configured by `config`.
    pub fn new(git_dir: &Path, common_dir: &Path, config: &Config, options: &HookOptions) -> Hooks {
        let configured = config.get("core.hookspath").filter(|v| !v.is_empty());
        let dir = match configured {
            _ if !options.enabled => None,
            Some(value) => {
                let dir = resolve_hooks_path(value, git_dir);
                if dir.is_none() {
                    tracing::warn!("core.hooksPath {value:?} cannot be resolved: no hooks run");
                }
                dir
            }
            None => Some(common_dir.join("hooks")),
        };
        Hooks {
            git_dir: git_dir.to_path_buf(),
            dir,
            default_dir: configured.is_none(),
            hint: config.get_bool("advice.ignoredhook").unwrap_or(true),
            timeout: options.timeout,
            push_options: Vec::new(),
            found: Vec::new(),
        }
    }

    /// Sets the push options given to `pre-receive` and `post-receive`.
    pub fn set_push_options(&mut self, options: Vec<String>) {
        self.push_options = options;
    }

    /// The hook `name`, if it is there and executable. One that is there but not executable is
    /// ignored, with git's hint on stderr (once per hook).
    pub fn find(&mut self, name: &str) -> Option<PathBuf> {
        if let Some((_, found)) = self.found.iter().find(|(n, _)| n == name) {
            return found.clone();
        }
        let found = self.look_for(name);
        self.found.push((name.to_string(), found.clone()));
        found
    }

    /// [`Hooks::find`] on the disk.
    fn look_for(&self, name: &str) -> Option<PathBuf> {
        let path = self.dir.as_ref()?.join(name);
        let meta = std::fs::metadata(&path).ok()?;
        if meta.permissions().mode() & 0o111 != 0 {
            return Some(path);
        }
        if self.hint {
            let shown = if self.default_dir {
                format!("hooks/{name}")
            } else {
                path.display().to_string()
            };
            eprintln!(
                "hint: The '{shown}' hook was ignored because it's not set as executable.\n\
                 hint: You can disable this warning with `git config advice.ignoredHook false`."
            );
        }
        None
    }

    /// Runs hook `name` if there is one: `None` when there is not, else how it ended.
    pub fn run(
        &mut self,
        name: &str,
        args: &[String],
        stdin: Option<&run::Feed<'_>>,
        extra_env: &[(String, Option<String>)],
        relay: &mut dyn Relay,
    ) -> Option<HookExit> {
        let program = self.find(name)?;
        let mut env = common_env();
        env.extend_from_slice(extra_env);
        let exit = run::run(
            &run::Invocation {
                program: &program,
                args,
                cwd: &self.git_dir,
                env: &env,
                stdin,
                timeout: self.timeout,
            },
            relay,
        );
        match &exit {
            HookExit::Exited(0) => {}
            HookExit::TimedOut => {
                tracing::warn!(
                    "{}: the {name} hook ran longer than {} s and was ended",
                    self.git_dir.display(),
                    self.timeout.as_secs_f64()
                );
                relay.relay(
                    format!(
                        "error: the {name} hook ran longer than {} s and was ended\n",
                        self.timeout.as_secs_f64()
                    )
                    .as_bytes(),
                );
            }
            HookExit::NotStarted(why) => {
                tracing::warn!("{}: cannot run {name}: {why}", self.git_dir.display());
                relay.relay(format!("error: cannot run hooks/{name}: {why}\n").as_bytes());
            }
            other => tracing::info!("{}: {name} hook: {other:?}", self.git_dir.display()),
        }
        Some(exit)
    }

    /// Push options as git gives them to `pre-receive` and `post-receive`.
    fn push_option_env(&self) -> Vec<(String, Option<String>)> {
        let mut env: Vec<(String, Option<String>)> = self
            .push_options
            .iter()
            .enumerate()
            .map(|(i, o)| (format!("GIT_PUSH_OPTION_{i}"), Some(o.clone())))
            .collect();
        env.push((
            "GIT_PUSH_OPTION_COUNT".into(),
            Some(self.push_options.len().to_string()),
        ));
        env
    }

    /// Runs `pre-receive` with every command on its stdin and the quarantine's variables in
    /// `quarantine_env`. `Err` (git's reason for every command) when it failed.
    pub fn pre_receive(
        &mut self,
        commands: &[RefUpdate],
        quarantine_env: &[(String, Option<String>)],
        relay: &mut dyn Relay,
    ) -> Result<(), String> {
        let mut env = self.push_option_env();
        env.extend_from_slice(quarantine_env);
        let stdin = |out: &mut dyn std::io::Write| write_update_lines(out, commands);
        match self.run("pre-receive", &[], Some(&stdin), &env, relay) {
            Some(exit) if !exit.success() => Err("pre-receive hook declined".into()),
            _ => Ok(()),
        }
    }

    /// Runs `update <ref> <old> <new>`. `Err` (git's reason) when it failed, after telling the
    /// client which ref it declined, as git does.
    pub fn update(&mut self, update: &RefUpdate, relay: &mut dyn Relay) -> Result<(), String> {
        let hex = |id: Option<ObjectId>| id.unwrap_or(ObjectId::NULL).to_hex();
        let args = [update.name.clone(), hex(update.old), hex(update.new)];
        match self.run("update", &args, None, &[], relay) {
            Some(exit) if !exit.success() => {
                relay.relay(format!("error: hook declined to update {}\n", update.name).as_bytes());
                Err("hook declined".into())
            }
            _ => Ok(()),
        }
    }

    /// Runs `reference-transaction <state>` (`prepared`, `committed` or `aborted`) for
    /// `updates`, its output to stderr as git's. `Err` when a `prepared` hook failed: the
    /// transaction must then be aborted (the statuses of the other states are ignored).
    pub fn reference_transaction(
        &mut self,
        state: &str,
        updates: &[RefUpdate],
    ) -> Result<(), String> {
        if updates.is_empty() || self.find("reference-transaction").is_none() {
            return Ok(());
        }
        // git's files backend adds, after the others, a log-only update of HEAD when a
        // transaction updates the branch HEAD points at, and the hook is told of it.
        let head_update = self.head_branch().and_then(|head| {
            let u = updates.iter().find(|u| u.name == head)?;
            Some(RefUpdate {
                name: "HEAD".into(),
                ..u.clone()
            })
        });
        let stdin = |out: &mut dyn std::io::Write| {
            write_update_lines(out, updates.iter().chain(head_update.as_ref()))
        };
        let exit = self.run(
            "reference-transaction",
            &[state.to_string()],
            Some(&stdin),
            &[],
            &mut StderrRelay,
        );
        match exit {
            Some(exit) if !exit.success() && state == "prepared" => {
                Err("ref updates aborted by hook".into())
            }
            _ => Ok(()),
        }
    }

    /// The branch HEAD points at (`ref: <name>` in the git directory's HEAD), if it is a
    /// symbolic ref.
    fn head_branch(&self) -> Option<String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(self.git_dir.join("HEAD"))
            .ok()?
            .take(4096)
            .read_to_string(&mut text)
            .ok()?;
        let name = text.strip_prefix("ref:")?.trim();
        (!name.is_empty()).then(|| name.to_string())
    }

    /// Runs `post-receive` (stdin: the refs updated, as proc-receive reported them for its
    /// commands); what it answers changes nothing.
    pub fn post_receive(&mut self, updated: &[RefUpdate], relay: &mut dyn Relay) {
        if updated.is_empty() {
            return;
        }
        let env = self.push_option_env();
        let stdin = |out: &mut dyn std::io::Write| write_update_lines(out, updated);
        self.run("post-receive", &[], Some(&stdin), &env, relay);
    }

    /// Runs `post-update <ref>...` with the names of the commands that succeeded; what it
    /// answers changes nothing.
    pub fn post_update(&mut self, names: &[String], relay: &mut dyn Relay) {
        if !names.is_empty() {
            self.run("post-update", names, None, &[], relay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<u8>);
    impl Relay for Collect {
        fn relay(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    fn hooks_with(script: &str, timeout: Duration) -> (tempfile::TempDir, Hooks) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("hooks")).unwrap();
        let hook = dir.path().join("hooks/pre-receive");
        std::fs::write(&hook, script).unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let options = HookOptions {
            enabled: true,
            timeout,
        };
        let hooks = Hooks::new(dir.path(), dir.path(), &Config::default(), &options);
        (dir, hooks)
    }

    #[test]
    fn output_and_status_and_stdin() {
        let (_dir, mut hooks) = hooks_with(
            "#!/bin/sh\necho out; echo err >&2; cat; pwd; echo $GIT_DIR; exit 3\n",
            Duration::from_secs(60),
        );
        let mut out = Collect(Vec::new());
        let stdin = |w: &mut dyn std::io::Write| w.write_all(b"in\n");
        let exit = hooks.run("pre-receive", &[], Some(&stdin), &[], &mut out);
        assert_eq!(exit, Some(HookExit::Exited(3)));
        let text = String::from_utf8(out.0.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(&lines[..3], ["out", "err", "in"]);
        assert_eq!(lines[4], ".");
        assert_eq!(hooks.run("update", &[], None, &[], &mut out), None);
    }

    #[test]
    fn a_hung_hook_and_its_children_are_ended() {
        let (_dir, mut hooks) = hooks_with(
            "#!/bin/sh\nsleep 1000 &\nsleep 1000\n",
            Duration::from_millis(300),
        );
        let started = std::time::Instant::now();
        let exit = hooks.run("pre-receive", &[], None, &[], &mut Collect(Vec::new()));
        assert_eq!(exit, Some(HookExit::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn disabled_or_not_executable_hooks_do_not_run() {
        let (dir, _) = hooks_with("#!/bin/sh\nexit 1\n", Duration::from_secs(60));
        let off = HookOptions {
            enabled: false,
            ..HookOptions::default()
        };
        let mut hooks = Hooks::new(dir.path(), dir.path(), &Config::default(), &off);
        assert_eq!(hooks.find("pre-receive"), None);
        let hook = dir.path().join("hooks/pre-receive");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut hooks = Hooks::new(
            dir.path(),
            dir.path(),
            &Config::default(),
            &HookOptions::default(),
        );
        assert_eq!(hooks.find("pre-receive"), None);
    }
}

//! `numatrace completions SHELL` and the hidden `numatrace manpages --out-dir DIR`: the shell
//! completion scripts and the man pages, generated from the command line's own definition
//! (clap_complete, clap_mangen), so they never drift from it. Neither needs privileges or
//! anything of the kernel; `cargo xtask deb` runs both with the built binary.

use std::{
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, Result, bail};
use clap::CommandFactory as _;

use crate::cli::{Cli, Command};

/// The name the scripts complete and the man pages are titled by.
const BIN: &str = "numatrace";

/// Runs `completions` and `manpages`; `None` for every other command. Called before the
/// privilege check: these two need none.
pub fn dispatch(command: &Command) -> Option<ExitCode> {
    let result = match command {
        Command::Completions { shell } => completions(shell).and_then(|script| {
            // A closed pipe (`| head`) is an error here, not a panic.
            let mut out = std::io::stdout().lock();
            out.write_all(&script)
                .and_then(|()| out.flush())
                .context("writing the script to stdout")
        }),
        Command::Manpages { out_dir } => write_man_pages(out_dir).map(|written| {
            for p in written {
                println!("{}", p.display());
            }
        }),
        _ => return None,
    };
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numatrace: {e:#}");
            ExitCode::from(1)
        }
    })
}

/// The completion script for `shell` (`bash`, `zsh` or `fish`).
pub fn completions(shell: &str) -> Result<Vec<u8>> {
    let shell = match shell {
        "bash" => clap_complete::Shell::Bash,
        "zsh" => clap_complete::Shell::Zsh,
        "fish" => clap_complete::Shell::Fish,
        other => bail!("no completions for shell {other:?} (bash, zsh or fish)"),
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut completion_command(), BIN, &mut script);
    Ok(script)
}

/// The command line as completions see it: numatrace's options and its subcommands but the
/// hidden ones (clap_complete offers every subcommand, `manpages` included, and a clap
/// command cannot drop one).
fn completion_command() -> clap::Command {
    let root = Cli::command();
    clap::Command::new(BIN)
        .version(env!("CARGO_PKG_VERSION"))
        .args(root.get_arguments().cloned())
        .subcommands(root.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

/// Every man page, as (file name, roff source): `numatrace.1`, and `numatrace-SUB.1` for each
/// subcommand that `--help` lists (hidden ones, like `manpages` itself, get none).
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    fn add(cmd: &clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
        let man = clap_mangen::Man::new(cmd.clone())
            .source(concat!("numatrace ", env!("CARGO_PKG_VERSION")))
            .manual("numatrace manual");
        let mut text = Vec::new();
        man.render(&mut text)?;
        pages.push((man.get_filename(), text));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            add(sub, pages)?;
        }
        Ok(())
    }
    // Built, so that every subcommand carries the global options and its display name
    // (`numatrace-stat`), which names its page. `help` is a flag, not a page.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    add(&cmd, &mut pages)?;
    Ok(pages)
}

/// Writes every man page into `dir` (created if missing), 0644. An existing page is refused
/// before anything is written: use an empty or new directory. Returns the paths written.
pub fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let pages = man_pages()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some(p) = pages
        .iter()
        .map(|(name, _)| dir.join(name))
        .find(|p| p.symlink_metadata().is_ok())
    {
        bail!(
            "{} exists: refusing to overwrite man pages (use an empty or new directory)",
            p.display()
        );
    }
    let mut written = Vec::new();
    for (name, text) in pages {
        let path = dir.join(name);
        // Exclusive: a file or symlink planted since the check above is refused, not followed.
        let mut file = crate::safe_fs::create_new(&path, false)?;
        file.write_all(&text)
            .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(0o644)))
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subcommands `--help` lists (not `help`, not the hidden ones).
    fn visible_subcommands() -> Vec<String> {
        Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_owned())
            .collect()
    }

    #[test]
    fn every_subcommand_gets_a_man_page() {
        let subs = visible_subcommands();
        assert!(subs.iter().any(|s| s == "stat") && subs.iter().any(|s| s == "completions"));
        assert!(!subs.iter().any(|s| s == "manpages"), "manpages is hidden");
        let pages = man_pages().unwrap();
        let mut names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        let mut want: Vec<String> = subs.iter().map(|s| format!("numatrace-{s}.1")).collect();
        want.push("numatrace.1".into());
        want.sort_unstable();
        assert_eq!(names, want);
        for (name, text) in &pages {
            let text = String::from_utf8_lossy(text);
            let title = name.trim_end_matches(".1");
            // Title, section, source: `numatrace VERSION` on every page.
            let th = format!(".TH {title} 1  \"numatrace {}\"", env!("CARGO_PKG_VERSION"));
            assert!(text.contains(&th), "{name}: no {th} in\n{text}");
        }
        // The root page lists every subcommand; each subcommand's page has its options.
        let root =
            String::from_utf8_lossy(&pages.iter().find(|(n, _)| n == "numatrace.1").unwrap().1)
                .into_owned();
        for s in &subs {
            let see = format!("numatrace\\-{}(1)", s.replace('-', "\\-"));
            assert!(root.contains(&see), "numatrace.1 does not name {see}");
        }
        let stat = &pages
            .iter()
            .find(|(n, _)| n == "numatrace-stat.1")
            .unwrap()
            .1;
        assert!(String::from_utf8_lossy(stat).contains("duration"));
    }

    #[test]
    fn man_pages_are_written_once_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let written = write_man_pages(&out).unwrap();
        assert_eq!(written.len(), visible_subcommands().len() + 1);
        for p in &written {
            let meta = std::fs::metadata(p).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o644, "{}", p.display());
        }
        let stat = out.join("numatrace-stat.1");
        std::fs::write(&stat, "mine").unwrap();
        let err = write_man_pages(&out).unwrap_err().to_string();
        assert!(err.contains("refusing to overwrite"), "{err}");
        assert_eq!(std::fs::read_to_string(&stat).unwrap(), "mine");
    }

    #[test]
    fn completion_scripts_offer_every_subcommand() {
        for shell in ["bash", "zsh", "fish"] {
            let script = String::from_utf8(completions(shell).unwrap()).unwrap();
            for s in visible_subcommands() {
                assert!(script.contains(&s), "{shell} script lacks {s}");
            }
            assert!(
                !script.contains("manpages"),
                "{shell} offers the hidden manpages"
            );
            assert!(
                script.contains("no-fentry"),
                "{shell} lacks the global options"
            );
        }
        // bash: the words offered after `numatrace ` are every subcommand, `help`, the options.
        let bash = String::from_utf8(completions("bash").unwrap()).unwrap();
        assert!(bash.contains("complete -F _numatrace"), "{bash}");
        let root: Vec<&str> = bash
            .lines()
            .filter_map(|l| l.trim().strip_prefix("opts=\""))
            .map(|l| {
                l.trim_end_matches('"')
                    .split_whitespace()
                    .collect::<Vec<_>>()
            })
            .find(|words| words.contains(&"--version"))
            .expect("the root's opts line");
        for s in visible_subcommands() {
            assert!(root.contains(&s.as_str()), "bash offers {root:?}, not {s}");
        }
        assert!(
            !root.contains(&"manpages") && root.contains(&"--no-fentry"),
            "{root:?}"
        );
        assert!(completions("tcsh").is_err());
    }
}

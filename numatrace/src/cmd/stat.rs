//! `numatrace stat`: count for a window, then print per-task and total aggregates.

use anyhow::{Result, anyhow};

use crate::{
    cli::StatArgs,
    report::stat::StatReport,
    session::{CollectOptions, Signals, collect},
};

/// Prints `stat`'s report; returns the exit code (the command's, with a command).
pub async fn run(args: StatArgs, no_fentry: bool) -> Result<i32> {
    // Handlers first: a Ctrl-C while the hooks are still attaching then ends the window as soon
    // as it opens (with a summary) instead of killing numatrace half-way.
    let mut signals = Signals::new()?;
    if let Some(path) = &args.output {
        crate::safe_fs::check_dest(path, args.force)?;
    }
    let mut opts = window_options(&args, no_fentry);
    opts.run_as =
        crate::identity::for_traced_command(args.traced.user.as_deref(), &args.traced.command)?;
    let collected = collect(&opts, &mut signals).await?;
    let (report, exit) = (StatReport::of(&collected), collected.exit);
    let text = if args.json {
        serde_json::to_string_pretty(&report.to_json()?)? + "\n"
    } else {
        report.to_text(args.rows)
    };
    match &args.output {
        Some(path) => {
            if let Err(e) = crate::safe_fs::write_atomic(path, text.as_bytes(), args.force) {
                // The window cannot be repeated: the report goes to stdout rather than nowhere.
                print!("{text}");
                return Err(anyhow!(e).context(format!(
                    "writing the report to {} (printed above instead)",
                    path.display()
                )));
            }
        }
        None => print!("{text}"),
    }
    Ok(exit.unwrap_or(0))
}

/// The window `stat`'s arguments describe.
fn window_options(a: &StatArgs, no_fentry: bool) -> CollectOptions {
    CollectOptions {
        duration: a.duration,
        pid: a.pid,
        command: a.traced.command.clone(),
        quiet_command: false,
        run_as: None,
        comm: a.view.comm.clone(),
        cgroup: a.view.cgroup.clone(),
        max_tasks: a.kernel.max_tasks,
        max_vmas: a.max_vmas,
        ringbuf_size: a.ringbuf_size,
        sample_hz: a.kernel.sample_hz,
        bpf_log: a.bpf_log,
        no_fentry,
        // The text has no scan times, region counts or per-VMA skips: only the JSON pays for
        // them.
        needs: if a.json {
            crate::bpf::needs::STAT_JSON
        } else {
            crate::bpf::needs::STAT
        },
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn needs_of(args: &[&str]) -> crate::bpf::needs::Needs {
        let cli = Cli::try_parse_from(std::iter::once("numatrace").chain(args.iter().copied()));
        let Command::Stat(a) = cli.unwrap().command else {
            panic!("not stat: {args:?}")
        };
        window_options(&a, false).needs
    }

    #[test]
    fn only_the_json_pays_for_scan_times_and_regions() {
        use numatrace_common::{EMIT_VMA_SCAN, READ_REGIONS, READ_VMAS};
        let text = needs_of(&["stat", "-d", "1s"]);
        let json = needs_of(&["stat", "-d", "1s", "--json"]);
        assert_eq!(text.emit_events & EMIT_VMA_SCAN, 0, "{text:?}");
        assert_ne!(json.emit_events & EMIT_VMA_SCAN, 0, "{json:?}");
        assert_eq!(
            text.reads, READ_VMAS,
            "{text:?}: the VMA table, no regions, no skips by reason"
        );
        assert_ne!(json.reads & READ_REGIONS, 0, "{json:?}");
        assert!(!text.emit_spans && !json.emit_spans);
    }
}

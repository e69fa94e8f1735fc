//! `report --html` and `report --diff --html` as a reader opens them: two captures recorded in
//! the 2-node guests (Debian 6.1 and 7.x, `numatrace-workload migrate`), rendered by Debian's
//! headless Chromium into a PNG that is not blank, with Chromium's own network log showing
//! that the page asked for nothing (checked against a control page that does ask).
//!
//! Chromium is installed by the test setup (`cargo xtask test`); without it these tests say
//! so and skip. `NUMATRACE_DOCS_PNG=PATH` keeps the A/B page's render (docs/report.png).

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use common::numatrace_bin;

const BASE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/capture-6.1-migrate.ntrace"
);
const PATCHED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/capture-7.x-migrate.ntrace"
);

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numatrace-html-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// What Chromium made of a page: its PNG, its DOM after scripts ran, and every URL the page
/// made its network stack ask for.
struct Render {
    png: Vec<u8>,
    dom: String,
    urls: Vec<String>,
}

fn render(browser: &str, page: &Path, dir: &Path) -> Render {
    let base_args = |c: &mut Command, tag: &str| {
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,3000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.join(format!("profile-{tag}")).display()
        ))
        .arg(format!(
            "--log-net-log={}",
            dir.join(format!("net-{tag}.json")).display()
        ));
    };
    let png = dir.join("page.png");
    let mut shot = Command::new(browser);
    base_args(&mut shot, "shot");
    let out = shot
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium");
    assert!(out.status.success(), "{}", common::text(&out));
    let mut dump = Command::new(browser);
    base_args(&mut dump, "dom");
    let out = dump
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium");
    assert!(out.status.success(), "{}", common::text(&out));
    let mut urls = vec![];
    for tag in ["shot", "dom"] {
        let log = fs::read_to_string(dir.join(format!("net-{tag}.json"))).unwrap();
        // Chromium may end its log without closing the list when it exits.
        let log: serde_json::Value = serde_json::from_str(&log)
            .or_else(|_| {
                serde_json::from_str(&format!("{}]}}", log.trim_end().trim_end_matches(',')))
            })
            .expect("net log JSON");
        // The page's own requests: those its file:// top frame keys (Chromium's services —
        // time, accounts, updates — ask too, keyed by no page, and are not the page's).
        for e in log["events"].as_array().into_iter().flatten() {
            let p = &e["params"];
            let page = p["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.starts_with("file://"));
            if let Some(u) = p["url"].as_str().filter(|_| page) {
                urls.push(u.to_owned());
            }
        }
    }
    Render {
        png: fs::read(png).unwrap(),
        dom: String::from_utf8(out.stdout).unwrap(),
        urls,
    }
}

/// The share of pixels that are not (nearly) white.
fn ink(png: &[u8]) -> f64 {
    let d = png::Decoder::new(std::io::Cursor::new(png));
    let mut r = d.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let inked = pixels
        .chunks(px)
        .filter(|p| p.iter().take(3).any(|c| *c < 200))
        .count();
    inked as f64 / (pixels.len() / px) as f64
}

fn report_html(args: &[&str], out: &Path) {
    let o = Command::new(numatrace_bin())
        .arg("report")
        .args(args)
        .arg("--html")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::text(&o));
}

/// The network log sees a request when a page makes one: a control page with an image
/// from an address that answers nothing.
fn network_log_sees_requests(browser: &str, dir: &Path) {
    let control = dir.join("control.html");
    fs::write(
        &control,
        "<!DOCTYPE html><html><body><p>control</p><img src=\"http://192.0.2.7/x.png\"></body></html>",
    )
    .unwrap();
    let r = render(browser, &control, &dir.join("c"));
    assert!(
        r.urls.iter().any(|u| u.starts_with("http://192.0.2.7/")),
        "the control page's request is not in the net log: {:?}",
        r.urls
    );
}

fn check_page(browser: &str, page: &Path, dir: &Path, charts: &[&str]) -> Render {
    let r = render(browser, page, dir);
    let remote: Vec<&String> = r
        .urls
        .iter()
        .filter(|u| !u.starts_with("file://") && !u.starts_with("data:"))
        .collect();
    assert!(remote.is_empty(), "the page asked for {remote:?}");
    let ink = ink(&r.png);
    println!(
        "{}: {} bytes of PNG, {:.1} % inked",
        page.display(),
        r.png.len(),
        ink * 100.0
    );
    assert!(ink > 0.01, "a blank page ({:.2} % inked)", ink * 100.0);
    for id in charts {
        let at = r
            .dom
            .find(&format!("<figure id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id} in the rendered DOM"));
        let fig = &r.dom[at..at + r.dom[at..].find("</figure>").unwrap()];
        assert!(
            fig.contains("<svg") || fig.contains("not measured: "),
            "{id} neither drawn nor explained"
        );
    }
    r
}

#[test]
fn a_capture_and_an_ab_render_in_chromium_and_load_nothing() {
    const TEST: &str = "a_capture_and_an_ab_render_in_chromium_and_load_nothing";
    let Some(browser) = chromium() else {
        common::skip(
            TEST,
            "Debian's chromium is not installed (`cargo xtask test` installs it)",
        );
        return;
    };
    let dir = scratch("render");
    network_log_sees_requests(browser, &dir);
    let charts = [
        "scan_share",
        "pte_updates",
        "hint_faults",
        "pages_migrated",
        "tiering",
        "node_matrix",
        "migration_latency",
        "slow_tier_latency",
    ];
    let one = dir.join("one.html");
    report_html(&[BASE], &one);
    let r = check_page(browser, &one, &dir.join("one"), &charts);
    // The hint faults and migrations were drawn (both guests migrated 8192 pages 1 -> 0).
    for id in [
        "hint_faults",
        "pages_migrated",
        "node_matrix",
        "migration_latency",
    ] {
        let at = r.dom.find(&format!("<figure id=\"{id}\"")).unwrap();
        assert!(
            r.dom[at..]
                .split("</figure>")
                .next()
                .unwrap()
                .contains("<svg"),
            "{id}"
        );
    }
    // The task table's script ran: a click sorts (the DOM after load still has the rows).
    assert!(r.dom.contains("<table class=\"sortable\" id=\"tasks\">"));

    let ab = dir.join("ab.html");
    report_html(&["--diff", BASE, PATCHED], &ab);
    let r = check_page(browser, &ab, &dir.join("ab"), &charts);
    assert!(r.dom.contains("id=\"mmtests-diff\""));
    let legend: Vec<&str> = r
        .dom
        .split("<text")
        .skip(1)
        .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim()))
        .collect();
    assert!(
        legend.contains(&"A: remote") && legend.contains(&"B: remote"),
        "{legend:?}"
    );
    if let Ok(keep) = std::env::var("NUMATRACE_DOCS_PNG") {
        fs::write(&keep, &r.png).unwrap();
    }
    // An existing page is not overwritten without --force.
    let o = Command::new(numatrace_bin())
        .args(["report", BASE, "--html"])
        .arg(&one)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", common::text(&o));
    let _ = fs::remove_dir_all(&dir);
}

//! `deploy/`: the files a fleet deploys numatrace with say what `serve` does (its port, its
//! metrics, the access it needs). No root needed.

mod common;

use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

/// deploy/'s files, built in: the test binaries also run in the QEMU guests, without the tree.
fn deploy(rel: &str) -> String {
    match rel {
        "grafana/numatrace-dashboard.json" => {
            include_str!("../../deploy/grafana/numatrace-dashboard.json")
        }
        "prometheus/prometheus.yml" => include_str!("../../deploy/prometheus/prometheus.yml"),
        "prometheus/kubernetes-scrape.yml" => {
            include_str!("../../deploy/prometheus/kubernetes-scrape.yml")
        }
        "kubernetes/daemonset.yaml" => include_str!("../../deploy/kubernetes/daemonset.yaml"),
        "systemd/numatrace.service" => include_str!("../../deploy/systemd/numatrace.service"),
        "systemd/numatrace.socket" => include_str!("../../deploy/systemd/numatrace.socket"),
        "Dockerfile" => include_str!("../../deploy/Dockerfile"),
        _ => panic!("{rel} is not built in"),
    }
    .to_owned()
}

const PORT: &str = "19472";

#[test]
fn dashboard_queries_only_families_serve_exports() {
    let dash: serde_json::Value =
        serde_json::from_str(&deploy("grafana/numatrace-dashboard.json")).expect("JSON");
    assert_eq!(dash["uid"], "numatrace");
    let text = dash.to_string();
    let catalogue = String::from_utf8(common::numatrace(&["serve", "--metrics"]).stdout).unwrap();
    let mut checked = 0;
    for (i, _) in text.match_indices("numatrace_") {
        let b = text.as_bytes()[i - 1];
        if b.is_ascii_alphanumeric() || b == b'_' {
            continue;
        }
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let family = name.strip_suffix("_bucket").unwrap_or(&name).to_owned();
        // Scoped copies of the workload families are listed once, unscoped.
        let unscoped = ["numatrace_cgroup_", "numatrace_task_", "numatrace_self_"]
            .iter()
            .find_map(|p| family.strip_prefix(p))
            .map(|rest| format!("numatrace_{rest}"))
            .unwrap_or_else(|| family.clone());
        let listed = catalogue.contains(&format!("  {unscoped}{{"))
            || catalogue.contains(&format!("  {unscoped} ("))
            || (unscoped.starts_with("numatrace_vmstat_") && unscoped.ends_with("_total"));
        assert!(
            listed,
            "the dashboard queries {name}, not in `serve --metrics`"
        );
        checked += 1;
    }
    assert!(checked > 20, "only {checked} metric references");
    // Panels the issue asks for.
    for title in [
        "PTE-scan share of run time, per cgroup",
        "Hint-fault locality",
        "Migration latency",
        "Node → node page flows",
        "Skipped VMAs by reason",
        "numatrace against /proc/vmstat",
        "numatrace's own cost",
    ] {
        assert!(text.contains(title), "panel {title}");
    }
}

#[test]
fn prometheus_config_is_valid() {
    const TEST: &str = "prometheus_config_is_valid";
    let path =
        std::env::temp_dir().join(format!("numatrace-prometheus-{}.yml", std::process::id()));
    std::fs::write(&path, deploy("prometheus/prometheus.yml")).unwrap();
    match Command::new("promtool")
        .args(["check", "config"])
        .arg(&path)
        .output()
    {
        Err(e) => common::skip(
            TEST,
            format!("promtool not runnable ({e}); `cargo xtask test` installs it as root"),
        ),
        Ok(out) => {
            let _ = std::fs::remove_file(&path);
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        }
    }
    assert!(deploy("prometheus/prometheus.yml").contains(&format!(":{PORT}\"")));
    let k8s = YamlLoader::load_from_str(&deploy("prometheus/kubernetes-scrape.yml")).unwrap();
    let job = &k8s[0]["scrape_configs"][0];
    assert_eq!(
        job["kubernetes_sd_configs"][0]["role"].as_str(),
        Some("pod")
    );
}

#[test]
fn daemonset_has_what_serve_needs() {
    let docs = YamlLoader::load_from_str(&deploy("kubernetes/daemonset.yaml")).unwrap();
    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(args[0], "serve");
    assert!(
        args.contains(&format!("0.0.0.0:{PORT}").as_str()),
        "{args:?}"
    );
    assert_eq!(c["ports"][0]["containerPort"].as_i64(), Some(19472));
    let caps: Vec<&str> = c["securityContext"]["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    for cap in ["BPF", "PERFMON"] {
        assert!(caps.contains(&cap), "{caps:?}");
    }
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/metrics")
    );
    assert!(!c["resources"]["limits"]["memory"].is_badvalue());
    let mounts = c["volumeMounts"].as_vec().unwrap();
    let paths: Vec<&str> = mounts
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for p in [
        "/sys/kernel/btf",
        "/sys/kernel/tracing",
        "/sys/kernel/debug",
        "/sys/fs/cgroup",
    ] {
        assert!(paths.contains(&p), "{p} not mounted: {paths:?}");
    }
    assert!(
        mounts.iter().all(|m| m["readOnly"].as_bool() == Some(true)),
        "every host mount is read-only"
    );
}

#[test]
fn systemd_units_serve_the_default_port() {
    let service = deploy("systemd/numatrace.service");
    assert!(service.contains(&format!("numatrace serve --listen 127.0.0.1:{PORT}")));
    assert!(deploy("systemd/numatrace.socket").contains(&format!("ListenStream=0.0.0.0:{PORT}")));
    assert!(deploy("Dockerfile").contains(&format!("0.0.0.0:{PORT}")));
    // The binary's default is the same port.
    let help = String::from_utf8(common::numatrace(&["serve", "--help"]).stdout).unwrap();
    assert!(help.contains(&format!("127.0.0.1:{PORT}")), "{help}");
}

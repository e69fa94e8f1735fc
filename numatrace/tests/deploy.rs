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
        "web-config.yml" => include_str!("../../deploy/web-config.yml"),
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
        c["livenessProbe"]["tcpSocket"]["port"].as_str(),
        Some("metrics")
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
    assert!(deploy("Dockerfile").contains(&format!("0.0.0.0:{PORT}")));
    // The binary's default is the same port.
    let help = String::from_utf8(common::numatrace(&["serve", "--help"]).stdout).unwrap();
    assert!(help.contains(&format!("127.0.0.1:{PORT}")), "{help}");
}

/// A unit file's active (uncommented) `Key=value` settings.
fn settings(unit: &str) -> Vec<(&str, &str)> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

fn setting<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    settings(unit)
        .into_iter()
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .collect()
}

/// The socket unit listens on loopback; the service has only the capabilities numatrace uses
/// and a sandbox that still lets it mount tracefs and write /run/numatrace; `systemd-analyze
/// verify` accepts both.
#[test]
fn systemd_units_listen_on_loopback_and_are_sandboxed() {
    let socket = deploy("systemd/numatrace.socket");
    let listen = setting(&socket, "ListenStream");
    assert_eq!(listen, [format!("127.0.0.1:{PORT}").as_str()], "{socket}");
    let service = deploy("systemd/numatrace.service");
    for unit in [&socket, &service] {
        assert_eq!(setting(unit, "IPAddressAllow"), ["localhost"]);
        assert_eq!(setting(unit, "IPAddressDeny"), ["any"]);
    }
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("KillSignal", "SIGTERM"),
    ] {
        assert_eq!(setting(&service, key), [value], "{key}");
    }
    // systemd deletes a RuntimeDirectory when the service stops: /run/numatrace holds check's
    // tunables record, which must outlive it.
    assert!(setting(&service, "RuntimeDirectory").is_empty());
    for key in ["LimitNOFILE", "MemoryMax"] {
        assert_eq!(setting(&service, key).len(), 1, "{key}");
    }
    for key in ["CapabilityBoundingSet", "AmbientCapabilities"] {
        let caps: Vec<&str> = setting(&service, key)[0].split_whitespace().collect();
        assert_eq!(
            caps,
            ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "CAP_SYSLOG"],
            "{key}"
        );
    }
    // /sys must stay writable for the tracefs/debugfs mounts, and CAP_SYSLOG must stay.
    for key in ["ProtectKernelTunables", "ProtectKernelLogs"] {
        assert!(setting(&service, key).is_empty(), "{key} breaks serve");
    }
    systemd_analyze_verify();
}

/// `systemd-analyze verify` accepts both units (with ExecStart naming the binary under test).
fn systemd_analyze_verify() {
    const TEST: &str = "systemd_units_listen_on_loopback_and_are_sandboxed";
    let dir = std::env::temp_dir().join(format!("numatrace-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = common::numatrace_bin();
    std::fs::write(
        dir.join("numatrace.service"),
        deploy("systemd/numatrace.service").replace("/usr/local/bin/numatrace", &bin),
    )
    .unwrap();
    std::fs::write(
        dir.join("numatrace.socket"),
        deploy("systemd/numatrace.socket"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("numatrace.service"))
        .arg(dir.join("numatrace.socket"))
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => common::skip(
            TEST,
            format!("(its systemd-analyze verify part) systemd-analyze not runnable ({e})"),
        ),
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{text}");
            assert!(
                !text.contains("numatrace."),
                "systemd-analyze warns about the units: {text}"
            );
        }
    }
}

/// deploy/web-config.yml passes `promtool check web-config` (with a certificate and key
/// beside it, as its relative paths expect), and its example hash is the documented password's.
#[test]
fn example_web_config_passes_promtool() {
    const TEST: &str = "example_web_config_passes_promtool";
    let text = deploy("web-config.yml");
    let doc = &YamlLoader::load_from_str(&text).unwrap()[0];
    let tls = &doc["tls_server_config"];
    assert_eq!(tls["cert_file"].as_str(), Some("tls.crt"));
    assert_eq!(tls["key_file"].as_str(), Some("tls.key"));
    let hash = doc["basic_auth_users"]["prometheus"].as_str().unwrap();
    assert!(text.contains("\"numatrace-example\""));
    assert!(bcrypt::verify("numatrace-example", hash).unwrap());
    let dir = std::env::temp_dir().join(format!("numatrace-webcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("tls.crt"), c.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), c.signing_key.serialize_pem()).unwrap();
    std::fs::write(dir.join("web-config.yml"), &text).unwrap();
    let out = Command::new("promtool")
        .args(["check", "web-config"])
        .arg(dir.join("web-config.yml"))
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => common::skip(
            TEST,
            format!("promtool not runnable ({e}); `cargo xtask test` installs it as root"),
        ),
        Ok(out) => assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The DaemonSet is reachable from the monitoring namespace only, serves TLS and basic auth
/// from a Secret, and the scrape jobs speak https with basic auth.
#[test]
fn kubernetes_serves_tls_to_the_monitoring_namespace_only() {
    let docs = YamlLoader::load_from_str(&deploy("kubernetes/daemonset.yaml")).unwrap();
    let policy = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("NetworkPolicy"))
        .expect("a NetworkPolicy");
    assert_eq!(policy["metadata"]["namespace"].as_str(), Some("numatrace"));
    let spec = &policy["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
        Some("numatrace")
    );
    let rules = spec["ingress"].as_vec().expect("ingress rules");
    assert_eq!(rules.len(), 1, "one ingress rule");
    let from = rules[0]["from"].as_vec().unwrap();
    assert_eq!(from.len(), 1);
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str(),
        Some("monitoring")
    );
    assert_eq!(rules[0]["ports"][0]["port"].as_i64(), Some(19472));

    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    let i = args
        .iter()
        .position(|a| *a == "--web.config.file")
        .expect("--web.config.file");
    let config = args[i + 1];
    let volume = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| !v["secret"]["secretName"].is_badvalue())
        .expect("a Secret volume");
    let mount = c["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the Secret mounted");
    let dir = mount["mountPath"].as_str().unwrap();
    assert_eq!(config, format!("{dir}/web-config.yml"));
    assert_eq!(mount["readOnly"].as_bool(), Some(true));

    for (file, job) in [
        ("prometheus/kubernetes-scrape.yml", "numatrace-kubernetes"),
        ("prometheus/prometheus.yml", "numatrace"),
    ] {
        let docs = YamlLoader::load_from_str(&deploy(file)).unwrap();
        let j = docs[0]["scrape_configs"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|j| j["job_name"].as_str() == Some(job))
            .unwrap();
        assert_eq!(j["scheme"].as_str(), Some("https"), "{file}");
        assert_eq!(
            j["basic_auth"]["username"].as_str(),
            Some("prometheus"),
            "{file}"
        );
        assert!(!j["tls_config"]["ca_file"].is_badvalue(), "{file}");
    }
}

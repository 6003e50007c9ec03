//! The benchmark end to end, small: rounds alternating a limit, a feedwire client and a peer
//! over two scenarios, latency at both rates and memory, each figure where the JSON and the
//! markdown report put it, and consistent with the others (a median within its min–max, the
//! percentiles in order, every round counted); then over TLS. Figures are not judged: the
//! machine is shared and this is the unoptimised build.

use std::process::Command;

use serde_json::Value;

/// Throughput clients: measured in every table.
const CLIENTS: [&str; 3] = ["limit", "feedwire-blocking", "tokio-websockets"];

/// Runs the benchmark binary with `args` and `--json`/`--markdown` (in a directory named
/// after `run`); its JSON rows, its markdown report and its progress (standard error).
fn bench(run: &str, args: &[&str]) -> (Vec<Value>, String, String) {
    let dir =
        std::env::temp_dir().join(format!("feedwire-bench-run-{}-{}", std::process::id(), run));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (json_path, markdown_path) = (dir.join("out.json"), dir.join("out.md"));
    let out = Command::new(env!("CARGO_BIN_EXE_feedwire-bench"))
        .args(args)
        .arg("--json")
        .arg(&json_path)
        .arg("--markdown")
        .arg(&markdown_path)
        .output()
        .expect("the benchmark runs");
    let text = std::fs::read_to_string(&json_path).unwrap_or_default();
    let markdown = std::fs::read_to_string(&markdown_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let progress = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{progress}");
    let rows = serde_json::from_str(&text).expect("a JSON array");
    (rows, markdown, progress)
}

/// The row of `scenario` × `client`.
fn find<'a>(rows: &'a [Value], scenario: &str, client: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["scenario"] == scenario && r["client"] == client)
        .unwrap_or_else(|| panic!("no row {scenario} × {client}: {rows:?}"))
}

fn number(r: &Value, key: &str) -> f64 {
    r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"))
}

/// A latency row: percentiles in order, a CPU figure.
fn assert_latency_row(r: &Value) {
    let p = |key: &str| r[key].as_u64().unwrap_or_else(|| panic!("{key}: {r}"));
    assert!(0 < p("p50_us"), "{r}");
    assert!(
        p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"),
        "{r}"
    );
    let cpu = number(r, "cpu_us_per_msg");
    assert!(cpu.is_finite() && cpu > 0.0, "{r}");
}

#[test]
fn a_short_run_reports_every_scenario_client_rate_and_memory() {
    let mut args = vec!["--quick", "--runs", "2", "--latency-runs", "1"];
    args.extend([
        "--scenario",
        "small_aggtrade",
        "--scenario",
        "huge_ticker_arr",
    ]);
    // A latency-only client besides: it spins, so it has no throughput row.
    for client in CLIENTS.iter().chain(&["limit-spin"]) {
        args.extend(["--client", client]);
    }
    let (rows, markdown, progress) = bench("plain", &args);
    for scenario in ["small_aggtrade", "huge_ticker_arr"] {
        for client in CLIENTS {
            let r = find(&rows, scenario, client);
            assert_eq!(r["runs"], 2, "{r}");
            let (cpu, rate) = (number(r, "cpu_us_per_msg"), number(r, "msgs_per_s"));
            let spread = |key: &str| {
                let pair = r["spread"][key].as_array().expect("min and max");
                (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap())
            };
            let ((cpu_lo, cpu_hi), (rate_lo, rate_hi)) =
                (spread("cpu_us_per_msg"), spread("msgs_per_s"));
            assert!(cpu_lo <= cpu && cpu <= cpu_hi && cpu_lo > 0.0, "{r}");
            assert!(rate_lo <= rate && rate <= rate_hi && rate_lo > 0.0, "{r}");
            let peer = client == "tokio-websockets";
            assert_eq!(r.get("rounds_ahead").is_none(), peer, "{r}");
            assert_eq!(r.get("paired_vs_best_peer").is_none(), peer, "{r}");
            if let Some(ahead) = r.get("rounds_ahead") {
                assert_eq!(ahead[1], 2, "both rounds compared: {r}");
            }
            assert_eq!(
                r.get("read_buffer_bytes").is_some(),
                client.starts_with("feedwire"),
                "{r}"
            );
            let peak = r.get("peak_rss_bytes").and_then(Value::as_u64);
            match scenario {
                // A 454 KB message is held whole at least once.
                "huge_ticker_arr" => assert!(peak.is_some_and(|b| b > 454_000), "{r}"),
                _ => assert_eq!(peak, None, "{r}"),
            }
        }
    }
    for rate in [10_000, 100_000] {
        for client in CLIENTS.iter().chain(&["limit-spin"]) {
            let r = find(&rows, &format!("small_aggtrade@{rate}/s"), client);
            assert_eq!(r["runs"], 1, "{r}");
            assert_latency_row(r);
        }
    }
    assert_eq!(rows.len(), 2 * 3 + 2 * 4, "{rows:?}");
    // --quick: a fifth of each scenario's messages.
    for heading in [
        "\n### small_aggtrade (0.19 KB mean payload, 60000 msgs per run, median of 2 rounds)",
        "\n### huge_ticker_arr (469.03 KB mean payload, 120 msgs per run, median of 2 rounds)",
        "\n### One-way latency",
        "\n### Memory while receiving huge_ticker_arr",
    ] {
        assert!(markdown.contains(heading), "{heading}: {markdown}");
    }
    assert!(
        markdown.contains("Command: `cargo run --release -p feedwire-bench -- --quick --runs 2"),
        "{markdown}"
    );
    // The memory table: the throughput clients, each run in a process of its own as itself
    // (only feedwire reports its read buffer).
    let memory = &markdown[markdown.find("\n### Memory").unwrap()..];
    let memory_row = |client: &str| {
        memory
            .lines()
            .find(|l| l.starts_with(&format!("| {client} |")))
            .unwrap_or_else(|| panic!("{client}: {memory}"))
    };
    assert!(
        memory_row("feedwire-blocking").ends_with(" B |"),
        "{memory}"
    );
    assert!(memory_row("limit").ends_with("| — |"), "{memory}");
    assert!(
        memory_row("tokio-websockets").ends_with("| — |"),
        "{memory}"
    );
    assert!(!memory.contains("| limit-spin |"), "{memory}");
    for line in [
        "\nsmall_aggtrade: 60000 messages a run from ws://127.0.0.1:",
        "\nlatency at 10000/s: 10000 messages a run from ws://127.0.0.1:",
        "\nlatency at 100000/s: 100000 messages a run from ws://127.0.0.1:",
    ] {
        assert!(progress.contains(line), "{line}: {progress}");
    }
}

#[test]
fn a_short_run_over_tls() {
    let (rows, markdown, progress) = bench(
        "tls",
        &[
            "--quick",
            "--runs",
            "1",
            "--tls",
            "--scenario",
            "medium_kline",
            "--scenario",
            "betfair_mcm",
            "--client",
            "limit",
            "--client",
            "feedwire-mio",
        ],
    );
    for scenario in ["medium_kline", "betfair_mcm"] {
        for client in ["limit", "feedwire-mio"] {
            assert_eq!(find(&rows, scenario, client)["runs"], 1);
        }
    }
    for rate in [10_000, 100_000] {
        assert_latency_row(find(&rows, &format!("small_aggtrade@{rate}/s"), "limit"));
    }
    assert!(markdown.contains("Over TLS (`--tls`)"), "{markdown}");
    // Every server over TLS, WebSocket and lines.
    for line in [
        "\nmedium_kline: 30000 messages a run from wss://127.0.0.1:",
        "\nbetfair_mcm: 200000 messages a run from tls://127.0.0.1:",
        "\nlatency at 10000/s: 10000 messages a run from wss://127.0.0.1:",
        "\nlatency at 100000/s: 100000 messages a run from wss://127.0.0.1:",
        // Memory is measured over plain TCP: the read buffers alone, not rustls's too.
        "\nmemory: 120 messages a run from ws://127.0.0.1:",
    ] {
        assert!(progress.contains(line), "{line}: {progress}");
    }
}

//! The benchmark end to end, small: rounds alternating a limit, a feedwire client and a peer
//! over two scenarios, latency at both rates and memory, each figure where the JSON and the
//! markdown report put it, and consistent with the others (a median within its min–max, the
//! percentiles in order, every round counted). Figures are not judged: the machine is
//! shared and this is the unoptimised build.

use std::process::Command;

use serde_json::Value;

const CLIENTS: [&str; 3] = ["limit", "feedwire-blocking", "tokio-websockets"];

#[test]
fn a_short_run_reports_every_scenario_client_rate_and_memory() {
    let dir = std::env::temp_dir().join(format!("feedwire-bench-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (json_path, markdown_path) = (dir.join("out.json"), dir.join("out.md"));
    let mut bench = Command::new(env!("CARGO_BIN_EXE_feedwire-bench"));
    bench.args([
        "--quick",
        "--runs",
        "2",
        "--latency-runs",
        "1",
        "--scenario",
        "small_aggtrade",
        "--scenario",
        "huge_ticker_arr",
    ]);
    for client in CLIENTS {
        bench.args(["--client", client]);
    }
    let out = bench
        .arg("--json")
        .arg(&json_path)
        .arg("--markdown")
        .arg(&markdown_path)
        .output()
        .expect("the benchmark runs");
    let text = std::fs::read_to_string(&json_path).unwrap_or_default();
    let markdown = std::fs::read_to_string(&markdown_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_str(&text).expect("a JSON array");
    let find = |scenario: &str, client: &str| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["client"] == client)
            .unwrap_or_else(|| panic!("no row {scenario} × {client}: {text}"))
    };
    let number = |r: &Value, key: &str| r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"));
    for scenario in ["small_aggtrade", "huge_ticker_arr"] {
        for client in CLIENTS {
            let r = find(scenario, client);
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
        for client in CLIENTS {
            let r = find(&format!("small_aggtrade@{rate}/s"), client);
            let p = |key: &str| r[key].as_u64().unwrap_or_else(|| panic!("{key}: {r}"));
            assert!(0 < p("p50_us"), "{r}");
            assert!(
                p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"),
                "{r}"
            );
            assert_eq!(r["runs"], 1, "{r}");
        }
    }
    assert_eq!(rows.len(), 2 * 3 + 2 * 3, "{text}");
    for heading in [
        "\n### small_aggtrade (",
        "\n### huge_ticker_arr (",
        "\n### One-way latency",
        "\n### Memory while receiving huge_ticker_arr",
    ] {
        assert!(markdown.contains(heading), "{heading}: {markdown}");
    }
    assert!(
        markdown.contains("Command: `cargo run --release -p feedwire-bench -- --quick --runs 2"),
        "{markdown}"
    );
}

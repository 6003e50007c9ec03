//! `--instructions` end to end: the benchmark binary counts, under valgrind's callgrind, the
//! instructions per message of two clients, in a firehose and paced, and reports them in
//! its JSON — over plain TCP and over TLS (the child that is counted gets the server's CA).

use std::process::Command;

#[test]
fn counts_instructions_per_message_under_callgrind() {
    counts_instructions(&[]);
}

#[test]
fn counts_instructions_per_message_over_tls() {
    counts_instructions(&["--tls"]);
}

fn counts_instructions(extra: &[&str]) {
    let dir = std::env::temp_dir().join(format!(
        "feedwire-bench-instr-{}-{}",
        std::process::id(),
        extra.len()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_feedwire-bench"))
        .args([
            "--quick",
            "--runs",
            "1",
            "--no-latency",
            "--no-memory",
            "--instructions",
            "--scenario",
            "small_aggtrade",
            "--client",
            "limit",
            "--client",
            "feedwire-blocking",
            "--json",
        ])
        .arg(&json)
        .args(extra)
        .output()
        .expect("the benchmark runs");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let count = |client: &str, key: &str| {
        rows.as_array()
            .expect("an array")
            .iter()
            .find(|r| r["client"] == client)
            .and_then(|r| r[key].as_f64())
            .unwrap_or_else(|| {
                panic!(
                    "no count for {client}: {text}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    // The limit skips headers; feedwire also validates UTF-8 and classifies each message,
    // in a firehose and paced (a read per message). (Tests run the unoptimised build, so
    // the figures say nothing of speed.)
    for key in ["instructions_per_msg", "paced_instructions_per_msg"] {
        let (limit, feedwire) = (count("limit", key), count("feedwire-blocking", key));
        assert!(limit > 0.0, "{key}: limit {limit}");
        assert!(
            feedwire > limit,
            "{key}: feedwire {feedwire}, limit {limit}"
        );
    }
    // A read costs something besides its message.
    assert!(
        count("feedwire-blocking", "paced_instructions_per_msg")
            > count("feedwire-blocking", "instructions_per_msg")
    );
}

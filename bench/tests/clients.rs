//! Every benchmark client receives exactly what the replay server sends, WebSocket and lines,
//! plain and TLS, throughput and latency runs (the server in-process here).

use feedwire_bench::{Extra, Recorder, Target, CLIENTS, LIMIT_READ_SIZE};
use feedwire_core::tls_config_with_roots;
use feedwire_replay::{Fault, Mode, ReplayConfig, ReplayServer, Scenario};

fn server(scenario: Scenario, count: usize, mode: Mode, tls: bool) -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(count),
        mode,
        hold_open: true,
        tls,
        ..ReplayConfig::new(scenario)
    })
    .expect("replay server")
}

/// Where clients connect: the server's URL, trusting its test CA when it speaks TLS.
fn target(srv: &ReplayServer) -> Target {
    let target = Target::from_url(&srv.url());
    match srv.pki() {
        Some(pki) => target.with_tls(tls_config_with_roots(pki.root_store())),
        None => target,
    }
}

#[test]
fn every_client_counts_every_websocket_message() {
    every_client_counts_every_websocket_message_over(false);
}

#[test]
fn every_client_counts_every_websocket_message_over_tls() {
    every_client_counts_every_websocket_message_over(true);
}

#[test]
fn line_clients_count_every_line() {
    line_clients_count_every_line_over(false);
}

#[test]
fn line_clients_count_every_line_over_tls() {
    line_clients_count_every_line_over(true);
}

fn every_client_counts_every_websocket_message_over(tls: bool) {
    let srv = server(Scenario::MultiplexMix, 3000, Mode::Firehose, tls);
    let expected: u64 = (0..3000).map(|i| srv.payload(i).len() as u64).sum();
    let target = target(&srv);
    for client in CLIENTS.iter().filter(|c| c.websocket) {
        let (rec, extra) = (client.run)(&target, Recorder::new(3000, false))
            .unwrap_or_else(|e| panic!("{}: {e}", client.name));
        let w = rec
            .window()
            .unwrap_or_else(|| panic!("{}: incomplete", client.name));
        assert_eq!(w.messages, 2999, "{}", client.name);
        assert_eq!(w.bytes, expected, "{}: payload bytes", client.name);
        assert_eq!(
            extra.read_buffer_bytes.is_some(),
            client.name.starts_with("feedwire"),
            "{}",
            client.name
        );
        assert_reads_counted(client.name, extra, expected);
    }
}

/// The feedwire clients and the limit count their reads: no read returns more than 256 KiB,
/// so there are at least as many as the payload bytes take, and no more full ones than reads.
fn assert_reads_counted(client: &str, extra: Extra, payload_bytes: u64) {
    let counts = client.starts_with("feedwire") || client.starts_with("limit");
    assert_eq!(extra.reads.is_some(), counts, "{client}");
    if let Some(reads) = extra.reads {
        assert!(
            reads.all >= payload_bytes.div_ceil(LIMIT_READ_SIZE as u64),
            "{client}: {reads:?} for {payload_bytes} bytes"
        );
        assert!(reads.full <= reads.all, "{client}: {reads:?}");
    }
}

fn line_clients_count_every_line_over(tls: bool) {
    let srv = server(Scenario::BetfairMcm, 2000, Mode::Firehose, tls);
    let expected: u64 = (0..2000).map(|i| srv.payload(i).len() as u64).sum();
    let target = target(&srv);
    assert!(target.lines);
    for client in CLIENTS.iter().filter(|c| c.lines) {
        let (rec, extra) = (client.run)(&target, Recorder::new(2000, false))
            .unwrap_or_else(|e| panic!("{}: {e}", client.name));
        let w = rec
            .window()
            .unwrap_or_else(|| panic!("{}: incomplete", client.name));
        assert_eq!(w.bytes, expected, "{}: payload bytes", client.name);
        assert_reads_counted(client.name, extra, expected);
    }
}

#[test]
fn latency_runs_read_the_send_stamps() {
    let srv = server(
        Scenario::SmallAggTrade,
        300,
        Mode::Paced { per_sec: 3000 },
        false,
    );
    let target = Target::from_url(&srv.url());
    for client in CLIENTS.iter().filter(|c| c.websocket) {
        let (rec, _) = (client.run)(&target, Recorder::new(300, true))
            .unwrap_or_else(|e| panic!("{}: {e}", client.name));
        let h = rec.latency().expect("histogram");
        assert_eq!(h.len(), 300, "{}: every message stamped", client.name);
    }
}

/// A feedwire client whose stream ends for good before its run is complete says so when
/// the end comes, rather than waiting out the stall (a minute): an upgrade refused with 403,
/// a Betfair login refused for its session — failures no reconnect mends.
#[test]
fn feedwire_clients_report_a_stream_that_ends_for_good() {
    let refused = ReplayServer::start(ReplayConfig {
        fault: Some(Fault::RefuseUpgrade(403)),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server");
    let betfair = server(Scenario::BetfairMcm, 50, Mode::Firehose, false);
    betfair.require_betfair_session("another session");
    for srv in [refused, betfair] {
        let target = target(&srv);
        let ours = CLIENTS.iter().filter(|c| {
            c.name.starts_with("feedwire") && if target.lines { c.lines } else { c.websocket }
        });
        for client in ours {
            let e = (client.run)(&target, Recorder::new(100, false))
                .map(|_| ())
                .expect_err(client.name);
            // Not "stalled": the end was seen when it came.
            assert!(
                e.contains("ended early") || e.contains("disconnected"),
                "{}: {e}",
                client.name
            );
        }
    }
}

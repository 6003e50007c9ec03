//! Comparing clients at one pace. On loopback the replay server, not a fast client, sets the
//! pace: it is on a CPU all of a round's window, and each time the client catches up and
//! sleeps, waking it costs the server CPU (28-68 µs on the tables' machines, whose idle
//! vCPUs halt), which slows it, so the client catches up and sleeps again. A round settles
//! fast, the client behind its feed and seldom waiting, or slow, woken for each piece; the
//! client's CPU per message follows, and which state its rounds land in differs by client.
//! A median then compares clients at different paces. Here each client's CPU per message is
//! read off a line through its rounds against their wall time per message, at one pace for
//! every client of the scenario.

use crate::runner::{median, Row};

/// Share of a round's window the replay server was on a CPU from which the server set the
/// pace. Where client and server had a CPU each, the server was busy 96-102% of the windows
/// of every client reading a small message in under 0.06 µs (10th to 90th percentile, every
/// WebSocket scenario but 454 KB, at 91-101%; pinned and not; the tables at `88ba54b`); the
/// slower peers set the pace themselves on 0.2 and 0.3 KB (23-90%), and where client and
/// server took turns on one CPU it was 23-54%, sometimes with too few preemptions to count as
/// shared (a server that runs whenever the client sleeps does not preempt it).
pub const SERVER_PACED_BUSY: f64 = 0.9;

/// Fewest rounds a line is drawn through.
pub const FIT_ROUNDS: usize = 5;

/// The rounds a line is drawn through: completed, the client's CPU its own, the server
/// setting the pace (busy at least [`SERVER_PACED_BUSY`] of the window, where measured).
fn paced_rounds(row: &Row) -> impl Iterator<Item = usize> + '_ {
    (0..row.cpu_by_round.len()).filter(|&i| {
        row.cpu_by_round[i].is_some()
            && !row.shared_by_round.get(i).copied().unwrap_or(false)
            && row
                .server_busy_by_round
                .get(i)
                .copied()
                .flatten()
                .is_none_or(|b| b >= SERVER_PACED_BUSY)
    })
}

/// A Theil–Sen line through `points`: the median of the slopes between every two points with
/// different x, and the median of what each point leaves for the intercept. One point far
/// off the line (a round that shared its CPU uncaught: a fast pace, much CPU) moves it far
/// less than a least-squares line. `(intercept, slope)`; `None` when every x is the same.
fn theil_sen(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut slopes = Vec::new();
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if a.0 != b.0 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    let slope = median(slopes);
    Some((
        median(points.iter().map(|p| p.1 - slope * p.0).collect()),
        slope,
    ))
}

/// Pearson's correlation of the points' two coordinates; 0 when either is constant.
fn correlation(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

/// A round's wall time per message, µs.
fn wall_of(msgs_per_s: f64) -> f64 {
    1e6 / msgs_per_s.max(1e-9)
}

/// The client's CPU per message at one pace (see [`Row::cpu_at_pace`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AtPace {
    /// CPU per message, µs.
    pub us_per_msg: f64,
    /// Whether the pace lies within the client's rounds (else the line is carried past its
    /// fastest or slowest round).
    pub within: bool,
}

/// The pace a scenario's clients are compared at, as wall time per message (µs): the median
/// over the server-paced rounds of every client that has [`FIT_ROUNDS`] of them. `None` when
/// none has.
pub fn common_pace(rows: &[&Row]) -> Option<f64> {
    let walls: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let walls: Vec<f64> = paced_rounds(r)
                .filter_map(|i| r.msgs_per_s_by_round.get(i).copied().flatten())
                .map(wall_of)
                .collect();
            (walls.len() >= FIT_ROUNDS).then_some(walls)
        })
        .flatten()
        .collect();
    (!walls.is_empty()).then(|| median(walls))
}

impl Row {
    /// The client's CPU per message at a pace of `wall_us_per_msg` µs of wall time per
    /// message: a Theil–Sen line through its server-paced rounds' CPU per message against
    /// their wall time per message, read there. Close to a line: a slower round holds more
    /// waits, each costing the client the same few µs (full tables at `3b23647`, 9 KB pinned:
    /// the tokio adapter 1.38 µs a message at 278k msgs/s, 1.17 at 381k, 1.05 at 591k, 0.91
    /// at 917k). `None` from fewer than [`FIT_ROUNDS`] rounds or when all ran at one pace.
    pub fn cpu_at_pace(&self, wall_us_per_msg: f64) -> Option<AtPace> {
        let points: Vec<(f64, f64)> = paced_rounds(self)
            .filter_map(|i| {
                let mps = self.msgs_per_s_by_round.get(i).copied().flatten()?;
                Some((wall_of(mps), self.cpu_by_round[i]?))
            })
            .collect();
        if points.len() < FIT_ROUNDS {
            return None;
        }
        let (intercept, slope) = theil_sen(&points)?;
        let (lo, hi) = points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
                (lo.min(p.0), hi.max(p.0))
            });
        Some(AtPace {
            us_per_msg: intercept + slope * wall_us_per_msg,
            within: (lo..=hi).contains(&wall_us_per_msg),
        })
    }

    /// The client's CPU per run against the times it waited, over its server-paced rounds: a
    /// Theil–Sen line, `None` from fewer than [`FIT_ROUNDS`] rounds or when every round
    /// waited as often. See [`WakeFit`].
    pub fn wake_fit(&self) -> Option<WakeFit> {
        let points: Vec<(f64, f64)> = paced_rounds(self)
            .filter_map(|i| {
                let waits = self.waits_by_round.get(i).copied().flatten()?;
                Some((waits as f64, self.cpu_by_round[i]? * self.messages as f64))
            })
            .collect();
        if points.len() < FIT_ROUNDS {
            return None;
        }
        let (at_no_waits, us_per_wait) = theil_sen(&points)?;
        Some(WakeFit {
            us_per_msg_at_no_waits: at_no_waits / self.messages.max(1) as f64,
            us_per_wait,
            r: correlation(&points),
        })
    }
}

/// What a client's CPU per run does with the number of times it waited for data: the line
/// `cpu = us_per_msg_at_no_waits × messages + us_per_wait × waits`. The intercept is the
/// client's CPU per message with no waits, as when it is always behind its feed; each wait
/// adds `us_per_wait` (the kernel's sleep and wake-up, and the shorter reads of a caught-up
/// client).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WakeFit {
    /// CPU per message at no waits, µs.
    pub us_per_msg_at_no_waits: f64,
    /// CPU each wait adds, µs.
    pub us_per_wait: f64,
    /// How closely the rounds follow a line: the correlation of CPU per run with waits
    /// (Pearson's r, 1 = exactly). Low where waits hardly move the CPU or the rounds'
    /// counts of them cluster; the intercept is then an extrapolation of noise. Full tables
    /// at `3b23647` (unpinned, 41 rounds): r = 0.68-0.93 for the fast clients on 0.3 KB but
    /// the blocking core (0.37), 0.5-0.95 on 1 KB and 9 KB — where no round came near 0
    /// waits (300-1,600), so the intercept is far from any round — and -0.05 to 0.30 on
    /// lines. Hence a JSON key, not a table column; [`Row::cpu_at_pace`] reads its line
    /// within the rounds.
    pub r: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of `messages` a run whose rounds ran at `mps` msgs/s with `waits` waits and
    /// `cpu` µs a message, none shared, the server busy all of each.
    fn rounds(messages: u64, mps: &[f64], waits: &[u64], cpu: &[f64]) -> Row {
        let cpu_by_round: Vec<Option<f64>> = cpu.iter().copied().map(Some).collect();
        let mut row = Row {
            messages,
            ..Row::of_rounds("c", false, &cpu_by_round)
        };
        row.msgs_per_s_by_round = mps.iter().copied().map(Some).collect();
        row.waits_by_round = waits.iter().copied().map(Some).collect();
        row.server_busy_by_round = vec![Some(1.0); cpu.len()];
        row
    }

    #[test]
    fn theil_sen_draws_the_line_past_one_point_far_off_it() {
        let line: Vec<(f64, f64)> = (0..7)
            .map(|x| (f64::from(x), 2.0 + 0.5 * f64::from(x)))
            .collect();
        assert_eq!(theil_sen(&line), Some((2.0, 0.5)));
        let mut off = line.clone();
        off.push((1.5, 40.0));
        let (a, b) = theil_sen(&off).unwrap();
        assert!((a - 2.0).abs() < 0.2 && (b - 0.5).abs() < 0.1, "{a} {b}");
        assert_eq!(theil_sen(&[(1.0, 1.0), (1.0, 2.0)]), None, "one x");
        assert!((correlation(&line) - 1.0).abs() < 1e-12);
        assert_eq!(correlation(&[(1.0, 1.0), (2.0, 1.0)]), 0.0, "constant y");
    }

    #[test]
    fn cpu_at_pace_reads_the_line_and_says_when_it_is_carried_on() {
        // 0.5 µs a message plus 0.1 µs per µs of wall time a message, at 1, 2, 0.5, 0.25 and
        // 4 M msgs/s (1, 0.5, 2, 4, 0.25 µs a message).
        let mps = [1e6, 2e6, 0.5e6, 0.25e6, 4e6];
        let cpu: Vec<f64> = mps.iter().map(|m| 0.5 + 0.1 * 1e6 / m).collect();
        let row = rounds(100, &mps, &[0; 5], &cpu);
        let at = row.cpu_at_pace(3.0).unwrap();
        assert!((at.us_per_msg - 0.8).abs() < 1e-9 && at.within, "{at:?}");
        let beyond = row.cpu_at_pace(10.0).unwrap();
        assert!(
            (beyond.us_per_msg - 1.5).abs() < 1e-9 && !beyond.within,
            "{beyond:?}"
        );
        // Shared rounds, rounds the server did not pace and failed ones are left out: four
        // left are too few.
        let mut fewer = row.clone();
        fewer.shared_by_round[0] = true;
        assert!(fewer.cpu_at_pace(3.0).is_none());
        let mut slack = row.clone();
        slack.server_busy_by_round[1] = Some(0.5);
        assert!(slack.cpu_at_pace(3.0).is_none());
        let mut failed = row;
        failed.cpu_by_round[2] = None;
        failed.msgs_per_s_by_round[2] = None;
        assert!(failed.cpu_at_pace(3.0).is_none());
    }

    #[test]
    fn the_common_pace_is_the_median_over_every_client_with_enough_rounds() {
        let a = rounds(1, &[1e6, 1e6, 1e6, 1e6, 1e6], &[0; 5], &[1.0; 5]);
        let b = rounds(1, &[0.5e6; 6], &[0; 6], &[1.0; 6]);
        // Four rounds only: not counted.
        let c = rounds(1, &[0.1e6; 4], &[0; 4], &[1.0; 4]);
        assert_eq!(
            common_pace(&[&a, &b, &c]),
            Some(2.0),
            "six of 2 µs, five of 1 µs"
        );
        assert_eq!(common_pace(&[&c]), None);
    }

    #[test]
    fn the_wake_fit_recovers_the_cost_of_a_message_and_of_a_wait() {
        // 1,000 messages a run at 0.03 µs each, and 5 µs a wait.
        let waits = [10u64, 200, 50, 120, 0, 80, 30, 150];
        let cpu: Vec<f64> = waits
            .iter()
            .map(|&w| (1_000.0 * 0.03 + 5.0 * w as f64) / 1_000.0)
            .collect();
        let mut row = rounds(1_000, &[1e6; 8], &waits, &cpu);
        let fit = row.wake_fit().unwrap();
        assert!((fit.us_per_msg_at_no_waits - 0.03).abs() < 1e-9, "{fit:?}");
        assert!((fit.us_per_wait - 5.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.r - 1.0).abs() < 1e-9, "{fit:?}");
        // A round that shared its CPU uncaught (2 waits, 2.5 times the CPU): the line stays.
        row.cpu_by_round.push(Some(0.1));
        row.shared_by_round.push(false);
        row.waits_by_round.push(Some(2));
        row.server_busy_by_round.push(Some(0.95));
        row.msgs_per_s_by_round.push(Some(1e6));
        let fit = row.wake_fit().unwrap();
        assert!((fit.us_per_wait - 5.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.us_per_msg_at_no_waits - 0.03).abs() < 1e-9, "{fit:?}");
        // No spread in the waits: no line.
        let level = rounds(1_000, &[1e6; 6], &[7; 6], &[1.0; 6]);
        assert_eq!(level.wake_fit(), None);
    }
}

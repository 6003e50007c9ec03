//! One compiled classifier for all the streams whose rules are equal.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::{Mutex, PoisonError};

use super::Classifier;
use crate::route::RouteRules;

/// The classifiers compiled for streams, by the rules they were compiled from.
static COMPILED: Mutex<Table> = Mutex::new(Table {
    by_rules: HashMap::with_hasher(BuildHasherDefault::new()),
    kept: 0,
    #[cfg(test)]
    sweeps: 0,
});

struct Table {
    /// Hashed with fixed keys: the keys are the application's own configurations, and the
    /// core asks the system for nothing, randomness included (std's `RandomState` would).
    by_rules: HashMap<RouteRules, Classifier, BuildHasherDefault<DefaultHasher>>,
    /// Entries kept by the last sweep: the next sweep comes once the table has doubled, so
    /// a lookup costs O(1) amortised however many sets of rules are in use.
    kept: usize,
    #[cfg(test)]
    sweeps: usize,
}

impl Table {
    /// Drops the entries no stream holds any more (only the table does).
    fn sweep(&mut self) {
        self.by_rules.retain(|_, c| c.holders() > 1);
        self.kept = self.by_rules.len();
        #[cfg(test)]
        {
            self.sweeps += 1;
        }
    }
}

impl Classifier {
    /// A classifier for `rules`: a clone of the one compiled for equal rules while any clone
    /// of it is alive, else compiled now. Ten thousand streams of one exchange's profile hold
    /// one copy of its compiled tables (about 1.9 KB for Binance's), not ten thousand.
    ///
    /// Memory: the table behind it holds each set of rules in use once, and those whose
    /// classifiers were all dropped until it has doubled since it last swept them out. Takes
    /// a process-wide lock: made for building streams, not for a message's path.
    pub fn shared(rules: RouteRules) -> Self {
        let mut table = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = table.by_rules.get(&rules) {
            return c.clone();
        }
        if table.by_rules.len() >= 2 * table.kept + 8 {
            table.sweep();
        }
        let c = Self::new(rules.clone());
        table.by_rules.insert(rules, c.clone());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules no other test builds (tests share the table): Binance's, scanning `len` bytes.
    fn rules(len: usize) -> RouteRules {
        RouteRules {
            scan_len: len,
            ..RouteRules::binance_stream()
        }
    }

    fn sweeps() -> usize {
        COMPILED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sweeps
    }

    fn in_table(rules: &RouteRules) -> bool {
        COMPILED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_rules
            .contains_key(rules)
    }

    #[test]
    fn equal_rules_share_one_compiled_classifier() {
        let a = Classifier::shared(rules(1_001));
        let b = Classifier::shared(rules(1_001));
        let other = Classifier::shared(rules(1_002));
        assert!(a.shares_tables_with(&b));
        assert!(!a.shares_tables_with(&other));
        assert!(!a.shares_tables_with(&Classifier::new(rules(1_001))));
        // The same answers as a classifier of its own.
        let own = Classifier::new(rules(1_001));
        for head in [
            &br#"{"stream":"btcusdt@aggTrade","data":{}}"#[..],
            br#"{"result":null,"id":7}"#,
            br#"{"e":"serverShutdown","E":1}"#,
        ] {
            let head = bytes::Bytes::from_static(head);
            assert_eq!(a.classify(&head), own.classify(&head));
        }
    }

    #[test]
    fn a_classifier_no_stream_holds_is_swept_out() {
        let gone = rules(2_001);
        drop(Classifier::shared(gone.clone()));
        let held = Classifier::shared(rules(2_002));
        // Enough other sets of rules to double the table: a sweep drops `gone` and keeps what
        // is still held. (Whether `gone` is still there before is not asserted: other tests,
        // running beside this one, may have made the table sweep already.)
        let _others: Vec<_> = (0..264)
            .map(|i| Classifier::shared(rules(3_000 + i)))
            .collect();
        assert!(!in_table(&gone));
        assert!(in_table(&rules(2_002)));
        assert!(held.shares_tables_with(&Classifier::shared(rules(2_002))));
    }

    /// The table sweeps once it has doubled since the last sweep: a few sweeps for hundreds
    /// of sets of rules in use (each sweep walks the whole table), and entries whose
    /// classifiers were dropped are gone by the time the table has doubled again.
    #[test]
    fn the_table_sweeps_once_it_has_doubled() {
        let before = sweeps();
        let held: Vec<_> = (0..512)
            .map(|i| Classifier::shared(rules(10_000 + i)))
            .collect();
        let swept = sweeps() - before;
        assert!(
            (1..=16).contains(&swept),
            "{swept} sweeps for 512 sets of rules"
        );
        drop(held);
        let _after: Vec<_> = (0..1_100)
            .map(|i| Classifier::shared(rules(20_000 + i)))
            .collect();
        let left = (0..512).filter(|i| in_table(&rules(10_000 + i))).count();
        assert_eq!(left, 0, "dropped classifiers still in the table");
    }
}

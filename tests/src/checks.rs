//! `main` for a test binary without libtest (`harness = false`), answering the command line
//! as libtest does where `cargo test` and `cargo nextest` use it: `--list --format terse`
//! lists the checks (`NAME: test`; none with `--ignored`), `--exact NAME` runs that one,
//! other words filter by substring, `--skip WORD` leaves out; other flags (`--nocapture`, …)
//! are ignored. A check fails by panicking, which fails the binary.

/// Flags that take a value: the value is not a filter.
const VALUED: [&str; 5] = ["--format", "--test-threads", "--color", "--logfile", "-Z"];

/// Runs (or lists) `checks`, each a `(name, check)`, names as test names are.
pub fn run(checks: &[(&str, fn())]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if VALUED.contains(&arg.as_str()) {
            iter.next();
        } else if arg == "--skip" {
            skips.extend(iter.next());
        } else if !arg.starts_with('-') {
            filters.push(arg.as_str());
        }
    }
    let flag = |f: &str| args.iter().any(|a| a == f);
    let exact = flag("--exact");
    let chosen = checks.iter().filter(|(name, _)| {
        let wanted = filters.is_empty()
            || filters
                .iter()
                .any(|f| if exact { name == f } else { name.contains(f) });
        wanted && !skips.iter().any(|s| name.contains(s.as_str()))
    });
    #[allow(
        clippy::print_stdout,
        reason = "without libtest, the binary reports each check itself"
    )]
    if flag("--list") {
        if !flag("--ignored") {
            for (name, _) in chosen {
                println!("{name}: test");
            }
        }
    } else {
        for (name, check) in chosen {
            check();
            println!("test {name} ... ok");
        }
    }
}

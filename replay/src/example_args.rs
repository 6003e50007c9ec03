//! The command line of the examples that run against the replay server (and the benchmarks'
//! measurements): most take one optional positional argument, the others flags ([`Flags`]),
//! and every one answers `--help` / `-h` with its usage.

use std::str::FromStr;

use crate::Scenario;

/// An example's flags: switches (`--tls`) and options with a value (`--streams 500`), in any
/// order; the example matches the names it knows and asks for the value of an option.
#[derive(Debug)]
pub struct Flags<I> {
    args: I,
}

impl Flags<std::iter::Skip<std::env::Args>> {
    /// The process's arguments after its name.
    pub fn from_env() -> Self {
        Self::new(std::env::args().skip(1))
    }
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// Flags read from `args`.
    pub fn new(args: I) -> Self {
        Self { args }
    }

    /// The next flag, `None` after the last (`--help` and `-h` come back as they are, for
    /// the example to print its usage). An argument that is not a flag is an error.
    pub fn next_flag(&mut self) -> Result<Option<String>, String> {
        match self.args.next() {
            Some(flag) if flag.starts_with("--") || flag == "-h" => Ok(Some(flag)),
            Some(other) => Err(format!(
                "unexpected argument {other} (--help lists the options)"
            )),
            None => Ok(None),
        }
    }

    /// The value that follows option `flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.args.next().ok_or(format!("{flag} needs a value"))
    }

    /// The value that follows option `flag`, as a number.
    pub fn number<T: FromStr>(&mut self, flag: &str) -> Result<T, String> {
        let value = self.value(flag)?;
        value.parse().map_err(|_| format!("{flag}: not a number"))
    }

    /// The value that follows option `flag`, as a scenario's name.
    pub fn scenario(&mut self, flag: &str) -> Result<Scenario, String> {
        let value = self.value(flag)?;
        Scenario::from_name(&value).ok_or(format!("unknown scenario {value}"))
    }
}

/// What an example says of a flag it does not know.
pub fn unknown_flag(flag: &str) -> String {
    format!("unknown option {flag} (--help lists them)")
}

/// The process's first argument as a number `T` named `name`, `default` without one;
/// `Ok(None)` once `usage` is printed for `--help` / `-h` (the caller returns). A value that
/// does not parse is an error naming the argument and carrying `usage`.
pub fn first_arg<T: FromStr>(name: &str, default: T, usage: &str) -> Result<Option<T>, String> {
    arg_of(std::env::args().nth(1).as_deref(), name, default, usage)
}

#[expect(clippy::print_stdout, reason = "--help answers on stdout")]
fn arg_of<T: FromStr>(
    arg: Option<&str>,
    name: &str,
    default: T,
    usage: &str,
) -> Result<Option<T>, String> {
    match arg {
        None => Ok(Some(default)),
        Some("--help" | "-h") => {
            println!("{usage}");
            Ok(None)
        }
        Some(value) => value
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}: not a number: {value} ({usage})")),
    }
}

#[cfg(test)]
mod tests {
    use super::{arg_of, Flags};
    use crate::Scenario;

    #[test]
    fn flags_switches_options_and_what_is_wrong_with_them() {
        let args = [
            "--tls",
            "--streams",
            "500",
            "--scenario",
            "small_aggtrade",
            "-h",
            "--count",
        ];
        let mut f = Flags::new(args.iter().map(|a| (*a).to_owned()));
        assert_eq!(f.next_flag(), Ok(Some("--tls".to_owned())));
        assert_eq!(f.next_flag(), Ok(Some("--streams".to_owned())));
        assert_eq!(f.number::<usize>("--streams"), Ok(500));
        assert_eq!(f.next_flag(), Ok(Some("--scenario".to_owned())));
        assert_eq!(f.scenario("--scenario"), Ok(Scenario::SmallAggTrade));
        assert_eq!(f.next_flag(), Ok(Some("-h".to_owned())));
        assert_eq!(f.next_flag(), Ok(Some("--count".to_owned())));
        assert_eq!(
            f.number::<usize>("--count"),
            Err("--count needs a value".to_owned())
        );
        assert_eq!(f.next_flag(), Ok(None));

        let args = ["stray", "--n", "x", "--s", "nope"];
        let mut f = Flags::new(args.iter().map(|a| (*a).to_owned()));
        assert!(f
            .next_flag()
            .is_err_and(|e| e.starts_with("unexpected argument stray")));
        f.next_flag().expect("a flag");
        assert_eq!(f.number::<u32>("--n"), Err("--n: not a number".to_owned()));
        f.next_flag().expect("a flag");
        assert_eq!(f.scenario("--s"), Err("unknown scenario nope".to_owned()));
    }

    #[test]
    fn a_value_its_default_help_and_a_bad_value() {
        assert_eq!(arg_of(Some("7"), "N", 3u32, "u"), Ok(Some(7)));
        assert_eq!(arg_of(None, "N", 3u32, "u"), Ok(Some(3)));
        assert_eq!(arg_of(Some("--help"), "N", 3u32, "u"), Ok(None));
        assert_eq!(arg_of(Some("-h"), "N", 3u32, "u"), Ok(None));
        assert_eq!(
            arg_of(Some("x"), "N", 3u32, "usage: e [N (3)]"),
            Err("N: not a number: x (usage: e [N (3)])".to_owned())
        );
    }
}

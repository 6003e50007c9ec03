//! The command line of the examples that run against the replay server (and the benchmarks'
//! measurements): most take one optional positional argument, and every one answers
//! `--help` / `-h` with its usage.

use std::str::FromStr;

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
    use super::arg_of;

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

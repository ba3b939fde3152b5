//! The benchmarks' command line: `--name value` pairs, read by name. A value that does not read
//! as the option asks ends the run with one line naming the option (exit status 2, as for any
//! mistake in a command), never with the default in its place.
#![allow(dead_code)] // each benchmark reads the options it has

use std::fmt::Display;
use std::str::FromStr;

pub struct Cli(Vec<String>);

impl Cli {
    pub fn new() -> Cli {
        Cli(std::env::args().collect())
    }

    /// The value after `name`, if given.
    pub fn value(&self, name: &str) -> Option<String> {
        self.0.iter().position(|s| s == name).and_then(|i| self.0.get(i + 1)).cloned()
    }

    /// The value after `name` read as a `T`, if given.
    pub fn optional<T: FromStr>(&self, name: &str) -> Option<T>
    where
        T::Err: Display,
    {
        self.value(name).map(|v| read(name, &v))
    }

    /// The value after `name` read as a `T`, or `default` where `name` is not given.
    pub fn parsed<T: FromStr>(&self, name: &str, default: T) -> T
    where
        T::Err: Display,
    {
        self.optional(name).unwrap_or(default)
    }

    /// The comma-separated values after `name` (`default` where not given), each read as a `T`.
    pub fn list<T: FromStr>(&self, name: &str, default: &str) -> Vec<T>
    where
        T::Err: Display,
    {
        self.value(name).as_deref().unwrap_or(default).split(',').map(|v| read(name, v)).collect()
    }

    /// The value after `name`, one of `choices`; the first where `name` is not given.
    pub fn choice(&self, name: &str, choices: &[&'static str]) -> &'static str {
        match self.value(name) {
            None => choices[0],
            Some(v) => choices.iter().find(|c| **c == v).unwrap_or_else(|| usage(format!("{name} {v}: not one of {}", choices.join(", ")))),
        }
    }
}

/// `v`, given after `name`, read as a `T`.
fn read<T: FromStr>(name: &str, v: &str) -> T
where
    T::Err: Display,
{
    v.parse().unwrap_or_else(|e| usage(format!("{name} {v}: {e}")))
}

/// Ends the run over a mistake on its command line: the message on stderr, exit status 2.
pub fn usage(message: impl Display) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2)
}

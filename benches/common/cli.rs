//! The benchmarks' command line: `--name value` pairs, read by name.

pub struct Cli(Vec<String>);

impl Cli {
    pub fn new() -> Cli {
        Cli(std::env::args().collect())
    }

    /// The value after `name`, if given.
    pub fn value(&self, name: &str) -> Option<String> {
        self.0.iter().position(|s| s == name).and_then(|i| self.0.get(i + 1)).cloned()
    }

    /// The integer after `name`, or `default`.
    pub fn num(&self, name: &str, default: i64) -> i64 {
        self.value(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    }
}

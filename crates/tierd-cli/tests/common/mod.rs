//! Helpers shared by the `tierd` command's integration tests: run the
//! binary, read its output, make input files.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn tierd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("run tierd")
}

/// Runs the binary in `dir` (a config's relative paths resolve there).
pub fn tierd_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tierd")
}

/// `tierd status --config config.toml --json` in `dir` (must succeed).
pub fn status_json(dir: &Path) -> serde_json::Value {
    let output = tierd_in(dir, &["status", "--config", "config.toml", "--json"]);
    assert!(
        output.status.success(),
        "tierd status failed:\n{}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("status is not JSON ({error}):\n{}", stdout(&output)))
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn path_arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

pub fn write_file(directory: &Path, name: &str, contents: &str) -> PathBuf {
    let path = directory.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// The fast tier of [`small_stack_config`].
pub enum FastTier {
    /// `mem`: a 16 MiB write-through memory tier.
    Memory,
    /// `ssd`: a 16 MiB file tier, with the fault wrapper when `faults`.
    File { faults: bool },
    /// `ssd`: a file tier of `size` used wholly as the volume's block cache
    /// (a cache volume): the volume gets `cache = { tier = "ssd", CACHE }`,
    /// `cache` being the rest of that table (e.g. `block = "8KiB"`).
    Cache {
        size: &'static str,
        cache: &'static str,
    },
}

/// The small stack the `serve` tests share: a 64 MiB volume `vol0` of 1 MiB
/// segments (256 KiB chunks, 200 ms periods, policy `none`, so only operator
/// moves change placement) over a 16 MiB fast tier and a 64 MiB file home
/// `disk`. `top` goes after `data_dir` (e.g. a `[server]` table);
/// `volume_extra` is appended to `[[volume]]`.
pub fn small_stack_config(data_dir: &str, top: &str, fast: FastTier, volume_extra: &str) -> String {
    let (fast_name, fast_tier, cache_line) = match fast {
        FastTier::Memory => (
            "mem",
            "backend = \"memory\"\nsize = \"16MiB\"\n".to_string(),
            String::new(),
        ),
        FastTier::File { faults } => (
            "ssd",
            format!(
                "backend = \"file\"\npath = \"ssd.img\"\nsize = \"16MiB\"\n{}",
                if faults { "[tier.faults]\n" } else { "" }
            ),
            String::new(),
        ),
        FastTier::Cache { size, cache } => (
            "ssd",
            format!("backend = \"file\"\npath = \"ssd.img\"\nsize = \"{size}\"\n"),
            format!("cache = {{ tier = \"ssd\", {cache} }}"),
        ),
    };
    format!(
        r#"data_dir = "{data_dir}"
{top}
[[tier]]
name = "{fast_name}"
{fast_tier}
[[tier]]
name = "disk"
backend = "file"
path = "disk.img"
size = "64MiB"

[[volume]]
name = "vol0"
size = "64MiB"
segment = "1MiB"
chunk = "256KiB"
tiers = ["{fast_name}", "disk"]
period = "200ms"
{cache_line}
{volume_extra}

[volume.policy]
kind = "none"
"#
    )
}

/// Runs `command` under a pseudo-terminal (`script`), so stderr is a
/// terminal; `None` (with the reason printed) when `script` is missing.
pub fn on_a_terminal(command: &[&str]) -> Option<String> {
    let line = std::iter::once(env!("CARGO_BIN_EXE_tierd"))
        .chain(command.iter().copied())
        .map(|word| format!("'{word}'"))
        .collect::<Vec<_>>()
        .join(" ");
    match std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(output) => {
            assert!(output.status.success(), "{}", stdout(&output));
            Some(stdout(&output))
        }
        Err(error) => {
            eprintln!("skipped: `script` (util-linux) is needed for a terminal: {error}");
            None
        }
    }
}

pub mod serve;
pub mod tools;

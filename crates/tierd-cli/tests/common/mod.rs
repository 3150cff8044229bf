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

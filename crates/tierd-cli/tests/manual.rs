//! `tierd completions` and `tierd man`: generated from the CLI definition,
//! checked by the shells and by groff where they are installed.

use std::path::Path;
use std::process::{Command, Output};

fn tierd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("run tierd")
}

fn stdout_of(args: &[&str]) -> String {
    let output = tierd(args);
    assert!(
        output.status.success(),
        "tierd {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// The subcommands `tierd --help` lists (the public command set).
fn subcommands() -> Vec<String> {
    let help = stdout_of(&["--help"]);
    let commands = help
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("Options:").next())
        .expect("a Commands: section");
    commands
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Whether `tool` is installed. CI installs every tool these tests use
/// (`.ci/run`), so there a missing one fails the test instead of skipping.
fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        found || std::env::var_os("CI").is_none(),
        "{tool} is not installed, and CI must run this check (.ci/run installs it)"
    );
    found
}

#[test]
fn bash_completion_parses_and_knows_every_subcommand_and_flag() {
    let script = stdout_of(&["completions", "bash"]);
    for name in subcommands() {
        assert!(script.contains(&name), "bash completion lacks `{name}`");
    }
    assert!(script.contains("--config"), "serve's --config is completed");
    assert!(script.contains("complete -F _tierd"), "registers itself");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tierd.bash");
    std::fs::write(&path, &script).unwrap();
    // Sourced in a real bash, then asked to complete `tierd se`.
    let check = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && COMP_WORDS=(tierd se) && COMP_CWORD=1 && COMP_LINE='tierd se' && \
             COMP_POINT=8 && _tierd tierd se tierd && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        ))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "bash could not source the completion: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let offered = String::from_utf8_lossy(&check.stdout);
    assert!(
        offered.lines().any(|word| word == "serve"),
        "`tierd se<TAB>` offers {offered:?}"
    );
}

#[test]
fn zsh_and_fish_completions_name_the_program_and_its_subcommands() {
    let zsh = stdout_of(&["completions", "zsh"]);
    assert!(
        zsh.starts_with("#compdef tierd"),
        "{}",
        &zsh[..40.min(zsh.len())]
    );
    let fish = stdout_of(&["completions", "fish"]);
    assert!(fish.contains("complete -c tierd"));
    for name in subcommands() {
        assert!(zsh.contains(&name), "zsh completion lacks `{name}`");
        assert!(fish.contains(&name), "fish completion lacks `{name}`");
    }
    for (shell, script) in [("zsh", &zsh), ("fish", &fish)] {
        if !have(shell) {
            eprintln!("skipping the {shell} syntax check: {shell} is not installed");
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("tierd.{shell}"));
        std::fs::write(&path, script).unwrap();
        let flag = if shell == "zsh" { "-n" } else { "--no-execute" };
        let check = Command::new(shell).arg(flag).arg(&path).output().unwrap();
        assert!(
            check.status.success(),
            "{shell} rejects the completion: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}

#[test]
fn an_unknown_shell_is_refused_with_the_choices() {
    let output = tierd(&["completions", "tcsh"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("tcsh") && stderr.contains("bash"),
        "{stderr}"
    );
}

fn check_page(path: &Path, title: &str) {
    let page = std::fs::read_to_string(path).unwrap();
    assert!(
        page.contains(&format!(".TH {title} 1")),
        "{} has no .TH {title} 1 header",
        path.display()
    );
    assert!(page.contains(".SH NAME") && page.contains(".SH SYNOPSIS"));
    if have("groff") {
        // -k: preconv, as man(1) runs it, for the UTF-8 in help texts.
        let render = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            render.status.success() && render.stderr.is_empty(),
            "groff warns on {}: {}",
            path.display(),
            String::from_utf8_lossy(&render.stderr)
        );
    } else {
        eprintln!(
            "skipping the groff check of {}: groff is not installed",
            path.display()
        );
    }
}

#[test]
fn man_prints_the_main_page_and_writes_one_per_subcommand() {
    let page = stdout_of(&["man"]);
    assert!(
        page.contains(".TH tierd 1"),
        "{}",
        &page[..80.min(page.len())]
    );
    for name in subcommands() {
        assert!(page.contains(&name), "tierd.1 does not list `{name}`");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    stdout_of(&["man", "--out", out.to_str().unwrap()]);
    check_page(&out.join("tierd.1"), "tierd");
    for name in subcommands() {
        let title = format!("tierd-{name}");
        check_page(&out.join(format!("{title}.1")), &title);
    }
    // Nested subcommands get pages too.
    check_page(&out.join("tierd-trace-convert.1"), "tierd-trace-convert");
    let serve = std::fs::read_to_string(out.join("tierd-serve.1")).unwrap();
    assert!(serve.contains("config"), "tierd-serve.1 documents --config");
}

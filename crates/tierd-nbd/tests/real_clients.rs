//! The server against the NBD clients people use: nbdinfo, qemu-io, nbdsh,
//! nbdcopy, fio. Each test skips (with the reason) when its tool is not
//! installed, and fails instead under CI=true; install them with
//! ../shared/tools/install-nbd-clients.sh.

mod common;

use std::process::{Command, Output};

use common::{pattern, tool_available, TestServer};

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("the tool starts");
    let text = format!(
        "{:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        command,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    output
}

/// nbdsh is `python3 -m nbd`; Debian's python3 has the module, a pyenv
/// python3 earlier in PATH may not.
fn debian_first_path() -> String {
    format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default())
}

#[test]
fn nbdinfo_sees_size_and_every_capability() {
    if !tool_available("nbdinfo") {
        return;
    }
    let server = TestServer::start(3 << 20);
    let output = run(Command::new("nbdinfo").arg("--json").arg(server.uri()));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["protocol"], "newstyle-fixed");
    assert_eq!(json["structured"], true);
    let export = &json["exports"][0];
    assert_eq!(export["export-size"], 3 << 20);
    for capability in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_multi_conn",
    ] {
        assert_eq!(export[capability], true, "{capability} in {export}");
    }
    assert_eq!(export["is_read_only"], false);
    let contexts = export["contexts"].as_array().unwrap();
    assert!(
        contexts.iter().any(|context| context == "base:allocation"),
        "{contexts:?}"
    );
    assert_eq!(export["block_size_maximum"], 32 << 20);

    // --list goes through NBD_OPT_LIST and INFO for each export.
    let output = run(Command::new("nbdinfo").arg("--list").arg(server.uri()));
    assert!(String::from_utf8_lossy(&output.stdout).contains("export=\"mem\""));
    // --map asks base:allocation for the whole export.
    server.export.poke(8192, &[1]).unwrap();
    let output = run(Command::new("nbdinfo").arg("--map").arg(server.uri()));
    let map = String::from_utf8_lossy(&output.stdout);
    assert!(map.contains("data") && map.contains("hole,zero"), "{map}");
}

#[test]
fn qemu_io_writes_reads_zeroes_discards_and_flushes() {
    if !tool_available("qemu-io") {
        return;
    }
    let server = TestServer::start(4 << 20);
    let commands = [
        "write -P 0xab 0 64k",
        "read -P 0xab 0 64k",
        "write -z 16k 16k",
        "read -P 0 16k 16k",
        "read -P 0xab 32k 32k",
        "discard 128k 64k",
        "flush",
        "write -f -P 0xcd 256k 4k",
        "read -P 0xcd 256k 4k",
        "aio_write -P 0x11 1M 64k",
        "aio_write -P 0x22 2M 64k",
        "aio_flush",
        "read -P 0x22 2M 64k",
    ];
    let mut command = Command::new("qemu-io");
    command.arg("-f").arg("raw");
    for line in commands {
        command.arg("-c").arg(line);
    }
    command.arg(server.uri());
    let output = run(&mut command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("failed") && !stdout.contains("error"),
        "{stdout}"
    );
    let bytes = server.export.snapshot();
    assert!(bytes[..16 << 10].iter().all(|byte| *byte == 0xab));
    assert!(bytes[16 << 10..32 << 10].iter().all(|byte| *byte == 0));
    assert!(bytes[256 << 10..260 << 10].iter().all(|byte| *byte == 0xcd));
    assert!(bytes[1 << 20..(1 << 20) + 65_536]
        .iter()
        .all(|byte| *byte == 0x11));
    assert!(server.export.fua_requests() >= 1, "write -f sent FUA");
    assert!(server.export.flushes() >= 1);
    // A pattern mismatch is reported by qemu-io, which this test must see.
    let output = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "read -P 0x55 0 4k"])
        .arg(server.uri())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("Pattern verification failed"));
}

#[test]
fn nbdsh_script_reads_and_writes() {
    if !tool_available("nbdsh") {
        return;
    }
    let server = TestServer::start(1 << 20);
    let script = r#"
data = bytes(range(256)) * 16
h.pwrite(data, 4096)
assert h.pread(4096, 4096) == data
h.pwrite(b"fua!", 0, nbd.CMD_FLAG_FUA)
h.flush()
h.zero(4096, 8192)
assert h.pread(4096, 8192) == bytes(4096)
assert h.can_multi_conn() and h.can_fast_zero() and h.can_df()
seen = []
h.block_status(65536, 0, lambda ctx, off, entries, err: seen.append((ctx, entries)))
assert seen and seen[0][0] == "base:allocation", seen
"#;
    run(Command::new("nbdsh")
        .env("PATH", debian_first_path())
        .arg("--base-allocation")
        .arg("-u")
        .arg(server.uri())
        .arg("-c")
        .arg(script));
    assert_eq!(&server.export.snapshot()[..4], b"fua!");
    assert_eq!(server.export.fua_requests(), 1);
}

#[test]
fn nbdcopy_copies_in_and_out_over_several_connections() {
    if !tool_available("nbdcopy") {
        return;
    }
    let server = TestServer::start(8 << 20);
    let source = server.directory.path().join("source.img");
    let data = pattern(99, 8 << 20);
    std::fs::write(&source, &data).unwrap();
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&source)
        .arg(server.uri()));
    assert!(server.export.snapshot() == data, "copy in differs");
    let target = server.directory.path().join("copy.img");
    run(Command::new("nbdcopy").arg(server.uri()).arg(&target));
    assert!(std::fs::read(&target).unwrap() == data, "copy out differs");
    assert!(server.server.stats().connections_accepted >= 2);
}

#[test]
fn fio_nbd_engine_verifies_random_writes() {
    if !tool_available("fio") {
        return;
    }
    let server = TestServer::start(4 << 20);
    run(Command::new("fio")
        .arg("--name=verify")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", server.uri()))
        .args([
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--size=4M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ]));
    let stats = server.server.stats();
    assert!(
        stats.requests_of(tierd_nbd::proto::NBD_CMD_WRITE) >= 1024,
        "{stats:?}"
    );
    assert!(
        stats.requests_of(tierd_nbd::proto::NBD_CMD_READ) >= 1024,
        "{stats:?}"
    );
}

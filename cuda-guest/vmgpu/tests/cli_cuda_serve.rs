//! `vmgpu cuda serve`: its help, and a guest session on its Unix socket (handshake, a
//! request, Goodbye) with the per-guest log lines, then a clean shutdown on SIGTERM.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cuda_guest::proto::{
    ClientHello, Decoded, Decoder, Features, Limits, Reply, ReplyBody, Request, RequestFrame,
    ServerHello, Status, SERVER_HELLO_LEN,
};

#[test]
fn serve_help_names_its_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(["cuda", "serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--socket <PATH>",
        "--backend",
        "--memory",
        "--max-objects",
        "--max-module-bytes",
        "--launches-per-sec",
        "--max-sessions",
        "--handshake-timeout <SECS>",
        "--guest-name",
    ] {
        assert!(help.contains(opt), "{opt} missing from:\n{help}");
    }
    // --socket is required.
    let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(["cuda", "serve"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn serve_answers_a_handshake_and_a_request_then_shuts_down_on_sigterm() {
    serve_round_trip(&[], "guests run in this process");
}

/// The same guest, served by a `vmgpu cuda worker` process of its own (the default on
/// the native driver, forced here on the simulator).
#[test]
fn serve_with_worker_processes_answers_through_the_worker() {
    serve_round_trip(
        &["--isolation", "process"],
        "guests run in worker processes of their own",
    );
}

fn serve_round_trip(extra: &[&str], isolation_line: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cuda.sock");
    let log = dir.path().join("serve.log");
    let mut server = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(["cuda", "serve", "--backend", "sim", "--memory", "1048576"])
        .args(extra)
        .args(["--guest-name", "test", "--socket"])
        .arg(&sock)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !sock.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no socket; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let ours = Limits::default();
    s.write_all(&ClientHello::new(Features::PIPELINING, ours.max_frame).encode())
        .unwrap();
    let mut buf = [0u8; SERVER_HELLO_LEN];
    s.read_exact(&mut buf).unwrap();
    let Ok(Decoded::Frame { frame: hello, .. }) = ServerHello::decode(&buf) else {
        panic!("not a server hello: {buf:02x?}");
    };
    assert_eq!(hello.status, Status::SUCCESS);
    assert!(hello.features.contains(Features::PIPELINING));

    let mut out = Vec::new();
    RequestFrame::new(1, Request::DriverGetVersion)
        .encode(&mut out)
        .unwrap();
    RequestFrame::new(2, Request::Goodbye)
        .encode(&mut out)
        .unwrap();
    s.write_all(&out).unwrap();
    let mut dec = Decoder::<Reply>::new(hello.limits);
    let mut replies = Vec::new();
    while replies.len() < 2 {
        match dec.next_frame().unwrap() {
            Some(r) => replies.push(r),
            None => assert!(dec.read_from(&mut s).unwrap() > 0, "closed early"),
        }
    }
    assert_eq!((replies[0].id, replies[0].status), (1, Status::SUCCESS));
    assert!(
        matches!(replies[0].body, ReplyBody::Int(v) if v >= 12000),
        "{:?}",
        replies[0].body
    );
    assert_eq!((replies[1].id, replies[1].status), (2, Status::SUCCESS));
    // The session ended with Goodbye: the server hangs up.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:02x?}");

    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(server.id() as i32, libc::SIGTERM) }, 0);
    let status = server.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status:?}\n{text}");
    for line in [
        isolation_line,
        "serving CUDA guests on",
        "guest test#1 (session 1): connected (quota: 1048576 bytes",
        "guest test#1 (session 1): session ended",
        "shutting down: draining guest sessions",
    ] {
        assert!(
            text.contains(line),
            "{line:?} missing from the log:\n{text}"
        );
    }
    assert!(!sock.exists(), "the socket file is removed at shutdown");
}

//! Forward mode end to end: the same C programs as `c_programs.rs`, linked with
//! `-lcuda` against the stock `cuda.h`, run on the shim with `VMGPU_CUDA_SERVER`
//! pointing at a vmgpu CUDA service (`cuda_guest::service` on the simulator, over a Unix
//! socket), with the same results as in simulator mode.

mod support;

use support::*;

/// Runs `program` in both modes; returns (sim stdout, forward stdout).
fn both(server: &Server, program: &str, args: &[&std::path::Path]) -> (String, String) {
    let exe = compile(program);
    let sim = run_ok(
        &exe,
        args,
        &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")],
    );
    let addr = server.env();
    let fwd = run_ok(&exe, args, &[("VMGPU_CUDA_SERVER", addr.as_str())]);
    server.wait_idle();
    (sim, fwd)
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or_default()
}

#[test]
fn vector_add_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "vector_add", &[&fixture("vector_add.nvrtc.ptx")]);
    assert!(fwd.contains("1000 elements OK (c[999] = 1498.5)"), "{fwd}");
    assert_eq!(last_line(&sim), last_line(&fwd));
}

#[test]
fn linked_ptx_units_through_the_service() {
    let server = Server::start();
    let dir = repo().join("cuda-guest/tests/ptx/link");
    let (main, lib) = (
        dir.join("link_main.nvrtc.ptx"),
        dir.join("link_lib.nvrtc.ptx"),
    );
    let (sim, fwd) = both(&server, "link", &[&main, &lib]);
    assert!(fwd.contains("linked kernel: r[999] = 2997.5"), "{fwd}");
    assert_eq!(sim, fwd);
}

#[test]
fn d2d_chain_on_two_streams_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "d2d_streams", &[]);
    assert!(fwd.contains("d2d_streams: 1048576 words OK"), "{fwd}");
    assert!(sim.contains("d2d_streams: 1048576 words OK"), "{sim}");
}

#[test]
fn jit_error_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "jit_error", &[]);
    let head = "cuModuleLoadDataEx: 218 CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)";
    assert!(sim.contains(head) && fwd.contains(head), "{fwd}");
    assert!(fwd.contains("frobnicate"), "{fwd}");
    assert_eq!(last_line(&sim), last_line(&fwd));
}

#[test]
fn out_of_bounds_kernel_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "oob", &[&fixture("oob_write.nvrtc.ptx")]);
    let line = "cuStreamSynchronize after the out-of-bounds kernel: 700 CUDA_ERROR_ILLEGAL_ADDRESS";
    assert!(sim.contains(line) && fwd.contains(line), "{fwd}");
    assert_eq!(last_line(&sim), last_line(&fwd));
}

#[test]
fn cu_get_proc_address_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(
        &server,
        "procaddr",
        &[&shim_path(), &fixture("vector_add.nvrtc.ptx")],
    );
    assert!(fwd.contains("vector_add legacy and per-thread OK"), "{fwd}");
    assert_eq!(last_line(&sim), last_line(&fwd));
}

#[test]
fn a_missing_server_fails_the_first_call_that_needs_it() {
    // cuInit does not connect (tests/lazy_connect.rs); cuDeviceGet is the first call
    // that needs the service.
    let exe = compile("jit_error");
    let out = run(
        &exe,
        &[],
        &[("VMGPU_CUDA_SERVER", "unix:/nonexistent/vmgpu.sock")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cuDeviceGet(&dev, 0) failed: 3 CUDA_ERROR_NOT_INITIALIZED"),
        "{err}"
    );
    assert!(err.contains("/nonexistent/vmgpu.sock"), "{err}");
}

#[test]
fn unsupported_attributes_warn_once_through_the_service() {
    let server = Server::start();
    let exe = compile("warn_once");
    let addr = server.env();
    let out = run(
        &exe,
        &[&fixture("vector_add.nvrtc.ptx")],
        &[("VMGPU_CUDA_SERVER", addr.as_str())],
    );
    assert!(out.status.success());
    warned_once(&String::from_utf8_lossy(&out.stderr));
    server.wait_idle();
}

#[test]
fn boundary_errors_through_the_service() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "errors", &[]);
    assert!(fwd.contains("checks OK"), "{fwd}");
    assert_eq!(last_line(&sim), last_line(&fwd));
}

#[test]
fn copies_larger_than_max_inline_are_split() {
    let server = Server::start();
    let (sim, fwd) = both(&server, "big_copy", &[]);
    assert!(
        fwd.contains("big_copy: 12582912 bytes each way OK"),
        "{fwd}"
    );
    assert_eq!(last_line(&sim), last_line(&fwd));
}

/// A pseudo-terminal in raw mode standing in for a virtio-serial port (a character
/// device the guest opens read-write): its master side is bridged to the service's Unix
/// socket, and the program gets `VMGPU_CUDA_SERVER=port:/dev/pts/N`.
#[test]
fn vector_add_through_a_serial_port_device() {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};

    let server = Server::start();
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the given slots; name, termios and
    // window size are optional (null).
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    use std::os::fd::AsRawFd;
    // SAFETY: termios is plain data; tcgetattr fills it for a valid tty descriptor,
    // cfmakeraw edits it, tcsetattr applies it (raw: no echo, no line editing, no CR/LF
    // translation, 8-bit clean).
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
        libc::cfmakeraw(&mut t);
        assert_eq!(libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t), 0);
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` is writable for its length; ttyname_r NUL-terminates.
    let r = unsafe { libc::ttyname_r(slave.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    assert_eq!(r, 0);
    // SAFETY: NUL-terminated by ttyname_r.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();

    let sock = std::os::unix::net::UnixStream::connect(&server.path).expect("connect");
    let mut to_server = sock.try_clone().expect("clone");
    let mut from_server = sock;
    let mut from_port = std::fs::File::from(master.try_clone().expect("dup"));
    let mut to_port = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = from_port.read(&mut buf) {
            if n == 0 || to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = from_server.read(&mut buf) {
            if n == 0 || to_port.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });

    let exe = compile("vector_add");
    let addr = format!("port:{path}");
    let out = run_ok(
        &exe,
        &[&fixture("vector_add.nvrtc.ptx")],
        &[("VMGPU_CUDA_SERVER", addr.as_str())],
    );
    assert!(out.contains("1000 elements OK (c[999] = 1498.5)"), "{out}");
    // The slave stays open until here, so the master never sees a hang-up mid-run.
    drop(slave);
}

#[test]
fn many_launches_then_one_synchronisation_through_the_service() {
    let server = Server::start();
    let exe = compile("launch_rate");
    let addr = server.env();
    let out = run_ok(
        &exe,
        &[std::path::Path::new("2000")],
        &[("VMGPU_CUDA_SERVER", addr.as_str())],
    );
    assert!(out.contains("launch_rate: 2000 launches"), "{out}");
}

//! Shared by the shim's test binaries: the built library installed as `libcuda.so.1`
//! (with a `libcuda.so` link) in a directory of its own, and the C programs of
//! `tests/c` compiled against the stock `cuda.h` and linked with `-lcuda`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

use cuda_guest::proto::{Decoder, Limits, Opcode, RequestFrame, CLIENT_HELLO_LEN};
use cuda_guest::service::{BackendChoice, BackgroundServer, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;

/// The directory of the stock `cuda.h` (the `nvidia-cuda-runtime-cu12` wheel), from
/// `VMGPU_CUDA_INCLUDE` or the places pip puts it.
pub fn cuda_include() -> PathBuf {
    if let Some(d) = std::env::var_os("VMGPU_CUDA_INCLUDE") {
        return d.into();
    }
    let mut candidates = vec![PathBuf::from(
        "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cuda_runtime/include",
    )];
    if let Ok(out) = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], 'include'))",
        ])
        .output()
    {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !s.is_empty() {
            candidates.push(s.into());
        }
    }
    candidates
        .into_iter()
        .find(|d| d.join("cuda.h").is_file())
        .expect("cuda.h of the nvidia-cuda-runtime-cu12 wheel (pip install nvidia-cuda-runtime-cu12, or set VMGPU_CUDA_INCLUDE)")
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A PTX file of `fixtures/ptx`.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("fixtures/ptx").join(name)
}

/// The cdylib cargo built for this test run: `target/<profile>/deps/libvmgpu_libcuda.so`
/// (beside the test binary; `cargo test` builds it there with the rlib), else the
/// newer one in `target/<profile>`.
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let candidates = [
        deps.join("libvmgpu_libcuda.so"),
        deps.parent()
            .expect("target/<profile>")
            .join("libvmgpu_libcuda.so"),
    ];
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    candidates
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| modified(p))
        .cloned()
        .expect("libvmgpu_libcuda.so is built (cargo test -p vmgpu-libcuda builds it)")
}

/// A directory holding the shim as `libcuda.so.1` and a `libcuda.so` link to it, and
/// what the tests build against it: made once per test process, under cargo's
/// `target/tmp/vmgpu-shim/<pid>`. A test binary cannot remove its own at exit (statics
/// are not dropped), so each one first removes those of processes that are gone.
pub fn shim_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vmgpu-shim");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let pid = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
                if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        // A directory left by an earlier process with this number.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the shim's directory");
        std::fs::copy(built_library(), dir.join("libcuda.so.1")).expect("copy the shim");
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so"))
            .expect("libcuda.so link");
        dir
    })
}

/// The shim's `libcuda.so.1`.
pub fn shim_path() -> PathBuf {
    shim_dir().join("libcuda.so.1")
}

/// Compiles `tests/c/<name>.c` against the stock `cuda.h`, linked with `-lcuda` (the
/// shim), and returns the executable.
pub fn compile(name: &str) -> PathBuf {
    compile_with(name, true)
}

/// Compiles `tests/c/<name>.c`, linked with `-lcuda` (the shim) when `libcuda` (else
/// only with `-ldl`: a program whose libraries load `libcuda.so.1` themselves), and
/// returns the executable.
pub fn compile_with(name: &str, libcuda: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = shim_dir().join(format!("{name}-{n}"));
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.arg("-std=gnu11").arg("-Wall").arg("-Werror");
    if libcuda {
        cc.arg("-I").arg(cuda_include());
    }
    cc.arg("-o").arg(&out).arg(&src);
    if libcuda {
        cc.arg("-L").arg(shim_dir()).arg("-lcuda");
    }
    let status = cc.arg("-ldl").arg("-lpthread").status().expect("run cc");
    assert!(status.success(), "compiling {}", src.display());
    out
}

/// Runs a compiled program on the shim with `env` added; returns its output.
pub fn run(exe: &Path, args: &[&Path], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", shim_dir())
        .env_remove("VMGPU_CUDA_SERVER")
        .env_remove("VMGPU_CUDA_MODE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the test program");
    println!(
        "--- {} stdout:\n{}--- stderr:\n{}",
        exe.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stdout of a run that must succeed.
pub fn run_ok(exe: &Path, args: &[&Path], env: &[(&str, &str)]) -> String {
    let out = run(exe, args, env);
    assert!(
        out.status.success(),
        "{} failed: {:?}",
        exe.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks the stderr of `tests/c/warn_once.c` (each unsupported call made 3 times): one
/// warning for each, none for the supported attribute.
pub fn warned_once(stderr: &str) {
    for what in [
        "cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)",
        "cuIpcGetMemHandle",
    ] {
        let line = format!("vmgpu libcuda: warning: {what} is not supported");
        assert_eq!(stderr.matches(&line).count(), 1, "{line}: {stderr}");
    }
    assert_eq!(stderr.matches("warning").count(), 2, "{stderr}");
}

/// A service on a Unix socket, on its own runtime thread.
pub struct Server {
    /// The service.
    pub service: Service,
    /// Its socket.
    pub path: PathBuf,
    _server: BackgroundServer,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts one.
    pub fn start() -> Server {
        let service = Service::new(
            BackendChoice::Simulator(SimConfig {
                threads: 2,
                ..SimConfig::default()
            }),
            ServiceConfig::default(),
        )
        .expect("the service starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vmgpu.sock");
        let server = BackgroundServer::start(service.clone(), &path, "shim-test")
            .expect("the server starts");
        Server {
            service,
            path,
            _server: server,
            _dir: dir,
        }
    }

    /// `VMGPU_CUDA_SERVER` for it.
    pub fn env(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    /// Waits until the service holds nothing of the guests that came and went.
    pub fn wait_idle(&self) {
        let t = std::time::Instant::now();
        loop {
            let s = self.service.stats();
            if s.sessions == 0 && s.contexts == 0 && s.device_bytes == 0 {
                return;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "service not idle: {s:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// What one connection through a [`Proxy`] sent towards the service.
#[derive(Debug, Default)]
struct Recorded {
    bytes: Vec<u8>,
    /// The client closed its side.
    closed: bool,
}

/// A Unix socket in front of a [`Server`] that forwards every connection to it and
/// records what each client sent: whether a process connected at all, and the requests
/// of its session.
pub struct Proxy {
    /// Its socket.
    pub path: PathBuf,
    connections: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// Starts one in front of `server`.
    pub fn start(server: &Server) -> Proxy {
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&path).expect("bind the proxy");
        let upstream = server.path.clone();
        let connections: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>> = Arc::default();
        let all = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let record = Arc::new(Mutex::new(Recorded::default()));
                all.lock().unwrap().push(record.clone());
                let server = UnixStream::connect(&upstream).expect("connect to the service");
                let (mut from_client, mut to_server) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        match from_client.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                record.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                                if to_server.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    record.lock().unwrap().closed = true;
                    let _ = to_server.shutdown(std::net::Shutdown::Write);
                });
                let (mut from_server, mut to_client) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Proxy {
            path,
            connections,
            _dir: dir,
        }
    }

    /// `VMGPU_CUDA_SERVER` for it.
    pub fn env(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    /// The connections made so far.
    pub fn connections(&self) -> usize {
        self.connections.lock().unwrap().len()
    }

    /// The opcodes of the requests connection `i` sent after its hello, once the client
    /// closed it.
    pub fn requests(&self, i: usize) -> Vec<Opcode> {
        let record = self.connections.lock().unwrap()[i].clone();
        let t = std::time::Instant::now();
        while !record.lock().unwrap().closed {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "connection {i} still open"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let bytes = std::mem::take(&mut record.lock().unwrap().bytes);
        let mut decoder = Decoder::<RequestFrame>::new(Limits::default());
        let mut rest = bytes.get(CLIENT_HELLO_LEN..).unwrap_or_default();
        let mut opcodes = Vec::new();
        loop {
            while let Ok(Some(frame)) = decoder.next_frame() {
                opcodes.push(frame.request.opcode());
            }
            if rest.is_empty() {
                return opcodes;
            }
            let n = decoder.feed(rest);
            assert!(n > 0, "undecodable requests after {opcodes:?}");
            rest = &rest[n..];
        }
    }
}

/// A real client's own suite against its list of known failures (`known`, for this
/// `label`): every test that failed is on the list, and every test on the list still
/// fails, so the list stays exact.
/// Which modes a known failure of a real client's suite fails in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// In-process on the simulator.
    pub sim: bool,
    /// Forwarded to a service.
    pub forwarded: bool,
}
/// Fails in both modes.
pub const BOTH: Modes = Modes {
    sim: true,
    forwarded: true,
};
/// Fails forwarded only.
pub const FORWARDED: Modes = Modes {
    sim: false,
    forwarded: true,
};

/// The names of `known` that fail in the mode (`forwarded` or not).
pub fn known_in<'a>(known: &[(&'a str, Modes, &str)], forwarded: bool) -> Vec<&'a str> {
    known
        .iter()
        .filter(|(_, m, _)| if forwarded { m.forwarded } else { m.sim })
        .map(|(k, _, _)| *k)
        .collect()
}

pub fn failures_are_the_known_ones(label: &str, failed: &[String], known: &[&str]) {
    let unexpected: Vec<&String> = failed
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .collect();
    let now_passing: Vec<&&str> = known
        .iter()
        .filter(|k| !failed.iter().any(|f| f == *k))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{label}: failures not known: {unexpected:#?}"
    );
    assert!(
        now_passing.is_empty(),
        "{label}: known failures that pass now (take them off the list): {now_passing:#?}"
    );
}

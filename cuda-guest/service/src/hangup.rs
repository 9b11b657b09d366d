//! Noticing a guest that is gone while its session's thread cannot: that thread blocks in
//! the backend (a synchronisation waiting for a kernel) or in a write to a worker
//! process, and reads its socket only between requests. One thread of the process
//! watches every guest socket for the peer's hang-up (`EPOLLRDHUP`/`EPOLLHUP` only: data
//! arriving costs it nothing) and runs that connection's action once: cancel the
//! session's simulator work, or end its worker process. The action runs on the watcher
//! thread, so it must be short and must not block.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

type Action = Box<dyn FnOnce() + Send>;

struct Watcher {
    epoll: Epoll,
    /// Watched connections: key to (a duplicate of the socket, which keeps the
    /// registration alive, and the action).
    watched: Mutex<HashMap<u64, (OwnedFd, Action)>>,
    next: AtomicU64,
}

impl Watcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (OwnedFd, Action)>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets `key`; its entry (the duplicate and the action) when it was still there.
    fn remove(&self, key: u64) -> Option<(OwnedFd, Action)> {
        let entry = self.lock().remove(&key);
        if let Some((fd, _)) = &entry {
            // A registration lives as long as its open file description: removed
            // explicitly, before the duplicate is closed.
            let _ = self.epoll.ctl(
                ControlOperation::Delete,
                fd.as_raw_fd(),
                EpollEvent::default(),
            );
        }
        entry
    }

    fn run(&self) {
        let mut events = vec![EpollEvent::default(); 64];
        loop {
            let n = match self.epoll.wait(-1, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("the guest hang-up watcher stopped: {e}");
                    return;
                }
            };
            for ev in &events[..n] {
                if let Some((_fd, action)) = self.remove(ev.data()) {
                    action();
                }
            }
        }
    }
}

static WATCHER: OnceLock<io::Result<&'static Watcher>> = OnceLock::new();

fn watcher() -> io::Result<&'static Watcher> {
    let w = WATCHER.get_or_init(|| {
        let w: &'static Watcher = Box::leak(Box::new(Watcher {
            epoll: Epoll::new()?,
            watched: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }));
        std::thread::Builder::new()
            .name("vmgpu-hangups".into())
            .spawn(move || w.run())?;
        Ok(w)
    });
    match w {
        Ok(w) => Ok(w),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    }
}

/// A connection being watched; dropping it stops watching (the action is not run).
#[derive(Debug)]
pub(super) struct Watch {
    key: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(w) = watcher() {
            w.remove(self.key);
        }
    }
}

/// Runs `on_hangup` once when the peer of `sock` closes its end (or shuts down its
/// writing side: the guest can send nothing more), unless the returned [`Watch`] is
/// dropped first.
pub(super) fn watch(sock: &impl AsFd, on_hangup: Action) -> io::Result<Watch> {
    let w = watcher()?;
    let fd = sock.as_fd().try_clone_to_owned()?;
    let key = w.next.fetch_add(1, Ordering::Relaxed);
    let raw = fd.as_raw_fd();
    w.lock().insert(key, (fd, on_hangup));
    let events = EventSet::READ_HANG_UP | EventSet::HANG_UP | EventSet::ERROR;
    if let Err(e) = w
        .epoll
        .ctl(ControlOperation::Add, raw, EpollEvent::new(events, key))
    {
        w.lock().remove(&key);
        return Err(e);
    }
    Ok(Watch { key })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_closed_peer_runs_the_action_once_and_data_does_not() {
        let (a, b) = UnixStream::pair().unwrap();
        let (tx, rx) = mpsc::channel();
        let _w = watch(&a, Box::new(move || tx.send(()).unwrap())).unwrap();
        use std::io::Write;
        (&b).write_all(b"data is no hang-up").unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(b);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    }

    #[test]
    fn a_dropped_watch_never_runs() {
        let (a, b) = UnixStream::pair().unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let w = watch(&a, Box::new(move || tx.send(()).unwrap())).unwrap();
        drop(w);
        drop(b);
        // The sender went with the entry: the channel is closed, never sent on.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(2)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }
}

//! One guest connection's session loop on a blocking byte stream (no async runtime):
//! what a socket transport runs on the connection's thread, and what a worker process
//! runs on its socket to the supervisor.
//!
//! Backpressure: replies are written with blocking writes and no further request is read
//! while a write waits, so a guest that sends more than `max_pipelined` requests without
//! reading replies is held by its own socket buffers (as the protocol allows), never
//! another guest; the decoder holds at most one `max_frame`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use vmgpu_cuda_proto::{Decoder, Reply, ReplyBody, RequestFrame, Status, SyncScope};

use super::Session;

/// Receive buffer of a connection's worker.
const READ_CHUNK: usize = 256 << 10;
/// Reply bytes gathered before they are handed to the writer.
const FLUSH_BYTES: usize = 256 << 10;

/// The worker thread: reads frames straight into the decoder (large inline copies go
/// from there to the device), runs them, writes replies in batches (before it reads
/// again and before a request that may wait for the device).
pub(crate) fn worker(
    mut session: Session,
    mut sock: std::os::unix::net::UnixStream,
    stop: &AtomicBool,
) {
    // A guest gone while this thread waits on the device: its work is cancelled, so the
    // wait ends and the session is released (see `hangup`).
    let gone = session.cancel_token();
    let cancel = gone.clone();
    let who = format!("guest {} (session {})", session.guest(), session.id());
    let _watch = super::hangup::watch(
        &sock,
        Box::new(move || {
            log::info!("{who}: connection closed; its work is cancelled");
            cancel.cancel();
        }),
    )
    .map_err(|e| {
        log::warn!(
            "guest {}: not watching its connection: {e}",
            session.guest()
        )
    })
    .ok();
    // Bulk inline copies come back to back: keep the buffer of the largest frame.
    let mut dec = Decoder::<RequestFrame>::new(*session.limits()).retain_capacity(usize::MAX);
    let mut replies: Vec<u8> = Vec::with_capacity(FLUSH_BYTES);
    // Received bytes not yet taken by the decoder: buf[taken..got].
    let mut buf = vec![0u8; READ_CHUNK];
    let (mut taken, mut got) = (0usize, 0usize);
    let max_pipelined = session.limits().max_pipelined.max(1) as usize;
    let mut queued = 0usize;
    let push = |replies: &mut Vec<u8>, r: &Reply| {
        if r.encode(replies).is_err() {
            let _ = Reply::error(r.id, r.opcode, Status::ERROR_UNKNOWN, "reply too large")
                .encode(replies);
        }
    };
    let flush = |replies: &mut Vec<u8>, sock: &mut std::os::unix::net::UnixStream| -> bool {
        if replies.is_empty() {
            return true;
        }
        let ok = sock.write_all(replies).is_ok();
        replies.clear();
        if replies.capacity() > 4 * FLUSH_BYTES {
            replies.shrink_to(FLUSH_BYTES);
        }
        ok
    };
    'outer: loop {
        taken += dec.feed(&buf[taken..got]);
        loop {
            match dec.next_lent() {
                Ok(Some(lent)) => {
                    if lent.frame.request.sync_scope() != SyncScope::None
                        && !flush(&mut replies, &mut sock)
                    {
                        break 'outer;
                    }
                    if let Some(r) = session.handle(lent.frame, lent.data, None) {
                        if replies.is_empty() {
                            queued = 0;
                        }
                        if matches!(&r.body, ReplyBody::Data(d) if d.len() >= FLUSH_BYTES) {
                            // A large device-to-host copy: its data is written from the
                            // reply, after the replies before it and its header, not
                            // copied into `replies` (which would grow to its size).
                            match r.encode_head(&mut replies) {
                                Ok(data) => {
                                    if !flush(&mut replies, &mut sock)
                                        || sock.write_all(data).is_err()
                                    {
                                        break 'outer;
                                    }
                                    // Its buffer serves the next copy.
                                    session.recycle(r.body);
                                }
                                Err(_) => push(&mut replies, &r),
                            }
                        } else {
                            push(&mut replies, &r);
                            queued += 1;
                            session.recycle(r.body);
                        }
                    }
                    if session.is_closed() {
                        flush(&mut replies, &mut sock);
                        break 'outer;
                    }
                    if gone.is_cancelled() {
                        // Nobody reads the replies of what it sent before it went.
                        break 'outer;
                    }
                    // At most `max_pipelined` replies wait in the server: beyond it the
                    // (blocking) write holds this guest until it reads.
                    if (replies.len() >= FLUSH_BYTES || queued >= max_pipelined)
                        && !flush(&mut replies, &mut sock)
                    {
                        break 'outer;
                    }
                }
                Ok(None) => break,
                Err(e) => match e.answerable() {
                    Some(r) => {
                        if let Some(reply) = session.refused(r, &e.to_string()) {
                            push(&mut replies, &reply);
                        }
                        if session.is_closed() {
                            // Its id was not above the last one: the closing notice was
                            // the last frame.
                            flush(&mut replies, &mut sock);
                            break 'outer;
                        }
                    }
                    None => {
                        log::warn!(
                            "guest {} (session {}): protocol violation, closing: {e}",
                            session.guest(),
                            session.id()
                        );
                        push(
                            &mut replies,
                            &Reply::closing_notice(
                                Status::ERROR_INVALID_VALUE,
                                format!("protocol violation: {e}"),
                            ),
                        );
                        flush(&mut replies, &mut sock);
                        break 'outer;
                    }
                },
            }
        }
        if taken < got {
            // The decoder had no room for all of it: frames were taken out, feed on.
            continue;
        }
        if !flush(&mut replies, &mut sock) {
            break;
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match std::io::Read::read(&mut sock, &mut buf) {
            Ok(0) => break,
            Ok(n) => (taken, got) = (0, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if stop.load(Ordering::SeqCst) {
        push(
            &mut replies,
            &Reply::closing_notice(Status::ERROR_DEINITIALIZED, "the server is shutting down"),
        );
        flush(&mut replies, &mut sock);
    }
    drop(session);
    let _ = sock.shutdown(std::net::Shutdown::Both);
}

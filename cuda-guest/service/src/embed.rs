//! The embedding API: a VMM that serves the protocol on its own virtio device hands the
//! service whole frames from its queues and gets the reply bytes back. Bulk data may be
//! given as guest-physical scatter-gather lists, resolved through `vm-memory` and copied
//! straight between guest RAM and the device (no intermediate buffer).

use vm_memory::GuestMemoryMmap;

use super::{Service, Session};
use vmgpu_cuda_proto::{ClientHello, Decoded, Features, Reply, RequestFrame, ServerHello, Status};

/// A guest's session on a VMM's own device. Drive it from one thread at a time (the
/// device's queue handler): [`EmbeddedSession::handshake`] once, then
/// [`EmbeddedSession::handle_frame`] per request frame. Dropping it releases everything
/// the guest held.
///
/// ```
/// use vmgpu_cuda_proto::{ClientHello, Features, Request, RequestFrame};
/// use vmgpu_cuda_service::{BackendChoice, Service, ServiceConfig};
/// use vm_memory::{GuestAddress, GuestMemoryMmap};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let svc = Service::new(BackendChoice::Simulator(Default::default()), ServiceConfig::default())?;
/// let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)])?;
/// let mut s = svc.session("vm-1")?;
/// let hello = s.handshake(&ClientHello::new(Features::ALL, 1 << 20).encode());
/// assert_eq!(&hello[0..4], b"VGPS");
/// let ping = RequestFrame::new(1, Request::Ping { data: vec![1, 2, 3] }).to_bytes()?;
/// let reply = s.handle_frame(&ping, &mem);
/// assert!(!reply.is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EmbeddedSession {
    service: Service,
    guest: String,
    id: u64,
    session: Option<Session>,
    ended: bool,
}

impl EmbeddedSession {
    pub(super) fn new(service: Service, guest: &str, id: u64) -> Self {
        EmbeddedSession {
            service,
            guest: guest.into(),
            id,
            session: None,
            ended: false,
        }
    }

    /// Answers the guest's `ClientHello` (the 24 bytes) with the `ServerHello` (64
    /// bytes). The embedding transport offers `SCATTER_GATHER` and `PIPELINING`. A bad
    /// hello gets a refusal and the session stays unusable.
    pub fn handshake(&mut self, client_hello: &[u8]) -> Vec<u8> {
        let hello = match ClientHello::decode(client_hello) {
            Ok(Decoded::Frame { frame, .. }) => frame,
            _ => {
                self.ended = true;
                return ServerHello::refusal(Status::ERROR_INVALID_VALUE, self.id)
                    .encode()
                    .to_vec();
            }
        };
        let answer = ServerHello::answer(
            &hello,
            self.service.session_limits(),
            Features::ALL,
            self.id,
        );
        if answer.status.is_success() {
            self.session = Some(self.service.open_session(
                &self.guest,
                self.id,
                answer.limits,
                answer.features,
            ));
        } else {
            self.ended = true;
        }
        answer.encode().to_vec()
    }

    /// Runs one whole request frame; returns the reply's bytes: empty for a `NO_REPLY`
    /// request, the closing notice after a protocol violation (the session then ends:
    /// everything is released and later frames get the closing notice again).
    pub fn handle_frame(&mut self, frame: &[u8], mem: &GuestMemoryMmap) -> Vec<u8> {
        let mut out = Vec::new();
        let Some(session) = self.session.as_mut().filter(|_| !self.ended) else {
            let _ =
                Reply::closing_notice(Status::ERROR_DEINITIALIZED, "no session").encode(&mut out);
            return out;
        };
        let limits = *session.limits();
        let reply = match RequestFrame::decode_lent(frame, &limits) {
            Ok(Decoded::Frame { frame: lent, len }) if len == frame.len() => {
                session.handle(lent.frame, lent.data, Some(mem))
            }
            Ok(_) => Some(self.violation("the buffer is not exactly one frame")),
            Err(e) => match e.answerable() {
                Some(r) => session.refused(r, &e.to_string()),
                None => Some(self.violation(&e.to_string())),
            },
        };
        if let Some(r) = reply {
            if r.encode(&mut out).is_err() {
                out.clear();
                let _ = Reply::error(r.id, r.opcode, Status::ERROR_UNKNOWN, "reply too large")
                    .encode(&mut out);
            }
            if let Some(s) = self.session.as_mut() {
                // A device-to-host copy's buffer serves the next one.
                s.recycle(r.body);
            }
        }
        if self.session.as_ref().is_some_and(|s| s.is_closed()) {
            self.ended = true;
            self.session = None;
        }
        out
    }

    fn violation(&mut self, why: &str) -> Reply {
        log::warn!(
            "guest {} (session {}): protocol violation, session ended: {why}",
            self.guest,
            self.id
        );
        self.ended = true;
        self.session = None;
        Reply::closing_notice(
            Status::ERROR_INVALID_VALUE,
            format!("protocol violation: {why}"),
        )
    }

    /// The session, once the handshake is done (for its counters).
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }
}

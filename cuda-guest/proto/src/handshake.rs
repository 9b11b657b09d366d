//! The handshake: the client's hello, then the server's, which accepts (and fixes the
//! session's version, features and limits) or refuses.
//!
//! ```text
//! ClientHello, 24 bytes            ServerHello, 64 bytes
//!  0 4 magic "VGPC"                 0 4 magic "VGPS"       32 4 max_inline
//!  4 2 major                        4 2 major              36 4 max_module
//!  6 2 minor                        6 2 minor              40 4 max_sg_entries
//!  8 8 features wanted              8 4 status (CUresult)  44 4 max_params
//! 16 4 max_frame it accepts        12 4 max_frame          48 4 max_param_bytes
//! 20 4 reserved (0)                16 8 features granted   52 4 max_name
//!                                  24 8 session id         56 4 max_objects
//!                                                          60 4 max_pipelined
//! ```

use super::decoder::Decoded;
use super::error::HandshakeError;
use super::{Features, Limits, Status, FRAME_OVERHEAD, MIN_FRAME, VERSION_MAJOR, VERSION_MINOR};

/// Bytes of a [`ClientHello`].
pub const CLIENT_HELLO_LEN: usize = 24;
/// Bytes of a [`ServerHello`].
pub const SERVER_HELLO_LEN: usize = 64;

const CLIENT_MAGIC: [u8; 4] = *b"VGPC";
const SERVER_MAGIC: [u8; 4] = *b"VGPS";

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn magic_at(b: &[u8], expected: [u8; 4]) -> Result<(), HandshakeError> {
    let found = [b[0], b[1], b[2], b[3]];
    if found != expected {
        return Err(HandshakeError::BadMagic { found, expected });
    }
    Ok(())
}

/// The client's opening message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello {
    /// Its protocol major version.
    pub major: u16,
    /// Its protocol minor version.
    pub minor: u16,
    /// Features it wants.
    pub features: Features,
    /// The largest frame it accepts (at least [`MIN_FRAME`]).
    pub max_frame: u32,
}

impl ClientHello {
    /// A hello of this crate's version.
    pub fn new(features: Features, max_frame: u32) -> Self {
        ClientHello {
            major: VERSION_MAJOR,
            minor: VERSION_MINOR,
            features,
            max_frame,
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> [u8; CLIENT_HELLO_LEN] {
        let mut b = [0u8; CLIENT_HELLO_LEN];
        b[0..4].copy_from_slice(&CLIENT_MAGIC);
        b[4..6].copy_from_slice(&self.major.to_le_bytes());
        b[6..8].copy_from_slice(&self.minor.to_le_bytes());
        b[8..16].copy_from_slice(&self.features.0.to_le_bytes());
        b[16..20].copy_from_slice(&self.max_frame.to_le_bytes());
        b
    }

    /// Decodes a hello at the front of `buf`. The magic is checked as soon as its 4 bytes
    /// are there. Any version is returned: [`ServerHello::answer`] decides.
    pub fn decode(buf: &[u8]) -> Result<Decoded<Self>, HandshakeError> {
        if buf.len() >= 4 {
            magic_at(buf, CLIENT_MAGIC)?;
        }
        if buf.len() < CLIENT_HELLO_LEN {
            return Ok(Decoded::NeedMore(CLIENT_HELLO_LEN - buf.len()));
        }
        let reserved = u32_at(buf, 20);
        if reserved != 0 {
            return Err(HandshakeError::Reserved {
                offset: 20,
                value: reserved.into(),
            });
        }
        Ok(Decoded::Frame {
            frame: ClientHello {
                major: u16_at(buf, 4),
                minor: u16_at(buf, 6),
                features: Features(u64_at(buf, 8)),
                max_frame: u32_at(buf, 16),
            },
            len: CLIENT_HELLO_LEN,
        })
    }
}

/// The server's answer to a [`ClientHello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    /// The session's major version (the server's when it refuses).
    pub major: u16,
    /// The session's minor version: the smaller of the two.
    pub minor: u16,
    /// `SUCCESS`, or why the session is refused (then the server closes).
    pub status: Status,
    /// Features granted: what both sides have.
    pub features: Features,
    /// The session's number (for logs on both sides).
    pub session_id: u64,
    /// The session's limits.
    pub limits: Limits,
}

fn zero_limits() -> Limits {
    Limits {
        max_frame: 0,
        max_inline: 0,
        max_module: 0,
        max_sg_entries: 0,
        max_params: 0,
        max_param_bytes: 0,
        max_name: 0,
        max_objects: 0,
        max_pipelined: 0,
    }
}

impl ServerHello {
    /// The server's answer: refused with `ERROR_NOT_SUPPORTED` when the major versions
    /// differ, with `ERROR_INVALID_VALUE` when the client's `max_frame` is below
    /// [`MIN_FRAME`]; else accepted with the common minor version, the common features,
    /// and `server` limits shrunk to fit the client's `max_frame`.
    pub fn answer(
        client: &ClientHello,
        server: Limits,
        offered: Features,
        session_id: u64,
    ) -> ServerHello {
        let refuse = |status| ServerHello::refusal(status, session_id);
        if client.major != VERSION_MAJOR {
            return refuse(Status::ERROR_NOT_SUPPORTED);
        }
        if client.max_frame < MIN_FRAME {
            return refuse(Status::ERROR_INVALID_VALUE);
        }
        let mut l = server;
        l.max_frame = l.max_frame.min(client.max_frame);
        let room = l.max_frame.saturating_sub(FRAME_OVERHEAD);
        l.max_inline = l.max_inline.min(room);
        l.max_module = l.max_module.min(room);
        l.max_name = l.max_name.min(room);
        l.max_sg_entries = l.max_sg_entries.min(room / 16);
        l.max_param_bytes = l.max_param_bytes.min(room / 2);
        l.max_params = l.max_params.min((room - l.max_param_bytes) / 8);
        ServerHello {
            major: VERSION_MAJOR,
            // The smaller minor (trivially 0 while this crate is at 1.0).
            #[allow(clippy::unnecessary_min_or_max)]
            minor: VERSION_MINOR.min(client.minor),
            status: Status::SUCCESS,
            features: offered.intersect(client.features).intersect(Features::ALL),
            session_id,
            limits: l,
        }
    }

    /// A refusal with `status` (the server closes after sending it): this version, no
    /// features, all limits 0.
    pub fn refusal(status: Status, session_id: u64) -> ServerHello {
        ServerHello {
            major: VERSION_MAJOR,
            minor: VERSION_MINOR,
            status,
            features: Features::NONE,
            session_id,
            limits: zero_limits(),
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> [u8; SERVER_HELLO_LEN] {
        let mut b = [0u8; SERVER_HELLO_LEN];
        let l = &self.limits;
        b[0..4].copy_from_slice(&SERVER_MAGIC);
        b[4..6].copy_from_slice(&self.major.to_le_bytes());
        b[6..8].copy_from_slice(&self.minor.to_le_bytes());
        b[8..12].copy_from_slice(&self.status.0.to_le_bytes());
        b[12..16].copy_from_slice(&l.max_frame.to_le_bytes());
        b[16..24].copy_from_slice(&self.features.0.to_le_bytes());
        b[24..32].copy_from_slice(&self.session_id.to_le_bytes());
        let rest = [
            l.max_inline,
            l.max_module,
            l.max_sg_entries,
            l.max_params,
            l.max_param_bytes,
            l.max_name,
            l.max_objects,
            l.max_pipelined,
        ];
        for (i, v) in rest.iter().enumerate() {
            b[32 + 4 * i..36 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Decodes the server's hello at the front of `buf`, as the client does: a refusal
    /// is [`HandshakeError::Refused`], another major version
    /// [`HandshakeError::Incompatible`], unusable limits [`HandshakeError::BadLimits`].
    pub fn decode(buf: &[u8]) -> Result<Decoded<Self>, HandshakeError> {
        if buf.len() >= 4 {
            magic_at(buf, SERVER_MAGIC)?;
        }
        if buf.len() < SERVER_HELLO_LEN {
            return Ok(Decoded::NeedMore(SERVER_HELLO_LEN - buf.len()));
        }
        let at = |i: usize| u32_at(buf, 32 + 4 * i);
        let hello = ServerHello {
            major: u16_at(buf, 4),
            minor: u16_at(buf, 6),
            status: Status(u32_at(buf, 8)),
            features: Features(u64_at(buf, 16)),
            session_id: u64_at(buf, 24),
            limits: Limits {
                max_frame: u32_at(buf, 12),
                max_inline: at(0),
                max_module: at(1),
                max_sg_entries: at(2),
                max_params: at(3),
                max_param_bytes: at(4),
                max_name: at(5),
                max_objects: at(6),
                max_pipelined: at(7),
            },
        };
        if !hello.status.is_success() {
            return Err(HandshakeError::Refused {
                status: hello.status,
            });
        }
        if hello.major != VERSION_MAJOR {
            return Err(HandshakeError::Incompatible {
                ours_major: VERSION_MAJOR,
                ours_minor: VERSION_MINOR,
                theirs_major: hello.major,
                theirs_minor: hello.minor,
            });
        }
        hello.limits.validate()?;
        Ok(Decoded::Frame {
            frame: hello,
            len: SERVER_HELLO_LEN,
        })
    }
}

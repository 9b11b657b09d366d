//! Incremental decoding: [`Message::decode`] looks at the front of a buffer and says
//! "need more" or "here is a frame of `len` bytes"; [`Decoder`] keeps the bytes of a
//! stream fed in pieces and hands out whole frames.

use std::marker::PhantomData;

use super::error::DecodeError;
use super::Limits;

/// What the front of a buffer holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<T> {
    /// Not a whole frame yet: at least this many more bytes are needed.
    NeedMore(usize),
    /// A frame, which took the first `len` bytes.
    Frame {
        /// The frame.
        frame: T,
        /// Its length in bytes.
        len: usize,
    },
}

/// A frame type: [`RequestFrame`](super::RequestFrame) (what a server decodes) or
/// [`Reply`](super::Reply) (what a client decodes).
pub trait Message: Sized {
    /// Decodes the frame at the front of `buf`. Never panics and allocates nothing for a
    /// field before checking it against `limits` and against the bytes present. The
    /// frame's length is checked as soon as its first 4 bytes are there, so an oversized
    /// frame is refused before it is buffered.
    fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded<Self>, DecodeError>;
}

/// Assembles frames from a byte stream. It buffers at most `max_frame` bytes: feed it
/// with [`Decoder::feed`] (or [`Decoder::read_from`]) and take frames with
/// [`Decoder::next_frame`] until it returns `Ok(None)`.
///
/// After [`DecodeError::Rejected`] the bad frame has been skipped and decoding goes on;
/// after a fatal error ([`DecodeError::is_fatal`]) every later call returns that error.
#[derive(Debug)]
pub struct Decoder<M> {
    /// `buf[..filled]` are the bytes held; `buf[filled..]` is initialised room that
    /// [`Decoder::read_from`] reads into, kept so that a large frame arriving in small
    /// pieces is not zero-filled again for each read (that was quadratic in its size).
    buf: Vec<u8>,
    filled: usize,
    start: usize,
    limits: Limits,
    failed: Option<DecodeError>,
    /// Length of the frame lent out by [`Decoder::next_lent`], consumed at the next call.
    pending: usize,
    /// Buffer capacity kept once the buffer is empty.
    keep: usize,
    _m: PhantomData<fn() -> M>,
}

/// Capacity kept after a large frame has been taken out.
const KEEP_CAPACITY: usize = 64 << 10;
/// Bytes read at once into the buffer when the frame's length is not known yet.
const PIECE: usize = 4096;
/// Bytes of a data reply before its data: the reply header, then `len: u32`.
const DATA_PREFIX: usize = super::REPLY_HEADER_LEN + 4;

impl<M: Message> Decoder<M> {
    /// A decoder for a session with these limits.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            buf: Vec::new(),
            filled: 0,
            start: 0,
            limits,
            failed: None,
            pending: 0,
            keep: KEEP_CAPACITY,
            _m: PhantomData,
        }
    }

    /// Keeps up to `bytes` of buffer capacity after large frames (default 64 KiB), so
    /// that a stream of large frames (bulk inline copies) does not regrow the buffer for
    /// each one; at most `max_frame` is ever held.
    pub fn retain_capacity(mut self, bytes: usize) -> Self {
        self.keep = bytes.min(self.limits.max_frame as usize);
        self
    }

    /// The limits it checks.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes held that are not yet part of a returned frame.
    pub fn buffered(&self) -> usize {
        self.filled - self.start - self.pending
    }

    /// How many more bytes may be fed now (at most `max_frame` are held).
    pub fn room(&self) -> usize {
        (self.limits.max_frame as usize).saturating_sub(self.buffered())
    }

    /// Drops the frame lent out by [`Decoder::next_lent`].
    fn settle(&mut self) {
        if self.pending > 0 {
            let n = std::mem::take(&mut self.pending);
            self.consume(n);
        }
    }

    fn compact(&mut self) {
        self.settle();
        if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
    }

    /// Takes as many bytes of `data` as there is [`Decoder::room`] for; returns how many.
    /// When it takes fewer than offered, take frames out first.
    pub fn feed(&mut self, data: &[u8]) -> usize {
        self.compact();
        let n = data.len().min(self.room());
        let end = self.filled + n;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        self.buf[self.filled..end].copy_from_slice(&data[..n]);
        self.filled = end;
        n
    }

    /// Reads once from `src` into the buffer (at most [`Decoder::room`] bytes, and at least
    /// what the frame being assembled still needs when that is known); returns what
    /// `read` returned, so `Ok(0)` is the end of the stream. With no room left (a whole
    /// frame is waiting: take it with [`Decoder::next_frame`]) it reads nothing and
    /// returns an `InvalidInput` error.
    pub fn read_from(&mut self, src: &mut impl std::io::Read) -> std::io::Result<usize> {
        self.compact();
        let want = match super::frame::read_header(&self.buf[..self.filled], &self.limits) {
            Ok(super::frame::HeaderStep::NeedMore(n)) => n.max(PIECE),
            _ => PIECE,
        };
        self.read_piece(src, want)
    }

    /// Reads once from `src` into the buffer, at most `want` bytes (and [`Decoder::room`]).
    fn read_piece(&mut self, src: &mut impl std::io::Read, want: usize) -> std::io::Result<usize> {
        self.compact();
        if self.room() == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "decoder full: take the buffered frames first",
            ));
        }
        let want = want.min(self.room());
        let (old, end) = (self.filled, self.filled + want);
        // Room is zero-filled once (a large frame's whole remainder at its first piece),
        // not at every read.
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        let r = src.read(&mut self.buf[old..end]);
        let got = *r.as_ref().unwrap_or(&0);
        self.filled = old + got.min(want);
        r
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<M>, DecodeError> {
        self.settle();
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match M::decode(&self.buf[self.start..self.filled], &self.limits) {
            Ok(Decoded::NeedMore(_)) => Ok(None),
            Ok(Decoded::Frame { frame, len }) => {
                self.consume(len);
                Ok(Some(frame))
            }
            Err(e @ DecodeError::Rejected { frame_len, .. }) => {
                self.consume(frame_len as usize);
                Err(e)
            }
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    fn consume(&mut self, len: usize) {
        self.start = (self.start + len).min(self.filled);
        if self.start == self.filled {
            self.filled = 0;
            self.start = 0;
            if self.buf.capacity() > self.keep {
                self.buf.clear();
                self.buf.shrink_to(self.keep);
            }
        }
    }
}

impl Decoder<super::RequestFrame> {
    /// The next whole request with its inline data left in the decoder's buffer (see
    /// [`RequestFrame::decode_lent`](super::RequestFrame::decode_lent)); `Ok(None)` when
    /// more bytes are needed. The frame's bytes are released at the next call.
    pub fn next_lent(&mut self) -> Result<Option<super::LentRequest<'_>>, DecodeError> {
        self.settle();
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match super::request::decode_request(&self.buf[self.start..self.filled], &self.limits, true)
        {
            Ok(Decoded::NeedMore(_)) => Ok(None),
            Ok(Decoded::Frame {
                frame: (frame, lent),
                len,
            }) => {
                self.pending = len;
                let base = self.start + super::HEADER_LEN;
                let data = match lent {
                    Some((at, n)) => &self.buf[base + at..base + at + n],
                    None => &[],
                };
                Ok(Some(super::LentRequest { frame, data }))
            }
            Err(e @ DecodeError::Rejected { frame_len, .. }) => {
                self.consume(frame_len as usize);
                Err(e)
            }
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }
}

impl Decoder<super::Reply> {
    /// Reads the reply to request `id` with its data going from `src` straight into
    /// `dst`, when that reply is a successful data reply ([`ReplyBody::Data`]) of exactly
    /// `dst.len()` bytes (a device-to-host copy's): the data is neither buffered in the
    /// decoder nor decoded into a vector of its own, so a large reply costs no buffer of
    /// its size, no zero-fill and no copy but the one from the stream. Returns the reply
    /// with an empty body (its data is in `dst`).
    ///
    /// Returns `Ok(None)`, having read at most a few KiB into the buffer and nothing into
    /// `dst`, when the next frame is anything else (a failure, another request's reply, a
    /// closing notice, a malformed frame), or at the end of the stream: then take it with
    /// [`Decoder::next_frame`] and [`Decoder::read_from`] as usual. After an `Err` the
    /// stream is out of step (part of the frame may have gone to `dst`): use the decoder
    /// no more.
    ///
    /// [`ReplyBody::Data`]: super::ReplyBody::Data
    pub fn read_data_into(
        &mut self,
        src: &mut impl std::io::Read,
        id: u64,
        dst: &mut [u8],
    ) -> std::io::Result<Option<super::Reply>> {
        self.settle();
        if self.failed.is_some() {
            return Ok(None);
        }
        let opcode = loop {
            match data_prefix(
                &self.buf[self.start..self.filled],
                id,
                dst.len(),
                &self.limits,
            ) {
                Prefix::Data(opcode) => break opcode,
                Prefix::Other => return Ok(None),
                // A piece, not the whole frame: the frame's data is to go to `dst`.
                Prefix::NeedMore => match self.read_piece(src, PIECE) {
                    Ok(0) => return Ok(None),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                },
            }
        };
        // What of the data was read with the prefix, then the rest from `src`.
        let held = (self.filled - self.start - DATA_PREFIX).min(dst.len());
        let at = self.start + DATA_PREFIX;
        dst[..held].copy_from_slice(&self.buf[at..at + held]);
        self.consume(DATA_PREFIX + held);
        let mut done = held;
        while done < dst.len() {
            match src.read(&mut dst[done..]) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the stream ended {} bytes into a {}-byte data reply",
                            DATA_PREFIX + done,
                            DATA_PREFIX + dst.len()
                        ),
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(super::Reply::ok(
            id,
            opcode,
            super::ReplyBody::Data(Vec::new()),
        )))
    }
}

/// What the front of a buffer says about a data reply expected there.
enum Prefix {
    /// Too few bytes to tell.
    NeedMore,
    /// Not a successful data reply to the request with exactly the bytes expected.
    Other,
    /// One (its opcode): its data follows the first [`DATA_PREFIX`] bytes.
    Data(super::Opcode),
}

/// Whether `buf` starts with a successful data reply to request `id` carrying `n` bytes,
/// checked as [`Reply::decode`](super::Reply) would (flags, status, cause, reserved field,
/// length, limits): its length is looked at first, so that no byte past a shorter frame
/// is asked for.
fn data_prefix(buf: &[u8], id: u64, n: usize, limits: &Limits) -> Prefix {
    if buf.len() < 4 {
        return Prefix::NeedMore;
    }
    let u32_at = |at: usize| u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    let u16_at = |at: usize| u16::from_le_bytes([buf[at], buf[at + 1]]);
    let length = u32_at(0) as usize;
    if n > limits.max_inline as usize
        || length != DATA_PREFIX + n
        || length > limits.max_frame as usize
    {
        return Prefix::Other;
    }
    if buf.len() < DATA_PREFIX {
        return Prefix::NeedMore;
    }
    let mut frame_id = [0u8; 8];
    frame_id.copy_from_slice(&buf[4..12]);
    let mut cause_id = [0u8; 8];
    cause_id.copy_from_slice(&buf[24..32]);
    let opcode = super::Opcode::from_u16(u16_at(12));
    match opcode {
        Some(op)
            if id != 0
                && u64::from_le_bytes(frame_id) == id
                && op.reply_body() == super::commands::BodyKind::Data
                && u16_at(14) == super::FLAG_REPLY
                && u32_at(16) == 0
                && u16_at(20) == 0
                && u16_at(22) == 0
                && u64::from_le_bytes(cause_id) == 0
                && u32_at(32) as usize == n =>
        {
            Prefix::Data(op)
        }
        _ => Prefix::Other,
    }
}

/// A frame of either direction, told apart by its `REPLY` flag: for tools that watch
/// both directions of a connection (traces, captures).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A client's request.
    Request(super::RequestFrame),
    /// A server's reply.
    Reply(super::Reply),
}

impl Message for Frame {
    fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded<Self>, DecodeError> {
        // The length is checked first, whatever the direction.
        if let super::frame::HeaderStep::NeedMore(n) = super::frame::read_header(buf, limits)? {
            return Ok(Decoded::NeedMore(n));
        }
        let flags = u16::from_le_bytes([buf[14], buf[15]]);
        if flags & super::FLAG_REPLY != 0 {
            Ok(map(super::Reply::decode(buf, limits)?, Frame::Reply))
        } else {
            Ok(map(
                super::RequestFrame::decode(buf, limits)?,
                Frame::Request,
            ))
        }
    }
}

fn map<T, U>(d: Decoded<T>, f: impl FnOnce(T) -> U) -> Decoded<U> {
    match d {
        Decoded::NeedMore(n) => Decoded::NeedMore(n),
        Decoded::Frame { frame, len } => Decoded::Frame {
            frame: f(frame),
            len,
        },
    }
}

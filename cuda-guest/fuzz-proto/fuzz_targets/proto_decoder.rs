//! Fuzzes the guest protocol's decoders. The first byte picks the limits (default or
//! small) and the piece size the stream decoder is fed with; the rest is the byte stream.
//! Checked: no panic; every frame that decodes re-encodes to exactly its bytes; the
//! stream decoder gives the same frames, errors and consumption as the one-shot decoder;
//! it never holds more than `max_frame` bytes.
#![no_main]

use cuda_guest::proto::*;
use libfuzzer_sys::fuzz_target;

fn small() -> Limits {
    Limits {
        max_frame: 4096,
        max_inline: 512,
        max_module: 1024,
        max_sg_entries: 8,
        max_params: 8,
        max_param_bytes: 256,
        max_name: 64,
        max_objects: 16,
        max_pipelined: 8,
    }
}

/// One-shot decoding of consecutive frames, as a reference for the stream decoder.
fn one_shot<M: Message>(mut b: &[u8], l: &Limits) -> Vec<Result<Vec<u8>, DecodeError>> {
    let mut out = Vec::new();
    loop {
        match M::decode(b, l) {
            Ok(Decoded::NeedMore(_)) => return out,
            Ok(Decoded::Frame { len, .. }) => {
                out.push(Ok(b[..len].to_vec()));
                b = &b[len..];
            }
            Err(e) => {
                let skip = match &e {
                    DecodeError::Rejected { frame_len, .. } => Some(*frame_len as usize),
                    _ => None,
                };
                out.push(Err(e));
                match skip {
                    Some(n) => b = &b[n..],
                    None => return out,
                }
            }
        }
    }
}

fn check<M: Message + PartialEq + std::fmt::Debug>(
    data: &[u8],
    l: &Limits,
    piece: usize,
    enc: fn(&M, &mut Vec<u8>) -> Result<usize, EncodeError>,
) {
    // Canonical: whatever decodes re-encodes to its bytes.
    let reference = one_shot::<M>(data, l);
    for r in &reference {
        if let Ok(bytes) = r {
            let Ok(Decoded::Frame { frame, len }) = M::decode(bytes, l) else {
                panic!("a frame decodes alone");
            };
            assert_eq!(len, bytes.len());
            let mut again = Vec::new();
            enc(&frame, &mut again).expect("what decodes encodes");
            assert_eq!(&again, bytes, "canonical encoding");
        }
    }
    // The stream decoder agrees, whatever the piece size.
    let mut d = Decoder::<M>::new(*l);
    let mut got: Vec<Result<Vec<u8>, DecodeError>> = Vec::new();
    let mut rest = data;
    let mut stalled = 0;
    'outer: while !rest.is_empty() && stalled < 2 {
        let took = d.feed(&rest[..piece.min(rest.len())]);
        assert!(d.buffered() <= l.max_frame as usize);
        rest = &rest[took..];
        stalled = if took == 0 { stalled + 1 } else { 0 };
        loop {
            match d.next_frame() {
                Ok(None) => break,
                Ok(Some(f)) => {
                    let mut b = Vec::new();
                    enc(&f, &mut b).unwrap();
                    got.push(Ok(b));
                }
                Err(e) => {
                    let fatal = e.is_fatal();
                    got.push(Err(e));
                    if fatal {
                        break 'outer;
                    }
                }
            }
        }
    }
    assert_eq!(got, reference);
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let l = if sel & 1 == 0 {
        Limits::default()
    } else {
        small()
    };
    let piece = usize::from(sel >> 1) + 1;
    check::<RequestFrame>(rest, &l, piece, |f, o| f.encode(o));
    check::<Reply>(rest, &l, piece, |f, o| f.encode(o));
    // Lent decoding agrees with owned decoding.
    match (
        RequestFrame::decode(rest, &l),
        RequestFrame::decode_lent(rest, &l),
    ) {
        (
            Ok(Decoded::Frame { frame, len }),
            Ok(Decoded::Frame {
                frame: lent,
                len: l2,
            }),
        ) => {
            assert_eq!(len, l2);
            let mut back = lent.frame.clone();
            match &mut back.request {
                Request::MemcpyHtoD {
                    src: HostSource::Inline(d),
                    ..
                }
                | Request::Ping { data: d } => d.extend_from_slice(lent.data),
                _ => assert!(lent.data.is_empty()),
            }
            assert_eq!(back, frame);
        }
        (Ok(Decoded::NeedMore(a)), Ok(Decoded::NeedMore(b))) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("owned {a:?} and lent {b:?} disagree"),
    }
    check::<Frame>(rest, &l, piece, |f, o| match f {
        Frame::Request(r) => r.encode(o),
        Frame::Reply(r) => r.encode(o),
    });
    if let Ok(Decoded::Frame { frame, .. }) = ClientHello::decode(rest) {
        assert_eq!(&frame.encode()[..], &rest[..CLIENT_HELLO_LEN]);
        let s = ServerHello::answer(&frame, Limits::default(), Features::ALL, 1);
        if s.status.is_success() {
            s.limits.validate().expect("negotiated limits are valid");
            assert!(matches!(
                ServerHello::decode(&s.encode()),
                Ok(Decoded::Frame { .. })
            ));
        }
    }
    if let Ok(Decoded::Frame { frame, .. }) = ServerHello::decode(rest) {
        assert_eq!(&frame.encode()[..], &rest[..SERVER_HELLO_LEN]);
    }
});

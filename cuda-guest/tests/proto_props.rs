//! Properties of the guest protocol: every request and reply survives encode and decode;
//! the encoding is canonical (whatever decodes re-encodes to the same bytes); arbitrary
//! and mutated bytes never panic the decoders; the stream decoder gives the same frames
//! whatever the pieces it is fed.

use cuda_guest::proto::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn limits() -> Limits {
    Limits::default()
}

fn sg() -> impl Strategy<Value = Vec<SgEntry>> {
    vec(
        (0u64..1 << 40, 1u64..1 << 20).prop_map(|(gpa, len)| SgEntry { gpa, len }),
        0..8,
    )
}

fn stream() -> impl Strategy<Value = Option<StreamId>> {
    proptest::option::of(any::<u64>().prop_map(StreamId))
}

fn width() -> impl Strategy<Value = MemsetWidth> {
    prop_oneof![
        Just(MemsetWidth::W8),
        Just(MemsetWidth::W16),
        Just(MemsetWidth::W32)
    ]
}

fn params() -> impl Strategy<Value = KernelParams> {
    vec(vec(any::<u8>(), 0..24), 0..10).prop_map(|args| {
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        KernelParams::pack(&refs)
    })
}

fn request() -> BoxedStrategy<Request> {
    use Request as R;
    let dev = any::<u32>();
    let h = any::<u64>();
    prop_oneof![
        vec(any::<u8>(), 0..64).prop_map(|data| R::Ping { data }),
        any::<u32>().prop_map(|flags| R::Init { flags }),
        Just(R::DriverGetVersion),
        Just(R::Goodbye),
        Just(R::DeviceGetCount),
        dev.prop_map(|ordinal| R::DeviceGet { ordinal }),
        dev.prop_map(|device| R::DeviceGetName { device }),
        dev.prop_map(|device| R::DeviceGetUuid { device }),
        dev.prop_map(|device| R::DeviceGetPciBusId { device }),
        (dev, any::<i32>())
            .prop_map(|(device, attribute)| R::DeviceGetAttribute { device, attribute }),
        dev.prop_map(|device| R::DeviceTotalMem { device }),
        dev.prop_map(|device| R::DeviceComputeCapability { device }),
        dev.prop_map(|device| R::PrimaryCtxRetain { device }),
        dev.prop_map(|device| R::PrimaryCtxRelease { device }),
        h.prop_map(|v| R::CtxSetCurrent { ctx: ContextId(v) }),
        Just(R::CtxSynchronize),
        vec(any::<u8>(), 0..256).prop_map(|image| R::ModuleLoadData { image }),
        h.prop_map(|v| R::ModuleUnload {
            module: ModuleId(v)
        }),
        (h, "[a-zA-Z_][a-zA-Z0-9_]{0,40}").prop_map(|(v, name)| R::ModuleGetFunction {
            module: ModuleId(v),
            name
        }),
        h.prop_map(|bytes| R::MemAlloc { bytes }),
        h.prop_map(|v| R::MemFree { ptr: DevicePtr(v) }),
        Just(R::MemGetInfo),
        (h, any::<u32>(), h, width(), stream()).prop_map(|(d, value, count, width, stream)| {
            R::Memset {
                dst: DevicePtr(d),
                value,
                count,
                width,
                stream,
            }
        }),
        (h, vec(any::<u8>(), 0..512), stream()).prop_map(|(d, data, stream)| R::MemcpyHtoD {
            dst: DevicePtr(d),
            src: HostSource::Inline(data),
            stream
        }),
        (h, sg(), stream()).prop_map(|(d, list, stream)| R::MemcpyHtoD {
            dst: DevicePtr(d),
            src: HostSource::Guest(list),
            stream
        }),
        (h, 0u64..1 << 20, stream()).prop_map(|(s, bytes, stream)| R::MemcpyDtoH {
            src: DevicePtr(s),
            bytes,
            dst: HostDest::Inline,
            stream
        }),
        (h, sg(), stream()).prop_map(|(s, list, stream)| R::MemcpyDtoH {
            src: DevicePtr(s),
            bytes: list.iter().map(|e| e.len).sum(),
            dst: HostDest::Guest(list),
            stream
        }),
        (h, h, h, stream()).prop_map(|(d, s, bytes, stream)| R::MemcpyDtoD {
            dst: DevicePtr(d),
            src: DevicePtr(s),
            bytes,
            stream
        }),
        (any::<u32>(), any::<i32>())
            .prop_map(|(flags, priority)| R::StreamCreate { flags, priority }),
        h.prop_map(|v| R::StreamDestroy {
            stream: StreamId(v)
        }),
        h.prop_map(|v| R::StreamSynchronize {
            stream: StreamId(v)
        }),
        h.prop_map(|v| R::StreamQuery {
            stream: StreamId(v)
        }),
        (h, h, any::<u32>()).prop_map(|(s, e, flags)| R::StreamWaitEvent {
            stream: StreamId(s),
            event: EventId(e),
            flags
        }),
        any::<u32>().prop_map(|flags| R::EventCreate { flags }),
        h.prop_map(|v| R::EventDestroy { event: EventId(v) }),
        (h, h).prop_map(|(e, s)| R::EventRecord {
            event: EventId(e),
            stream: StreamId(s)
        }),
        h.prop_map(|v| R::EventSynchronize { event: EventId(v) }),
        h.prop_map(|v| R::EventQuery { event: EventId(v) }),
        (h, h).prop_map(|(a, b)| R::EventElapsedTime {
            start: EventId(a),
            end: EventId(b)
        }),
        (
            h,
            any::<[u32; 3]>(),
            any::<[u32; 3]>(),
            any::<u32>(),
            h,
            params()
        )
            .prop_map(
                |(f, grid, block, shared_bytes, s, params)| R::LaunchKernel {
                    function: FunctionId(f),
                    config: cuda_guest::driver::LaunchConfig {
                        grid,
                        block,
                        shared_bytes,
                    },
                    stream: StreamId(s),
                    params,
                }
            ),
    ]
    .boxed()
}

fn request_frame() -> impl Strategy<Value = RequestFrame> {
    (1u64.., any::<bool>(), request()).prop_map(|(id, want_no_reply, request)| RequestFrame {
        id,
        no_reply: want_no_reply && request.opcode().pipelined(),
        request,
    })
}

fn body_for(op: Opcode) -> BoxedStrategy<ReplyBody> {
    use Opcode as O;
    match op {
        O::Ping | O::MemcpyDtoH | O::MemcpyDtoHAsync => {
            vec(any::<u8>(), 0..256).prop_map(ReplyBody::Data).boxed()
        }
        O::DriverGetVersion | O::DeviceGetAttribute | O::FuncGetAttribute => {
            any::<i32>().prop_map(ReplyBody::Int).boxed()
        }
        O::DeviceGetCount => any::<u32>().prop_map(ReplyBody::Count).boxed(),
        O::DeviceGet => any::<u32>().prop_map(ReplyBody::Device).boxed(),
        O::DeviceGetName | O::DeviceGetPciBusId => "\\PC{0,60}".prop_map(ReplyBody::Text).boxed(),
        O::DeviceGetUuid => any::<[u8; 16]>().prop_map(ReplyBody::Uuid).boxed(),
        O::DeviceTotalMem => any::<u64>().prop_map(ReplyBody::Size).boxed(),
        O::DeviceComputeCapability => (any::<u32>(), any::<u32>())
            .prop_map(|(major, minor)| ReplyBody::ComputeCapability { major, minor })
            .boxed(),
        O::PrimaryCtxRetain | O::CtxCreate => any::<u64>()
            .prop_map(|v| ReplyBody::Context(ContextId(v)))
            .boxed(),
        O::ModuleGetGlobal => (any::<u64>(), any::<u64>())
            .prop_map(|(p, bytes)| ReplyBody::Global {
                dptr: cuda_guest::proto::DevicePtr(p),
                bytes,
            })
            .boxed(),
        O::ModuleLoadData => any::<u64>()
            .prop_map(|v| ReplyBody::Module(ModuleId(v)))
            .boxed(),
        O::ModuleGetFunction => (
            any::<u64>(),
            proptest::option::of(params().prop_map(|p| p.slots)),
        )
            .prop_map(|(f, params)| {
                ReplyBody::Function(FunctionInfo {
                    function: FunctionId(f),
                    params,
                })
            })
            .boxed(),
        O::MemAlloc => any::<u64>()
            .prop_map(|v| ReplyBody::DevicePtr(DevicePtr(v)))
            .boxed(),
        O::MemGetInfo => (any::<u64>(), any::<u64>())
            .prop_map(|(free, total)| ReplyBody::MemInfo { free, total })
            .boxed(),
        O::StreamCreate => any::<u64>()
            .prop_map(|v| ReplyBody::Stream(StreamId(v)))
            .boxed(),
        O::EventCreate => any::<u64>()
            .prop_map(|v| ReplyBody::Event(EventId(v)))
            .boxed(),
        // Finite values: NaN != NaN would fail the equality, not the codec (the bytes
        // property below covers every bit pattern).
        O::EventElapsedTime => (-1e9f32..1e9f32).prop_map(ReplyBody::ElapsedMs).boxed(),
        _ => Just(ReplyBody::Empty).boxed(),
    }
}

fn reply() -> impl Strategy<Value = Reply> {
    (0..Opcode::ALL.len(), 1u64.., 0u8..3).prop_flat_map(|(i, id, shape)| {
        let op = Opcode::ALL[i];
        match shape {
            0 => body_for(op).prop_map(move |b| Reply::ok(id, op, b)).boxed(),
            1 => (1u32.., "\\PC{0,80}")
                .prop_map(move |(s, d)| Reply::error(id, op, Status(s), d))
                .boxed(),
            _ => (1u32.., 1u64.., 0..Opcode::ALL.len(), "\\PC{0,20}")
                .prop_map(move |(s, cid, ci, d)| {
                    Reply::deferred(
                        id,
                        op,
                        Status(s),
                        Cause {
                            id: cid,
                            opcode: Opcode::ALL[ci],
                        },
                        d,
                    )
                })
                .boxed(),
        }
    })
}

/// Decodes one whole frame of `M` from `bytes` and re-encodes it.
fn reencode<M: Message>(
    bytes: &[u8],
    enc: impl Fn(&M, &mut Vec<u8>) -> Result<usize, EncodeError>,
) -> Option<Vec<u8>> {
    match M::decode(bytes, &limits()) {
        Ok(Decoded::Frame { frame, len }) => {
            let mut out = Vec::new();
            let n = enc(&frame, &mut out).expect("what decodes encodes");
            assert_eq!(n, len);
            Some(out)
        }
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn requests_round_trip(f in request_frame()) {
        let b = f.to_bytes().unwrap();
        prop_assert_eq!(b.len(), u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize);
        match RequestFrame::decode(&b, &limits()).unwrap() {
            Decoded::Frame { frame, len } => {
                prop_assert_eq!(len, b.len());
                prop_assert_eq!(frame, f);
            }
            Decoded::NeedMore(n) => prop_assert!(false, "needs {}", n),
        }
        // Every proper prefix asks for more, never errs.
        for cut in [0, 1, 3, 4, 15, 16, b.len() - 1] {
            if cut < b.len() {
                prop_assert!(matches!(
                    RequestFrame::decode(&b[..cut], &limits()),
                    Ok(Decoded::NeedMore(_))
                ));
            }
        }
    }

    #[test]
    fn lent_decoding_agrees(f in request_frame()) {
        let b = f.to_bytes().unwrap();
        let Ok(Decoded::Frame { frame: lent, len }) = RequestFrame::decode_lent(&b, &limits()) else {
            panic!("a whole frame");
        };
        prop_assert_eq!(len, b.len());
        let mut back = lent.frame.clone();
        match &mut back.request {
            Request::MemcpyHtoD { src: HostSource::Inline(d), .. } | Request::Ping { data: d } => {
                prop_assert!(d.is_empty());
                d.extend_from_slice(lent.data);
            }
            _ => prop_assert!(lent.data.is_empty()),
        }
        prop_assert_eq!(back, f);
    }

    #[test]
    fn replies_round_trip(r in reply()) {
        let b = r.to_bytes().unwrap();
        match Reply::decode(&b, &limits()).unwrap() {
            Decoded::Frame { frame, len } => {
                prop_assert_eq!(len, b.len());
                prop_assert_eq!(frame, r);
            }
            Decoded::NeedMore(n) => prop_assert!(false, "needs {}", n),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in vec(any::<u8>(), 0..512)) {
        let l = limits();
        let _ = RequestFrame::decode(&b, &l);
        let _ = Reply::decode(&b, &l);
        let _ = Frame::decode(&b, &l);
        let _ = ClientHello::decode(&b);
        let _ = ServerHello::decode(&b);
        let mut d = Decoder::<RequestFrame>::new(l);
        d.feed(&b);
        while let Ok(Some(_)) | Err(DecodeError::Rejected { .. }) = d.next_frame() {}
    }

    /// Arbitrary payloads behind a valid header reach every opcode's parser; whatever
    /// they decode to re-encodes to the very same bytes.
    #[test]
    fn decoding_is_canonical(op in 0..Opcode::ALL.len(), flags in prop_oneof![Just(0u16), Just(1), Just(0x8000)], id in 0u64..4, payload in vec(any::<u8>(), 0..96)) {
        let mut b = Vec::new();
        b.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&Opcode::ALL[op].code().to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&payload);
        if let Some(again) = reencode::<RequestFrame>(&b, |f, o| f.encode(o)) {
            prop_assert_eq!(&again, &b);
        }
        if let Some(again) = reencode::<Reply>(&b, |f, o| f.encode(o)) {
            prop_assert_eq!(&again, &b);
        }
    }

    /// Valid frames with a few bytes changed or cut: no panic, and canonical when
    /// accepted.
    #[test]
    fn mutated_frames(f in request_frame(), r in reply(), flips in vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
        for mut b in [f.to_bytes().unwrap(), r.to_bytes().unwrap()] {
            for (at, v) in &flips {
                let i = at % b.len();
                b[i] ^= v | 1;
            }
            let b = &b[..b.len() - cut % 3];
            if let Some(again) = reencode::<RequestFrame>(b, |f, o| f.encode(o)) {
                prop_assert_eq!(&again[..], b);
            }
            if let Some(again) = reencode::<Reply>(b, |f, o| f.encode(o)) {
                prop_assert_eq!(&again[..], b);
            }
        }
    }

    #[test]
    fn stream_decoding_ignores_piece_sizes(frames in vec(request_frame(), 1..12), pieces in vec(1usize..200, 1..50)) {
        let mut wire = Vec::new();
        for f in &frames {
            f.encode(&mut wire).unwrap();
        }
        let mut d = Decoder::<RequestFrame>::new(limits());
        let mut got = Vec::new();
        let mut rest = &wire[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = pieces[i % pieces.len()].min(rest.len());
            i += 1;
            let took = d.feed(&rest[..n]);
            rest = &rest[took..];
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        prop_assert_eq!(got, frames);
        prop_assert_eq!(d.buffered(), 0);
    }
}

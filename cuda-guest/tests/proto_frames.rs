//! The guest protocol's frames: exact bytes of a few, a round trip of every opcode and
//! reply body, and each decoding error with its field and offset.

use cuda_guest::proto::*;

fn limits() -> Limits {
    Limits::default()
}

/// Limits small enough to hit.
fn small() -> Limits {
    Limits {
        max_frame: 8192,
        max_inline: 1024,
        max_module: 2048,
        max_sg_entries: 4,
        max_params: 4,
        max_param_bytes: 64,
        max_name: 32,
        max_objects: 16,
        max_pipelined: 8,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn decode_req(bytes: &[u8], l: &Limits) -> Result<RequestFrame, DecodeError> {
    match RequestFrame::decode(bytes, l)? {
        Decoded::Frame { frame, len } => {
            assert_eq!(len, bytes.len(), "the frame is the whole buffer");
            Ok(frame)
        }
        Decoded::NeedMore(n) => panic!("needs {n} more bytes"),
    }
}

fn decode_reply(bytes: &[u8], l: &Limits) -> Result<Reply, DecodeError> {
    match Reply::decode(bytes, l)? {
        Decoded::Frame { frame, len } => {
            assert_eq!(len, bytes.len());
            Ok(frame)
        }
        Decoded::NeedMore(n) => panic!("needs {n} more bytes"),
    }
}

fn reason(e: DecodeError) -> FieldError {
    match e {
        DecodeError::Rejected { reason, .. } => reason,
        other => panic!("not a rejected frame: {other:?}"),
    }
}

// ---------------------------------------------------------------- exact bytes

#[test]
fn mem_alloc_request_bytes() {
    let b = RequestFrame::new(7, Request::MemAlloc { bytes: 1 << 20 })
        .to_bytes()
        .unwrap();
    assert_eq!(
        hex(&b),
        "18 00 00 00 07 00 00 00 00 00 00 00 01 04 00 00 00 00 10 00 00 00 00 00"
    );
}

#[test]
fn mem_alloc_reply_bytes() {
    let b = Reply::ok(
        7,
        Opcode::MemAlloc,
        ReplyBody::DevicePtr(DevicePtr(0x2_0000_0000)),
    )
    .to_bytes()
    .unwrap();
    assert_eq!(
        hex(&b),
        "28 00 00 00 07 00 00 00 00 00 00 00 01 04 00 80 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 02 00 00 00"
    );
}

#[test]
fn pipelined_launch_bytes() {
    let ptr = 0x2_0000_0000u64.to_le_bytes();
    let n = 1024u32.to_le_bytes();
    let params = KernelParams::pack(&[&ptr, &n]);
    assert_eq!(
        params.slots,
        vec![
            ParamLayout { offset: 0, size: 8 },
            ParamLayout { offset: 8, size: 4 }
        ]
    );
    let f = RequestFrame::pipelined(
        9,
        Request::LaunchKernel {
            function: FunctionId(0x101),
            config: cuda_guest::driver::LaunchConfig {
                grid: [4, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            stream: StreamId::DEFAULT,
            params,
        },
    );
    let b = f.to_bytes().unwrap();
    assert_eq!(b.len(), 96);
    assert_eq!(
        hex(&b),
        "60 00 00 00 09 00 00 00 00 00 00 00 01 07 01 00 \
         01 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         04 00 00 00 01 00 00 00 01 00 00 00 \
         00 01 00 00 01 00 00 00 01 00 00 00 \
         00 00 00 00 02 00 00 00 0c 00 00 00 \
         00 00 00 00 08 00 00 00 08 00 00 00 04 00 00 00 \
         00 00 00 00 02 00 00 00 00 04 00 00"
    );
    assert_eq!(decode_req(&b, &limits()).unwrap(), f);
}

#[test]
fn deferred_error_reply_bytes() {
    let r = Reply::deferred(
        12,
        Opcode::StreamSynchronize,
        Status::ERROR_ILLEGAL_ADDRESS,
        Cause {
            id: 9,
            opcode: Opcode::LaunchKernel,
        },
        "",
    );
    let b = r.to_bytes().unwrap();
    assert_eq!(
        hex(&b),
        "24 00 00 00 0c 00 00 00 00 00 00 00 03 05 00 80 \
         bc 02 00 00 01 07 00 00 09 00 00 00 00 00 00 00 \
         00 00 00 00"
    );
    assert_eq!(decode_reply(&b, &limits()).unwrap(), r);
}

#[test]
fn jit_log_travels_in_the_detail() {
    let log = "ptxas application ptx input, line 3; error   : syntax error";
    let r = Reply::error(3, Opcode::ModuleLoadData, Status::ERROR_INVALID_PTX, log);
    let b = r.to_bytes().unwrap();
    assert_eq!(&b[16..20], &218u32.to_le_bytes());
    assert_eq!(&b[32..36], &(log.len() as u32).to_le_bytes());
    assert_eq!(&b[36..], log.as_bytes());
    let back = decode_reply(&b, &limits()).unwrap();
    assert_eq!(back.detail(), Some(log));
    assert_eq!(back.cause, None);
}

#[test]
fn inline_and_guest_copies_bytes() {
    let b = RequestFrame::new(
        5,
        Request::MemcpyHtoD {
            dst: DevicePtr(0x10),
            src: HostSource::Inline(vec![0xaa, 0xbb, 0xcc]),
            stream: None,
        },
    )
    .to_bytes()
    .unwrap();
    assert_eq!(
        hex(&b),
        "2b 00 00 00 05 00 00 00 00 00 00 00 20 04 00 00 \
         10 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 \
         00 00 00 00 03 00 00 00 aa bb cc"
    );
    let b = RequestFrame::new(
        6,
        Request::MemcpyDtoH {
            src: DevicePtr(0x10),
            bytes: 0x3000,
            dst: HostDest::Guest(vec![
                SgEntry {
                    gpa: 0x1000,
                    len: 0x1000,
                },
                SgEntry {
                    gpa: 0x8000,
                    len: 0x2000,
                },
            ]),
            stream: Some(StreamId(0x100)),
        },
    )
    .to_bytes()
    .unwrap();
    assert_eq!(
        hex(&b),
        "50 00 00 00 06 00 00 00 00 00 00 00 23 04 00 00 \
         00 01 00 00 00 00 00 00 10 00 00 00 00 00 00 00 \
         00 30 00 00 00 00 00 00 01 00 00 00 02 00 00 00 \
         00 10 00 00 00 00 00 00 00 10 00 00 00 00 00 00 \
         00 80 00 00 00 00 00 00 00 20 00 00 00 00 00 00"
    );
}

#[test]
fn handshake_bytes_and_negotiation() {
    let c = ClientHello::new(Features::ALL, 1 << 20);
    let cb = c.encode();
    assert_eq!(
        hex(&cb),
        "56 47 50 43 01 00 02 00 03 00 00 00 00 00 00 00 00 00 10 00 00 00 00 00"
    );
    assert_eq!(
        ClientHello::decode(&cb).unwrap(),
        Decoded::Frame { frame: c, len: 24 }
    );

    let s = ServerHello::answer(&c, Limits::default(), Features::PIPELINING, 42);
    assert_eq!(s.status, Status::SUCCESS);
    assert_eq!(s.features, Features::PIPELINING);
    assert_eq!(s.limits.max_frame, 1 << 20);
    assert_eq!(s.limits.max_inline, (1 << 20) - FRAME_OVERHEAD);
    assert_eq!(s.limits.max_module, (1 << 20) - FRAME_OVERHEAD);
    assert_eq!(s.limits.max_sg_entries, 4096);
    assert_eq!(s.limits.max_param_bytes, 32764);
    s.limits.validate().unwrap();
    let sb = s.encode();
    assert_eq!(&sb[0..4], b"VGPS");
    assert_eq!(&sb[8..12], &[0, 0, 0, 0]);
    assert_eq!(&sb[12..16], &(1u32 << 20).to_le_bytes());
    assert_eq!(&sb[16..24], &2u64.to_le_bytes());
    assert_eq!(&sb[24..32], &42u64.to_le_bytes());
    assert_eq!(
        ServerHello::decode(&sb).unwrap(),
        Decoded::Frame { frame: s, len: 64 }
    );
    // Pieces.
    assert_eq!(
        ServerHello::decode(&sb[..10]).unwrap(),
        Decoded::NeedMore(54)
    );
}

#[test]
fn handshake_refusals() {
    // Another major version: refused, and the client sees why.
    let mut c = ClientHello::new(Features::ALL, 1 << 20);
    c.major = 2;
    let s = ServerHello::answer(&c, Limits::default(), Features::ALL, 1);
    assert_eq!(s.status, Status::ERROR_NOT_SUPPORTED);
    assert_eq!(
        ServerHello::decode(&s.encode()),
        Err(HandshakeError::Refused {
            status: Status::ERROR_NOT_SUPPORTED
        })
    );
    // Too small a frame.
    let c = ClientHello::new(Features::ALL, 100);
    let s = ServerHello::answer(&c, Limits::default(), Features::ALL, 1);
    assert_eq!(s.status, Status::ERROR_INVALID_VALUE);
    // Bad magic is seen from the first 4 bytes.
    assert_eq!(
        ClientHello::decode(b"GET "),
        Err(HandshakeError::BadMagic {
            found: *b"GET ",
            expected: *b"VGPC"
        })
    );
    // A reserved field.
    let mut cb = ClientHello::new(Features::NONE, 4096).encode();
    cb[21] = 1;
    assert_eq!(
        ClientHello::decode(&cb),
        Err(HandshakeError::Reserved {
            offset: 20,
            value: 256
        })
    );
    // A server hello with limits that do not fit its frame.
    let mut s = ServerHello::answer(
        &ClientHello::new(Features::ALL, 1 << 20),
        Limits::default(),
        Features::ALL,
        1,
    );
    s.limits.max_inline = 1 << 20;
    assert!(matches!(
        ServerHello::decode(&s.encode()),
        Err(HandshakeError::BadLimits {
            field: "max_inline",
            offset: 32,
            ..
        })
    ));
    // Another major from the server.
    s.limits = Limits::default();
    s.major = 9;
    assert!(matches!(
        ServerHello::decode(&s.encode()),
        Err(HandshakeError::Incompatible {
            theirs_major: 9,
            ..
        })
    ));
}

// ---------------------------------------------------------------- every opcode

fn sample_requests() -> Vec<RequestFrame> {
    use Request as R;
    let s = Some(StreamId(0x100));
    let sg = vec![
        SgEntry {
            gpa: 0x10_0000,
            len: 4096,
        },
        SgEntry {
            gpa: 0x20_0000,
            len: 100,
        },
    ];
    let reqs = vec![
        R::Ping {
            data: b"hello".to_vec(),
        },
        R::Init { flags: 0 },
        R::DriverGetVersion,
        R::Goodbye,
        R::DeviceGetCount,
        R::DeviceGet { ordinal: 1 },
        R::DeviceGetName { device: 0 },
        R::DeviceGetUuid { device: 0 },
        R::DeviceGetPciBusId { device: 0 },
        R::DeviceGetAttribute {
            device: 0,
            attribute: 16,
        },
        R::DeviceTotalMem { device: 0 },
        R::DeviceComputeCapability { device: 0 },
        R::PrimaryCtxRetain { device: 0 },
        R::PrimaryCtxRelease { device: 0 },
        R::CtxSetCurrent {
            ctx: ContextId(0x100),
        },
        R::CtxSynchronize,
        R::CtxCreate {
            device: 0,
            flags: 0,
        },
        R::CtxDestroy {
            ctx: ContextId(0x107),
        },
        R::ModuleLoadData {
            image: b".version 8.0\n.target sm_80\n\0".to_vec(),
        },
        R::ModuleUnload {
            module: ModuleId(0x101),
        },
        R::ModuleGetFunction {
            module: ModuleId(0x101),
            name: "_Z6vecaddPfS_S_i".into(),
        },
        R::ModuleGetGlobal {
            module: ModuleId(0x101),
            name: "counter".into(),
        },
        R::FuncGetAttribute {
            function: FunctionId(0x104),
            attribute: 4,
        },
        R::FuncSetAttribute {
            function: FunctionId(0x104),
            attribute: 8,
            value: 65536,
        },
        R::MemAlloc { bytes: 4096 },
        R::MemFree {
            ptr: DevicePtr(0x2_0000_0000),
        },
        R::MemGetInfo,
        R::Memset {
            dst: DevicePtr(0x2_0000_0000),
            value: 0xab,
            count: 4096,
            width: MemsetWidth::W8,
            stream: None,
        },
        R::Memset {
            dst: DevicePtr(0x2_0000_0000),
            value: 0xdead_beef,
            count: 1024,
            width: MemsetWidth::W32,
            stream: s,
        },
        R::MemcpyHtoD {
            dst: DevicePtr(0x2_0000_0000),
            src: HostSource::Inline(vec![1, 2, 3, 4]),
            stream: None,
        },
        R::MemcpyHtoD {
            dst: DevicePtr(0x2_0000_0000),
            src: HostSource::Guest(sg.clone()),
            stream: s,
        },
        R::MemcpyDtoH {
            src: DevicePtr(0x2_0000_0000),
            bytes: 16,
            dst: HostDest::Inline,
            stream: None,
        },
        R::MemcpyDtoH {
            src: DevicePtr(0x2_0000_0000),
            bytes: 4196,
            dst: HostDest::Guest(sg),
            stream: s,
        },
        R::MemcpyDtoD {
            dst: DevicePtr(0x2_0001_0000),
            src: DevicePtr(0x2_0000_0000),
            bytes: 4096,
            stream: None,
        },
        R::MemcpyDtoD {
            dst: DevicePtr(0x2_0001_0000),
            src: DevicePtr(0x2_0000_0000),
            bytes: 4096,
            stream: s,
        },
        R::StreamCreate {
            flags: 1,
            priority: -1,
        },
        R::StreamDestroy {
            stream: StreamId(0x100),
        },
        R::StreamSynchronize {
            stream: StreamId(0x100),
        },
        R::StreamQuery {
            stream: StreamId::DEFAULT,
        },
        R::StreamWaitEvent {
            stream: StreamId(0x100),
            event: EventId(0x102),
            flags: 0,
        },
        R::EventCreate { flags: 2 },
        R::EventDestroy {
            event: EventId(0x102),
        },
        R::EventRecord {
            event: EventId(0x102),
            stream: StreamId(0x100),
        },
        R::EventSynchronize {
            event: EventId(0x102),
        },
        R::EventQuery {
            event: EventId(0x102),
        },
        R::EventElapsedTime {
            start: EventId(0x102),
            end: EventId(0x103),
        },
        R::LaunchKernel {
            function: FunctionId(0x104),
            config: cuda_guest::driver::LaunchConfig {
                grid: [1024, 2, 1],
                block: [128, 1, 1],
                shared_bytes: 256,
            },
            stream: StreamId(0x100),
            params: KernelParams::pack(&[&[1; 8], &[2; 8], &[3; 8], &[4; 4]]),
        },
        R::LaunchCooperativeKernel {
            function: FunctionId(0x104),
            config: cuda_guest::driver::LaunchConfig {
                grid: [216, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            stream: StreamId(0x100),
            params: KernelParams::pack(&[&[5; 8], &[6; 4]]),
        },
    ];
    reqs.into_iter()
        .enumerate()
        .map(|(i, r)| RequestFrame {
            id: i as u64 + 1,
            no_reply: r.opcode().pipelined(),
            request: r,
        })
        .collect()
}

#[test]
fn every_opcode_round_trips_as_a_request() {
    let reqs = sample_requests();
    let mut seen: Vec<Opcode> = reqs.iter().map(|r| r.request.opcode()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, Opcode::ALL.to_vec(), "every opcode has a sample");
    for f in &reqs {
        let b = f.to_bytes().unwrap();
        assert_eq!(
            u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(&b[12..14], &f.request.opcode().code().to_le_bytes());
        assert_eq!(decode_req(&b, &limits()).unwrap(), *f, "{f:?}");
        // Also answered (the client may wait for any request).
        let answered = RequestFrame::new(f.id, f.request.clone());
        let b = answered.to_bytes().unwrap();
        assert_eq!(decode_req(&b, &limits()).unwrap(), answered);
    }
}

fn sample_body(op: Opcode) -> ReplyBody {
    use Opcode as O;
    match op {
        O::Ping => ReplyBody::Data(b"hello".to_vec()),
        O::MemcpyDtoH | O::MemcpyDtoHAsync => ReplyBody::Data((0..16).collect()),
        O::DriverGetVersion => ReplyBody::Int(12080),
        O::DeviceGetAttribute => ReplyBody::Int(-3),
        O::DeviceGetCount => ReplyBody::Count(2),
        O::DeviceGet => ReplyBody::Device(1),
        O::DeviceGetName => ReplyBody::Text("vmgpu simulated GPU".into()),
        O::DeviceGetPciBusId => ReplyBody::Text("0000:3b:00.0".into()),
        O::DeviceGetUuid => ReplyBody::Uuid(*b"0123456789abcdef"),
        O::DeviceTotalMem => ReplyBody::Size(80 << 30),
        O::DeviceComputeCapability => ReplyBody::ComputeCapability { major: 9, minor: 0 },
        O::PrimaryCtxRetain => ReplyBody::Context(ContextId(0x100)),
        O::CtxCreate => ReplyBody::Context(ContextId(0x107)),
        O::ModuleGetGlobal => ReplyBody::Global {
            dptr: DevicePtr(0x2_0000_0100),
            bytes: 12,
        },
        O::FuncGetAttribute => ReplyBody::Int(32),
        O::ModuleLoadData => ReplyBody::Module(ModuleId(0x101)),
        O::ModuleGetFunction => ReplyBody::Function(FunctionInfo {
            function: FunctionId(0x104),
            params: Some(vec![
                ParamLayout { offset: 0, size: 8 },
                ParamLayout { offset: 8, size: 4 },
            ]),
        }),
        O::MemAlloc => ReplyBody::DevicePtr(DevicePtr(0x2_0000_0000)),
        O::MemGetInfo => ReplyBody::MemInfo {
            free: 1 << 30,
            total: 4 << 30,
        },
        O::StreamCreate => ReplyBody::Stream(StreamId(0x105)),
        O::EventCreate => ReplyBody::Event(EventId(0x106)),
        O::EventElapsedTime => ReplyBody::ElapsedMs(1.25),
        _ => ReplyBody::Empty,
    }
}

#[test]
fn every_opcode_round_trips_as_a_reply() {
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        let id = i as u64 + 1;
        for r in [
            Reply::ok(id, op, sample_body(op)),
            Reply::error(
                id,
                op,
                Status::ERROR_INVALID_HANDLE,
                "stream 0x999 is not yours",
            ),
            Reply::deferred(
                id,
                op,
                Status::ERROR_LAUNCH_FAILED,
                Cause {
                    id: 1000,
                    opcode: Opcode::LaunchKernel,
                },
                "",
            ),
        ] {
            let b = r.to_bytes().unwrap();
            assert_eq!(&b[14..16], &[0x00, 0x80], "REPLY flag");
            assert_eq!(decode_reply(&b, &limits()).unwrap(), r, "{r:?}");
        }
    }
    // A function whose layout the server does not know.
    let r = Reply::ok(
        1,
        Opcode::ModuleGetFunction,
        ReplyBody::Function(FunctionInfo {
            function: FunctionId(7),
            params: None,
        }),
    );
    let b = r.to_bytes().unwrap();
    assert_eq!(&b[40..44], &[0xff; 4]);
    assert_eq!(decode_reply(&b, &limits()).unwrap(), r);
    // The server's closing notice has id 0.
    let notice = Reply::closing_notice(Status::ERROR_INVALID_VALUE, "bad frame");
    assert!(notice.is_closing_notice());
    assert_eq!(
        &notice.to_bytes().unwrap()[..16],
        &[45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0x80]
    );
    assert_eq!(
        decode_reply(&notice.to_bytes().unwrap(), &limits()).unwrap(),
        notice
    );
}

#[test]
fn encoding_refuses_inconsistent_messages() {
    assert_eq!(
        Reply::ok(1, Opcode::MemAlloc, ReplyBody::Empty).to_bytes(),
        Err(EncodeError::BodyMismatch {
            opcode: 0x0401,
            body: "Empty"
        })
    );
    let mut out = vec![1, 2, 3];
    assert!(Reply::error(1, Opcode::MemAlloc, Status(2), "")
        .encode(&mut out)
        .is_ok());
    let before = out.clone();
    assert!(Reply {
        id: 1,
        opcode: Opcode::MemAlloc,
        status: Status::ERROR_OUT_OF_MEMORY,
        cause: None,
        body: ReplyBody::Count(3)
    }
    .encode(&mut out)
    .is_err());
    assert_eq!(out, before, "a failed encode leaves the buffer as it was");
    assert_eq!(
        RequestFrame::pipelined(1, Request::MemAlloc { bytes: 1 }).to_bytes(),
        Err(EncodeError::NoReplyNotAllowed { opcode: 0x0401 })
    );
    assert_eq!(
        RequestFrame::new(0, Request::CtxSynchronize).to_bytes(),
        Err(EncodeError::ZeroRequestId)
    );
    let bad = Request::LaunchKernel {
        function: FunctionId(1),
        config: cuda_guest::driver::LaunchConfig {
            grid: [1; 3],
            block: [1; 3],
            shared_bytes: 0,
        },
        stream: StreamId::DEFAULT,
        params: KernelParams {
            slots: vec![ParamLayout { offset: 4, size: 8 }],
            bytes: vec![0; 8],
        },
    };
    assert!(matches!(
        RequestFrame::new(1, bad).to_bytes(),
        Err(EncodeError::BadParamSlot { index: 0, .. })
    ));
}

// ---------------------------------------------------------------- errors

#[test]
fn oversized_length_is_refused_from_four_bytes() {
    let e = RequestFrame::decode(&[0xff, 0xff, 0xff, 0x7f], &limits()).unwrap_err();
    assert_eq!(
        e,
        DecodeError::FrameTooLarge {
            length: 0x7fff_ffff,
            max: limits().max_frame
        }
    );
    assert!(e.is_fatal());
    assert_eq!(
        RequestFrame::decode(&[8, 0, 0, 0], &limits()).unwrap_err(),
        DecodeError::FrameTooShort { length: 8, min: 16 }
    );
    // Fewer than four bytes: need the header.
    assert_eq!(
        RequestFrame::decode(&[0xff], &limits()).unwrap(),
        Decoded::NeedMore(15)
    );
    // A valid length: need the rest of the frame.
    assert_eq!(
        RequestFrame::decode(&[100, 0, 0, 0, 1], &limits()).unwrap(),
        Decoded::NeedMore(95)
    );
}

fn frame(id: u64, opcode: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&opcode.to_le_bytes());
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

#[test]
fn header_errors() {
    let l = limits();
    let e = decode_req(&frame(4, 0x0999, 0, &[]), &l).unwrap_err();
    assert_eq!(
        e,
        DecodeError::Rejected {
            id: 4,
            opcode: 0x0999,
            flags: 0,
            frame_len: 16,
            reason: FieldError::UnknownOpcode { opcode: 0x0999 }
        }
    );
    assert!(!e.is_fatal());
    assert_eq!(e.answerable(), None, "a protocol violation");
    assert_eq!(
        e.to_string(),
        "frame 4 (opcode 0x0999, 16 bytes) refused: unknown opcode 0x0999 at offset 12"
    );
    assert_eq!(
        reason(decode_req(&frame(4, 0x0204, 0x0004, &[]), &l).unwrap_err()),
        FieldError::BadFlags { flags: 4, bad: 4 }
    );
    assert_eq!(
        reason(decode_req(&frame(4, 0x0204, 0x8000, &[]), &l).unwrap_err()),
        FieldError::BadFlags {
            flags: 0x8000,
            bad: 0x8000
        },
        "a reply is not a request"
    );
    assert_eq!(
        reason(decode_req(&frame(4, 0x0401, 1, &[0; 8]), &l).unwrap_err()),
        FieldError::NoReplyNotAllowed { opcode: 0x0401 }
    );
    assert_eq!(
        reason(decode_req(&frame(0, 0x0204, 0, &[]), &l).unwrap_err()),
        FieldError::InvalidValue {
            field: "id",
            offset: 4,
            value: 0
        }
    );
    // A request is not a reply either.
    assert_eq!(
        reason(decode_reply(&frame(4, 0x0204, 0, &[0; 16]), &l).unwrap_err()),
        FieldError::BadFlags {
            flags: 0,
            bad: 0x8000
        }
    );
}

#[test]
fn payload_errors_name_field_and_offset() {
    let l = small();
    // A payload error is answered, and the session goes on.
    let e = decode_req(&frame(1, 0x0401, 0, &[0; 4]), &l).unwrap_err();
    assert_eq!(
        e.answerable(),
        Some(Refused {
            id: 1,
            opcode: Opcode::MemAlloc,
            no_reply: false
        })
    );
    // One of a pipelined request is deferred.
    let e = decode_req(&frame(2, 0x0701, FLAG_NO_REPLY, &[0; 4]), &l).unwrap_err();
    assert_eq!(
        e.answerable(),
        Some(Refused {
            id: 2,
            opcode: Opcode::LaunchKernel,
            no_reply: true
        })
    );
    assert_eq!(
        e.to_string(),
        "frame 2 (opcode 0x0701, 20 bytes) refused: field `function` at offset 16 needs 8 \
         bytes, the frame has 4 left"
    );
    // MemAlloc with 4 of its 8 bytes.
    assert_eq!(
        reason(decode_req(&frame(1, 0x0401, 0, &[0; 4]), &l).unwrap_err()),
        FieldError::Truncated {
            field: "bytes",
            offset: 16,
            need: 8,
            have: 4
        }
    );
    // Trailing bytes.
    assert_eq!(
        reason(decode_req(&frame(1, 0x0401, 0, &[0; 10]), &l).unwrap_err()),
        FieldError::TrailingBytes {
            offset: 24,
            count: 2
        }
    );
    // Inline data above max_inline: refused at its count (offset 36), before the data.
    let mut p = Vec::new();
    p.extend_from_slice(&0x10u64.to_le_bytes()); // dst
    p.extend_from_slice(&2000u64.to_le_bytes()); // bytes
    p.extend_from_slice(&0u32.to_le_bytes()); // inline
    p.extend_from_slice(&2000u32.to_le_bytes()); // count
    assert_eq!(
        reason(decode_req(&frame(1, 0x0420, 0, &p), &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "count",
            offset: 36,
            value: 2000,
            max: 1024
        }
    );
    // Inline count disagreeing with bytes.
    let mut p = Vec::new();
    p.extend_from_slice(&0x10u64.to_le_bytes());
    p.extend_from_slice(&5u64.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&4u32.to_le_bytes());
    p.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(
        reason(decode_req(&frame(1, 0x0420, 0, &p), &l).unwrap_err()),
        FieldError::Mismatch {
            field: "count",
            offset: 36,
            found: 4,
            expected: 5
        }
    );
    // Unknown data kind.
    let mut p = Vec::new();
    p.extend_from_slice(&0x10u64.to_le_bytes());
    p.extend_from_slice(&5u64.to_le_bytes());
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        reason(decode_req(&frame(1, 0x0420, 0, &p), &l).unwrap_err()),
        FieldError::InvalidValue {
            field: "kind",
            offset: 32,
            value: 7
        }
    );
}

fn sg_payload(bytes: u64, count: u32, entries: &[(u64, u64)]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&0x10u64.to_le_bytes()); // dst
    p.extend_from_slice(&bytes.to_le_bytes());
    p.extend_from_slice(&1u32.to_le_bytes()); // guest
    p.extend_from_slice(&count.to_le_bytes());
    for (g, n) in entries {
        p.extend_from_slice(&g.to_le_bytes());
        p.extend_from_slice(&n.to_le_bytes());
    }
    p
}

#[test]
fn scatter_gather_errors() {
    let l = small();
    // More entries than allowed: refused at the count.
    assert_eq!(
        reason(decode_req(&frame(1, 0x0420, 0, &sg_payload(0, 5, &[])), &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "count",
            offset: 36,
            value: 5,
            max: 4
        }
    );
    // A count the frame does not hold: refused before allocating the list.
    assert_eq!(
        reason(decode_req(&frame(1, 0x0420, 0, &sg_payload(16, 3, &[(0, 16)])), &l).unwrap_err()),
        FieldError::Truncated {
            field: "sg_entries",
            offset: 40,
            need: 48,
            have: 16
        }
    );
    // A zero-length entry.
    assert_eq!(
        reason(
            decode_req(&frame(1, 0x0420, 0, &sg_payload(0, 1, &[(0x1000, 0)])), &l).unwrap_err()
        ),
        FieldError::InvalidValue {
            field: "sg_len",
            offset: 48,
            value: 0
        }
    );
    // An entry that wraps around.
    assert!(matches!(
        reason(
            decode_req(
                &frame(1, 0x0420, 0, &sg_payload(16, 1, &[(u64::MAX - 4, 16)])),
                &l
            )
            .unwrap_err()
        ),
        FieldError::InvalidValue {
            field: "sg_len",
            ..
        }
    ));
    // Entries that do not add up to the copy's length.
    assert_eq!(
        reason(
            decode_req(
                &frame(1, 0x0420, 0, &sg_payload(100, 2, &[(0, 10), (100, 20)])),
                &l
            )
            .unwrap_err()
        ),
        FieldError::Mismatch {
            field: "bytes",
            offset: 24,
            found: 100,
            expected: 30
        }
    );
    // Inline device-to-host above max_inline: refused at its length.
    let mut p = Vec::new();
    p.extend_from_slice(&0x10u64.to_le_bytes());
    p.extend_from_slice(&4096u64.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        reason(decode_req(&frame(1, 0x0422, 0, &p), &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "bytes",
            offset: 24,
            value: 4096,
            max: 1024
        }
    );
}

fn launch_payload(count: u32, blob: u32, slots: &[(u32, u32)], data: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&1u64.to_le_bytes()); // function
    p.extend_from_slice(&0u64.to_le_bytes()); // stream
    for v in [1u32, 1, 1, 32, 1, 1, 0, count, blob] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    for (o, s) in slots {
        p.extend_from_slice(&o.to_le_bytes());
        p.extend_from_slice(&s.to_le_bytes());
    }
    p.extend_from_slice(data);
    p
}

#[test]
fn launch_errors() {
    let l = small();
    let rej = |p: Vec<u8>| reason(decode_req(&frame(1, 0x0701, 1, &p), &l).unwrap_err());
    assert_eq!(
        rej(launch_payload(5, 0, &[], &[])),
        FieldError::LimitExceeded {
            field: "param_count",
            offset: 60,
            value: 5,
            max: 4
        }
    );
    assert_eq!(
        rej(launch_payload(1, 65, &[], &[])),
        FieldError::LimitExceeded {
            field: "param_bytes",
            offset: 64,
            value: 65,
            max: 64
        }
    );
    assert_eq!(
        rej(launch_payload(4, 8, &[(0, 8)], &[])),
        FieldError::Truncated {
            field: "param_slots",
            offset: 68,
            need: 32,
            have: 8
        }
    );
    assert_eq!(
        rej(launch_payload(1, 8, &[(4, 8)], &[0; 8])),
        FieldError::LimitExceeded {
            field: "param_size",
            offset: 72,
            value: 12,
            max: 8
        }
    );
    assert_eq!(
        rej(launch_payload(2, 12, &[(0, 8), (4, 4)], &[0; 12])),
        FieldError::Mismatch {
            field: "param_offset",
            offset: 76,
            found: 4,
            expected: 8
        }
    );
    assert_eq!(
        rej(launch_payload(1, 8, &[(0, 8)], &[0; 4])),
        FieldError::Truncated {
            field: "param_data",
            offset: 76,
            need: 8,
            have: 4
        }
    );
    // And a good one.
    let ok = decode_req(
        &frame(1, 0x0701, 1, &launch_payload(1, 8, &[(0, 8)], &[7; 8])),
        &l,
    )
    .unwrap();
    match ok.request {
        Request::LaunchKernel { params, .. } => assert_eq!(params.args(), vec![&[7u8; 8][..]]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn string_and_enum_errors() {
    let l = small();
    let mut p = 1u64.to_le_bytes().to_vec();
    p.extend_from_slice(&33u32.to_le_bytes());
    p.extend_from_slice(&[b'a'; 33]);
    assert_eq!(
        reason(decode_req(&frame(1, 0x0303, 0, &p), &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "name_len",
            offset: 24,
            value: 33,
            max: 32
        }
    );
    let mut p = 1u64.to_le_bytes().to_vec();
    p.extend_from_slice(&2u32.to_le_bytes());
    p.extend_from_slice(&[0xff, 0xfe]);
    assert_eq!(
        reason(decode_req(&frame(1, 0x0303, 0, &p), &l).unwrap_err()),
        FieldError::InvalidUtf8 {
            field: "name_len",
            offset: 28
        }
    );
    let mut p = vec![0u8; 20];
    p.extend_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        reason(decode_req(&frame(1, 0x0410, 0, &p), &l).unwrap_err()),
        FieldError::InvalidValue {
            field: "width",
            offset: 36,
            value: 3
        }
    );
    let p = vec![0u8; 4];
    let mut img = 3000u32.to_le_bytes().to_vec();
    img.extend_from_slice(&p);
    assert_eq!(
        reason(decode_req(&frame(1, 0x0301, 0, &img), &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "image_len",
            offset: 16,
            value: 3000,
            max: 2048
        }
    );
}

#[test]
fn reply_errors() {
    let l = small();
    // A cause on a success.
    let mut b = Reply::ok(1, Opcode::CtxSynchronize, ReplyBody::Empty)
        .to_bytes()
        .unwrap();
    b[20] = 0x01;
    b[21] = 0x07;
    b[24] = 9;
    assert_eq!(
        reason(decode_reply(&b, &l).unwrap_err()),
        FieldError::InvalidValue {
            field: "cause_opcode",
            offset: 20,
            value: 0x0701
        }
    );
    // A cause id without an opcode.
    let mut b = Reply::error(1, Opcode::CtxSynchronize, Status(1), "")
        .to_bytes()
        .unwrap();
    b[24] = 9;
    assert_eq!(
        reason(decode_reply(&b, &l).unwrap_err()),
        FieldError::InvalidValue {
            field: "cause_id",
            offset: 24,
            value: 9
        }
    );
    // A device name above max_name.
    let b = Reply::ok(1, Opcode::DeviceGetName, ReplyBody::Text("x".repeat(40)))
        .to_bytes()
        .unwrap();
    assert_eq!(
        reason(decode_reply(&b, &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "text_len",
            offset: 32,
            value: 40,
            max: 32
        }
    );
    // A parameter list above max_params.
    let b = Reply::ok(
        1,
        Opcode::ModuleGetFunction,
        ReplyBody::Function(FunctionInfo {
            function: FunctionId(1),
            params: Some(vec![ParamLayout { offset: 0, size: 4 }; 5]),
        }),
    )
    .to_bytes()
    .unwrap();
    assert_eq!(
        reason(decode_reply(&b, &l).unwrap_err()),
        FieldError::LimitExceeded {
            field: "param_count",
            offset: 40,
            value: 5,
            max: 4
        }
    );
    // A layout out of order, or beyond max_param_bytes.
    let layout = |slots: Vec<ParamLayout>| {
        Reply::ok(
            1,
            Opcode::ModuleGetFunction,
            ReplyBody::Function(FunctionInfo {
                function: FunctionId(1),
                params: Some(slots),
            }),
        )
        .to_bytes()
        .unwrap()
    };
    assert_eq!(
        reason(
            decode_reply(
                &layout(vec![
                    ParamLayout { offset: 0, size: 8 },
                    ParamLayout { offset: 4, size: 4 }
                ]),
                &l
            )
            .unwrap_err()
        ),
        FieldError::Mismatch {
            field: "param_offset",
            offset: 52,
            found: 4,
            expected: 8
        }
    );
    assert_eq!(
        reason(
            decode_reply(
                &layout(vec![ParamLayout {
                    offset: 60,
                    size: 8
                }]),
                &l
            )
            .unwrap_err()
        ),
        FieldError::LimitExceeded {
            field: "param_size",
            offset: 48,
            value: 68,
            max: 64
        }
    );
}

// ---------------------------------------------------------------- decoder

#[test]
fn decoder_assembles_frames_fed_byte_by_byte() {
    let reqs = sample_requests();
    let mut wire = Vec::new();
    for f in &reqs {
        f.encode(&mut wire).unwrap();
    }
    let mut d = Decoder::<RequestFrame>::new(limits());
    let mut got = Vec::new();
    for b in &wire {
        assert_eq!(d.feed(std::slice::from_ref(b)), 1);
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got, reqs);
    assert_eq!(d.buffered(), 0);
}

#[test]
fn decoder_holds_at_most_one_frame_limit() {
    let l = small();
    let mut d = Decoder::<RequestFrame>::new(l);
    let big = vec![0u8; 3 * l.max_frame as usize];
    // It takes no more than max_frame bytes.
    assert_eq!(d.feed(&big), l.max_frame as usize);
    assert_eq!(d.room(), 0);
    assert_eq!(d.feed(&big), 0);
    let e = d
        .read_from(&mut std::io::Cursor::new(vec![0u8; 10]))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn decoder_skips_a_rejected_frame_and_stops_at_a_fatal_one() {
    let mut wire = frame(1, 0x0999, 0, &[1, 2, 3]);
    RequestFrame::new(2, Request::CtxSynchronize)
        .encode(&mut wire)
        .unwrap();
    wire.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    let mut d = Decoder::<RequestFrame>::new(limits());
    assert_eq!(d.feed(&wire), wire.len());
    let e = d.next_frame().unwrap_err();
    assert!(matches!(e, DecodeError::Rejected { id: 1, .. }));
    assert_eq!(
        d.next_frame().unwrap(),
        Some(RequestFrame::new(2, Request::CtxSynchronize))
    );
    let e = d.next_frame().unwrap_err();
    assert!(e.is_fatal());
    assert_eq!(d.next_frame().unwrap_err(), e, "a fatal error stays");
}

#[test]
fn decoder_reads_from_a_reader() {
    let mut wire = Vec::new();
    let data: Vec<u8> = (0..=255).cycle().take(100_000).collect();
    let reply = Reply::ok(3, Opcode::MemcpyDtoH, ReplyBody::Data(data));
    reply.encode(&mut wire).unwrap();
    Reply::ok(4, Opcode::CtxSynchronize, ReplyBody::Empty)
        .encode(&mut wire)
        .unwrap();
    let mut src = std::io::Cursor::new(wire);
    let mut d = Decoder::<Reply>::new(limits());
    let mut got = Vec::new();
    loop {
        while let Some(r) = d.next_frame().unwrap() {
            got.push(r);
        }
        if d.read_from(&mut src).unwrap() == 0 {
            break;
        }
    }
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], reply);
    assert_eq!(got[1].id, 4);
}

/// A stream socket that hands out at most `piece` bytes per read, as a guest's vsock
/// or virtio-serial port does.
struct Pieces {
    data: std::io::Cursor<Vec<u8>>,
    piece: usize,
    reads: usize,
}

impl std::io::Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reads += 1;
        let n = buf.len().min(self.piece);
        std::io::Read::read(&mut self.data, &mut buf[..n])
    }
}

#[test]
fn decoder_reads_large_frames_in_small_pieces() {
    // Two 6 MiB replies, then a small one whose header arrives with the second's tail:
    // the buffer's room is reused (not zero-filled again for each 4 KiB read) and what
    // follows a frame is moved to the front intact.
    let mut wire = Vec::new();
    let a: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    let b: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 241) as u8).collect();
    let first = Reply::ok(5, Opcode::MemcpyDtoH, ReplyBody::Data(a));
    let second = Reply::ok(6, Opcode::MemcpyDtoH, ReplyBody::Data(b));
    first.encode(&mut wire).unwrap();
    second.encode(&mut wire).unwrap();
    Reply::ok(7, Opcode::CtxSynchronize, ReplyBody::Empty)
        .encode(&mut wire)
        .unwrap();
    let total = wire.len();
    let mut src = Pieces {
        data: std::io::Cursor::new(wire),
        piece: 4096,
        reads: 0,
    };
    let mut d = Decoder::<Reply>::new(limits());
    let mut got = Vec::new();
    loop {
        while let Some(r) = d.next_frame().unwrap() {
            got.push(r);
        }
        if d.read_from(&mut src).unwrap() == 0 {
            break;
        }
    }
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], first);
    assert_eq!(got[1], second);
    assert_eq!(got[2].id, 7);
    assert_eq!(d.buffered(), 0);
    // At most 4 KiB a read: about 3000 reads for 12 MiB.
    assert!(
        src.reads > total / 4096,
        "{} reads of {total} bytes",
        src.reads
    );
}

/// A stream read in pieces of at most `piece` bytes that counts the bytes it hands out
/// into `dst` (a buffer at that address range) and into any other buffer.
struct Counted {
    data: std::io::Cursor<Vec<u8>>,
    piece: usize,
    dst: std::ops::Range<usize>,
    into_dst: usize,
    elsewhere: usize,
}

impl Counted {
    fn new(wire: Vec<u8>, piece: usize) -> Counted {
        Counted {
            data: std::io::Cursor::new(wire),
            piece,
            dst: 0..0,
            into_dst: 0,
            elsewhere: 0,
        }
    }

    /// Counts what is read into `dst` from now on.
    fn watch(&mut self, dst: &[u8]) {
        let at = dst.as_ptr() as usize;
        self.dst = at..at + dst.len();
    }
}

impl std::io::Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.piece);
        let got = std::io::Read::read(&mut self.data, &mut buf[..n])?;
        let at = buf.as_ptr() as usize;
        if self.dst.contains(&at) && at + got <= self.dst.end {
            self.into_dst += got;
        } else {
            self.elsewhere += got;
        }
        Ok(got)
    }
}

#[test]
fn decoder_reads_data_replies_straight_into_the_destination() {
    // Two 6 MiB data replies in 4 KiB pieces, as a guest's vsock or virtio-serial port
    // hands them out, then a small reply. Each data reply's bytes go from the stream into
    // its destination: the decoder buffers only the piece with its header (no buffer of
    // the frame's size, no zero-fill, no copy of the data but the first piece's).
    let a: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    let b: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 241) as u8).collect();
    let mut wire = Vec::new();
    for (id, data) in [(5, &a), (6, &b)] {
        Reply::ok(id, Opcode::MemcpyDtoH, ReplyBody::Data(data.clone()))
            .encode(&mut wire)
            .unwrap();
    }
    Reply::ok(7, Opcode::CtxSynchronize, ReplyBody::Empty)
        .encode(&mut wire)
        .unwrap();
    let total = wire.len();
    let mut src = Counted::new(wire, 4096);
    let mut d = Decoder::<Reply>::new(limits());
    for (id, data) in [(5, &a), (6, &b)] {
        let mut dst = vec![0u8; data.len()];
        src.watch(&dst);
        let (into, elsewhere) = (src.into_dst, src.elsewhere);
        let r = d.read_data_into(&mut src, id, &mut dst).unwrap();
        assert_eq!(
            r,
            Some(Reply::ok(
                id,
                Opcode::MemcpyDtoH,
                ReplyBody::Data(Vec::new())
            ))
        );
        assert!(dst == *data, "reply {id}: the data differs");
        assert!(
            src.elsewhere - elsewhere <= 4096,
            "reply {id}: {} bytes read outside the destination",
            src.elsewhere - elsewhere
        );
        assert!(src.into_dst - into >= data.len() - 4096);
        assert_eq!(d.buffered(), 0, "reply {id}: nothing of the frame kept");
    }
    // The small reply is not a data reply: read as usual.
    let mut dst = [0u8; 4];
    assert_eq!(d.read_data_into(&mut src, 7, &mut dst).unwrap(), None);
    assert_eq!(
        d.next_frame().unwrap(),
        Some(Reply::ok(7, Opcode::CtxSynchronize, ReplyBody::Empty))
    );
    assert_eq!(src.into_dst + src.elsewhere, total);
    // The end of the stream: nothing, as `read_from` says.
    assert_eq!(d.read_data_into(&mut src, 8, &mut dst).unwrap(), None);
    assert_eq!(d.read_from(&mut src).unwrap(), 0);
}

#[test]
fn a_reply_encoded_without_its_data_is_completed_by_it() {
    // `encode_head` then the data it returns is the frame `encode` makes, and the data is
    // the body's own (not a copy); replies without data are appended whole.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let replies = [
        Reply::ok(9, Opcode::MemcpyDtoH, ReplyBody::Data(data)),
        Reply::ok(10, Opcode::MemcpyDtoHAsync, ReplyBody::Data(Vec::new())),
        Reply::ok(11, Opcode::DeviceTotalMem, ReplyBody::Size(1 << 30)),
        Reply::error(12, Opcode::MemcpyDtoH, Status(1), "out of range"),
    ];
    for r in &replies {
        let mut out = vec![0xcd; 5];
        let data = r.encode_head(&mut out).unwrap();
        if let ReplyBody::Data(d) = &r.body {
            assert_eq!(data.as_ptr(), d.as_ptr(), "reply {}", r.id);
        } else {
            assert!(data.is_empty(), "reply {}", r.id);
        }
        out.extend_from_slice(data);
        let mut whole = vec![0xcd; 5];
        r.encode(&mut whole).unwrap();
        assert!(out == whole, "reply {}", r.id);
        let mut back = Decoder::<Reply>::new(limits());
        back.feed(&out[5..]);
        assert_eq!(back.next_frame().unwrap().as_ref(), Some(r));
    }
}

#[test]
fn decoder_reads_other_replies_as_usual_where_data_was_expected() {
    // What is not a successful data reply to the request, of the size asked for, is
    // left to `next_frame` whole, and nothing of it is written to the destination.
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let mut failed = Reply::error(3, Opcode::MemcpyDtoH, Status(1), "out of range");
    failed.cause = None;
    let cases = [
        ("a failure", 3, failed),
        (
            "another size",
            3,
            Reply::ok(
                3,
                Opcode::MemcpyDtoH,
                ReplyBody::Data(data[..9_999].to_vec()),
            ),
        ),
        (
            "another request's",
            4,
            Reply::ok(3, Opcode::MemcpyDtoH, ReplyBody::Data(data.clone())),
        ),
        (
            "a closing notice",
            3,
            Reply::closing_notice(Status(4), "shutting down"),
        ),
        (
            "not a data reply",
            3,
            Reply::ok(3, Opcode::DeviceTotalMem, ReplyBody::Size(10_000)),
        ),
    ];
    for (what, id, reply) in cases {
        let mut wire = reply.to_bytes().unwrap();
        wire.extend_from_slice(&[0xab; 100]);
        let mut src = Counted::new(wire, 4096);
        let mut d = Decoder::<Reply>::new(limits());
        let mut dst = vec![0u8; data.len()];
        src.watch(&dst);
        assert_eq!(
            d.read_data_into(&mut src, id, &mut dst).unwrap(),
            None,
            "{what}"
        );
        assert_eq!(src.into_dst, 0, "{what}");
        assert!(dst.iter().all(|&x| x == 0), "{what}");
        let got = loop {
            if let Some(r) = d.next_frame().unwrap() {
                break r;
            }
            assert!(d.read_from(&mut src).unwrap() > 0, "{what}: ended");
        };
        assert_eq!(got, reply, "{what}");
    }
    // A data reply cut short: an error, not a reply.
    let mut wire = Reply::ok(3, Opcode::MemcpyDtoH, ReplyBody::Data(data.clone()))
        .to_bytes()
        .unwrap();
    wire.truncate(6_000);
    let mut d = Decoder::<Reply>::new(limits());
    let mut dst = vec![0u8; data.len()];
    let e = d
        .read_data_into(&mut Counted::new(wire, 4096), 3, &mut dst)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
}

// ---------------------------------------------------------------- rules

#[test]
fn pipelining_rules() {
    let pipelined: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| o.pipelined())
        .collect();
    assert_eq!(
        pipelined,
        vec![
            Opcode::MemsetAsync,
            Opcode::MemcpyHtoDAsync,
            Opcode::MemcpyDtoDAsync,
            Opcode::StreamWaitEvent,
            Opcode::EventRecord,
            Opcode::LaunchKernel,
            Opcode::LaunchCooperativeKernel
        ]
    );
    let s = StreamId(0x100);
    assert_eq!(Request::CtxSynchronize.sync_scope(), SyncScope::Context);
    assert_eq!(
        Request::StreamSynchronize { stream: s }.sync_scope(),
        SyncScope::Stream(s)
    );
    assert_eq!(
        Request::StreamQuery { stream: s }.sync_scope(),
        SyncScope::Stream(s)
    );
    assert_eq!(
        Request::EventSynchronize { event: EventId(5) }.sync_scope(),
        SyncScope::Event(EventId(5))
    );
    let dtoh = |stream| Request::MemcpyDtoH {
        src: DevicePtr(0),
        bytes: 4,
        dst: HostDest::Inline,
        stream,
    };
    assert_eq!(dtoh(None).sync_scope(), SyncScope::Context);
    assert_eq!(dtoh(Some(s)).sync_scope(), SyncScope::Stream(s));
    assert_eq!(
        Request::MemFree { ptr: DevicePtr(1) }.sync_scope(),
        SyncScope::Context
    );
    assert_eq!(Request::MemAlloc { bytes: 1 }.sync_scope(), SyncScope::None);
    assert_eq!(
        Request::EventRecord {
            event: EventId(5),
            stream: s
        }
        .stream(),
        Some(s)
    );
}

#[test]
fn status_names() {
    assert_eq!(Status::SUCCESS.name(), Some("CUDA_SUCCESS"));
    assert_eq!(Status(700).name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
    assert_eq!(
        Status(700).description(),
        Some("an illegal memory access was encountered")
    );
    assert_eq!(Status(218).name(), Some("CUDA_ERROR_INVALID_PTX"));
    assert_eq!(Status(12345).name(), None);
    assert!(Status::ERROR_ILLEGAL_ADDRESS.is_sticky());
    assert!(Status::ERROR_LAUNCH_FAILED.is_sticky());
    assert!(!Status::ERROR_INVALID_VALUE.is_sticky());
    assert!(!Status::ERROR_NOT_READY.is_sticky());
    assert_eq!(
        Status(2).to_string(),
        "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
    );
    assert_eq!(Status(12345).to_string(), "CUresult 12345");
    for s in Status::KNOWN {
        assert!(s.name().unwrap().starts_with("CUDA_"));
    }
}

#[test]
fn kernel_params_layouts() {
    let p = KernelParams::pack(&[&[1; 4], &[2; 8], &[3; 2], &[4; 16], &[5; 12]]);
    let offsets: Vec<u32> = p.slots.iter().map(|s| s.offset).collect();
    assert_eq!(offsets, vec![0, 8, 16, 32, 48]);
    assert_eq!(p.bytes.len(), 60);
    assert_eq!(p.args()[3], &[4; 16]);
    let layout = [
        ParamLayout { offset: 0, size: 4 },
        ParamLayout {
            offset: 16,
            size: 8,
        },
    ];
    let q = KernelParams::with_layout(&layout, &[&[1; 4], &[2; 8]]).unwrap();
    assert_eq!(q.bytes.len(), 24);
    assert_eq!(&q.bytes[16..24], &[2; 8]);
    assert!(KernelParams::with_layout(&layout, &[&[1; 4], &[2; 4]]).is_none());
    assert!(KernelParams::with_layout(&layout, &[&[1; 4]]).is_none());
}

// ---------------------------------------------------------------- fuzz seeds

/// The seed inputs of `cuda-guest/fuzz-proto` (a selector byte, then frames): each must
/// decode cleanly to the end. With `PROTO_SEED_DIR` set they are also written there:
/// `PROTO_SEED_DIR=$PWD/cuda-guest/fuzz-proto/seeds cargo test -p cuda-guest --test proto_frames fuzz_seeds`.
#[test]
fn fuzz_seeds() {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    let mut put = |sel: u8, bytes: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(bytes);
        seeds.push(v);
    };
    let mut stream = Vec::new();
    for (i, f) in sample_requests().iter().enumerate() {
        let b = f.to_bytes().unwrap();
        put((i % 2) as u8, &b);
        stream.extend_from_slice(&b);
    }
    put(0x20, &stream);
    let mut replies = Vec::new();
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        let b = Reply::ok(i as u64 + 1, op, sample_body(op))
            .to_bytes()
            .unwrap();
        put(0, &b);
        replies.extend_from_slice(&b);
    }
    let d = Reply::deferred(
        5,
        Opcode::CtxSynchronize,
        Status::ERROR_ILLEGAL_ADDRESS,
        Cause {
            id: 4,
            opcode: Opcode::LaunchKernel,
        },
        "illegal address",
    );
    replies.extend_from_slice(&d.to_bytes().unwrap());
    put(0x41, &replies);
    let hello = ClientHello::new(Features::ALL, 1 << 20);
    put(0, &hello.encode());
    put(
        0,
        &ServerHello::answer(&hello, Limits::default(), Features::ALL, 7).encode(),
    );

    let mut frames = 0;
    for seed in &seeds[..seeds.len() - 2] {
        let mut d = Decoder::<Frame>::new(limits());
        assert_eq!(d.feed(&seed[1..]), seed.len() - 1);
        while d.next_frame().unwrap().is_some() {
            frames += 1;
        }
        assert_eq!(d.buffered(), 0);
    }
    assert_eq!(
        frames,
        2 * (sample_requests().len() + Opcode::ALL.len()) + 1
    );
    if let Ok(dir) = std::env::var("PROTO_SEED_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        for (n, seed) in seeds.iter().enumerate() {
            std::fs::write(format!("{dir}/seed-{n:03}"), seed).unwrap();
        }
    }
}

// ---------------------------------------------------------------- the documentation

/// The hex blocks of `docs/protocol.md`'s worked example, in order.
fn documented_blocks() -> Vec<Vec<u8>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .unwrap();
    let start = doc.find("## 8. Worked example").unwrap();
    let end = doc[start..].find("## 9.").unwrap() + start;
    let mut blocks = Vec::new();
    let mut current: Option<Vec<u8>> = None;
    for line in doc[start..end].lines() {
        match (
            line.trim() == "```text",
            line.trim() == "```",
            current.as_mut(),
        ) {
            (true, _, None) => current = Some(Vec::new()),
            (_, true, Some(_)) => blocks.push(current.take().unwrap()),
            (_, _, Some(bytes)) => {
                for tok in line.split_whitespace() {
                    let is_byte = tok.len() == 2 && tok.chars().all(|c| c.is_ascii_hexdigit());
                    if !is_byte {
                        break;
                    }
                    bytes.push(u8::from_str_radix(tok, 16).unwrap());
                }
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn the_documented_session_is_what_the_code_sends() {
    let b = documented_blocks();
    assert_eq!(b.len(), 8, "blocks of section 8");
    let client = ClientHello::new(Features::ALL, 1 << 20);
    assert_eq!(b[0], client.encode());
    // The service's defaults (its quota bounds max_module and max_objects).
    let service = cuda_guest::service::Service::new(
        cuda_guest::service::BackendChoice::Simulator(Default::default()),
        cuda_guest::service::ServiceConfig::default(),
    )
    .unwrap();
    let server = ServerHello::answer(&client, service.session_limits(), Features::PIPELINING, 42);
    assert_eq!(b[1], server.encode());
    assert_eq!(
        b[2],
        RequestFrame::new(7, Request::MemAlloc { bytes: 1 << 20 })
            .to_bytes()
            .unwrap()
    );
    assert_eq!(
        b[3],
        Reply::ok(
            7,
            Opcode::MemAlloc,
            ReplyBody::DevicePtr(DevicePtr(0x2_0000_0000))
        )
        .to_bytes()
        .unwrap()
    );
    let mut htod = RequestFrame::new(
        8,
        Request::MemcpyHtoD {
            dst: DevicePtr(0x2_0000_0000),
            src: HostSource::Inline(vec![1, 0, 0, 0, 2, 0, 0, 0]),
            stream: None,
        },
    )
    .to_bytes()
    .unwrap();
    Reply::ok(8, Opcode::MemcpyHtoD, ReplyBody::Empty)
        .encode(&mut htod)
        .unwrap();
    assert_eq!(b[4], htod);
    let ptr = 0x2_0000_0000u64.to_le_bytes();
    let n = 1024u32.to_le_bytes();
    assert_eq!(
        b[5],
        RequestFrame::pipelined(
            9,
            Request::LaunchKernel {
                function: FunctionId(0x101),
                config: cuda_guest::driver::LaunchConfig {
                    grid: [4, 1, 1],
                    block: [256, 1, 1],
                    shared_bytes: 0
                },
                stream: StreamId::DEFAULT,
                params: KernelParams::pack(&[&ptr, &n]),
            }
        )
        .to_bytes()
        .unwrap()
    );
    assert_eq!(
        b[6],
        RequestFrame::new(10, Request::CtxSynchronize)
            .to_bytes()
            .unwrap()
    );
    assert_eq!(
        b[7],
        Reply::deferred(
            10,
            Opcode::CtxSynchronize,
            Status::ERROR_ILLEGAL_ADDRESS,
            Cause {
                id: 9,
                opcode: Opcode::LaunchKernel
            },
            ""
        )
        .to_bytes()
        .unwrap()
    );
}

#[test]
fn the_documented_opcode_table_matches() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .unwrap();
    for &op in Opcode::ALL {
        let row = format!("| `{:#06x}` | {} |", op.code(), op.name());
        let line = doc
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("no row {row}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | opcode | name | call | request | reply | P | scope |
        assert_eq!(cells[6] == "P", op.pipelined(), "{line}");
        for f in sample_requests() {
            if f.request.opcode() == op {
                let scope = match f.request.sync_scope() {
                    SyncScope::None => "",
                    SyncScope::Stream(_) => "stream",
                    SyncScope::Event(_) => "event",
                    SyncScope::Context => "context",
                };
                assert_eq!(cells[7], scope, "{line}");
            }
        }
    }
}

#[test]
fn frames_of_both_directions() {
    let mut wire = Vec::new();
    let req = RequestFrame::new(7, Request::MemAlloc { bytes: 64 });
    let rep = Reply::ok(
        7,
        Opcode::MemAlloc,
        ReplyBody::DevicePtr(DevicePtr(0x2_0000_0000)),
    );
    req.encode(&mut wire).unwrap();
    rep.encode(&mut wire).unwrap();
    let mut d = Decoder::<Frame>::new(limits());
    d.feed(&wire);
    assert_eq!(d.next_frame().unwrap(), Some(Frame::Request(req)));
    assert_eq!(d.next_frame().unwrap(), Some(Frame::Reply(rep)));
    assert_eq!(d.next_frame().unwrap(), None);
    assert_eq!(
        Frame::decode(&[0xff, 0xff, 0xff, 0xff], &limits()).unwrap_err(),
        DecodeError::FrameTooLarge {
            length: u32::MAX,
            max: limits().max_frame
        }
    );
}

#[test]
fn lent_decoding_leaves_inline_data_in_the_buffer() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let htod = RequestFrame::pipelined(
        1,
        Request::MemcpyHtoD {
            dst: DevicePtr(0x2_0000_0000),
            src: HostSource::Inline(data.clone()),
            stream: Some(StreamId(0x100)),
        },
    );
    let ping = RequestFrame::new(
        2,
        Request::Ping {
            data: b"abc".to_vec(),
        },
    );
    let sync = RequestFrame::new(3, Request::CtxSynchronize);
    let mut wire = Vec::new();
    for f in [&htod, &ping, &sync] {
        f.encode(&mut wire).unwrap();
    }
    // One shot.
    let Decoded::Frame { frame, len } = RequestFrame::decode_lent(&wire, &limits()).unwrap() else {
        panic!("whole frame")
    };
    assert_eq!(len, htod.to_bytes().unwrap().len());
    assert_eq!(frame.data, &data[..]);
    assert_eq!(
        frame.frame.request,
        Request::MemcpyHtoD {
            dst: DevicePtr(0x2_0000_0000),
            src: HostSource::Inline(Vec::new()),
            stream: Some(StreamId(0x100)),
        }
    );
    // Through the stream decoder, mixed with owned decoding.
    let mut d = Decoder::<RequestFrame>::new(limits());
    assert_eq!(d.feed(&wire[..100]), 100);
    assert_eq!(d.next_lent().unwrap(), None);
    d.feed(&wire[100..]);
    let a = d.next_lent().unwrap().unwrap();
    assert_eq!(a.frame.id, 1);
    assert_eq!(a.data, &data[..]);
    let b = d.next_lent().unwrap().unwrap();
    assert_eq!(b.frame.id, 2);
    assert_eq!(b.data, b"abc");
    assert_eq!(d.next_frame().unwrap(), Some(sync));
    assert_eq!(d.next_lent().unwrap(), None);
    assert_eq!(d.buffered(), 0);
}

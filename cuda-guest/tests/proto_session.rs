//! A whole pipelined exchange through the protocol types, with a toy server that keeps
//! the deferred-error rule with `DeferredErrors`: what the service will do, minus the
//! backend.

use cuda_guest::proto::*;

/// A toy session: launches of function 0xbad fail with `status`; everything else works.
struct ToyServer {
    deferred: DeferredErrors,
    fail_with: Status,
    event_stream: Vec<(EventId, StreamId)>,
    decoder: Decoder<RequestFrame>,
    out: Vec<u8>,
}

impl ToyServer {
    fn new(fail_with: Status) -> Self {
        ToyServer {
            deferred: DeferredErrors::new(),
            fail_with,
            event_stream: Vec::new(),
            decoder: Decoder::new(Limits::default()),
            out: Vec::new(),
        }
    }

    fn execute(&mut self, f: &RequestFrame) -> Result<ReplyBody, (Status, String)> {
        match &f.request {
            Request::LaunchKernel { function, .. } if function.0 == 0xbad => {
                Err((self.fail_with, "kernel fault".into()))
            }
            Request::EventRecord { event, stream } => {
                self.event_stream.retain(|(e, _)| e != event);
                self.event_stream.push((*event, *stream));
                Ok(ReplyBody::Empty)
            }
            Request::MemAlloc { .. } => Ok(ReplyBody::DevicePtr(DevicePtr(0x2_0000_0000))),
            Request::MemcpyDtoH { bytes, .. } => Ok(ReplyBody::Data(vec![9; *bytes as usize])),
            _ => Ok(ReplyBody::Empty),
        }
    }

    fn serve(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = self.decoder.feed(rest);
            rest = &rest[n..];
            while let Some(f) = self.decoder.next_frame().unwrap() {
                let op = f.request.opcode();
                // Synchronising requests report what their scope covers first.
                let streams: Vec<StreamId>;
                let covered = match f.request.sync_scope() {
                    SyncScope::None => None,
                    SyncScope::Context => Some(Covered::All),
                    SyncScope::Stream(s) => {
                        streams = vec![s, StreamId::DEFAULT];
                        Some(Covered::Streams(&streams))
                    }
                    SyncScope::Event(e) => {
                        streams = self
                            .event_stream
                            .iter()
                            .filter(|(ev, _)| *ev == e)
                            .map(|(_, s)| *s)
                            .collect();
                        Some(Covered::Streams(&streams))
                    }
                };
                let reported = match covered {
                    Some(c) => self.deferred.reply_for(f.id, op, c),
                    None => self
                        .deferred
                        .sticky()
                        .map(|e| Reply::deferred(f.id, op, e.status, e.cause, e.detail.clone())),
                };
                let reply = match reported {
                    Some(r) => Some(r),
                    None => match self.execute(&f) {
                        Ok(body) => (!f.no_reply).then(|| Reply::ok(f.id, op, body)),
                        Err((status, detail)) if f.no_reply => {
                            let stream = f.request.stream().unwrap_or(StreamId::DEFAULT);
                            self.deferred.record(
                                stream,
                                DeferredError {
                                    status,
                                    cause: Cause {
                                        id: f.id,
                                        opcode: op,
                                    },
                                    detail,
                                },
                            );
                            None
                        }
                        Err((status, detail)) => Some(Reply::error(f.id, op, status, detail)),
                    },
                };
                if let Some(r) = reply {
                    r.encode(&mut self.out).unwrap();
                }
            }
        }
    }
}

fn launch(id: u64, function: u64, stream: StreamId) -> RequestFrame {
    RequestFrame::pipelined(
        id,
        Request::LaunchKernel {
            function: FunctionId(function),
            config: cuda_guest::driver::LaunchConfig {
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_bytes: 0,
            },
            stream,
            params: KernelParams::pack(&[&0x2_0000_0000u64.to_le_bytes()]),
        },
    )
}

fn replies(bytes: &[u8]) -> Vec<Reply> {
    let mut d = Decoder::<Reply>::new(Limits::default());
    d.feed(bytes);
    let mut v = Vec::new();
    while let Some(r) = d.next_frame().unwrap() {
        v.push(r);
    }
    v
}

#[test]
fn a_failed_launch_surfaces_at_the_next_sync_of_its_stream() {
    let (a, b) = (StreamId(0x100), StreamId(0x101));
    let mut wire = Vec::new();
    for f in [
        launch(1, 0x104, a),
        launch(2, 0xbad, a),
        launch(3, 0xbad, a), // the second failure of `a` is not reported
        launch(4, 0x104, b),
        RequestFrame::new(5, Request::StreamSynchronize { stream: b }),
        RequestFrame::new(6, Request::StreamSynchronize { stream: a }),
        RequestFrame::new(7, Request::StreamSynchronize { stream: a }),
    ] {
        f.encode(&mut wire).unwrap();
    }
    let mut server = ToyServer::new(Status::ERROR_LAUNCH_OUT_OF_RESOURCES);
    server.serve(&wire);
    let r = replies(&server.out);
    // Pipelined requests got no reply; the three synchronisations did, in order.
    assert_eq!(r.iter().map(|r| r.id).collect::<Vec<_>>(), vec![5, 6, 7]);
    assert_eq!(r[0].status, Status::SUCCESS, "stream b is clean");
    assert_eq!(r[1].status, Status::ERROR_LAUNCH_OUT_OF_RESOURCES);
    assert_eq!(
        r[1].cause,
        Some(Cause {
            id: 2,
            opcode: Opcode::LaunchKernel
        })
    );
    assert_eq!(r[1].detail(), Some("kernel fault"));
    assert_eq!(r[2].status, Status::SUCCESS, "reported once");
    assert!(server.deferred.is_empty());
}

#[test]
fn a_sticky_fault_answers_everything_after_it() {
    let s = StreamId(0x100);
    let mut wire = Vec::new();
    for f in [
        launch(1, 0xbad, s),
        RequestFrame::new(2, Request::MemAlloc { bytes: 64 }),
        RequestFrame::new(3, Request::CtxSynchronize),
        RequestFrame::new(
            4,
            Request::MemcpyDtoH {
                src: DevicePtr(0x2_0000_0000),
                bytes: 4,
                dst: HostDest::Inline,
                stream: None,
            },
        ),
    ] {
        f.encode(&mut wire).unwrap();
    }
    let mut server = ToyServer::new(Status::ERROR_ILLEGAL_ADDRESS);
    server.serve(&wire);
    let r = replies(&server.out);
    assert_eq!(r.len(), 3);
    for reply in &r {
        assert_eq!(reply.status, Status::ERROR_ILLEGAL_ADDRESS);
        assert_eq!(
            reply.cause,
            Some(Cause {
                id: 1,
                opcode: Opcode::LaunchKernel
            })
        );
    }
    server.deferred.reset();
    server.out.clear();
    let mut wire = Vec::new();
    RequestFrame::new(5, Request::CtxSynchronize)
        .encode(&mut wire)
        .unwrap();
    server.serve(&wire);
    assert_eq!(replies(&server.out)[0].status, Status::SUCCESS);
}

#[test]
fn event_scope_and_oldest_first() {
    let (a, b) = (StreamId(0x100), StreamId(0x101));
    let ev = EventId(0x200);
    let mut wire = Vec::new();
    for f in [
        launch(1, 0xbad, b),
        launch(2, 0xbad, a),
        RequestFrame::pipelined(
            3,
            Request::EventRecord {
                event: ev,
                stream: a,
            },
        ),
        RequestFrame::new(4, Request::EventSynchronize { event: ev }),
        RequestFrame::new(5, Request::CtxSynchronize),
        RequestFrame::new(6, Request::CtxSynchronize),
    ] {
        f.encode(&mut wire).unwrap();
    }
    let mut server = ToyServer::new(Status::ERROR_INVALID_VALUE);
    server.serve(&wire);
    let r = replies(&server.out);
    let got: Vec<(u64, Status, Option<u64>)> = r
        .iter()
        .map(|r| (r.id, r.status, r.cause.map(|c| c.id)))
        .collect();
    assert_eq!(
        got,
        vec![
            (4, Status::ERROR_INVALID_VALUE, Some(2)), // the event's stream a
            (5, Status::ERROR_INVALID_VALUE, Some(1)), // then b's, at the context sync
            (6, Status::SUCCESS, None),
        ]
    );
}

#[test]
fn deferred_errors_bookkeeping() {
    let mut d = DeferredErrors::new();
    let err = |id, status| DeferredError {
        status,
        cause: Cause {
            id,
            opcode: Opcode::MemcpyHtoDAsync,
        },
        detail: String::new(),
    };
    d.record(StreamId(1), err(10, Status::ERROR_INVALID_VALUE));
    d.record(StreamId(1), err(11, Status::ERROR_INVALID_VALUE));
    d.record(StreamId(2), err(5, Status::ERROR_INVALID_VALUE));
    assert_eq!(d.len(), 2);
    assert_eq!(d.take(Covered::Streams(&[StreamId(3)])), None);
    assert_eq!(d.take(Covered::All).unwrap().cause.id, 5);
    d.forget_stream(StreamId(1));
    assert!(d.is_empty());
    assert_eq!(d.take(Covered::All), None);
    d.record(StreamId(1), err(20, Status::ERROR_LAUNCH_FAILED));
    assert_eq!(d.sticky().unwrap().cause.id, 20);
    let r = d
        .reply_for(21, Opcode::StreamQuery, Covered::Streams(&[StreamId(9)]))
        .unwrap();
    assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED);
    assert_eq!(r.cause.unwrap().id, 20);
    d.reset();
    assert_eq!(d.reply_for(22, Opcode::StreamQuery, Covered::All), None);
}

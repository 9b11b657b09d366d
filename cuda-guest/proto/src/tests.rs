//! Properties of the command table itself: every row's request and reply survive
//! encoding and decoding whatever their field values, and the table agrees with
//! `docs/protocol.md` section 4.

use proptest::prelude::*;

use super::codec::Gen;
use super::{
    Decoded, HostSource, Limits, Message, Opcode, Reply, ReplyBody, Request, RequestFrame, Status,
};

/// A request of `op` from `seed`, as a frame, round-trips through both decoders; a
/// successful reply of the row's body, a failure and a deferred failure round-trip too.
fn row_round_trips(op: Opcode, seed: u64, id: u64, no_reply: bool) -> Result<(), TestCaseError> {
    let limits = Limits::default();
    let mut g = Gen::new(seed);
    let request = Request::sample(op, &mut g);
    prop_assert_eq!(request.opcode(), op);
    let frame = RequestFrame {
        id,
        no_reply: no_reply && op.pipelined(),
        request,
    };
    let b = frame
        .to_bytes()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&b[12..14], &op.code().to_le_bytes()[..]);
    prop_assert_eq!(
        b.len(),
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
    );
    match RequestFrame::decode(&b, &limits) {
        Ok(Decoded::Frame { frame: back, len }) => {
            prop_assert_eq!(len, b.len());
            prop_assert_eq!(&back, &frame);
        }
        other => prop_assert!(false, "{:?} decodes to {:?}", frame, other),
    }
    match RequestFrame::decode_lent(&b, &limits) {
        Ok(Decoded::Frame { frame: lent, len }) => {
            prop_assert_eq!(len, b.len());
            let mut back = lent.frame.clone();
            match &mut back.request {
                Request::MemcpyHtoD {
                    src: HostSource::Inline(d),
                    ..
                }
                | Request::Ping { data: d } => {
                    prop_assert!(d.is_empty());
                    d.extend_from_slice(lent.data);
                }
                _ => prop_assert!(lent.data.is_empty()),
            }
            prop_assert_eq!(&back, &frame);
        }
        other => prop_assert!(false, "{:?} lent-decodes to {:?}", frame, other),
    }

    let body = ReplyBody::sample(op.reply_body(), &mut g);
    for reply in [
        Reply::ok(id, op, body),
        Reply::error(id, op, Status(1 + g.below(1000) as u32), "a detail"),
        Reply::deferred(
            id,
            op,
            Status::ERROR_LAUNCH_FAILED,
            super::Cause {
                id: 1 + g.below(id.max(1)),
                opcode: Opcode::LaunchKernel,
            },
            "",
        ),
    ] {
        let b = reply
            .to_bytes()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        match Reply::decode(&b, &limits) {
            Ok(Decoded::Frame { frame: back, len }) => {
                prop_assert_eq!(len, b.len());
                prop_assert_eq!(&back, &reply);
            }
            other => prop_assert!(false, "{:?} decodes to {:?}", reply, other),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn every_row_round_trips_arbitrary_values(
        op in 0..Opcode::ALL.len(),
        seed in any::<u64>(),
        id in 1u64..,
        no_reply in any::<bool>(),
    ) {
        row_round_trips(Opcode::ALL[op], seed, id, no_reply)?;
    }
}

/// Every row, many times, whatever proptest happens to pick.
#[test]
fn every_row_round_trips_many_samples() {
    for &op in Opcode::ALL {
        for seed in 0..300 {
            if let Err(e) = row_round_trips(op, seed, seed + 1, seed % 2 == 0) {
                panic!("{} seed {seed}: {e}", op.name());
            }
        }
    }
}

#[test]
fn opcodes_are_in_order_and_unique() {
    for w in Opcode::ALL.windows(2) {
        assert!(w[0].code() < w[1].code(), "{:?} before {:?}", w[0], w[1]);
        assert!(w[0] < w[1], "Ord follows the numbers");
    }
    for &op in Opcode::ALL {
        assert_eq!(Opcode::from_u16(op.code()), Some(op));
        assert!(!op.needs_context() || op.needs_init(), "{op:?}");
        assert_eq!(op.backend_method(), op.backend_methods().first().copied());
    }
    assert_eq!(Opcode::from_u16(0), None);
}

fn protocol_md() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/protocol.md"
    ))
    .expect("docs/protocol.md")
}

/// Section 4's table has one row per opcode of the command table, with its number, name,
/// "(1.N)" (added in protocol 1.N), "P" (may be pipelined) and "sync scope" as declared.
#[test]
fn the_documented_opcode_table_is_the_declared_one() {
    let doc = protocol_md();
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `0x")).collect();
    assert_eq!(
        rows.len(),
        Opcode::ALL.len(),
        "one documented row per opcode"
    );
    for (&op, line) in Opcode::ALL.iter().zip(&rows) {
        // | opcode | name | call | request | reply | P | scope |
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 9, "{line}");
        assert_eq!(cells[1], format!("`{:#06x}`", op.code()), "{line}");
        assert_eq!(cells[2], op.name(), "{line}");
        let p = if op.pipelined() { "P" } else { "" };
        assert_eq!(cells[6], p, "P of {line}");
        assert_eq!(cells[7], op.sync_column(), "sync scope of {line}");
        let since = match op.minor() {
            0 => "",
            m => &format!("(1.{m})"),
        };
        let mark = cells[3].rsplit_once(' ').map_or("", |(_, m)| m);
        let marked = if mark.starts_with("(1.") { mark } else { "" };
        assert_eq!(marked, since, "the version mark of {line}");
    }
}

/// Section 4's "Call order": the commands that need no `Init` are the `session` rows.
#[test]
fn the_documented_call_order_is_the_declared_one() {
    let doc = protocol_md();
    let start = doc
        .find("every request but")
        .expect("the call order names the commands without Init");
    let sentence = &doc[start..start + doc[start..].find(" answered").unwrap()];
    let mut documented: Vec<&str> = sentence.split('`').skip(1).step_by(2).collect();
    documented.sort_unstable();
    let mut declared: Vec<&str> = Opcode::ALL
        .iter()
        .filter(|o| !o.needs_init())
        .map(|o| o.name())
        .collect();
    declared.sort_unstable();
    assert_eq!(documented, declared);
}

/// `encode_inline_htod_head` writes the copy's head by hand (for vectored writes of the
/// caller's buffer); with the data after it, it is the row's encoding.
#[test]
fn the_inline_htod_head_is_the_rows_encoding() {
    use super::{DevicePtr, StreamId};
    for (stream, no_reply) in [
        (None, false),
        (Some(StreamId(0x100)), false),
        (Some(StreamId(7)), true),
    ] {
        for len in [0usize, 1, 4096] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let dst = DevicePtr(0x2_0000_0000);
            let mut head = Vec::new();
            let total =
                RequestFrame::encode_inline_htod_head(9, no_reply, dst, stream, len, &mut head)
                    .unwrap();
            head.extend_from_slice(&data);
            let whole = RequestFrame {
                id: 9,
                no_reply,
                request: Request::MemcpyHtoD {
                    dst,
                    src: HostSource::Inline(data),
                    stream,
                },
            }
            .to_bytes()
            .unwrap();
            assert_eq!(total, whole.len());
            assert_eq!(head, whole);
        }
    }
}

//! Linked images (`cuLinkComplete`'s output, `vmgpu_ptx::linked`) never panic the
//! loader: any bytes after the magic line give units and a linked module, or a
//! positioned error; an image of fuzzed units round-trips through encode and decode.
#![no_main]

use cuda_guest::ptx::linked;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The bytes as an image's body, as the simulator's loader meets them.
    let image = format!("{}{text}", linked::MAGIC);
    if let Err(e) = linked::parse_any("fuzz", &image) {
        assert!(e.line >= 1 && e.column >= 1);
    }
    // The bytes split into two units: encode, then decode gives them back.
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let (a, b) = text.split_at(mid);
    let image = linked::encode([("a.ptx", a), ("b.ptx", b)]);
    let units = linked::decode("fuzz", &image)
        .expect("an encoded image is one")
        .expect("an encoded image decodes");
    assert_eq!(units.len(), 2);
    assert_eq!((units[0].text, units[1].text), (a, b));
    let _ = linked::parse_any("fuzz", &image);
});

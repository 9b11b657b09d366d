//! Linked images (`cuLinkComplete`'s output, `vmgpu_ptx::linked`) from any bytes: the
//! loader gives a module or a positioned error, never a panic; what `encode` makes,
//! `decode` gives back, names made one line.

use cuda_guest::ptx::linked;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_image_body_is_a_module_or_a_positioned_error(body in any::<String>()) {
        let image = format!("{}{body}", linked::MAGIC);
        if let Err(e) = linked::parse_any("fuzz", &image) {
            prop_assert!(e.line >= 1 && e.column >= 1, "{e}");
        }
    }

    #[test]
    fn unit_headers_with_any_lengths_are_refused_or_read(
        len in any::<u64>(),
        name in "[^\n]{0,12}",
        rest in any::<String>(),
    ) {
        let image = format!("{}//unit {len} {name}\n{rest}", linked::MAGIC);
        match linked::decode("fuzz", &image) {
            Some(Ok(units)) => prop_assert!(!units.is_empty() && units[0].text.len() as u64 == len),
            Some(Err(e)) => prop_assert!(e.line >= 1),
            None => prop_assert!(false, "an image with the magic line is an image"),
        }
    }

    #[test]
    fn encode_then_decode_gives_the_units_back(
        units in prop::collection::vec((any::<String>(), any::<String>()), 0..4),
    ) {
        let image = linked::encode(units.iter().map(|(n, t)| (n.as_str(), t.as_str())));
        let back = linked::decode("fuzz", &image).expect("an image").expect("decodes");
        prop_assert_eq!(back.len(), units.len());
        for (u, (name, text)) in back.iter().zip(&units) {
            prop_assert_eq!(u.text, text.as_str());
            prop_assert!(!u.name.contains('\n'));
            prop_assert_eq!(u.name.chars().count(), name.chars().count());
        }
        let _ = linked::parse_any("fuzz", &image);
    }
}

//! One scenario per sentence of the contract's events, queries and concurrency rules, run
//! against every index type.
//!
//! The cases live in `scenarios/cases.rs`, written once; `scenarios!` instantiates them in one
//! module per index, so a new layout joins every scenario with one line. The list is checked
//! against [`testing::enabled_layouts`], so the two registries cannot drift apart.

use flash_indexer::*;

macro_rules! scenarios {
    ($($(#[$cfg:meta])* $label:literal => $name:ident: $index:ty = $make:expr,)*) => {
        $(
            $(#[$cfg])*
            mod $name {
                use super::*;
                fn index() -> $index {
                    $make
                }
                include!("scenarios/cases.rs");
            }
        )*

        /// The layouts that have scenarios, by their registry names.
        #[allow(unused_mut, clippy::vec_init_then_push)]
        fn scenario_layouts() -> Vec<&'static str> {
            let mut out = Vec::new();
            $($(#[$cfg])* out.push($label);)*
            out
        }
    };
}

scenarios! {
    "naive" => naive: NaiveIndexer = NaiveIndexer::default(),
    #[cfg(feature = "positional")]
    "positional" => positional: PositionalIndexer = PositionalIndexer::default(),
    #[cfg(feature = "positional")]
    "positional/stride=8" => positional_stride_8: Indexer<testing::NarrowPositionalMap> = Indexer::with_jump(1),
    #[cfg(feature = "array")]
    "array" => array: ArrayIndexer = ArrayIndexer::default(),
    // Shallow enough (one checkpoint map) that deep scenarios cross into the overflow map.
    #[cfg(feature = "array")]
    "array/depth=64" => array_depth_64: layouts::ArrayIndexerOf<64> = Default::default(),
    #[cfg(feature = "radix")]
    "radix" => radix: RadixIndexer = RadixIndexer::default(),
}

#[test]
fn every_registered_layout_has_its_scenarios() {
    let registered: Vec<&str> = testing::enabled_layouts().iter().map(|f| f.name).collect();
    let mut with_scenarios = scenario_layouts();
    with_scenarios.retain(|&name| name != "naive");
    assert_eq!(with_scenarios, registered);
}

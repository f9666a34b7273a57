//! One scenario per sentence of SPEC §2-§4, run against every index type.
//!
//! The cases live in `scenarios/cases.rs`, written once; `scenarios!` instantiates them in one
//! module per index type, so a new layout joins every scenario with one line.

use flash_indexer::*;

macro_rules! scenarios {
    ($($name:ident: $index:ty),* $(,)?) => {$(
        mod $name {
            use super::*;
            fn index() -> $index {
                <$index>::default()
            }
            include!("scenarios/cases.rs");
        }
    )*};
}

scenarios! {
    naive: NaiveIndexer,
}

#[cfg(feature = "positional")]
scenarios! {
    positional: PositionalIndexer,
}

#[cfg(feature = "array")]
scenarios! {
    array: ArrayIndexer,
    // Shallow enough that most scenarios cross into the overflow map.
    array_depth_16: layouts::ArrayIndexerOf<16>,
}

#[cfg(feature = "radix")]
scenarios! {
    radix: RadixIndexer,
}

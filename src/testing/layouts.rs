//! The layouts this build has, by name: for suites and tools that run them all.

use crate::index::KvIndex;

/// A named way to build an empty index.
#[derive(Clone, Copy)]
pub struct IndexFactory {
    /// Short name, e.g. `positional` or `positional/jump=3`.
    pub name: &'static str,
    /// Builds an empty index.
    pub make: fn() -> Box<dyn KvIndex>,
    /// `false` for variants that exist to stress the search (other jump sizes), not to compare.
    pub primary: bool,
}

impl core::fmt::Debug for IndexFactory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every layout this build has, at its defaults (`primary`), plus search variants with other
/// jump sizes. The reference, [`NaiveIndexer`](crate::NaiveIndexer), is not included.
pub fn enabled_layouts() -> Vec<IndexFactory> {
    #[allow(unused_mut)] // Empty when every layout feature is off.
    let mut out: Vec<IndexFactory> = Vec::new();
    #[cfg(feature = "positional")]
    {
        use crate::{Indexer, PositionalIndexer};
        out.push(IndexFactory {
            name: "positional",
            make: || Box::new(PositionalIndexer::default()),
            primary: true,
        });
        out.push(IndexFactory {
            name: "positional/jump=3",
            make: || Box::new(Indexer::<crate::layouts::PositionalMap>::with_jump(3)),
            primary: false,
        });
    }
    #[cfg(feature = "array")]
    {
        use crate::ArrayIndexer;
        out.push(IndexFactory {
            name: "array",
            make: || Box::new(ArrayIndexer::default()),
            primary: true,
        });
        // A shallow array so that generated chains cross into the overflow map.
        out.push(IndexFactory {
            name: "array/depth=16",
            make: || Box::new(crate::layouts::ArrayIndexerOf::<16>::default()),
            primary: false,
        });
    }
    #[cfg(feature = "radix")]
    out.push(IndexFactory {
        name: "radix",
        make: || Box::new(crate::RadixIndexer::default()),
        primary: true,
    });
    out
}

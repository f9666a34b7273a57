//! The layouts this build has, by name: for suites and tools that run them all.

use crate::index::KvIndex;
use crate::index_core::{Indexer, Layout};

/// What an index still holds: layout entries and live workers. Both are 0 once every worker has
/// been removed, whatever the index held before.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Residue {
    /// Entries of the layout (map entries, or tree nodes).
    pub entries: usize,
    /// Workers the worker table still holds.
    pub workers: usize,
}

/// An index that can say what it still holds, so that a harness can empty it and reuse it
/// instead of building a new one per case (the fuzz target does: building the map layouts
/// costs more than a short input).
pub trait Inspect: KvIndex {
    /// What the index holds now.
    fn residue(&self) -> Residue;
    /// The index itself, as the trait the harness drives.
    fn as_index(&self) -> &dyn KvIndex;
}

impl<L: Layout> Inspect for Indexer<L> {
    fn residue(&self) -> Residue {
        Residue {
            entries: self.entries(),
            workers: self.worker_count(),
        }
    }

    fn as_index(&self) -> &dyn KvIndex {
        self
    }
}

impl Inspect for crate::NaiveIndexer {
    /// Held blocks count as entries.
    fn residue(&self) -> Residue {
        let (entries, workers) = self.totals();
        Residue { entries, workers }
    }

    fn as_index(&self) -> &dyn KvIndex {
        self
    }
}

/// A named way to build an empty index.
#[derive(Clone, Copy)]
pub struct IndexFactory {
    /// Short name, e.g. `positional` or `positional/stride=8`.
    pub name: &'static str,
    /// Builds an empty index.
    pub make: fn() -> Box<dyn KvIndex>,
    /// Builds the same empty index, able to say what it still holds.
    pub inspectable: fn() -> Box<dyn Inspect>,
    /// `false` for variants that exist to stress the search (other jump sizes), not to compare.
    pub primary: bool,
}

impl core::fmt::Debug for IndexFactory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

/// The reference, [`NaiveIndexer`](crate::NaiveIndexer), as a factory: for tools that measure
/// it beside the layouts.
pub fn naive_factory() -> IndexFactory {
    IndexFactory {
        name: "naive",
        make: || Box::new(crate::NaiveIndexer::new()),
        inspectable: || Box::new(crate::NaiveIndexer::new()),
        primary: true,
    }
}

/// Every layout this build has, at its defaults (`primary`), plus search variants with other
/// jump sizes. The reference, [`NaiveIndexer`](crate::NaiveIndexer), is not included.
pub fn enabled_layouts() -> Vec<IndexFactory> {
    #[allow(unused_mut)] // Empty when every layout feature is off.
    let mut out: Vec<IndexFactory> = Vec::new();
    #[cfg(feature = "positional")]
    {
        use crate::PositionalIndexer;
        out.push(IndexFactory {
            name: "positional",
            make: || Box::new(PositionalIndexer::default()),
            inspectable: || Box::new(PositionalIndexer::default()),
            primary: true,
        });
        // Checkpoints every 8 positions and the shortest jump: generated chains cross many
        // checkpoints, so every case exercises the binary scan-back.
        type Narrow = Indexer<crate::layouts::positional::NarrowPositionalMap>;
        out.push(IndexFactory {
            name: "positional/stride=8",
            make: || Box::new(Narrow::with_jump(1)),
            inspectable: || Box::new(Narrow::with_jump(1)),
            primary: false,
        });
    }
    #[cfg(feature = "array")]
    {
        use crate::ArrayIndexer;
        out.push(IndexFactory {
            name: "array",
            make: || Box::new(ArrayIndexer::default()),
            inspectable: || Box::new(ArrayIndexer::default()),
            primary: true,
        });
        // A shallow array (one checkpoint map) so that generated chains cross into the
        // overflow map.
        out.push(IndexFactory {
            name: "array/depth=64",
            make: || Box::new(crate::layouts::ArrayIndexerOf::<64>::default()),
            inspectable: || Box::new(crate::layouts::ArrayIndexerOf::<64>::default()),
            primary: false,
        });
    }
    #[cfg(feature = "radix")]
    out.push(IndexFactory {
        name: "radix",
        make: || Box::new(crate::RadixIndexer::default()),
        inspectable: || Box::new(crate::RadixIndexer::default()),
        primary: true,
    });
    out
}

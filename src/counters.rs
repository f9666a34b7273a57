//! Counters that many threads bump and one snapshot reads: declared once, as a public `Copy`
//! struct of `u64`s (the snapshot) and a crate-private struct of atomics behind it.

/// `counters!(/// docs
/// Stats, Counters { /// docs
/// field, ... })` declares `pub struct Stats` (a snapshot, `#[non_exhaustive]`) and
/// `pub(crate) struct Counters` (the atomics) with `Counters::snapshot()`.
macro_rules! counters {
    (
        $(#[$stats_doc:meta])* $stats:ident, $counters:ident {
            $($(#[$doc:meta])* $name:ident,)*
        }
    ) => {
        $(#[$stats_doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl $stats {
            /// Every counter with its name, in declaration order (for metrics and bindings).
            pub fn named(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }

        #[derive(Debug, Default)]
        pub(crate) struct $counters {
            $(pub(crate) $name: $crate::sync::atomic::AtomicU64,)*
        }

        impl $counters {
            /// Every counter, read now (each on its own: not one atomic snapshot).
            pub(crate) fn snapshot(&self) -> $stats {
                $stats {
                    $($name: self.$name.load($crate::sync::atomic::Ordering::Relaxed),)*
                }
            }
        }
    };
}

pub(crate) use counters;

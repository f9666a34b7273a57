//! Every layout against the reference on generated adversarial sequences (SPEC: a layout that
//! disagrees with `NaiveIndexer` on any input is broken).
//!
//! `FLASH_DIFF_CASES` scales the number of cases (CI runs thousands; the default is a quick run).

use flash_indexer::testing::{Profile, assert_agrees_with_reference};

fn cases(default: u32) -> u32 {
    std::env::var("FLASH_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(default, |scale| {
            // The variable sets the adversarial profile's count; others scale with it.
            (u64::from(default) * u64::from(scale) / 512).max(1) as u32
        })
}

macro_rules! differential {
    ($($name:ident: $index:ty),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[test]
            fn adversarial() {
                assert_agrees_with_reference::<$index>(&Profile::adversarial().cases(cases(512)));
            }

            #[test]
            fn long_chains() {
                assert_agrees_with_reference::<$index>(&Profile::long_chains().cases(cases(12)));
            }

            #[test]
            fn many_workers() {
                assert_agrees_with_reference::<$index>(&Profile::many_workers().cases(cases(24)));
            }
        }
    )*};
}

#[cfg(feature = "positional")]
differential! {
    positional: flash_indexer::PositionalIndexer,
}

/// Jump sizes around and at the extremes: the search must be exact for every one of them.
#[cfg(feature = "positional")]
mod positional_jumps {
    use super::*;
    use flash_indexer::testing::assert_agrees_with_reference_using;
    use flash_indexer::{Indexer, layouts::positional::PositionalMap};

    fn check(jump: u32) {
        let make = || Indexer::<PositionalMap>::with_jump(jump);
        assert_agrees_with_reference_using(make, &Profile::adversarial().cases(cases(128)));
    }

    #[test]
    fn jump_1() {
        check(1);
    }

    #[test]
    fn jump_7() {
        check(7);
    }

    #[test]
    fn jump_64() {
        check(64);
    }

    #[test]
    fn jump_256() {
        check(256);
    }
}

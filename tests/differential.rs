//! Every layout against the reference on generated adversarial sequences (SPEC: a layout that
//! disagrees with `NaiveIndexer` on any input is broken). Layouts come from
//! `testing::enabled_layouts()`, so a new layout, and its search variants, join without a line here.
//!
//! `FLASH_DIFF_CASES` sets the adversarial profile's case count (the others scale with it); CI
//! runs thousands, the default is a quick run.

use flash_indexer::testing::{self, IndexFactory};
use flash_indexer::testing::{Profile, agrees_with_reference_using, scaled_cases};

/// Runs `profile` on every enabled layout; reports every layout that diverged.
fn every_layout(profile: Profile) {
    let factories = testing::enabled_layouts();
    assert!(!factories.is_empty(), "no layout feature enabled");
    let failures: Vec<String> = factories
        .iter()
        .filter_map(|IndexFactory { name, make, .. }| {
            agrees_with_reference_using(make, &profile)
                .err()
                .map(|report| format!("{name}: {report}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn adversarial() {
    every_layout(Profile::adversarial().cases(scaled_cases(512)));
}

#[test]
fn long_chains() {
    every_layout(Profile::long_chains().cases(scaled_cases(12)));
}

#[test]
fn many_workers() {
    every_layout(Profile::many_workers().cases(scaled_cases(24)));
}

#[test]
fn wide_sets() {
    every_layout(Profile::wide_sets().cases(scaled_cases(16)));
}

/// Jump sizes around and at the extremes: the search must be exact for every one of them.
/// Jumps are whole strides of checkpoints; at the positional layout's stride (64) every jump up
/// to 64 is one stride, so the small ones run on the layout with checkpoints every 8 positions,
/// where generated chains cross many of them.
#[cfg(feature = "positional")]
mod positional_jumps {
    use super::*;
    use flash_indexer::testing::{NarrowPositionalMap, assert_agrees_with_reference_using};
    use flash_indexer::{Indexer, layouts::PositionalMap};

    fn check_narrow(jump: u32) {
        let make = || Indexer::<NarrowPositionalMap>::with_jump(jump);
        assert_agrees_with_reference_using(make, &Profile::adversarial().cases(scaled_cases(128)));
    }

    fn check(jump: u32) {
        let make = || Indexer::<PositionalMap>::with_jump(jump);
        assert_agrees_with_reference_using(make, &Profile::adversarial().cases(scaled_cases(128)));
    }

    #[test]
    fn stride_8_jump_8() {
        check_narrow(1);
    }

    #[test]
    fn stride_8_jump_24() {
        check_narrow(17);
    }

    #[test]
    fn stride_8_jump_64() {
        check_narrow(64);
    }

    #[test]
    fn jump_128() {
        check(128);
    }

    #[test]
    fn jump_256() {
        check(256);
    }
}

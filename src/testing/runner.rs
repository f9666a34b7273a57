//! proptest runs of the harness, in one call per index type.

use super::check::check_ops;
use super::step::steps_strategy;
use super::universe::Universe;
use crate::index::KvIndex;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// `default` cases, scaled by the `FLASH_DIFF_CASES` environment variable: its value counts
/// against 512 (the adversarial profile's default), so `FLASH_DIFF_CASES=8192` runs 16 times
/// `default`. Suites read it so that CI can lengthen every differential run with one variable.
pub fn scaled_cases(default: u32) -> u32 {
    std::env::var("FLASH_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(default, |scale| {
            (u64::from(default) * u64::from(scale) / 512).max(1) as u32
        })
}

/// How the harness generates cases: universe size and number of cases.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Distinct worker ids.
    pub ids: u64,
    /// Dp ranks per id.
    pub ranks: u32,
    /// Deepest position (chains up to `max_pos + 1` blocks).
    pub max_pos: u32,
    /// Steps per case, at most.
    pub steps: usize,
    /// Cases to run.
    pub cases: u32,
}

impl Profile {
    /// Short chains crossing the jump boundaries up to 128 (the real layouts' first checkpoint
    /// after the root), few workers, many collisions: the profile that finds most bugs.
    pub fn adversarial() -> Self {
        Self {
            ids: 3,
            ranks: 2,
            max_pos: 144,
            steps: 48,
            cases: 512,
        }
    }

    /// Chains of more than 10,000 blocks, with holes and re-stores deep inside.
    pub fn long_chains() -> Self {
        Self {
            ids: 2,
            ranks: 1,
            max_pos: 12_000,
            steps: 16,
            cases: 12,
        }
    }

    /// Hundreds of workers with dp ranks on shared prefixes.
    pub fn many_workers() -> Self {
        Self {
            ids: 400,
            ranks: 3,
            max_pos: 40,
            steps: 200,
            cases: 24,
        }
    }

    /// Hundreds of workers storing the same few paths, so that entries hold more workers than a
    /// sorted list does (wide sets, changed in place) and shrink back as workers leave.
    pub fn wide_sets() -> Self {
        Self {
            ids: 160,
            ranks: 1,
            max_pos: 20,
            steps: 700,
            cases: 16,
        }
    }

    /// The same profile with `cases` cases.
    pub fn cases(mut self, cases: u32) -> Self {
        self.cases = cases;
        self
    }

    /// The universe of one case.
    pub fn universe(&self, seed: u64) -> Universe {
        Universe::new(self.ids, self.ranks, self.max_pos, seed)
    }
}

/// Runs `profile.cases` generated cases on fresh `I::default()` indexes against the reference.
/// On a divergence, returns proptest's shrunk failing case and what disagreed.
pub fn agrees_with_reference<I: KvIndex + Default>(profile: &Profile) -> Result<(), String> {
    agrees_with_reference_using(I::default, profile)
}

/// [`agrees_with_reference`] for indexes built by `make` (a configured jump, a seed, ...).
pub fn agrees_with_reference_using<I: KvIndex>(
    make: impl Fn() -> I,
    profile: &Profile,
) -> Result<(), String> {
    let config = Config {
        cases: profile.cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        steps_strategy(profile.steps),
        proptest::prelude::any::<u64>(),
    );
    let result = runner.run(&strategy, |(steps, seed)| {
        let mut universe = profile.universe(seed);
        let ops = universe.ops(&steps);
        let workers: Vec<_> = universe.workers().collect();
        let index = make();
        check_ops(&index, &ops, &universe.closing_queries(), &workers)
            .map_err(|d| TestCaseError::fail(d.to_string()))
    });
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(why, (steps, seed))) => Err(format!(
            "{why}\nminimal failing case: seed {seed}, steps {steps:#?}"
        )),
        Err(TestError::Abort(why)) => Err(format!("harness aborted: {why}")),
    }
}

/// [`agrees_with_reference`], panicking with the failing case.
pub fn assert_agrees_with_reference<I: KvIndex + Default>(profile: &Profile) {
    assert_agrees_with_reference_using(I::default, profile);
}

/// [`agrees_with_reference_using`], panicking with the failing case.
pub fn assert_agrees_with_reference_using<I: KvIndex>(make: impl Fn() -> I, profile: &Profile) {
    if let Err(report) = agrees_with_reference_using(make, profile) {
        panic!(
            "{} disagrees with NaiveIndexer: {report}",
            core::any::type_name::<I>()
        );
    }
}

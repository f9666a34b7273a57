//! The order in which a round runs the subjects.
//!
//! Whatever a subject leaves behind (hundreds of megabytes being freed, threads being joined, a
//! heap laid out by its allocations) weighs on the subject that runs next. Starting each round
//! one subject further on does not spread that: the order stays cyclic, so every subject but the
//! round's first follows the same one every round. Each round therefore runs the subjects in a
//! shuffled order, fixed by the round's number so that a run can be repeated: over the rounds,
//! every subject follows every other about equally often.

use flash_indexer::testing::{GOLDEN, SplitMix64};

/// Seed of the shuffles ("order" in ASCII; any constant will do, as long as it stays the same
/// from run to run).
const SEED: u64 = 0x006f_7264_6572;

/// The subjects' indices (`0..subjects`) in the order round `round` runs them.
pub fn of_round(round: usize, subjects: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..subjects).collect();
    let mut rng = SplitMix64(SEED ^ (round as u64).wrapping_mul(GOLDEN));
    // Fisher-Yates: every permutation equally likely.
    for i in (1..subjects).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_subject_once() {
        for round in 0..50 {
            let mut order = of_round(round, 9);
            order.sort_unstable();
            assert_eq!(order, (0..9).collect::<Vec<_>>(), "round {round}");
        }
        assert!(of_round(0, 0).is_empty());
        assert_eq!(of_round(3, 1), vec![0]);
    }

    #[test]
    fn the_same_round_gets_the_same_order() {
        assert_eq!(of_round(7, 9), of_round(7, 9));
    }

    /// What the shuffle is for: over the trace preset's 45 rounds of 9 subjects, no subject
    /// follows one predecessor most of the time (a cyclic order gives 44 of 45), and every
    /// subject follows at least five different ones.
    #[test]
    fn predecessors_vary_from_round_to_round() {
        let (rounds, subjects) = (45, 9);
        let sequence: Vec<usize> = (0..rounds).flat_map(|r| of_round(r, subjects)).collect();
        let mut follows = vec![vec![0usize; subjects]; subjects];
        for pair in sequence.windows(2) {
            follows[pair[1]][pair[0]] += 1;
        }
        for (subject, before) in follows.iter().enumerate() {
            let most = before.iter().max().copied().unwrap_or(0);
            let distinct = before.iter().filter(|&&n| n > 0).count();
            assert!(
                most <= rounds / 3,
                "subject {subject} follows one subject {most} times"
            );
            assert!(
                distinct >= 5,
                "subject {subject} follows only {distinct} others"
            );
        }
    }
}

//! The order in which a round runs the subjects.
//!
//! Whatever a subject leaves behind (hundreds of megabytes being freed, threads being joined, a
//! heap laid out by its allocations) weighs on the subject that runs next. Starting each round
//! one subject further on does not spread that: the order stays cyclic, so every subject but the
//! round's first follows the same one every round. Shuffling each round only spreads it on
//! average: over 45 rounds of 9 subjects, some subject follows one other in 10 or more rounds
//! where 5 is fair.
//!
//! So the rounds follow a Williams design, the crossover design built for carryover: a Latin
//! square whose rows are orders in which every subject directly follows every other subject
//! equally often. For `n` subjects its rows are `0, 1, n-1, 2, n-2, ...` shifted by `0..n`; for
//! an odd `n` the same rows reversed follow, and every ordered pair is then adjacent twice in
//! `2n` rows (once in `n` rows for an even `n`). Each subject also runs in every position of a
//! round equally often.

/// Rounds after which the design repeats.
fn period(subjects: usize) -> usize {
    if subjects.is_multiple_of(2) {
        subjects
    } else {
        2 * subjects
    }
}

/// The subjects' indices (`0..subjects`) in the order round `round` runs them.
pub fn of_round(round: usize, subjects: usize) -> Vec<usize> {
    if subjects == 0 {
        return Vec::new();
    }
    let row = round % period(subjects);
    let shift = row % subjects;
    // 0, 1, n-1, 2, n-2, ...: every difference between neighbours occurs once, either way.
    let first_row = (0..subjects).map(|k| {
        if !k.is_multiple_of(2) {
            k.div_ceil(2)
        } else {
            (subjects - k / 2) % subjects
        }
    });
    let mut order: Vec<usize> = first_row.map(|s| (s + shift) % subjects).collect();
    if row >= subjects {
        order.reverse();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_subject_once() {
        for subjects in 0..12 {
            for round in 0..50 {
                let mut order = of_round(round, subjects);
                order.sort_unstable();
                assert_eq!(order, (0..subjects).collect::<Vec<_>>(), "round {round}");
            }
        }
    }

    /// Within the rounds of one period, every subject directly follows every other subject
    /// equally often: once for an even number of subjects, twice for an odd one.
    #[test]
    fn every_subject_follows_every_other_equally_often() {
        for subjects in 2..12 {
            let mut follows = vec![vec![0usize; subjects]; subjects];
            for round in 0..period(subjects) {
                for pair in of_round(round, subjects).windows(2) {
                    follows[pair[1]][pair[0]] += 1;
                }
            }
            let want = if subjects.is_multiple_of(2) { 1 } else { 2 };
            for (subject, before) in follows.iter().enumerate() {
                for (other, &n) in before.iter().enumerate() {
                    let want = if other == subject { 0 } else { want };
                    assert_eq!(n, want, "{subjects} subjects: {subject} after {other}");
                }
            }
        }
    }

    /// And in every position of a round equally often.
    #[test]
    fn every_subject_runs_in_every_position_equally_often() {
        for subjects in 1..12 {
            let mut at = vec![vec![0usize; subjects]; subjects];
            for round in 0..period(subjects) {
                for (position, subject) in of_round(round, subjects).into_iter().enumerate() {
                    at[subject][position] += 1;
                }
            }
            let want = period(subjects) / subjects;
            assert!(
                at.iter().flatten().all(|&n| n == want),
                "{subjects}: {at:?}"
            );
        }
    }

    /// Across round boundaries too, over the trace preset's 45 rounds of this build's 9
    /// subjects, no subject follows one other in more than 9 rounds (the cyclic order of
    /// starting each round one subject further on: 40).
    #[test]
    fn across_rounds_no_predecessor_dominates() {
        let (rounds, subjects) = (45, 9);
        let sequence: Vec<usize> = (0..rounds).flat_map(|r| of_round(r, subjects)).collect();
        let mut follows = vec![vec![0usize; subjects]; subjects];
        for pair in sequence.windows(2) {
            follows[pair[1]][pair[0]] += 1;
        }
        let most = follows.iter().flatten().max().copied().unwrap_or(0);
        assert!(most <= 9, "a subject follows one other {most} times");
    }
}

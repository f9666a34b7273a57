//! How much of a tree edge each worker holds: one *cutoff* per worker.
//!
//! A compressed tree node carries an edge of consecutive blocks. A worker's reachable blocks
//! are prefix-closed (a reachable block's parent is reachable), so what a worker holds of an
//! edge is always a prefix of it, `edge[..cutoff]`: one number per worker, however long the
//! edge. Evicting a tail moves the number; it rewrites nothing per block.
//!
//! Readers never lock. A cover's membership is copied on write (a new cover is published and
//! the old one retired through the epoch), but a member's cutoff is an atomic changed in place,
//! so raising or cutting the cutoff of a worker already in the node allocates nothing. Wide
//! covers (a system prompt under thousands of workers) change membership in place too: a bit
//! per slot and a cutoff per slot. Writers of one cover are serialised by their node's lock.
//!
//! Every cutoff a reader loads is the worker's coverage at that instant, which is what the
//! walk's no-phantom argument needs (`search.rs`).

use super::slots::{Slot, WIDE, slots_of_bits};
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A wide cover goes back to a sorted list when it shrinks to this many.
const NARROW: usize = WIDE / 2;

/// The workers holding a prefix of one edge, and how long a prefix each holds (at least 1).
#[derive(Debug)]
pub enum Cover {
    /// Exactly one worker (a sequence's private suffix: the common case).
    One(Slot, AtomicU32),
    /// 2 to [`WIDE`] workers, sorted by slot.
    Many(Box<[(Slot, AtomicU32)]>),
    /// More than [`WIDE`] workers (until it shrinks to [`NARROW`]).
    Wide(Box<WideCover>),
}

/// A cover of many workers: a bit per slot for listing them, a cutoff per slot for reading one.
#[derive(Debug)]
pub struct WideCover {
    /// Members; changed only by the node's writer.
    len: AtomicU32,
    bits: Box<[AtomicU64]>,
    /// Indexed by slot; 0 for non-members.
    cutoffs: Box<[AtomicU32]>,
}

/// What a change could not do in place: publish this cover (`None`: no workers left) in the
/// node, then retire the old one.
pub(super) type Replacement = Option<Cover>;

impl Cover {
    /// A cover of one worker holding `cutoff` blocks.
    pub fn one(slot: Slot, cutoff: u32) -> Self {
        Cover::One(slot, AtomicU32::new(cutoff))
    }

    /// How many blocks of the edge `slot` holds now (0: none).
    #[inline]
    pub fn cutoff(&self, slot: Slot) -> u32 {
        // Acquire pairs with the writer's release, after which the slot's name is readable.
        match self {
            Cover::One(s, c) => {
                if *s == slot {
                    c.load(Ordering::Acquire)
                } else {
                    0
                }
            }
            Cover::Many(pairs) => pairs
                .binary_search_by_key(&slot, |(s, _)| *s)
                .map_or(0, |at| pairs[at].1.load(Ordering::Acquire)),
            Cover::Wide(wide) => wide.cutoff(slot),
        }
    }

    /// The members, sorted ascending.
    pub fn slots(&self) -> Vec<Slot> {
        match self {
            Cover::One(slot, _) => vec![*slot],
            Cover::Many(pairs) => pairs.iter().map(|(s, _)| *s).collect(),
            Cover::Wide(wide) => wide.slots(),
        }
    }

    /// Keeps, at the front of `slots` (sorted), those holding at least `m` blocks, in order,
    /// and returns how many; calls `dropped(slot, cutoff)` for each of the others, with the
    /// cutoff it read (`< m`, 0 for a non-member). The tail of `slots` is left unspecified.
    #[inline]
    pub fn keep_at_least(
        &self,
        slots: &mut [Slot],
        m: u32,
        mut dropped: impl FnMut(Slot, u32),
    ) -> usize {
        match self {
            Cover::One(sole, c) => {
                // A private suffix under many active workers: all but one drop, at 0.
                let c = c.load(Ordering::Acquire);
                keep(
                    slots,
                    m,
                    &mut dropped,
                    |slot| if slot == *sole { c } else { 0 },
                )
            }
            Cover::Many(pairs) => {
                // Both sorted: one forward walk over the cover.
                let mut j = 0;
                keep(slots, m, &mut dropped, |slot| {
                    while j < pairs.len() && pairs[j].0 < slot {
                        j += 1;
                    }
                    match pairs.get(j) {
                        Some((s, c)) if *s == slot => c.load(Ordering::Acquire),
                        _ => 0,
                    }
                })
            }
            Cover::Wide(wide) => keep(slots, m, &mut dropped, |slot| wide.cutoff(slot)),
        }
    }

    /// Raises `slot`'s cutoff to `to` if it is lower (adding `slot`); returns the cutoff before.
    /// `Err` when the cover must be replaced: publish it, then retire this one.
    ///
    /// Caller: the node's writer (under its lock).
    pub fn raise(&self, slot: Slot, to: u32) -> Result<u32, (Replacement, u32)> {
        debug_assert!(to > 0);
        let raise_in_place = |c: &AtomicU32| {
            let old = c.load(Ordering::Relaxed);
            if to > old {
                c.store(to, Ordering::Release);
            }
            old
        };
        match self {
            Cover::One(s, c) if *s == slot => Ok(raise_in_place(c)),
            Cover::One(s, c) => {
                let mut pairs = vec![(*s, AtomicU32::new(c.load(Ordering::Relaxed)))];
                let at = usize::from(*s < slot);
                pairs.insert(at, (slot, AtomicU32::new(to)));
                Err((Some(Cover::Many(pairs.into_boxed_slice())), 0))
            }
            Cover::Many(pairs) => match pairs.binary_search_by_key(&slot, |(s, _)| *s) {
                Ok(at) => Ok(raise_in_place(&pairs[at].1)),
                Err(at) => {
                    let copy = |(s, c): &(Slot, AtomicU32)| (*s, c.load(Ordering::Relaxed));
                    let mut all: Vec<(Slot, u32)> = pairs.iter().map(copy).collect();
                    all.insert(at, (slot, to));
                    let cover = if all.len() > WIDE {
                        Cover::Wide(Box::new(WideCover::new(&all)))
                    } else {
                        Cover::many(&all)
                    };
                    Err((Some(cover), 0))
                }
            },
            Cover::Wide(wide) => match wide.cutoffs.get(slot as usize) {
                Some(c) => {
                    let old = raise_in_place(c);
                    if old == 0 {
                        // Release: a reader that sees the bit also sees the cutoff.
                        wide.bits[slot as usize / 64].fetch_or(1 << (slot % 64), Ordering::Release);
                        wide.len.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(old)
                }
                None => {
                    let mut all = wide.pairs();
                    all.push((slot, to));
                    Err((Some(Cover::Wide(Box::new(WideCover::new(&all)))), 0))
                }
            },
        }
    }

    /// Cuts `slot`'s cutoff down to `to` (0: removes `slot`). `Err` when the cover must be
    /// replaced: publish it, then retire this one.
    ///
    /// Caller: the node's writer (under its lock); `slot` is a member holding more than `to`.
    pub fn cut(&self, slot: Slot, to: u32) -> Result<(), Replacement> {
        if to > 0 {
            let c = match self {
                Cover::One(_, c) => c,
                Cover::Many(pairs) => {
                    let at = pairs.binary_search_by_key(&slot, |(s, _)| *s);
                    &pairs[at.expect("a cut worker is a member")].1
                }
                Cover::Wide(wide) => &wide.cutoffs[slot as usize],
            };
            debug_assert!(c.load(Ordering::Relaxed) > to, "a cut shortens the cover");
            c.store(to, Ordering::Release);
            return Ok(());
        }
        match self {
            Cover::One(s, _) => {
                debug_assert_eq!(*s, slot);
                Err(None)
            }
            Cover::Many(pairs) => {
                let rest: Vec<(Slot, u32)> = pairs
                    .iter()
                    .filter(|(s, _)| *s != slot)
                    .map(|(s, c)| (*s, c.load(Ordering::Relaxed)))
                    .collect();
                Err(Some(match rest.as_slice() {
                    [(s, c)] => Cover::one(*s, *c),
                    _ => Cover::many(&rest),
                }))
            }
            Cover::Wide(wide) => {
                if wide.len.load(Ordering::Relaxed) as usize <= NARROW + 1 {
                    let mut rest = wide.pairs();
                    rest.retain(|(s, _)| *s != slot);
                    return Err(Some(Cover::many(&rest)));
                }
                wide.bits[slot as usize / 64].fetch_and(!(1 << (slot % 64)), Ordering::Release);
                wide.cutoffs[slot as usize].store(0, Ordering::Release);
                wide.len.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn many(pairs: &[(Slot, u32)]) -> Self {
        Cover::Many(pairs.iter().map(|&(s, c)| (s, AtomicU32::new(c))).collect())
    }
}

/// Keeps at the front of `slots`, in order, those whose `cutoff_of` is at least `m`; calls
/// `dropped(slot, cutoff)` for the others; returns how many are kept.
#[inline(always)]
fn keep(
    slots: &mut [Slot],
    m: u32,
    dropped: &mut impl FnMut(Slot, u32),
    mut cutoff_of: impl FnMut(Slot) -> u32,
) -> usize {
    let mut write = 0;
    for read in 0..slots.len() {
        let slot = slots[read];
        let c = cutoff_of(slot);
        if c >= m {
            slots[write] = slot;
            write += 1;
        } else {
            dropped(slot, c);
        }
    }
    write
}

impl WideCover {
    /// A cover of `pairs` (not empty), with room for slots up to twice the largest.
    fn new(pairs: &[(Slot, u32)]) -> Self {
        let last = pairs.iter().map(|(s, _)| *s).max().expect("not empty") as usize;
        let words = (last / 64 + 1).next_power_of_two() * 2;
        let cover = Self {
            len: AtomicU32::new(pairs.len() as u32),
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            cutoffs: (0..words * 64).map(|_| AtomicU32::new(0)).collect(),
        };
        for &(slot, c) in pairs {
            cover.cutoffs[slot as usize].store(c, Ordering::Relaxed);
            cover.bits[slot as usize / 64].fetch_or(1 << (slot % 64), Ordering::Relaxed);
        }
        cover
    }

    #[inline]
    fn cutoff(&self, slot: Slot) -> u32 {
        self.cutoffs
            .get(slot as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    fn slots(&self) -> Vec<Slot> {
        slots_of_bits(&self.bits, self.len.load(Ordering::Relaxed) as usize)
    }

    /// Members and cutoffs, sorted by slot (writer side).
    fn pairs(&self) -> Vec<(Slot, u32)> {
        self.slots()
            .into_iter()
            .map(|s| (s, self.cutoffs[s as usize].load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Applies a change the way a node's writer does: in place, or by replacement.
    fn apply(cover: Option<Cover>, slot: Slot, to: u32) -> Option<Cover> {
        let Some(cover) = cover else {
            return (to > 0).then(|| Cover::one(slot, to));
        };
        let present = cover.cutoff(slot) > 0;
        if to > 0 && to >= cover.cutoff(slot) {
            match cover.raise(slot, to) {
                Ok(_) => Some(cover),
                Err((replacement, old)) => {
                    assert_eq!(old, 0);
                    replacement
                }
            }
        } else if present {
            match cover.cut(slot, to) {
                Ok(()) => Some(cover),
                Err(replacement) => replacement,
            }
        } else {
            Some(cover)
        }
    }

    #[test]
    fn covers_agree_with_a_model_through_every_transition() {
        let mut cover = None;
        let mut model = BTreeMap::new();
        let mut x = 11u64;
        let (mut wide_seen, mut narrowed, mut was_wide) = (false, false, false);
        for step in 0..20_000u64 {
            x = crate::mix::splitmix64(x);
            let growing = (step / 2_000) % 2 == 0;
            let slot = (x >> 8) as u32 % (WIDE as u32 * (1 + (step / 4_000) as u32) * 8);
            let old = model.get(&slot).copied().unwrap_or(0u32);
            let to = if growing {
                old + 1 + (x % 5) as u32
            } else if !x.is_multiple_of(4) {
                0
            } else {
                old.saturating_sub(1 + (x % 3) as u32)
            };
            cover = apply(cover, slot, to);
            if to == 0 {
                model.remove(&slot);
            } else {
                model.insert(slot, to);
            }
            let Some(c) = &cover else {
                assert!(model.is_empty(), "step {step}");
                was_wide = false;
                continue;
            };
            assert_eq!(c.slots(), model.keys().copied().collect::<Vec<_>>());
            let is_wide = matches!(c, Cover::Wide(_));
            narrowed |= was_wide && !is_wide;
            wide_seen |= is_wide;
            was_wide = is_wide;
            let mut probe: Vec<Slot> = (0..60).map(|i| i * 5).collect();
            let m = 1 + (x % 7) as u32;
            let mut seen = Vec::new();
            let kept = c.keep_at_least(&mut probe, m, |s, cut| seen.push((s, cut)));
            for s in &probe[..kept] {
                assert!(model.get(s).is_some_and(|&v| v >= m), "step {step}");
            }
            assert!(probe[..kept].is_sorted());
            for (s, cut) in seen {
                assert_eq!(model.get(&s).copied().unwrap_or(0), cut, "step {step}");
                assert!(cut < m);
            }
        }
        assert!(wide_seen && narrowed, "{wide_seen} {narrowed}");
    }
}

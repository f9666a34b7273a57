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
//! A search narrows its workers ([`SlotSet`], words of bits) at a node a word at a time: the
//! cover keeps its members as words of bits too, and which of them hold the *whole* edge
//! (`full` bits). A query that follows the whole edge keeps `active & full` and reads a cutoff
//! only for the members that hold less, and scores (one at a time: they are the answer) the
//! workers that stop there.
//!
//! Every cutoff a reader loads is the worker's coverage at that instant, which is what the
//! walk's no-phantom argument needs (`search.rs`). So is every `full` bit: the writer sets it
//! after raising the cutoff to the whole edge and clears it before cutting the cutoff below,
//! so a reader that sees it set reads a moment when the worker held the whole edge.

use super::slot_set::{SlotSet, Word, slots_of};
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
    Many(ManyCover),
    /// More than [`WIDE`] workers (until it shrinks to [`NARROW`]).
    Wide(Box<WideCover>),
}

/// A cover of a few workers: a sorted list of cutoffs, and the members as words of bits.
#[derive(Debug)]
pub struct ManyCover {
    /// Members and cutoffs, sorted by slot.
    pairs: Box<[(Slot, AtomicU32)]>,
    /// The members by word, sorted by word.
    words: Box<[ManyWord]>,
    /// The edge's length: a cutoff of this many is the whole edge.
    edge: u32,
    /// The lowest cutoff of any member: a query that follows the edge for no more than this
    /// keeps every member without reading a cutoff (see [`Floor`]).
    floor: Floor,
}

/// The members of a [`ManyCover`] among one word's 64 slots.
#[derive(Debug)]
struct ManyWord {
    word: u32,
    /// Where in the cover's `pairs` the word's first member is: a member's cutoff is at
    /// `first` plus the number of members below it in the word.
    first: u32,
    members: u64,
    /// The members holding the whole edge.
    full: AtomicU64,
}

/// A cover of many workers: a bit per slot for membership and for holding the whole edge, a
/// cutoff per slot.
#[derive(Debug)]
pub struct WideCover {
    /// Members; changed only by the node's writer.
    len: AtomicU32,
    bits: Box<[AtomicU64]>,
    /// The members holding the whole edge.
    full: Box<[AtomicU64]>,
    /// Indexed by slot; 0 for non-members.
    cutoffs: Box<[AtomicU32]>,
    /// The edge's length: a cutoff of this many is the whole edge.
    edge: u32,
    /// At most the lowest cutoff of any member (see [`Floor`]); not raised when the lowest
    /// member is, since finding the next lowest would scan every slot.
    floor: Floor,
}

/// A lower bound of the cutoffs of a cover's members, so that a query leaving the edge at or
/// before it keeps all of them with a word operation.
///
/// The edge a worker first stores runs on into its own private tail, and the workers that
/// share only the prefix hold less than the whole edge (on Dynamo's workload, all but one of the
/// workers under each shared prefix). Without a floor, `full` bits keep none of them, and every
/// query through the prefix reads each one's cutoff (paper §6.8).
///
/// Kept true for readers the way `full` bits are: a writer lowers the floor before it cuts a
/// cutoff below it or publishes a member below it, and raises it only after the cutoffs it
/// is computed from, so a reader that sees `floor >= m` reads a moment when every member it
/// sees held at least `m` blocks.
#[derive(Debug)]
struct Floor(AtomicU32);

impl Floor {
    /// The floor of members holding `cutoffs`.
    fn of(cutoffs: impl Iterator<Item = u32>) -> Self {
        Floor(AtomicU32::new(cutoffs.min().unwrap_or(0)))
    }

    /// Whether every member holds at least `m` blocks.
    #[inline]
    fn keeps_all(&self, m: u32) -> bool {
        // Acquire pairs with the writer's release in `set`.
        m <= self.0.load(Ordering::Acquire)
    }

    /// Makes the floor at most `to`, before a member's cutoff goes down to it. Caller: the
    /// node's writer.
    fn lower_to(&self, to: u32) {
        if to < self.0.load(Ordering::Relaxed) {
            self.set(to);
        }
    }

    fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, to: u32) {
        self.0.store(to, Ordering::Release);
    }
}

/// What [`Cover::keep`] tells of the workers it drops: one at a time, or a word of them that
/// stop at the same cutoff (which a scorer names from one run of cells).
pub(crate) trait Drops {
    /// `slot` stops at `cutoff`.
    fn one(&mut self, slot: Slot, cutoff: u32);

    /// The slots `bits` of word `word` (possibly none) all stop at `cutoff`.
    fn word(&mut self, word: u32, bits: u64, cutoff: u32) {
        for slot in slots_of(word, bits) {
            self.one(slot, cutoff);
        }
    }
}

impl<F: FnMut(Slot, u32)> Drops for F {
    fn one(&mut self, slot: Slot, cutoff: u32) {
        self(slot, cutoff);
    }
}

/// Collects the workers [`Cover::keep`] drops into a set (they come in ascending words).
struct Collect<'a>(&'a mut SlotSet);

impl Drops for Collect<'_> {
    #[inline]
    fn one(&mut self, slot: Slot, _: u32) {
        let (word, bit) = Word::of(slot);
        self.0.push_bits(word, bit);
    }

    #[inline]
    fn word(&mut self, word: u32, bits: u64, _: u32) {
        self.0.push_bits(word, bits);
    }
}

/// What a change could not do in place: publish this cover (`None`: no workers left) in the
/// node, then retire the old one.
pub(super) type Replacement = Option<Cover>;

impl Cover {
    /// A cover of one worker holding `cutoff` blocks.
    pub fn one(slot: Slot, cutoff: u32) -> Self {
        Cover::One(slot, AtomicU32::new(cutoff))
    }

    /// `slot`'s cutoff when it is the cover's one worker; `None` when the cover has others.
    #[cfg_attr(
        not(any(feature = "positional", feature = "array", feature = "radix")),
        allow(dead_code)
    )]
    pub(crate) fn only(&self, slot: Slot) -> Option<u32> {
        match self {
            Cover::One(s, c) if *s == slot => Some(c.load(Ordering::Relaxed)),
            _ => None,
        }
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
            Cover::Many(many) => many
                .pairs
                .binary_search_by_key(&slot, |(s, _)| *s)
                .map_or(0, |at| many.pairs[at].1.load(Ordering::Acquire)),
            Cover::Wide(wide) => wide.cutoff(slot),
        }
    }

    /// The members, sorted ascending.
    pub fn slots(&self) -> Vec<Slot> {
        match self {
            Cover::One(slot, _) => vec![*slot],
            Cover::Many(many) => many.pairs.iter().map(|(s, _)| *s).collect(),
            Cover::Wide(wide) => wide.slots(),
        }
    }

    /// The members, as a set.
    pub(crate) fn members(&self) -> SlotSet {
        match self {
            Cover::One(slot, _) => SlotSet::one(*slot),
            Cover::Many(many) => SlotSet::from_words(many.words.iter().map(|w| Word {
                word: w.word,
                bits: w.members,
            })),
            Cover::Wide(wide) => {
                SlotSet::from_words(wide.bits.iter().enumerate().map(|(i, b)| Word {
                    word: i as u32,
                    // Acquire: as in `cutoff`.
                    bits: b.load(Ordering::Acquire),
                }))
            }
        }
    }

    /// Keeps in `set` those holding at least `m` blocks (`m` at most the edge's length), and
    /// tells `dropped` of each of the others, with the cutoff it read (`< m`, 0 for a
    /// non-member): a word at a time for those that stop together (non-members; all but the
    /// member of a one-worker cover), one at a time otherwise. Costs a word operation per word
    /// of `set`, plus a cutoff read for each member below the floor that does not hold the
    /// whole edge, plus what `dropped` does with the dropped workers.
    #[inline]
    pub(crate) fn keep(&self, set: &mut SlotSet, m: u32, mut dropped: impl Drops) {
        match self {
            Cover::One(sole, c) => {
                // A private suffix under many active workers: all but one drop, at 0.
                let c = c.load(Ordering::Acquire);
                let (word, bit) = Word::of(*sole);
                set.retain_bits(|w| {
                    let kept = if w.word == word && c >= m {
                        bit & w.bits
                    } else {
                        0
                    };
                    let mut out = w.bits & !kept;
                    if w.word == word && out & bit != 0 {
                        dropped.one(*sole, c);
                        out &= !bit;
                    }
                    dropped.word(w.word, out, 0);
                    kept
                });
            }
            Cover::Many(many) => {
                // Membership is fixed for the cover's life, so one look at the floor serves
                // every word.
                let all = many.floor.keeps_all(m);
                // Both sorted by word: one forward walk over the cover's words.
                let mut j = 0;
                set.retain_bits(|w| {
                    while many.words.get(j).is_some_and(|o| o.word < w.word) {
                        j += 1;
                    }
                    let Some(own) = many.words.get(j).filter(|o| o.word == w.word) else {
                        dropped.word(w.word, w.bits, 0);
                        return 0;
                    };
                    let inside = w.bits & own.members;
                    dropped.word(w.word, w.bits & !inside, 0);
                    let mut kept = if all {
                        inside
                    } else if m <= many.edge {
                        own.full.load(Ordering::Acquire) & inside
                    } else {
                        0
                    };
                    for slot in slots_of(w.word, inside & !kept) {
                        let bit = 1u64 << (slot % 64);
                        let rank = (own.members & (bit - 1)).count_ones();
                        let c = many.pairs[(own.first + rank) as usize]
                            .1
                            .load(Ordering::Acquire);
                        if c >= m {
                            kept |= bit;
                        } else {
                            dropped.one(slot, c);
                        }
                    }
                    kept
                });
            }
            Cover::Wide(wide) => set.retain_bits(|w| {
                let (members, full) = wide.bits_of(w.word);
                let inside = w.bits & members;
                dropped.word(w.word, w.bits & !inside, 0);
                // After the members: a member published since is below the floor read here.
                let mut kept = if wide.floor.keeps_all(m) {
                    inside
                } else if m <= wide.edge {
                    full & inside
                } else {
                    0
                };
                for slot in slots_of(w.word, inside & !kept) {
                    let c = wide.cutoff(slot);
                    if c >= m {
                        kept |= 1 << (slot % 64);
                    } else {
                        dropped.one(slot, c);
                    }
                }
                kept
            }),
        }
    }

    /// Splits `set` into the members (left in `set`) and the others (returned): a word
    /// operation per word of `set` (every member holds at least one block).
    pub(crate) fn split_off_absent(&self, set: &mut SlotSet) -> SlotSet {
        match self {
            Cover::One(sole, _) => {
                let (word, bit) = Word::of(*sole);
                set.split_off(|w| if w.word == word { bit } else { 0 })
            }
            Cover::Many(many) => {
                let mut j = 0;
                set.split_off(|w| {
                    while many.words.get(j).is_some_and(|o| o.word < w.word) {
                        j += 1;
                    }
                    many.words
                        .get(j)
                        .filter(|o| o.word == w.word)
                        .map_or(0, |o| o.members)
                })
            }
            Cover::Wide(wide) => set.split_off(|w| wide.bits_of(w.word).0),
        }
    }

    /// Splits `set` into those holding at least `m` blocks (left in `set`) and the others
    /// (returned): [`keep`](Self::keep), with the others collected instead of scored, so at
    /// the same cost.
    #[inline]
    pub(crate) fn split_off_short(&self, set: &mut SlotSet, m: u32) -> SlotSet {
        if m <= 1 {
            return self.split_off_absent(set);
        }
        let mut short = SlotSet::default();
        self.keep(set, m, Collect(&mut short));
        short
    }

    /// Raises `slot`'s cutoff to `to` if it is lower (adding `slot`); returns the cutoff before.
    /// `edge` is the edge's length. `Err` when the cover must be replaced: publish it, then
    /// retire this one.
    ///
    /// Caller: the node's writer (under its lock).
    pub fn raise(&self, slot: Slot, to: u32, edge: u32) -> Result<u32, (Replacement, u32)> {
        debug_assert!(to > 0 && to <= edge);
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
                let mut pairs = vec![(*s, c.load(Ordering::Relaxed))];
                let at = usize::from(*s < slot);
                pairs.insert(at, (slot, to));
                Err((Some(Cover::many(&pairs, edge)), 0))
            }
            Cover::Many(many) => match many.pairs.binary_search_by_key(&slot, |(s, _)| *s) {
                Ok(at) => {
                    let old = raise_in_place(&many.pairs[at].1);
                    if to == edge {
                        // After the cutoff: a reader that sees the bit sees the whole edge held.
                        let (word, bit) = Word::of(slot);
                        many.word(word).full.fetch_or(bit, Ordering::Release);
                    }
                    if old == many.floor.get() && to > old {
                        // After the cutoff, like the bit; a few dozen members at most.
                        let cutoffs = many.pairs.iter().map(|(_, c)| c.load(Ordering::Relaxed));
                        many.floor.set(Floor::of(cutoffs).get());
                    }
                    Ok(old)
                }
                Err(at) => {
                    let mut all = many.pairs();
                    all.insert(at, (slot, to));
                    let cover = if all.len() > WIDE {
                        Cover::Wide(Box::new(WideCover::new(&all, edge)))
                    } else {
                        Cover::many(&all, edge)
                    };
                    Err((Some(cover), 0))
                }
            },
            Cover::Wide(wide) => match wide.cutoffs.get(slot as usize) {
                Some(c) => {
                    let old = raise_in_place(c);
                    let (word, bit) = Word::of(slot);
                    if to == edge {
                        wide.full[word as usize].fetch_or(bit, Ordering::Release);
                    }
                    if old == 0 {
                        // Before the member's bit: a reader that sees the bit sees the floor
                        // under the member.
                        wide.floor.lower_to(to);
                        // Release: a reader that sees the bit also sees the cutoff.
                        wide.bits[word as usize].fetch_or(bit, Ordering::Release);
                        wide.len.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(old)
                }
                None => {
                    let mut all = wide.pairs();
                    all.push((slot, to));
                    Err((Some(Cover::Wide(Box::new(WideCover::new(&all, edge)))), 0))
                }
            },
        }
    }

    /// Cuts `slot`'s cutoff down to `to` (0: removes `slot`); `edge` is the edge's length.
    /// `Err` when the cover must be replaced: publish it, then retire this one.
    ///
    /// Caller: the node's writer (under its lock); `slot` is a member holding more than `to`.
    pub fn cut(&self, slot: Slot, to: u32, edge: u32) -> Result<(), Replacement> {
        let (word, bit) = Word::of(slot);
        if to > 0 {
            // The `full` bit goes before the cutoff: a reader that sees it set reads a moment
            // when the whole edge was still held.
            let c = match self {
                Cover::One(_, c) => c,
                Cover::Many(many) => {
                    many.floor.lower_to(to);
                    many.word(word).full.fetch_and(!bit, Ordering::Release);
                    let at = many.pairs.binary_search_by_key(&slot, |(s, _)| *s);
                    &many.pairs[at.expect("a cut worker is a member")].1
                }
                Cover::Wide(wide) => {
                    wide.floor.lower_to(to);
                    wide.full[word as usize].fetch_and(!bit, Ordering::Release);
                    &wide.cutoffs[slot as usize]
                }
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
            Cover::Many(many) => {
                let mut rest = many.pairs();
                rest.retain(|(s, _)| *s != slot);
                Err(Some(match rest.as_slice() {
                    [(s, c)] => Cover::one(*s, *c),
                    _ => Cover::many(&rest, edge),
                }))
            }
            Cover::Wide(wide) => {
                if wide.len.load(Ordering::Relaxed) as usize <= NARROW + 1 {
                    let mut rest = wide.pairs();
                    rest.retain(|(s, _)| *s != slot);
                    return Err(Some(Cover::many(&rest, edge)));
                }
                wide.full[word as usize].fetch_and(!bit, Ordering::Release);
                wide.bits[word as usize].fetch_and(!bit, Ordering::Release);
                wide.cutoffs[slot as usize].store(0, Ordering::Release);
                wide.len.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn many(pairs: &[(Slot, u32)], edge: u32) -> Self {
        Cover::Many(ManyCover::new(pairs, edge))
    }
}

impl ManyCover {
    /// A cover of `pairs` (sorted by slot) on an edge of `edge` blocks.
    fn new(pairs: &[(Slot, u32)], edge: u32) -> Self {
        // (word, first, members, full)
        let mut words: Vec<(u32, u32, u64, u64)> = Vec::new();
        for (i, &(slot, c)) in pairs.iter().enumerate() {
            let (word, bit) = Word::of(slot);
            if words.last().is_none_or(|w| w.0 != word) {
                words.push((word, i as u32, 0, 0));
            }
            let last = words.last_mut().expect("pushed above");
            last.2 |= bit;
            if c == edge {
                last.3 |= bit;
            }
        }
        Self {
            pairs: pairs.iter().map(|&(s, c)| (s, AtomicU32::new(c))).collect(),
            words: words
                .into_iter()
                .map(|(word, first, members, full)| ManyWord {
                    word,
                    first,
                    members,
                    full: AtomicU64::new(full),
                })
                .collect(),
            edge,
            floor: Floor::of(pairs.iter().map(|&(_, c)| c)),
        }
    }

    /// The members' word `word` (writer side: `word` has a member).
    fn word(&self, word: u32) -> &ManyWord {
        let at = self.words.binary_search_by_key(&word, |w| w.word);
        &self.words[at.expect("a member's word")]
    }

    /// Members and cutoffs, sorted by slot (writer side).
    fn pairs(&self) -> Vec<(Slot, u32)> {
        let copy = |(s, c): &(Slot, AtomicU32)| (*s, c.load(Ordering::Relaxed));
        self.pairs.iter().map(copy).collect()
    }
}

impl WideCover {
    /// A cover of `pairs` (not empty) on an edge of `edge` blocks, with room for slots up to
    /// twice the largest.
    fn new(pairs: &[(Slot, u32)], edge: u32) -> Self {
        let last = pairs.iter().map(|(s, _)| *s).max().expect("not empty") as usize;
        let words = (last / 64 + 1).next_power_of_two() * 2;
        let cover = Self {
            len: AtomicU32::new(pairs.len() as u32),
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            full: (0..words).map(|_| AtomicU64::new(0)).collect(),
            cutoffs: (0..words * 64).map(|_| AtomicU32::new(0)).collect(),
            edge,
            floor: Floor::of(pairs.iter().map(|&(_, c)| c)),
        };
        for &(slot, c) in pairs {
            let (word, bit) = Word::of(slot);
            cover.cutoffs[slot as usize].store(c, Ordering::Relaxed);
            cover.bits[word as usize].fetch_or(bit, Ordering::Relaxed);
            if c == edge {
                cover.full[word as usize].fetch_or(bit, Ordering::Relaxed);
            }
        }
        cover
    }

    #[inline]
    fn cutoff(&self, slot: Slot) -> u32 {
        self.cutoffs
            .get(slot as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// The members among word `word`'s slots, and those of them holding the whole edge.
    #[inline]
    fn bits_of(&self, word: u32) -> (u64, u64) {
        // Acquire: as in `cutoff`.
        let load = |bits: &[AtomicU64]| {
            bits.get(word as usize)
                .map_or(0, |b| b.load(Ordering::Acquire))
        };
        (load(&self.bits), load(&self.full))
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

    /// The edge the model's covers are on: short, so that cutoffs often reach it (`full`).
    const EDGE: u32 = 6;

    /// Applies a change the way a node's writer does: in place, or by replacement.
    fn apply(cover: Option<Cover>, slot: Slot, to: u32) -> Option<Cover> {
        let Some(cover) = cover else {
            return (to > 0).then(|| Cover::one(slot, to));
        };
        let present = cover.cutoff(slot) > 0;
        if to > 0 && to >= cover.cutoff(slot) {
            match cover.raise(slot, to, EDGE) {
                Ok(_) => Some(cover),
                Err((replacement, old)) => {
                    assert_eq!(old, 0);
                    replacement
                }
            }
        } else if present {
            match cover.cut(slot, to, EDGE) {
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
                (old + 1 + (x % 5) as u32).min(EDGE)
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
            let members = SlotSet::from_sorted(model.keys().copied());
            assert_eq!(c.members(), members, "step {step}");
            let is_wide = matches!(c, Cover::Wide(_));
            narrowed |= was_wide && !is_wide;
            wide_seen |= is_wide;
            was_wide = is_wide;
            // Every fifth slot up to 300, and a few beyond every cover's words.
            let probe = || SlotSet::from_sorted((0..60).map(|i| i * 5).chain([70_000, 70_001]));
            let m = 1 + (x % u64::from(EDGE)) as u32;
            let mut kept = probe();
            let mut seen = BTreeMap::new();
            c.keep(&mut kept, m, |s, cut| {
                assert!(seen.insert(s, cut).is_none())
            });
            for s in probe().iter() {
                let held = model.get(&s).copied().unwrap_or(0);
                if held >= m {
                    assert!(kept.iter().any(|k| k == s), "step {step}: {s} kept");
                    assert!(!seen.contains_key(&s), "step {step}: {s} not dropped");
                } else {
                    assert_eq!(seen.get(&s), Some(&held), "step {step}: {s} dropped");
                    assert!(kept.iter().all(|k| k != s), "step {step}: {s} not kept");
                }
            }
            let mut present = probe();
            let absent = c.split_off_absent(&mut present);
            let (inside, outside): (Vec<Slot>, Vec<Slot>) =
                probe().iter().partition(|s| model.contains_key(s));
            assert_eq!(present.iter().collect::<Vec<_>>(), inside, "step {step}");
            assert_eq!(absent.iter().collect::<Vec<_>>(), outside, "step {step}");
        }
        assert!(wide_seen && narrowed, "{wide_seen} {narrowed}");
    }

    /// Members that hold the same prefix of a longer edge are kept by the floor when a
    /// query leaves the edge there; a cut below it lowers it, and raising the lowest member
    /// back raises it (a few members; a wide cover keeps a lower bound until it is rebuilt).
    #[test]
    fn floors_follow_cuts_and_raises() {
        for workers in [3u32, 100] {
            // Slot 0 holds the whole edge; the others stop two blocks short.
            let mut cover = Cover::one(0, EDGE);
            for slot in 1..workers {
                if let Err((Some(bigger), _)) = cover.raise(slot, EDGE - 2, EDGE) {
                    cover = bigger;
                }
            }
            let floor = |cover: &Cover| match cover {
                Cover::Many(many) => many.floor.get(),
                Cover::Wide(wide) => wide.floor.get(),
                Cover::One(..) => unreachable!("more than one member"),
            };
            let kept = |cover: &Cover, m: u32| {
                let mut set = SlotSet::from_sorted(0..workers);
                let mut dropped = Vec::new();
                cover.keep(&mut set, m, |s, c| dropped.push((s, c)));
                (set.len(), dropped)
            };
            assert_eq!(floor(&cover), EDGE - 2);
            assert_eq!(kept(&cover, EDGE - 2), (workers as usize, vec![]));
            cover.cut(1, 1, EDGE).expect("in place");
            assert_eq!(floor(&cover), 1);
            assert_eq!(kept(&cover, EDGE - 2), (workers as usize - 1, vec![(1, 1)]));
            assert_eq!(kept(&cover, 1), (workers as usize, vec![]));
            assert_eq!(cover.raise(1, EDGE - 2, EDGE).expect("in place"), 1);
            assert_eq!(kept(&cover, EDGE - 2), (workers as usize, vec![]));
            let raised_back = if workers <= WIDE as u32 { EDGE - 2 } else { 1 };
            assert_eq!(floor(&cover), raised_back);
        }
    }

    /// A member whose tail is cut is no longer kept by its `full` bit when a query follows the
    /// whole edge, and is kept again once raised back, in both forms that keep the bits.
    #[test]
    fn full_bits_follow_cuts_and_raises() {
        for workers in [3u32, 100] {
            let mut cover = Cover::one(0, EDGE);
            for slot in 1..workers {
                if let Err((Some(bigger), _)) = cover.raise(slot, EDGE, EDGE) {
                    cover = bigger;
                }
            }
            let all = || SlotSet::from_sorted(0..workers);
            let kept = |cover: &Cover| {
                let mut set = all();
                let mut dropped = Vec::new();
                cover.keep(&mut set, EDGE, |s, c| dropped.push((s, c)));
                (set.len(), dropped)
            };
            assert_eq!(kept(&cover), (workers as usize, vec![]));
            cover.cut(1, EDGE - 2, EDGE).expect("in place");
            assert_eq!(kept(&cover), (workers as usize - 1, vec![(1, EDGE - 2)]));
            assert_eq!(cover.raise(1, EDGE, EDGE).expect("in place"), EDGE - 2);
            assert_eq!(kept(&cover), (workers as usize, vec![]));
        }
    }
}

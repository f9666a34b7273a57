//! Where a worker's seqs are: a hash table of places that stores no keys.
//!
//! A worker must find any seq it holds (a parent, a block to remove) in one probe. A map from
//! seq to place stores the seq twice, once in the map and once in its run's blocks, which is why
//! it was 16 bytes an entry. This table stores the place alone (4 bytes an entry while the
//! worker's runs and offsets fit in 32 bits with room to double, else 8; with the bits left
//! over filled from the seq's hash, to skip most entries unread) and is asked
//! with the runs beside it: an entry *matches* a seq when the run block at its place is that
//! seq. A worker holds a seq in one place at most (the core's invariant), so whichever matching
//! entry a probe finds first names the only place there is.
//!
//! That makes every entry self-checking, so entries need not be exact. Evicting blocks from the
//! end of a run leaves their entries behind (a write per block is most of what an eviction would
//! cost otherwise), and an entry left behind can later point at another seq's place: it is then
//! a duplicate of that seq's own entry, which is harmless, because a lookup accepts only a place
//! that holds the seq it looks for. What the table must keep is *completeness*: every place that
//! holds a block or a hole has an entry reachable under its seq's hash. Entries beyond that are
//! garbage, counted as `len - live`; a rebuild from the runs, which name every place in order,
//! drops them all whenever the table would grow and when garbage outnumbers the live entries
//! four to one, so the table never holds more than the peak of live places it had room for.
//!
//! A store files each new block of its event (a claim), in tables that are cold: the workers'
//! events interleave. So it asks for the lines of each claim a few blocks ahead
//! ([`ProbeLines::warm`]) and the misses of an event's claims overlap (paper §6.8 measured it
//! where claims were two fifths of a writer's time).

use super::run::{Loc, Run, RunId};
use crate::prefetch::prefetch;
use crate::types::{Block, SeqHash};
use core::hash::BuildHasher;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry as Vacancy;

/// Garbage is dropped by a rebuild only once there is this much of it, so that a small worker
/// does not rebuild at every eviction.
const REBUILD_MIN: usize = 64;

/// A table that must grow while it has no garbage (its worker is filling, not evicting) grows
/// fourfold while it has room for fewer entries than this, and twofold otherwise.
///
/// A worker that is filling rebuilds its table at every growth; growing fourfold halves how many
/// rebuilds there are. The slack that leaves is bounded by the table size at which growth turns
/// twofold, where slack is what counts. Tables with garbage (workers that evict as they store)
/// always double. Measured in paper §6.10.
const GROW_FOURFOLD_BELOW: usize = 1 << 15;

/// The block at `loc` of `runs`, if the run has one there.
fn seq_at<H>(runs: &[Run<H>], loc: Loc) -> Option<SeqHash> {
    runs.get(loc.run as usize)?.seqs.get(loc.off()).copied()
}

/// How an entry holds a place: the two formats a table can have, chosen when it is built.
trait Format: Copy + 'static {
    /// What the table stores per entry.
    type Code: Copy + Eq;
    fn encode(self, loc: Loc, hash: u64) -> Self::Code;
    fn decode(self, code: Self::Code) -> Loc;
    /// Whether the entry can be the place of a seq with this hash.
    fn may_be(self, code: Self::Code, hash: u64) -> bool;
}

/// The wide format: a place, and 7 bits of its seq's hash beside the 7 the table's own tag keeps.
///
/// A probe asks the runs only about entries whose bits match, so a seq that is not there costs
/// a probe of the table and almost never a read of a run (one entry in 2^14 instead of one in
/// 2^7: the run's record and its seqs were two more cache misses). The bits live in the offset's
/// high bits, which only a run of 2^24 blocks or more needs; its entries keep the whole offset
/// and no bits, and are always asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    run: u32,
    /// `FILTERED` and the bits above the offset's 24, or the whole offset.
    code: u32,
}

/// Marks an entry with hash bits; never set in an offset (it is [`Loc`]'s hole mark).
const FILTERED: u32 = 1 << 31;
/// Offsets below this leave room for the hash bits.
const SHORT: u32 = 1 << 24;

/// Tables in the wide format.
#[derive(Clone, Copy, Debug)]
struct Wide;

impl Entry {
    /// The hash bits an entry keeps: apart from hashbrown's tag (the top 7) and its bucket
    /// index (the low bits).
    fn bits(hash: u64) -> u32 {
        (hash >> 48) as u32 & 0x7f
    }
}

impl Format for Wide {
    type Code = Entry;

    fn encode(self, loc: Loc, hash: u64) -> Entry {
        let off = loc.off() as u32;
        let code = match off < SHORT {
            true => FILTERED | Entry::bits(hash) << 24 | off,
            false => off,
        };
        Entry { run: loc.run, code }
    }

    fn decode(self, entry: Entry) -> Loc {
        let off = match entry.code & FILTERED {
            0 => entry.code,
            _ => entry.code & (SHORT - 1),
        };
        Loc::new(entry.run, off as usize)
    }

    fn may_be(self, entry: Entry, hash: u64) -> bool {
        entry.code & FILTERED == 0 || (entry.code >> 24) & 0x7f == Entry::bits(hash)
    }
}

/// The narrow format: a place in 32 bits, the offset in the low `off_bits`, the run above it,
/// and as many bits of the seq's hash as are left above that (none, possibly), for the same
/// filtering as [`Wide`]'s.
///
/// Half the bytes of a wide entry, and a table is most of what a worker keeps a block for
/// beside its seq (paper §6.10). A table is built
/// narrow whenever the places it could be asked to file fit with room to grow: runs and
/// offsets twice what they are at the build. A worker outgrowing that is rebuilt (by
/// [`Places::reserve`], before an event files anything), so a rebuild for the format is a
/// doubling away from the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Narrow {
    off_bits: u32,
    run_bits: u32,
}

impl Narrow {
    /// A format for run ids below `runs` and offsets below `offs`, with room for twice as many
    /// of each; `None` when that takes more than 32 bits.
    fn with_room(runs: usize, offs: usize) -> Option<Self> {
        let bits = |n: usize| usize::BITS - (2 * n.max(1) - 1).leading_zeros();
        let (run_bits, off_bits) = (bits(runs), bits(offs));
        (run_bits + off_bits <= u32::BITS).then_some(Self { off_bits, run_bits })
    }

    /// Whether run ids below `runs` and offsets below `offs` fit.
    fn fits(self, runs: usize, offs: usize) -> bool {
        runs <= 1 << self.run_bits && offs <= 1 << self.off_bits
    }

    fn filter_shift(self) -> u32 {
        self.off_bits + self.run_bits
    }

    /// The hash bits an entry keeps: from bit 25 on, apart from the bucket index of any table
    /// of fewer than 2^25 buckets (the low bits), and mostly apart from hashbrown's tag (the
    /// top 7).
    fn bits(self, hash: u64) -> u32 {
        match self.filter_shift() {
            u32::BITS => 0,
            shift => ((hash >> 25) as u32) << shift,
        }
    }
}

impl Format for Narrow {
    type Code = u32;

    fn encode(self, loc: Loc, hash: u64) -> u32 {
        debug_assert!(
            self.fits(loc.run as usize + 1, loc.off() + 1),
            "{loc:?} fits"
        );
        self.bits(hash) | loc.run << self.off_bits | loc.off() as u32
    }

    fn decode(self, code: u32) -> Loc {
        let place = match self.filter_shift() {
            u32::BITS => code,
            shift => code & ((1 << shift) - 1),
        };
        let off = place & ((1 << self.off_bits) - 1);
        Loc::new(place >> self.off_bits, off as usize)
    }

    fn may_be(self, code: u32, hash: u64) -> bool {
        match self.filter_shift() {
            u32::BITS => true,
            shift => code >> shift == self.bits(hash) >> shift,
        }
    }
}

/// The entries of a table in either format.
#[derive(Debug)]
enum Table {
    Narrow(HashTable<u32>, Narrow),
    Wide(HashTable<Entry>),
}

/// Runs `$body` with `$t` bound to the table and `$f` to its format.
macro_rules! with_table {
    ($table:expr, $t:ident, $f:ident => $body:expr) => {
        match $table {
            Table::Narrow($t, format) => {
                let $f = *format;
                $body
            }
            Table::Wide($t) => {
                let $f = Wide;
                $body
            }
        }
    };
}

/// The hash an entry is filed under when the table moves it: that of the seq its place holds
/// now (garbage then files under whatever it points at, which is as good as anywhere).
fn rehasher<'a, H, F: Format>(
    hasher: &'a RandomState,
    runs: &'a [Run<H>],
    format: F,
) -> impl Fn(&F::Code) -> u64 + 'a {
    move |&code| seq_at(runs, format.decode(code)).map_or(0, |seq| hasher.hash_one(seq.0))
}

/// Where a table's probes start, to ask for a probe's lines before it runs ([`ProbeLines::warm`]).
/// A hint: nothing is read through it, and a table that changed since only wastes the asks.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProbeLines {
    /// The table's control bytes.
    ctrl: *const u8,
    mask: usize,
    /// Bytes of an entry.
    entry: usize,
}

/// Each claim's lines are asked for this many blocks ahead of it ([`Places::claim_all`]), in
/// events long enough (`WARM_FROM`) to repay finding where the table's lines are (two more
/// misses). Far enough ahead for the writers' tables, which do not fit in the cache together
/// (paper §6.16).
const AHEAD: usize = 12;
const WARM_FROM: usize = 12;

/// The hashes of the blocks being claimed, from the one being claimed to the last one warmed:
/// a ring of at least [`AHEAD`] + 1.
const RING: usize = 16;

/// [`Places::claim_all`] in a table of format `F`.
#[allow(clippy::too_many_arguments)] // The table, its hasher, and the claim's own arguments.
fn claim_in<H, F: Format>(
    t: &mut HashTable<F::Code>,
    f: F,
    hasher: &RandomState,
    lines: Option<ProbeLines>,
    runs: &[Run<H>],
    blocks: &[Block],
    run: RunId,
    off0: usize,
) -> bool {
    const _: () = assert!(
        RING > AHEAD,
        "the ring holds every hash warmed and not yet claimed"
    );
    let hash = |block: &Block| hasher.hash_one(block.seq.0);
    let mut ring = [0u64; RING];
    let ahead = match lines {
        Some(_) => AHEAD.min(blocks.len()),
        None => 0,
    };
    for (i, block) in blocks[..ahead].iter().enumerate() {
        ring[i % RING] = hash(block);
    }
    let warm = |h: u64| {
        if let Some(lines) = lines {
            lines.warm(h);
        }
    };
    ring[..ahead].iter().for_each(|&h| warm(h));
    for (i, block) in blocks.iter().enumerate() {
        if let Some(next) = blocks.get(i + ahead).filter(|_| ahead > 0) {
            let h = hash(next);
            ring[(i + ahead) % RING] = h;
            warm(h);
        }
        let h = match ahead {
            0 => hash(block),
            _ => ring[i % RING],
        };
        // An entry naming a place this event just gave (in `run` before this block's) may be
        // an earlier new block with the same seq: the exact path decides.
        let taken = |&c: &F::Code| {
            f.may_be(c, h) && {
                let at = f.decode(c);
                (at.run == run && (off0..off0 + i).contains(&at.off()))
                    || seq_at(runs, at) == Some(block.seq)
            }
        };
        match t.entry(h, taken, rehasher(hasher, runs, f)) {
            Vacancy::Vacant(vacant) => {
                vacant.insert(f.encode(Loc::new(run, off0 + i), h));
            }
            Vacancy::Occupied(_) => {
                // Take back what this event filed.
                for (j, undo) in blocks[..i].iter().enumerate() {
                    let h = hash(undo);
                    let filed = f.encode(Loc::new(run, off0 + j), h);
                    if let Ok(entry) = t.find_entry(h, |&c| c == filed) {
                        entry.remove();
                    }
                }
                return false;
            }
        }
    }
    true
}

/// Where the probes of `table` start (`None` while it is empty); see [`Places::probe_lines`].
fn lines_of<T>(table: &HashTable<T>) -> Option<ProbeLines> {
    let filled = table.iter_buckets().next()?;
    let slot = std::ptr::from_ref(table.get_bucket(filled)?).cast::<u8>();
    let entry = size_of::<T>();
    Some(ProbeLines {
        ctrl: slot.wrapping_add((filled + 1) * entry),
        mask: table.num_buckets() - 1,
        entry,
    })
}

impl ProbeLines {
    /// Asks for the lines a probe for a seq of hash `hash` reads first, its control group and
    /// its first slot, so that a claim a few blocks later finds them loaded: an event's claims
    /// then wait for their misses together instead of one after another.
    #[inline]
    fn warm(self, hash: u64) {
        let home = hash as usize & self.mask;
        prefetch(self.ctrl.wrapping_add(home));
        prefetch(self.ctrl.wrapping_sub((home + 1) * self.entry));
    }
}

/// The places of one worker's seqs; see the module docs.
#[derive(Debug)]
pub(super) struct Places {
    table: Table,
    hasher: RandomState,
    /// Places of the runs that hold a block or a hole; the other entries are garbage.
    live: usize,
    /// No place filed since the table was built has a larger offset.
    top_off: usize,
}

impl Places {
    pub(super) fn new() -> Self {
        Self {
            table: Table::Narrow(HashTable::new(), Narrow::with_room(1, 1).expect("fits")),
            hasher: RandomState::default(),
            live: 0,
            top_off: 0,
        }
    }

    /// Places that hold a block or a hole.
    pub(super) fn live(&self) -> usize {
        self.live
    }

    #[inline]
    fn hash(&self, seq: SeqHash) -> u64 {
        self.hasher.hash_one(seq.0)
    }

    /// Where `seq` is (with no hole mark), if a run holds it.
    pub(super) fn find<H>(&self, runs: &[Run<H>], seq: SeqHash) -> Option<Loc> {
        let hash = self.hash(seq);
        with_table!(&self.table, t, f => {
            let matches = |&c: &_| f.may_be(c, hash) && seq_at(runs, f.decode(c)) == Some(seq);
            t.find(hash, matches).map(|&c| f.decode(c))
        })
    }

    /// Records that `seq` was just put at `loc`, a place that held nothing, where no other place
    /// holds it. Room was made by [`Places::reserve`].
    pub(super) fn insert<H>(&mut self, runs: &[Run<H>], seq: SeqHash, loc: Loc) {
        debug_assert_eq!(seq_at(runs, loc), Some(seq), "the block is in its run");
        let hash = self.hash(seq);
        self.top_off = self.top_off.max(loc.off());
        with_table!(&mut self.table, t, f => {
            t.insert_unique(hash, f.encode(loc, hash), rehasher(&self.hasher, runs, f));
        });
        self.live += 1;
    }

    /// Files the seqs of `blocks`, an event's new blocks, at the places they are about to fill
    /// (block `i` at offset `off0 + i` of run `run`), unless a run holds one of them already or
    /// two of them are the same seq. All or nothing: returns whether they were filed, and files
    /// nothing when it returns `false`. The blocks are not in their run yet. Room was made by
    /// [`Places::reserve`].
    ///
    /// One call an event rather than one a block: the table's format is matched once, and each
    /// seq is hashed once, when its lines are asked for ahead of its claim ([`ProbeLines::warm`])
    /// (paper §6.16).
    pub(super) fn claim_all<H>(
        &mut self,
        runs: &[Run<H>],
        blocks: &[Block],
        run: RunId,
        off0: usize,
    ) -> bool {
        if blocks.is_empty() {
            return true;
        }
        let lines = match blocks.len() > WARM_FROM {
            true => self.probe_lines(),
            false => None,
        };
        let hasher = &self.hasher;
        let filed = with_table!(&mut self.table, t, f => {
            claim_in(t, f, hasher, lines, runs, blocks, run, off0)
        });
        if filed {
            self.top_off = self.top_off.max(off0 + blocks.len() - 1);
            self.live += blocks.len();
        }
        filed
    }

    /// Where this table's probes start (`None` while it is empty), for [`ProbeLines::warm`].
    ///
    /// hashbrown keeps its control bytes right after its slots, which run backwards from them:
    /// slot `i` ends `i` slots before the control bytes. It does not give out that address, so it
    /// is derived from a filled slot's. Were hashbrown to lay its table out otherwise, the asks
    /// would be wasted, not wrong, since nothing is read through them; a test checks the layout.
    pub(super) fn probe_lines(&self) -> Option<ProbeLines> {
        with_table!(&self.table, t, _f => lines_of(t))
    }

    /// Records that `seq` moved from `from` to `to` (a run cut in two; the runs show it at `to`
    /// already).
    pub(super) fn moved<H>(&mut self, runs: &[Run<H>], seq: SeqHash, from: Loc, to: Loc) {
        let hash = self.hash(seq);
        self.top_off = self.top_off.max(to.off());
        with_table!(&mut self.table, t, f => {
            let (from, to) = (f.encode(from, hash), f.encode(to, hash));
            match t.find_mut(hash, |&c| c == from) {
                Some(entry) => *entry = to,
                None => {
                    // Completeness says every place has an entry under its seq; were one
                    // missing, filing the new place keeps the table complete all the same.
                    debug_assert!(false, "no entry for a place that held {seq:?}");
                    t.insert_unique(hash, to, rehasher(&self.hasher, runs, f));
                }
            }
        });
    }

    /// Records that `n` places no longer hold anything. Their entries stay, as garbage.
    pub(super) fn vacated(&mut self, n: usize) {
        self.live -= n;
    }

    fn len(&self) -> usize {
        with_table!(&self.table, t, _f => t.len())
    }

    fn capacity(&self) -> usize {
        with_table!(&self.table, t, _f => t.capacity())
    }

    /// Makes room for an event of `n` blocks: for `n` more entries, and for the places it can
    /// file, in the table's format. By a rebuild, which drops the garbage and grows the table
    /// or widens its format if it must.
    ///
    /// What an event of `n` blocks can file: offsets up to `n` past the largest filed so far
    /// (it extends a run, or starts one), and run ids below `runs.len() + 2n` (each block at
    /// most starts a run and cuts one in two).
    pub(super) fn reserve<H>(&mut self, runs: &[Run<H>], n: usize) {
        let capacity = self.capacity();
        let (run_ids, offs) = self.bounds(runs, n);
        let fits = match &self.table {
            Table::Narrow(_, format) => format.fits(run_ids, offs),
            Table::Wide(_) => true,
        };
        if self.len() + n > capacity || !fits {
            // The same size when dropping the garbage frees an eighth of it, else at least twice
            // the size (four times, while small): either way the next rebuild is an eighth of
            // the table away, so rebuilds cost O(1) a place, amortized, and the table grows
            // only when the live places need it.
            let want = self.live + n;
            let filling = self.len() == self.live;
            let grown = match filling && capacity < GROW_FOURFOLD_BELOW {
                true => 2 * capacity + 1,
                false => capacity + 1,
            };
            let room = match want + capacity / 8 <= capacity {
                true => capacity,
                false => want.max(grown),
            };
            self.rebuild(runs, room, n);
        }
    }

    /// What an event of `n` blocks can file (see [`Places::reserve`]): run ids and offsets below
    /// these.
    fn bounds<H>(&self, runs: &[Run<H>], n: usize) -> (usize, usize) {
        (runs.len() + 2 * n, self.top_off + n + 1)
    }

    /// Drops the garbage once it outnumbers the live entries four to one and is worth a rebuild,
    /// which costs O(places + runs) (vacant runs included, hence the second bound).
    pub(super) fn shrink_if_sparse<H>(&mut self, runs: &[Run<H>]) {
        let garbage = self.len() - self.live;
        if garbage > 4 * self.live && garbage >= REBUILD_MIN && runs.len() <= 4 * garbage {
            self.rebuild(runs, self.live, 0);
        }
    }

    /// Builds the table anew from the runs, with room for `capacity` entries and for an event of
    /// `n` blocks' places (see [`Places::reserve`]): one entry per place, read in order (cheaper
    /// than visiting every entry, garbage included, at random). Narrow when that fits.
    fn rebuild<H>(&mut self, runs: &[Run<H>], capacity: usize, n: usize) {
        let longest = runs.iter().map(|run| run.seqs.len()).max().unwrap_or(0);
        self.top_off = longest.saturating_sub(1);
        let (run_ids, offs) = self.bounds(runs, n);
        self.table = match Narrow::with_room(run_ids, offs) {
            Some(format) => Table::Narrow(self.entries(runs, capacity, format), format),
            None => Table::Wide(self.entries(runs, capacity, Wide)),
        };
        debug_assert_eq!(self.len(), self.live, "the runs hold every live place");
    }

    /// A table of one entry per place of `runs`, in `format`, with room for `capacity`.
    fn entries<H, F: Format>(
        &self,
        runs: &[Run<H>],
        capacity: usize,
        format: F,
    ) -> HashTable<F::Code> {
        let mut table = HashTable::with_capacity(capacity);
        let rehash = rehasher(&self.hasher, runs, format);
        let mut places = runs.iter().enumerate().flat_map(|(id, run)| {
            let at = move |(off, &seq): (usize, &SeqHash)| (Loc::new(id as u32, off), seq);
            run.seqs.iter().enumerate().map(at)
        });
        let entry = |(loc, seq): (Loc, SeqHash)| {
            let hash = self.hash(seq);
            (hash, format.encode(loc, hash))
        };
        // The first entry shows where the table's lines are; each later one's are asked for
        // `AHEAD` entries before it is filed, as a claim's are (paper §6.16).
        let Some(first) = places.next() else {
            return table;
        };
        let (hash, code) = entry(first);
        table.insert_unique(hash, code, &rehash);
        let lines = lines_of(&table);
        let warm = |hash: u64| {
            if let Some(lines) = lines {
                lines.warm(hash);
            }
        };
        let mut ring = [(hash, code); RING];
        let mut ahead = 0;
        for place in places.by_ref().take(AHEAD) {
            ring[ahead] = entry(place);
            warm(ring[ahead].0);
            ahead += 1;
        }
        let mut next = 0;
        while next < ahead {
            let (hash, code) = ring[next % RING];
            if let Some(place) = places.next() {
                let later = entry(place);
                warm(later.0);
                ring[ahead % RING] = later;
                ahead += 1;
            }
            table.insert_unique(hash, code, &rehash);
            next += 1;
        }
        table
    }

    /// Bytes of the table's allocation.
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        with_table!(&self.table, t, _f => t.allocation_size())
    }

    /// Whether the table is in the narrow format.
    #[cfg(test)]
    fn is_narrow(&self) -> bool {
        matches!(self.table, Table::Narrow(..))
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::seam::Stretch;
    use super::*;
    use crate::types::{Block, LocalHash};

    #[derive(Clone, Copy, Debug)]
    struct NoHandle;

    impl Stretch for NoHandle {
        fn follows(self, _: NoHandle) -> bool {
            true
        }
        fn advance(self, _: u32) -> NoHandle {
            NoHandle
        }
    }

    /// Appends `seqs` to run `id` (making runs up to it) and files them.
    fn push(places: &mut Places, runs: &mut Vec<Run<NoHandle>>, id: usize, seqs: &[u64]) {
        while runs.len() <= id {
            runs.push(Run::vacant());
        }
        places.reserve(runs, seqs.len());
        for &seq in seqs {
            let off = runs[id].len();
            runs[id].extend(&[Block::new(LocalHash(seq), SeqHash(seq))]);
            places.insert(runs, SeqHash(seq), Loc::new(id as u32, off));
        }
    }

    #[test]
    fn wide_entries_keep_their_place_and_filter_by_hash_bits() {
        let (a, b) = (0x0012_3400_0000_0000_u64, 0x0045_6700_0000_0000_u64);
        assert_ne!(Entry::bits(a), Entry::bits(b));
        for off in [0, 1, SHORT as usize - 1] {
            let entry = Wide.encode(Loc::new(9, off), a);
            assert_eq!(Wide.decode(entry), Loc::new(9, off));
            assert!(
                Wide.may_be(entry, a) && !Wide.may_be(entry, b),
                "offset {off}"
            );
        }
        // A run of 2^24 blocks and more: the whole offset, no bits, always asked about.
        for off in [SHORT as usize, (FILTERED - 1) as usize] {
            let entry = Wide.encode(Loc::new(9, off), a);
            assert_eq!(Wide.decode(entry), Loc::new(9, off));
            assert!(
                Wide.may_be(entry, a) && Wide.may_be(entry, b),
                "offset {off}"
            );
        }
    }

    #[test]
    fn narrow_entries_keep_their_place_and_filter_by_the_bits_left() {
        let (a, b) = (0x0fff_ffff_fe00_0000_u64, 0x0000_0000_0000_0000_u64);
        // Room for twice the runs and offsets asked for, in as few bits as that takes.
        let format = Narrow::with_room(5, 300).unwrap();
        assert_eq!((format.run_bits, format.off_bits), (4, 10));
        assert!(format.fits(10, 600) && !format.fits(17, 1) && !format.fits(1, 1025));
        for (run, off) in [(0, 0), (15, 1023), (7, 512)] {
            let code = format.encode(Loc::new(run, off), a);
            assert_eq!(format.decode(code), Loc::new(run, off));
            assert!(
                format.may_be(code, a) && !format.may_be(code, b),
                "{run}, {off}"
            );
        }
        // No bits left: every entry is asked about.
        let full = Narrow::with_room(1 << 15, 1 << 15).unwrap();
        assert_eq!(full.filter_shift(), 32);
        let code = full.encode(Loc::new((1 << 16) - 1, (1 << 16) - 1), a);
        assert_eq!(full.decode(code), Loc::new((1 << 16) - 1, (1 << 16) - 1));
        assert!(full.may_be(code, a) && full.may_be(code, b));
        // More than 32 bits: no narrow format.
        assert_eq!(Narrow::with_room(1 << 16, 1 << 16), None);
    }

    /// A table changes format (and narrow split) when a worker outgrows it, and finds every
    /// place all along.
    #[test]
    fn a_table_widens_as_runs_grow_long_and_many() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        let mut held = Vec::new();
        let check = |places: &Places, runs: &Vec<Run<NoHandle>>, held: &[(u64, Loc)]| {
            for &(seq, loc) in held {
                assert_eq!(places.find(runs, SeqHash(seq)), Some(loc), "seq {seq}");
            }
            assert_eq!(places.find(runs, SeqHash(u64::MAX)), None);
        };
        // Many short runs: the run bits grow.
        for id in 0..3_000u64 {
            let seqs = [2 * id, 2 * id + 1].map(crate::mix::splitmix64);
            push(&mut places, &mut runs, id as usize, &seqs);
            held.push((seqs[0], Loc::new(id as u32, 0)));
            held.push((seqs[1], Loc::new(id as u32, 1)));
        }
        assert!(places.is_narrow());
        check(&places, &runs, &held);
        // One long run: the offset bits grow, until 32 bits are not enough.
        let long: Vec<u64> = (0..1 << 20)
            .map(|i| crate::mix::splitmix64(i + (1 << 40)))
            .collect();
        for chunk in long.chunks(1 << 14) {
            let at = runs.get(3_000).map_or(0, Run::len);
            push(&mut places, &mut runs, 3_000, chunk);
            let locs = (0..chunk.len()).map(|i| Loc::new(3_000, at + i));
            held.extend(chunk.iter().copied().zip(locs));
        }
        assert!(
            !places.is_narrow(),
            "3,001 runs and a run of 2^20 blocks take 33 bits"
        );
        check(&places, &runs, &held);
        // The long run evicted: narrow again at the next rebuild.
        runs[3_000].truncate(0);
        places.vacated(1 << 20);
        places.shrink_if_sparse(&runs);
        assert!(places.is_narrow());
        held.truncate(6_000);
        check(&places, &runs, &held);
    }

    /// The layout [`Places::probe_lines`] assumes: slot `i` ends `i` slots before the control
    /// bytes, and a probe for a hash starts at the slot the hash's low bits name.
    #[test]
    fn probe_lines_name_the_slots_probes_start_at() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        assert!(places.probe_lines().is_none(), "an empty table");
        // Seqs are hashes: small consecutive integers would cluster under some of the hasher's
        // seeds, and this test is about where probes start, not about the hasher.
        let seqs: Vec<u64> = (1..=500).map(crate::mix::splitmix64).collect();
        push(&mut places, &mut runs, 0, &seqs);
        let lines = places.probe_lines().expect("a filled table");
        let Table::Narrow(table, format) = &places.table else {
            panic!("a small worker's table is narrow");
        };
        assert_eq!(lines.entry, size_of::<u32>());
        for i in table.iter_buckets() {
            let slot = std::ptr::from_ref(table.get_bucket(i).unwrap());
            let named = lines.ctrl.wrapping_sub((i + 1) * lines.entry);
            assert_eq!(slot.cast::<u8>(), named, "slot {i}");
        }
        // A table at half load holds about three in four seqs in their first slot (378 of 500
        // on average, 342 at least, over 6,000 tables); a wrong first slot finds almost none.
        let at_home = seqs
            .iter()
            .filter(|&&seq| {
                let loc = places.find(&runs, SeqHash(seq)).unwrap();
                let hash = places.hash(SeqHash(seq));
                let home = table.get_bucket(hash as usize & lines.mask).copied();
                home == Some(format.encode(loc, hash))
            })
            .count();
        assert!(
            at_home * 3 > seqs.len(),
            "{at_home} of {} at home",
            seqs.len()
        );
    }

    #[test]
    fn finds_every_place_and_nothing_else() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        push(&mut places, &mut runs, 0, &[10, 11, 12]);
        push(&mut places, &mut runs, 2, &[20, 21]);
        assert_eq!(places.find(&runs, SeqHash(12)), Some(Loc::new(0, 2)));
        assert_eq!(places.find(&runs, SeqHash(21)), Some(Loc::new(2, 1)));
        assert_eq!(places.find(&runs, SeqHash(13)), None);
        assert_eq!(places.live(), 5);
    }

    #[test]
    fn an_evicted_place_reused_by_another_seq_answers_for_that_seq_only() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        push(&mut places, &mut runs, 0, &[1, 2, 3]);
        // Evict 2 and 3; their entries stay, as garbage.
        runs[0].truncate(1);
        places.vacated(2);
        assert_eq!(places.find(&runs, SeqHash(2)), None);
        assert_eq!(places.find(&runs, SeqHash(3)), None);
        // 7 takes 2's old place: the garbage entry points at it, and must not answer for 2.
        push(&mut places, &mut runs, 0, &[7]);
        assert_eq!(places.find(&runs, SeqHash(7)), Some(Loc::new(0, 1)));
        assert_eq!(places.find(&runs, SeqHash(2)), None);
        assert_eq!(places.live(), 2);
    }

    #[test]
    fn claims_refuse_held_seqs_and_repeats_within_an_event_and_file_nothing_then() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        push(&mut places, &mut runs, 0, &[1, 2]);
        let blocks = |seqs: &[u64]| -> Vec<Block> {
            seqs.iter()
                .map(|&s| Block::new(LocalHash(s), SeqHash(s)))
                .collect()
        };
        // Long enough to warm ahead (more than `WARM_FROM` blocks), and short.
        let fresh: Vec<u64> = (100..100 + 2 * WARM_FROM as u64).collect();
        for n in [3, fresh.len()] {
            let event = &fresh[..n];
            places.reserve(&runs, n + 1);
            let held = [event, &[2]].concat();
            assert!(!places.claim_all(&runs, &blocks(&held), 1, 0), "held");
            let repeat = [event, &[event[0]]].concat();
            assert!(!places.claim_all(&runs, &blocks(&repeat), 1, 0), "repeat");
            assert_eq!(places.live(), 2);
            assert_eq!(places.len(), 2, "a refused claim files nothing");
            for &seq in event {
                assert_eq!(places.find(&runs, SeqHash(seq)), None);
            }
        }
        let event = blocks(&fresh);
        assert!(places.claim_all(&runs, &event, 1, 0), "new seqs");
        assert_eq!(places.live(), 2 + fresh.len());
        while runs.len() < 2 {
            runs.push(Run::vacant());
        }
        runs[1].extend(&event);
        for (i, &seq) in fresh.iter().enumerate() {
            assert_eq!(places.find(&runs, SeqHash(seq)), Some(Loc::new(1, i)));
        }
    }

    #[test]
    fn a_moved_place_is_found_at_its_new_place() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        push(&mut places, &mut runs, 0, &[1, 2, 3]);
        let (seqs, locals) = runs[0].split_off(1);
        runs[0].truncate(1);
        runs.push(Run::unrooted(SeqHash(2), seqs, locals));
        places.vacated(1);
        places.moved(&runs, SeqHash(3), Loc::new(0, 2), Loc::new(1, 0));
        assert_eq!(places.find(&runs, SeqHash(3)), Some(Loc::new(1, 0)));
        assert_eq!(places.find(&runs, SeqHash(2)), None);
        assert_eq!(places.live(), 2);
    }

    #[test]
    fn garbage_is_dropped_and_an_entry_costs_five_bytes() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        let seqs: Vec<u64> = (0..10_000).collect();
        push(&mut places, &mut runs, 0, &seqs);
        // 4 bytes and a control byte a bucket, at a load of 1/2 to 7/8.
        assert!(places.is_narrow());
        let per_entry = places.allocation_size() as f64 / places.live() as f64;
        assert!(
            (5.0..=10.5).contains(&per_entry),
            "{per_entry} bytes an entry"
        );
        // Evict nearly everything: the table shrinks to what is live.
        runs[0].truncate(100);
        places.vacated(9_900);
        places.shrink_if_sparse(&runs);
        assert_eq!(places.len(), 100, "garbage dropped");
        assert!(
            places.allocation_size() < 4096,
            "{} bytes",
            places.allocation_size()
        );
        for seq in 0..10_000 {
            let want = (seq < 100).then(|| Loc::new(0, seq as usize));
            assert_eq!(places.find(&runs, SeqHash(seq)), want);
        }
    }
}

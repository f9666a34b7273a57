//! Where a worker's seqs are: a hash table of places that stores no keys.
//!
//! A worker must find any seq it holds (a parent, a block to remove) in one probe. A map from
//! seq to place stores the seq twice, once in the map and once in its run's blocks, which is why
//! it was 16 bytes an entry. This table stores the place alone (8 bytes an entry, with a few bits
//! of the seq's hash in the offset's spare bits to skip most entries unread) and is asked
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
//! events interleave. So it asks for the lines of each claim a few blocks ahead ([`Places::warm`])
//! and the misses of an event's claims overlap: on Dynamo's workload, where claims were two
//! fifths of a writer's time, stores through the writer pool went 3-7% faster (medians of 10
//! rounds interleaved with the same build asking for nothing).

use super::run::{Loc, Run};
use crate::prefetch::prefetch;
use crate::types::SeqHash;
use core::hash::BuildHasher;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry as Vacancy;

/// Garbage is dropped by a rebuild only once there is this much of it, so that a small worker
/// does not rebuild at every eviction.
const REBUILD_MIN: usize = 64;

/// The block at `loc` of `runs`, if the run has one there.
fn seq_at<H>(runs: &[Run<H>], loc: Loc) -> Option<SeqHash> {
    runs.get(loc.run as usize)?.seqs.get(loc.off()).copied()
}

/// One entry: a place, and 7 bits of its seq's hash beside the 7 the table's own tag keeps.
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

impl Entry {
    /// The hash bits an entry keeps: apart from hashbrown's tag (the top 7) and its bucket
    /// index (the low bits).
    fn bits(hash: u64) -> u32 {
        (hash >> 48) as u32 & 0x7f
    }

    fn new(loc: Loc, hash: u64) -> Self {
        let off = loc.off() as u32;
        let code = match off < SHORT {
            true => FILTERED | Self::bits(hash) << 24 | off,
            false => off,
        };
        Self { run: loc.run, code }
    }

    fn loc(self) -> Loc {
        let off = match self.code & FILTERED {
            0 => self.code,
            _ => self.code & (SHORT - 1),
        };
        Loc::new(self.run, off as usize)
    }

    /// Whether the entry can be the place of a seq with this hash.
    fn may_be(self, hash: u64) -> bool {
        self.code & FILTERED == 0 || (self.code >> 24) & 0x7f == Self::bits(hash)
    }
}

/// The hash an entry is filed under when the table moves it: that of the seq its place holds
/// now (garbage then files under whatever it points at, which is as good as anywhere).
fn rehasher<'a, H>(hasher: &'a RandomState, runs: &'a [Run<H>]) -> impl Fn(&Entry) -> u64 + 'a {
    move |entry| seq_at(runs, entry.loc()).map_or(0, |seq| hasher.hash_one(seq.0))
}

/// Where a table's probes start, to ask for a probe's lines before it runs ([`Places::warm`]).
/// A hint: nothing is read through it, and a table that changed since only wastes the asks.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProbeLines {
    /// The table's control bytes.
    ctrl: *const u8,
    mask: usize,
}

/// The places of one worker's seqs; see the module docs.
#[derive(Debug)]
pub(super) struct Places {
    table: HashTable<Entry>,
    hasher: RandomState,
    /// Places of the runs that hold a block or a hole; the other entries are garbage.
    live: usize,
}

impl Places {
    pub(super) fn new() -> Self {
        Self {
            table: HashTable::new(),
            hasher: RandomState::default(),
            live: 0,
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
        let matches = |e: &Entry| e.may_be(hash) && seq_at(runs, e.loc()) == Some(seq);
        self.table.find(hash, matches).map(|e| e.loc())
    }

    /// Records that `seq` was just put at `loc`, a place that held nothing, where no other place
    /// holds it. Room was made by [`Places::reserve`].
    pub(super) fn insert<H>(&mut self, runs: &[Run<H>], seq: SeqHash, loc: Loc) {
        debug_assert_eq!(seq_at(runs, loc), Some(seq), "the block is in its run");
        let hash = self.hash(seq);
        let rehash = rehasher(&self.hasher, runs);
        self.table
            .insert_unique(hash, Entry::new(loc, hash), rehash);
        self.live += 1;
    }

    /// Files `seq` at `loc`, which its event is about to fill, unless a run holds it already or
    /// an earlier block of the event took it (`claimed`: the places this event filed so far).
    /// Returns whether it was filed. The blocks are not in their run yet.
    pub(super) fn claim<H>(
        &mut self,
        runs: &[Run<H>],
        seq: SeqHash,
        loc: Loc,
        claimed: impl Fn(Loc) -> bool,
    ) -> bool {
        let hash = self.hash(seq);
        let taken =
            |e: &Entry| e.may_be(hash) && (claimed(e.loc()) || seq_at(runs, e.loc()) == Some(seq));
        let rehash = rehasher(&self.hasher, runs);
        match self.table.entry(hash, taken, rehash) {
            Vacancy::Occupied(_) => false,
            Vacancy::Vacant(vacant) => {
                vacant.insert(Entry::new(loc, hash));
                self.live += 1;
                true
            }
        }
    }

    /// Where this table's probes start (`None` while it is empty), for [`Places::warm`].
    ///
    /// hashbrown keeps its control bytes right after its slots, which run backwards from them:
    /// slot `i` ends `i` slots before the control bytes. It does not give out that address, so it
    /// is derived from a filled slot's. Were hashbrown to lay its table out otherwise, the asks
    /// would be wasted, not wrong, since nothing is read through them; a test checks the layout.
    pub(super) fn probe_lines(&self) -> Option<ProbeLines> {
        let filled = self.table.iter_buckets().next()?;
        let slot = std::ptr::from_ref(self.table.get_bucket(filled)?).cast::<u8>();
        Some(ProbeLines {
            ctrl: slot.wrapping_add((filled + 1) * size_of::<Entry>()),
            mask: self.table.num_buckets() - 1,
        })
    }

    /// Asks for the lines a probe for `seq` reads first, its control group and its first slot,
    /// so that a claim a few blocks later finds them loaded: an event's claims then wait for
    /// their misses together instead of one after another.
    #[inline]
    pub(super) fn warm(&self, lines: ProbeLines, seq: SeqHash) {
        let home = self.hash(seq) as usize & lines.mask;
        prefetch(lines.ctrl.wrapping_add(home));
        prefetch(lines.ctrl.wrapping_sub((home + 1) * size_of::<Entry>()));
    }

    /// Takes back the entry [`Places::claim`] filed for `seq` at `loc`.
    pub(super) fn unclaim(&mut self, seq: SeqHash, loc: Loc) {
        let hash = self.hash(seq);
        let filed = Entry::new(loc, hash);
        if let Ok(entry) = self.table.find_entry(hash, |&e| e == filed) {
            entry.remove();
            self.live -= 1;
        }
    }

    /// Records that `seq` moved from `from` to `to` (a run cut in two; the runs show it at `to`
    /// already).
    pub(super) fn moved<H>(&mut self, runs: &[Run<H>], seq: SeqHash, from: Loc, to: Loc) {
        let hash = self.hash(seq);
        let (from, to) = (Entry::new(from, hash), Entry::new(to, hash));
        match self.table.find_mut(hash, |&e| e == from) {
            Some(entry) => *entry = to,
            None => {
                // Completeness says every place has an entry under its seq; were one missing,
                // filing the new place keeps the table complete all the same.
                debug_assert!(false, "no entry for a place that held {seq:?}");
                self.table
                    .insert_unique(hash, to, rehasher(&self.hasher, runs));
            }
        }
    }

    /// Records that `n` places no longer hold anything. Their entries stay, as garbage.
    pub(super) fn vacated(&mut self, n: usize) {
        self.live -= n;
    }

    /// Makes room for `n` more entries: by a rebuild, which drops the garbage and grows the
    /// table if it must.
    pub(super) fn reserve<H>(&mut self, runs: &[Run<H>], n: usize) {
        let capacity = self.table.capacity();
        if self.table.len() + n > capacity {
            // The same size when dropping the garbage frees an eighth of it, else at least twice
            // the size: either way the next rebuild is an eighth of the table away, so rebuilds
            // cost O(1) a place, amortized, and the table doubles only when the live places
            // need it (growing by more would double it early, at twice the bytes).
            let want = self.live + n;
            let room = match want + capacity / 8 <= capacity {
                true => capacity,
                false => want.max(capacity + 1),
            };
            self.rebuild(runs, room);
        }
    }

    /// Drops the garbage once it outnumbers the live entries four to one and is worth a rebuild,
    /// which costs O(places + runs) (vacant runs included, hence the second bound).
    pub(super) fn shrink_if_sparse<H>(&mut self, runs: &[Run<H>]) {
        let garbage = self.table.len() - self.live;
        if garbage > 4 * self.live && garbage >= REBUILD_MIN && runs.len() <= 4 * garbage {
            self.rebuild(runs, self.live);
        }
    }

    /// Builds the table anew from the runs, with room for `capacity` entries: one entry per
    /// place, read in order (cheaper than visiting every entry, garbage included, at random).
    fn rebuild<H>(&mut self, runs: &[Run<H>], capacity: usize) {
        let mut table = HashTable::with_capacity(capacity);
        let rehash = rehasher(&self.hasher, runs);
        for (id, run) in runs.iter().enumerate() {
            for (off, &seq) in run.seqs.iter().enumerate() {
                let hash = self.hash(seq);
                table.insert_unique(hash, Entry::new(Loc::new(id as u32, off), hash), &rehash);
            }
        }
        debug_assert_eq!(table.len(), self.live, "the runs hold every live place");
        self.table = table;
    }

    /// Bytes of the table's allocation.
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        self.table.allocation_size()
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
    fn entries_keep_their_place_and_filter_by_hash_bits() {
        let (a, b) = (0x0012_3400_0000_0000_u64, 0x0045_6700_0000_0000_u64);
        assert_ne!(Entry::bits(a), Entry::bits(b));
        for off in [0, 1, SHORT as usize - 1] {
            let entry = Entry::new(Loc::new(9, off), a);
            assert_eq!(entry.loc(), Loc::new(9, off));
            assert!(entry.may_be(a) && !entry.may_be(b), "offset {off}");
        }
        // A run of 2^24 blocks and more: the whole offset, no bits, always asked about.
        for off in [SHORT as usize, (FILTERED - 1) as usize] {
            let entry = Entry::new(Loc::new(9, off), a);
            assert_eq!(entry.loc(), Loc::new(9, off));
            assert!(entry.may_be(a) && entry.may_be(b), "offset {off}");
        }
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
        for i in places.table.iter_buckets() {
            let slot = std::ptr::from_ref(places.table.get_bucket(i).unwrap());
            let named = lines.ctrl.wrapping_sub((i + 1) * size_of::<Entry>());
            assert_eq!(slot.cast::<u8>(), named, "slot {i}");
        }
        // A table at half load holds about three in four seqs in their first slot (378 of 500
        // on average, 342 at least, over 6,000 tables); a wrong first slot finds almost none.
        let at_home = seqs
            .iter()
            .filter(|&&seq| {
                let loc = places.find(&runs, SeqHash(seq)).unwrap();
                let hash = places.hash(SeqHash(seq));
                let home = places.table.get_bucket(hash as usize & lines.mask).copied();
                home == Some(Entry::new(loc, hash))
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
    fn claims_refuse_held_seqs_and_repeats_within_an_event() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        push(&mut places, &mut runs, 0, &[1, 2]);
        places.reserve(&runs, 3);
        let none = |_: Loc| false;
        assert!(
            !places.claim(&runs, SeqHash(2), Loc::new(1, 0), none),
            "held"
        );
        assert!(places.claim(&runs, SeqHash(5), Loc::new(1, 0), none));
        // The event's blocks are not in their run yet: only `claimed` sees the first 5.
        let first = |l: Loc| l == Loc::new(1, 0);
        assert!(
            !places.claim(&runs, SeqHash(5), Loc::new(1, 1), first),
            "repeat"
        );
        places.unclaim(SeqHash(5), Loc::new(1, 0));
        assert_eq!(places.live(), 2);
        assert!(
            places.claim(&runs, SeqHash(5), Loc::new(1, 0), none),
            "unclaimed"
        );
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
    fn garbage_is_dropped_and_an_entry_costs_nine_bytes() {
        let (mut places, mut runs) = (Places::new(), Vec::new());
        let seqs: Vec<u64> = (0..10_000).collect();
        push(&mut places, &mut runs, 0, &seqs);
        // 8 bytes and a control byte a bucket, at a load of 1/2 to 7/8.
        let per_entry = places.allocation_size() as f64 / places.live() as f64;
        assert!(
            (9.0..=18.5).contains(&per_entry),
            "{per_entry} bytes an entry"
        );
        // Evict nearly everything: the table shrinks to what is live.
        runs[0].truncate(100);
        places.vacated(9_900);
        places.shrink_if_sparse(&runs);
        assert_eq!(places.table.len(), 100, "garbage dropped");
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

//! The layout handles of a run's reachable blocks, kept per stretch rather than per block.
//!
//! Consecutive blocks of a run mostly lie in one tree node, at consecutive offsets of its edge,
//! so their handles follow from the first one ([`Stretch`]). A
//! run keeps one segment (its first block's index and handle) per such stretch: a 128-block run
//! over two or three nodes keeps two or three segments of 24 bytes instead of 128 handles of 16.
//! Handles are read on the write path only (attaching, detaching, anchoring a branch), in
//! order, and never by a query.

use super::layout::seam::Stretch;
use std::any::Any;
use std::cell::RefCell;

std::thread_local! {
    /// The writing thread's buffer of handles being attached or detached (one per thread, not
    /// per worker: a worker's would stay as large as its longest run). Its type is the layout's
    /// handle, hence `Any`.
    static SCRATCH: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's buffer of handles (empty when `f` gets it); allocates only to
/// grow it.
pub(super) fn with_scratch<H: 'static, R>(f: impl FnOnce(&mut Vec<H>) -> R) -> R {
    let taken = SCRATCH.with(|s| s.borrow_mut().take());
    let mut buffer: Box<Vec<H>> = match taken.map(|b| b.downcast::<Vec<H>>()) {
        Some(Ok(buffer)) => buffer,
        // None: the first use, or a call within `f` holds it; Err: another layout's handles.
        _ => Box::default(),
    };
    buffer.clear();
    let result = f(&mut buffer);
    SCRATCH.with(|s| *s.borrow_mut() = Some(buffer));
    result
}

/// A stretch of blocks whose handles follow each other.
#[derive(Clone, Copy, Debug)]
struct Segment<H> {
    /// Index in the run of the stretch's first block.
    start: u32,
    first: H,
}

/// The handles of blocks `0..len` of a run.
#[derive(Debug)]
pub(super) struct Handles<H> {
    segments: Vec<Segment<H>>,
    len: u32,
}

impl<H: Stretch> Handles<H> {
    pub(super) fn new() -> Self {
        Self {
            segments: Vec::new(),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// Starts loading the segments, without waiting: a hint, for a caller that will read the
    /// handles after other work (their list is an allocation of its own, cold in a cold run).
    pub(super) fn warm(&self) {
        crate::prefetch::prefetch(self.segments.as_ptr());
    }

    /// The handle of block `i` (`i < len`).
    pub(super) fn get(&self, i: usize) -> H {
        debug_assert!(i < self.len());
        let i = i as u32;
        // The last segment whose stretch starts at or before `i`; runs have a few.
        let at = self.segments.partition_point(|s| s.start <= i) - 1;
        let segment = self.segments[at];
        segment.first.advance(i - segment.start)
    }

    /// Appends the handles of the next blocks, in order.
    pub(super) fn extend(&mut self, handles: &[H]) {
        for &handle in handles {
            let follows = match self.segments.last() {
                Some(last) => {
                    let previous = last.first.advance(self.len - 1 - last.start);
                    previous.follows(handle)
                }
                None => false,
            };
            if !follows {
                if self.segments.capacity() == 0 {
                    // Most runs lie in one stretch (a private suffix is one node): room for
                    // one, not the four a first push makes, which cost 72 bytes a run.
                    self.segments.reserve_exact(1);
                }
                self.segments.push(Segment {
                    start: self.len,
                    first: handle,
                });
            }
            self.len += 1;
        }
    }

    /// Calls `f(first, n)` for each stretch of blocks `from..to`, in order: the handle of its
    /// first block in the range, and how many blocks of the range it has.
    pub(super) fn stretches(&self, from: usize, to: usize, mut f: impl FnMut(H, u32)) {
        if from >= to {
            return;
        }
        let mut at = self.segments.partition_point(|s| s.start as usize <= from) - 1;
        let mut i = from;
        while i < to {
            let segment = self.segments[at];
            let end = self
                .segments
                .get(at + 1)
                .map_or(self.len(), |next| next.start as usize)
                .min(to);
            let skip = (i - segment.start as usize) as u32;
            f(segment.first.advance(skip), (end - i) as u32);
            i = end;
            at += 1;
        }
    }

    /// Calls `f(first, n)` for each stretch of blocks `from..to` as [`stretches`](Self::stretches)
    /// does, but the last stretch first: the order in which a run is detached.
    pub(super) fn stretches_rev(&self, from: usize, to: usize, mut f: impl FnMut(H, u32)) {
        if from >= to {
            return;
        }
        // The last segment whose stretch starts before `to`.
        let mut at = self.segments.partition_point(|s| (s.start as usize) < to);
        let mut end = to;
        while end > from {
            at -= 1;
            let segment = self.segments[at];
            let start = (segment.start as usize).max(from);
            let skip = (start - segment.start as usize) as u32;
            f(segment.first.advance(skip), (end - start) as u32);
            end = start;
        }
    }

    /// Keeps the handles of blocks `0..n` only.
    pub(super) fn truncate(&mut self, n: usize) {
        if n >= self.len() {
            return;
        }
        let n = n as u32;
        let keep = self.segments.partition_point(|s| s.start < n);
        self.segments.truncate(keep);
        self.len = n;
        if self.segments.is_empty() {
            // A run that lost its reach gives the room back.
            self.segments = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles as numbers: `n + 1` follows `n` unless `n + 1` is a multiple of 10 (a new node).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Num(u32);

    impl Stretch for Num {
        fn follows(self, next: Num) -> bool {
            next.0 == self.0 + 1 && !next.0.is_multiple_of(10)
        }
        fn advance(self, k: u32) -> Num {
            Num(self.0 + k)
        }
    }

    fn handles_of(values: &[u32]) -> Handles<Num> {
        let mut handles = Handles::new();
        let values: Vec<Num> = values.iter().map(|&v| Num(v)).collect();
        // Two calls, as two attaches of one run make them.
        let (a, b) = values.split_at(values.len() / 2);
        handles.extend(a);
        handles.extend(b);
        handles
    }

    #[test]
    fn stretches_become_segments_and_read_back_exactly() {
        // 5..25 crosses two node boundaries; 40 and 7 start stretches of their own.
        let values: Vec<u32> = (5..25).chain([40, 7, 8]).collect();
        let handles = handles_of(&values);
        assert_eq!(handles.len(), values.len());
        assert_eq!(handles.segments.len(), 5, "5..10, 10..20, 20..25, 40, 7..9");
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(handles.get(i), Num(v), "block {i}");
        }
        let mut out = Vec::new();
        for from in 0..=values.len() {
            for to in from..=values.len() {
                out.clear();
                handles.stretches(from, to, |first, n| {
                    out.extend((0..n).map(|k| first.advance(k)));
                });
                let want: Vec<Num> = values[from..to].iter().map(|&v| Num(v)).collect();
                assert_eq!(out, want, "{from}..{to}");
            }
        }
    }

    #[test]
    fn stretches_read_backwards_are_the_stretches_reversed() {
        let values: Vec<u32> = (5..25).chain([40, 7, 8]).collect();
        let handles = handles_of(&values);
        for from in 0..=values.len() {
            for to in from..=values.len() {
                let mut forward = Vec::new();
                handles.stretches(from, to, |first, n| forward.push((first, n)));
                let mut backward = Vec::new();
                handles.stretches_rev(from, to, |first, n| backward.push((first, n)));
                backward.reverse();
                assert_eq!(backward, forward, "{from}..{to}");
            }
        }
    }

    #[test]
    fn truncating_keeps_a_prefix_and_extending_continues_it() {
        let values: Vec<u32> = (5..25).collect();
        for n in 0..=values.len() {
            let mut handles = handles_of(&values);
            handles.truncate(n);
            assert_eq!(handles.len(), n);
            for (i, &v) in values[..n].iter().enumerate() {
                assert_eq!(handles.get(i), Num(v));
            }
            // Attaching the same blocks again merges into the stretch they left.
            let rest: Vec<Num> = values[n..].iter().map(|&v| Num(v)).collect();
            handles.extend(&rest);
            assert_eq!(handles.segments.len(), 3, "after truncating to {n}");
            assert_eq!(handles.get(values.len() - 1), Num(24));
        }
    }
}

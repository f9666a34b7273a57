//! When a table gives room back: once three quarters empty, so that memory follows what is live,
//! not the most there ever was, while a table that shrinks and grows again is not rebuilt on
//! every step.

/// The capacity a table of `len` entries and room for `capacity` should shrink to, if it should.
pub(crate) fn shrunk(len: usize, capacity: usize) -> Option<usize> {
    (capacity > 64 && len < capacity / 4).then_some(len * 2)
}

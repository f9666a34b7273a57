//! Asking the memory system for a line before it is read, so that misses the code would take
//! one after another overlap instead.

/// Starts loading the cache line at `p` into every level, without waiting for it. A hint: it
/// reads nothing the program sees, and any address, even dangling or null, is fine.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is in every x86-64 CPU (the target's baseline), and a prefetch never faults,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading the `lines` cache lines from `p` on, asked for together so that they arrive
/// in one wait. A hint, as [`prefetch`].
#[inline(always)]
pub(crate) fn prefetch_lines<T>(p: *const T, lines: usize) {
    for line in 0..lines {
        prefetch(p.cast::<u8>().wrapping_add(64 * line));
    }
}

/// Starts loading every line of `items` (the line its end reaches into too, since a slice need not
/// start on a line), asked for together. A hint, as [`prefetch`].
#[inline(always)]
pub(crate) fn prefetch_slice<T>(items: &[T]) {
    prefetch_lines(items.as_ptr(), size_of_val(items).div_ceil(64) + 1);
}

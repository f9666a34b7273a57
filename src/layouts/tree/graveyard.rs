//! Frees what the tree retires on writers' threads, never on a query's.
//!
//! crossbeam-epoch runs deferred functions on whichever thread collects, and every 128th pin of
//! any thread collects: up to eight bags of 64 functions. Queries pin, so a query thread freed
//! up to 512 covers, child arrays and nodes that writers had allocated and retired, and often
//! waited on the allocator's lock for a writer's arena while doing it. That was the tail of the
//! trace replay (paper §6.6, with the measurements).
//!
//! So the epoch no longer frees tree memory itself. A writer gathers what it retires in a
//! thread-local batch and, every so many mutations, hands the batch to the epoch as *one*
//! deferred function. That function only moves the batch onto a lock-free list, the retiring
//! thread's graveyard (one compare-and-swap, no allocation, no free), once no reader can reach
//! what it holds. Each writer frees its own graveyard's batches right after handing over its
//! batch. A query that collects therefore runs at most eight such moves.
//!
//! Each thread frees what it retired, not every writer's: a writer mostly retires what it
//! allocated (a worker's events go to one writer thread, and its tails are its own), and glibc
//! frees another thread's allocation under that thread's arena lock. With one graveyard for all
//! writers, those locks were most of what was left of the writers' system calls on the trace
//! replay. A graveyard outlives its thread while batches are on their way to it; once the last
//! is buried, what it holds moves to a graveyard of orphans that every writer frees.
//!
//! What waits in a writer's batch or in the graveyard is bounded by what the writers retired
//! since they last flushed; a pool's writers flush when it is idle
//! ([`KvIndex::flush_retired`](crate::KvIndex::flush_retired)).
//!
//! Under loom, retiring defers the free directly (loom explores each execution from fresh
//! thread-locals, which a batch would outlive); the graveyard's list has its own model below.

use crate::sync::atomic::{AtomicPtr, Ordering};
#[cfg(not(loom))]
use crate::sync::{Arc, Mutex, lock};
use crossbeam_epoch::Guard;
use std::ptr;
#[cfg(not(loom))]
use std::sync::Weak; // sync-shim: the registry of graveyards, never built under loom

/// An object retired by the tree: its address and how to free it.
#[cfg_attr(loom, allow(dead_code))] // Under loom only the list's own model uses it.
struct Retired {
    ptr: *mut (),
    free: unsafe fn(*mut ()),
}

/// Retired objects that leave the epoch together.
#[cfg_attr(loom, allow(dead_code))]
struct Batch {
    next: *mut Batch,
    items: Vec<Retired>,
}

// SAFETY: a batch owns its objects (they are unreachable by anybody else), so whichever thread
// holds the batch may free them; the tree's objects are `Send`.
unsafe impl Send for Batch {}

/// A lock-free list of batches whose grace period has passed.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct Graveyard {
    head: AtomicPtr<Batch>,
}

#[cfg_attr(loom, allow(dead_code))]
impl Graveyard {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Adds `batch` to the list.
    fn bury(&self, batch: Box<Batch>) {
        let batch = Box::into_raw(batch);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `batch` is ours until the exchange below publishes it.
            unsafe { (*batch).next = head };
            // Release: the batch's fields happen-before the thread that takes it reads them.
            match self
                .head
                .compare_exchange_weak(head, batch, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Moves every batch of the list onto `to`'s (frees nothing).
    #[cfg(not(loom))]
    fn hand_over(&self, to: &Graveyard) {
        // Acquire: as in `free_all`, the batches are read (their `next`) before they move.
        let mut batch = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        while !batch.is_null() {
            // SAFETY: the swap made the list ours alone; each batch came from `Box::into_raw`
            // in `bury` and is taken once.
            let owned = unsafe { Box::from_raw(batch) };
            batch = owned.next;
            to.bury(owned);
        }
    }

    /// Takes the whole list and frees every object in it; returns how many.
    fn free_all(&self) -> usize {
        // A cheap look first: writers call this after every hand-over.
        if self.head.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        // Acquire: pairs with `bury`'s release, for every batch of the list.
        let mut batch = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        let mut freed = 0;
        while !batch.is_null() {
            // SAFETY: the swap made the list ours alone; each batch came from `Box::into_raw`
            // in `bury` and is taken once.
            let owned = unsafe { Box::from_raw(batch) };
            batch = owned.next;
            for item in &owned.items {
                // SAFETY: the item was retired once (its only owner let go of it) and its grace
                // period passed before its batch was buried, so nobody can reach it.
                unsafe { (item.free)(item.ptr) };
            }
            freed += owned.items.len();
        }
        freed
    }
}

impl Drop for Graveyard {
    fn drop(&mut self) {
        self.free_all();
    }
}

/// A thread's graveyard. When the last reference goes (its thread has ended, and its last batch
/// is buried), what it still holds moves to [`ORPHANS`], without a free on whichever thread
/// buried that batch (it can be a query's).
#[cfg(not(loom))]
struct ThreadYard(Graveyard);

#[cfg(not(loom))]
impl Drop for ThreadYard {
    fn drop(&mut self) {
        self.0.hand_over(&ORPHANS);
    }
}

/// Batches of threads that have ended; every writer's [`flush`] frees them.
#[cfg(not(loom))]
static ORPHANS: Graveyard = Graveyard::new();

/// Every thread's graveyard, for [`free_buried`] (which frees them all: memory readings).
#[cfg(not(loom))]
static GRAVEYARDS: Mutex<Vec<Weak<ThreadYard>>> = Mutex::new(Vec::new());

#[cfg(not(loom))]
thread_local! {
    /// What this thread retired since it last handed a batch to the epoch.
    static PENDING: Pending = const { Pending(std::cell::RefCell::new(Vec::new())) };
    /// Where this thread's batches go once their grace period has passed.
    static OWN: Arc<ThreadYard> = {
        let yard = Arc::new(ThreadYard(Graveyard::new()));
        let mut all = lock(&GRAVEYARDS);
        all.retain(|weak| weak.strong_count() > 0);
        all.push(Arc::downgrade(&yard));
        yard
    };
}

/// This thread's graveyard; `None` once it is gone (a batch handed over as the thread ends).
#[cfg(not(loom))]
fn own() -> Option<Arc<ThreadYard>> {
    OWN.try_with(Arc::clone).ok()
}

#[cfg(not(loom))]
struct Pending(std::cell::RefCell<Vec<Retired>>);

#[cfg(not(loom))]
impl Drop for Pending {
    /// A thread that ends hands over what it still holds (freed by a later flush).
    fn drop(&mut self) {
        let items = std::mem::take(self.0.get_mut());
        if !items.is_empty() {
            defer_batch(items, &crossbeam_epoch::pin());
        }
    }
}

/// Retires `ptr`: `free(ptr)` runs once no thread pinned now can reach it, on a writer's thread.
///
/// # Safety
/// `ptr` was just made unreachable to anybody who is not pinned now, is retired once, and
/// `free` frees it (it must be `Send`).
#[cfg(not(loom))]
pub(crate) unsafe fn retire(ptr: *mut (), free: unsafe fn(*mut ()), _: &Guard) {
    PENDING.with(|p| p.0.borrow_mut().push(Retired { ptr, free }));
}

/// Under loom: straight to the epoch.
///
/// # Safety
/// As above.
#[cfg(loom)]
pub(crate) unsafe fn retire(ptr: *mut (), free: unsafe fn(*mut ()), guard: &Guard) {
    // SAFETY: the caller's contract; `free` runs after every thread pinned now unpins.
    unsafe { guard.defer_unchecked(move || free(ptr)) };
}

/// Hands this thread's batch to the epoch and frees what its graveyard holds.
#[cfg(not(loom))]
pub(crate) fn flush(guard: &Guard) {
    let items = PENDING.with(|p| {
        let mut p = p.0.borrow_mut();
        // Nothing retired since the last flush: keep the buffer and its room.
        if p.is_empty() {
            return None;
        }
        let capacity = p.len();
        Some(std::mem::replace(&mut *p, Vec::with_capacity(capacity)))
    });
    if let Some(items) = items {
        defer_batch(items, guard);
    }
    // A thread being torn down has no graveyard of its own left: nothing to free then.
    let _ = OWN.try_with(|yard| yard.0.free_all());
    ORPHANS.free_all();
}

#[cfg(loom)]
pub(crate) fn flush(guard: &Guard) {
    guard.flush();
}

/// Frees what every thread's graveyard holds now (tests and memory readings; writers free
/// their own in [`flush`]). Any thread may take a graveyard's list.
#[cfg(all(not(loom), feature = "testing"))]
pub(crate) fn free_buried() -> usize {
    let yards: Vec<Arc<ThreadYard>> = lock(&GRAVEYARDS).iter().filter_map(Weak::upgrade).collect();
    let freed: usize = yards.iter().map(|yard| yard.0.free_all()).sum();
    // Dropped before the orphans are freed: a graveyard whose thread ended moves its batches
    // there as the last reference goes.
    drop(yards);
    freed + ORPHANS.free_all()
}

#[cfg(not(loom))]
fn defer_batch(items: Vec<Retired>, guard: &Guard) {
    let batch = Box::new(Batch {
        next: ptr::null_mut(),
        items,
    });
    // The deferred function only moves the batch: whichever thread runs it (a query, too) frees
    // nothing.
    let yard = own();
    guard.defer(move || match yard {
        Some(yard) => yard.0.bury(batch),
        None => ORPHANS.bury(batch),
    });
    guard.flush();
}

#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use crate::sync::Arc;
    use std::sync::atomic::{AtomicUsize as Count, Ordering as CountOrdering}; // sync-shim: a tally outside the model, reset by each execution

    static FREED: Count = Count::new(0);

    unsafe fn free_counted(ptr: *mut ()) {
        // SAFETY: made by `Box::into_raw` in `batch_of`, freed once.
        drop(unsafe { Box::from_raw(ptr.cast::<u64>()) });
        FREED.fetch_add(1, CountOrdering::Relaxed);
    }

    fn batch_of(n: usize) -> Box<Batch> {
        let items = (0..n)
            .map(|_| Retired {
                ptr: Box::into_raw(Box::new(0_u64)).cast(),
                free: free_counted,
            })
            .collect();
        Box::new(Batch {
            next: ptr::null_mut(),
            items,
        })
    }

    /// Two threads bury while a third frees: every object is freed exactly once, whoever takes
    /// it (a double free or a lost batch fails the count).
    #[test]
    fn loom_graveyard_frees_each_batch_once() {
        loom::model(|| {
            FREED.store(0, CountOrdering::Relaxed);
            let yard = Arc::new(Graveyard::new());
            let buriers: Vec<_> = (0..2)
                .map(|i| {
                    let yard = Arc::clone(&yard);
                    loom::thread::spawn(move || yard.bury(batch_of(i + 1)))
                })
                .collect();
            let taken = yard.free_all();
            for b in buriers {
                b.join().unwrap();
            }
            let rest = yard.free_all();
            assert_eq!(taken + rest, 3);
            assert_eq!(FREED.load(CountOrdering::Relaxed), 3);
        });
    }
}

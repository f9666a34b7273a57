//! The one place shared-memory primitives come from: `std` normally, `loom` under `--cfg loom`,
//! so that loom sees every atomic, lock and thread of our own code.

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

// Every feature combination uses a different subset of what the shim offers.
#[allow(unused_imports)]
pub(crate) mod atomic {
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, Ordering,
    };

    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, Ordering,
    };
}

/// Reads `lock`, ignoring poisoning (as [`lock`] does).
#[cfg(feature = "approximate")]
pub(crate) fn read<T>(lock: &RwLock<T>) -> crate::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes `lock`, ignoring poisoning (as [`lock`] does).
#[cfg(feature = "approximate")]
pub(crate) fn write<T>(lock: &RwLock<T>) -> crate::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Locks `mutex`, ignoring poisoning: every lock of this crate guards state that is only
/// mutated after validation, so a panic elsewhere cannot leave it half-updated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

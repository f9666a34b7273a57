//! What an idle stretch costs the work after it, on this machine, with no index involved.
//!
//! One thread spins for a set time, then times a fixed walk of 256 cache lines that fit in its
//! own L1 and L2 caches (a pointer chase through 64 KiB, touched every time). Nothing else in
//! the process runs, so any growth with the idle time is the machine's: interrupts, the
//! hypervisor, or whatever else takes the core while the thread waits. The hybrid preset's
//! queries wait for their writer in the same way (paper §6.21).
//!
//! ```sh
//! cargo run --release -p flashbench --example idle_cost
//! ```

use std::time::{Duration, Instant};

/// Cache lines in the chase, and `u64`s per line.
const LINES: usize = 1024;
const PER_LINE: usize = 8;
/// Lines read per timed walk, and walks per idle time.
const STEPS: usize = 256;
const SAMPLES: usize = 4000;

/// A cycle through every line in a pseudo-random order (xorshift), as slot indices.
fn chase() -> Vec<usize> {
    let mut order: Vec<usize> = (0..LINES).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..LINES).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, state as usize % (i + 1));
    }
    let mut next = vec![0; LINES * PER_LINE];
    for (i, &line) in order.iter().enumerate() {
        next[line * PER_LINE] = order[(i + 1) % LINES] * PER_LINE;
    }
    next
}

fn main() {
    let next = chase();
    println!("| idle before the walk | p50 ns | p99 ns |\n|---|---|---|");
    for idle_us in [0, 5, 20, 100, 500, 2000] {
        let idle = Duration::from_micros(idle_us);
        let mut ns: Vec<u128> = (0..SAMPLES)
            .map(|_| {
                let due = Instant::now() + idle;
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
                let t0 = Instant::now();
                let mut at = 0;
                for _ in 0..STEPS {
                    at = next[at];
                }
                std::hint::black_box(at);
                t0.elapsed().as_nanos()
            })
            .collect();
        ns.sort_unstable();
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
        println!("| {idle_us} us | {} | {} |", at(0.5), at(0.99));
    }
}

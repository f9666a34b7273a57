//! Arithmetic in GF(2^64), the field of the canonical hashes (`canon.rs`): 64-bit words are
//! polynomials over GF(2) of degree below 64, added by XOR and multiplied carry-less, modulo
//! the irreducible `f = x^64 + x^4 + x^3 + x + 1`.
//!
//! A product is one instruction on x86-64 processors that have PCLMULQDQ (every one since
//! 2010); [`Multiplier::detect`] looks for it at run time and [`roll`] uses it. Elsewhere a
//! portable shift-and-XOR product gives the same values, some tens of times slower.
//!
//! Why a binary field rather than a prime one: its elements are the 64-bit words themselves, so
//! an engine's local hash enters the polynomial as it is (no mapping into the field that could
//! merge two hashes), and sums need no carries, so the products of a group of blocks are
//! combined by XOR and reduced once.

use crate::types::LocalHash;

/// `p mod f` for a carry-less product `p` (degree below 127).
#[inline(always)]
fn reduce(p: u128) -> u64 {
    let (high, low) = ((p >> 64) as u64, p as u64);
    // high * x^64 = high * (x^4 + x^3 + x + 1): four shifted copies, whose bits past x^63
    // (`over`, degree below 4) fold once more, into degree below 8.
    let over = (high >> 63) ^ (high >> 61) ^ (high >> 60);
    let folded = high ^ (high << 1) ^ (high << 3) ^ (high << 4);
    low ^ folded ^ over ^ (over << 1) ^ (over << 3) ^ (over << 4)
}

/// The carry-less product of `a` and `b`, bit by bit (the portable path, and the tests' oracle).
#[inline]
fn clmul_portable(a: u64, b: u64) -> u128 {
    let a = u128::from(a);
    (0..64).fold(0, |acc, i| {
        acc ^ ((a << i) & 0u128.wrapping_sub(u128::from((b >> i) & 1)))
    })
}

/// The longest run of blocks [`Powers::roll`] folds into one step: one stride of the positional
/// and array layouts' checkpoints, which cannot be longer.
pub(crate) const MAX_FOLD: usize = 128;

/// How this process multiplies: chosen once, when an index is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Multiplier {
    /// PCLMULQDQ, found on the running processor: one product an instruction.
    #[cfg(target_arch = "x86_64")]
    Pclmul,
    /// PCLMULQDQ and its AVX-512 form VPCLMULQDQ, four products an instruction.
    #[cfg(target_arch = "x86_64")]
    Vpclmul,
    /// Shifts and XORs.
    Portable,
}

impl Multiplier {
    /// The fastest multiplier the running processor has.
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("pclmulqdq") {
            let wide = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("vpclmulqdq");
            return if wide { Self::Vpclmul } else { Self::Pclmul };
        }
        Self::Portable
    }

    /// `a * b` in the field.
    #[inline]
    pub(crate) fn mul(self, a: u64, b: u64) -> u64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Pclmul` and `Vpclmul` are only built by `detect`, after the processor
            // reported PCLMULQDQ.
            Self::Pclmul | Self::Vpclmul => unsafe { x86::mul(a, b) },
            Self::Portable => reduce(clmul_portable(a, b)),
        }
    }
}

/// The powers of a secret point `r` that Horner's rule over runs of blocks needs, and the
/// multiplier to apply them with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Powers {
    /// `desc[i] = r^(MAX_FOLD - i)`: a run of `n` blocks takes the last `n` as its own powers
    /// (`r^(n-1) ..= r^0`, in the run's order) and `r^n` just before them.
    desc: [u64; MAX_FOLD + 1],
    by: Multiplier,
}

impl Powers {
    /// The powers of `r`, multiplied by `by`.
    pub(crate) fn new(r: u64, by: Multiplier) -> Self {
        let mut desc = [1; MAX_FOLD + 1];
        for i in (0..MAX_FOLD).rev() {
            desc[i] = by.mul(desc[i + 1], r);
        }
        Self { desc, by }
    }

    /// `acc * r + local`: Horner's rule for one block.
    #[inline]
    pub(crate) fn step(&self, acc: u64, local: LocalHash) -> u64 {
        self.by.mul(acc, self.desc[MAX_FOLD - 1]) ^ local.0
    }

    /// Horner's rule over `locals` from `acc`, [`MAX_FOLD`] blocks at most to a dependent
    /// product: `acc * r^n + locals[0] * r^(n-1) + ... + locals[n-1]`. After each whole group
    /// of `every` blocks (at most [`MAX_FOLD`]), the value so far is written to `marks`
    /// (`marks[g]`: after `g + 1` groups), which must hold `locals.len() / every` values.
    #[inline]
    pub(crate) fn roll(
        &self,
        acc: u64,
        locals: &[LocalHash],
        every: usize,
        marks: &mut [u64],
    ) -> u64 {
        assert!(
            (1..=MAX_FOLD).contains(&every),
            "groups of 1 to {MAX_FOLD} blocks"
        );
        match self.by {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Pclmul` is only built by `detect`, after the processor reported the
            // feature.
            Multiplier::Pclmul => unsafe { x86::roll(&self.desc, acc, locals, every, marks) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Vpclmul` is only built by `detect`, after the processor reported
            // PCLMULQDQ, AVX-512F and VPCLMULQDQ.
            Multiplier::Vpclmul => unsafe { x86::roll_wide(&self.desc, acc, locals, every, marks) },
            Multiplier::Portable => roll_with(&self.desc, acc, locals, every, marks, fold_portable),
        }
    }
}

impl Powers {
    /// Horner's rule block by block from `acc`, calling `emit` with every value on the way
    /// (`acc * r + x0`, then `(acc * r + x0) * r + x1`, ...); returns the last. Four blocks
    /// cost one dependent product: each of the four values is computed from `acc` on its own.
    #[inline]
    pub(crate) fn each(
        &self,
        acc: u64,
        locals: impl Iterator<Item = LocalHash>,
        emit: impl FnMut(u64),
    ) -> u64 {
        match self.by {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Pclmul` and `Vpclmul` are only built by `detect`, after the processor
            // reported PCLMULQDQ.
            Multiplier::Pclmul | Multiplier::Vpclmul => unsafe {
                x86::each(&self.desc, acc, locals, emit)
            },
            Multiplier::Portable => {
                let mut emit = emit;
                locals.fold(acc, |acc, x| {
                    let next = self.step(acc, x);
                    emit(next);
                    next
                })
            }
        }
    }
}

/// [`Powers::roll`] given how to fold a run of blocks.
#[inline(always)]
fn roll_with(
    desc: &[u64; MAX_FOLD + 1],
    mut acc: u64,
    locals: &[LocalHash],
    every: usize,
    marks: &mut [u64],
    fold: impl Fn(&[u64; MAX_FOLD + 1], u64, &[LocalHash]) -> u64,
) -> u64 {
    let groups = locals.chunks_exact(every);
    let rest = groups.remainder();
    for (group, mark) in groups.zip(marks.iter_mut()) {
        acc = fold(desc, acc, group);
        *mark = acc;
    }
    // The rest in long runs too: a mark-less tail may be almost `MAX_FOLD` blocks.
    for run in rest.chunks(MAX_FOLD) {
        acc = fold(desc, acc, run);
    }
    acc
}

/// `acc * r^n + run[0] * r^(n-1) + ... + run[n-1]` for a run of `n <= MAX_FOLD` blocks: products
/// that do not wait for each other, summed without carries (XOR), reduced once.
fn fold_portable(desc: &[u64; MAX_FOLD + 1], acc: u64, run: &[LocalHash]) -> u64 {
    let n = run.len();
    let own = &desc[MAX_FOLD + 1 - n..];
    let sum = run
        .iter()
        .zip(own)
        .fold(clmul_portable(acc, desc[MAX_FOLD - n]), |sum, (x, r)| {
            sum ^ clmul_portable(x.0, *r)
        });
    reduce(sum)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MAX_FOLD, reduce, roll_with};
    use crate::types::LocalHash;
    use std::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x,
        _mm_setzero_si128, _mm_unpackhi_epi64, _mm_xor_si128, _mm512_clmulepi64_epi128,
        _mm512_extracti32x4_epi32, _mm512_set_epi64, _mm512_setzero_si512, _mm512_xor_si512,
    };

    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn word(x: u64) -> __m128i {
        _mm_cvtsi64_si128(x as i64)
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn reduced(p: __m128i) -> u64 {
        let low = _mm_cvtsi128_si64(p) as u64;
        let high = _mm_cvtsi128_si64(_mm_unpackhi_epi64(p, p)) as u64;
        reduce(u128::from(high) << 64 | u128::from(low))
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn mul(a: u64, b: u64) -> u64 {
        reduced(_mm_clmulepi64_si128::<0x00>(word(a), word(b)))
    }

    /// The carry-less sum of `run[i] * own[i]`, two blocks to a register: one instruction
    /// multiplies the low halves and one the high halves, into two sums.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn pairs(run: &[LocalHash], own: &[u64]) -> __m128i {
        let (mut low, mut high) = (_mm_setzero_si128(), _mm_setzero_si128());
        let pairs = run.chunks_exact(2);
        if let ([last], [.., power]) = (pairs.remainder(), own) {
            low = _mm_clmulepi64_si128::<0x00>(word(last.0), word(*power));
        }
        for (x, r) in pairs.zip(own.chunks_exact(2)) {
            let x = _mm_set_epi64x(x[1].0 as i64, x[0].0 as i64);
            let r = _mm_set_epi64x(r[1] as i64, r[0] as i64);
            low = _mm_xor_si128(low, _mm_clmulepi64_si128::<0x00>(x, r));
            high = _mm_xor_si128(high, _mm_clmulepi64_si128::<0x11>(x, r));
        }
        _mm_xor_si128(low, high)
    }

    /// [`pairs`] eight blocks to a register (four 128-bit lanes, two blocks each).
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx512f,vpclmulqdq")]
    fn eights(run: &[LocalHash], own: &[u64]) -> __m128i {
        let (mut low, mut high) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let eights = run.chunks_exact(8);
        let tail = pairs(eights.remainder(), &own[run.len() / 8 * 8..]);
        for (x, r) in eights.zip(own.chunks_exact(8)) {
            let x = _mm512_set_epi64(
                x[7].0 as i64,
                x[6].0 as i64,
                x[5].0 as i64,
                x[4].0 as i64,
                x[3].0 as i64,
                x[2].0 as i64,
                x[1].0 as i64,
                x[0].0 as i64,
            );
            let r = _mm512_set_epi64(
                r[7] as i64,
                r[6] as i64,
                r[5] as i64,
                r[4] as i64,
                r[3] as i64,
                r[2] as i64,
                r[1] as i64,
                r[0] as i64,
            );
            low = _mm512_xor_si512(low, _mm512_clmulepi64_epi128::<0x00>(x, r));
            high = _mm512_xor_si512(high, _mm512_clmulepi64_epi128::<0x11>(x, r));
        }
        let sum = _mm512_xor_si512(low, high);
        let halves = _mm_xor_si128(
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<0>(sum),
                _mm512_extracti32x4_epi32::<1>(sum),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(sum),
                _mm512_extracti32x4_epi32::<3>(sum),
            ),
        );
        _mm_xor_si128(halves, tail)
    }

    /// `acc * r^n + sum`, reduced: the one product that waits for `acc`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn finish(desc: &[u64; MAX_FOLD + 1], acc: u64, n: usize, sum: __m128i) -> u64 {
        let carried = _mm_clmulepi64_si128::<0x00>(word(acc), word(desc[MAX_FOLD - n]));
        reduced(_mm_xor_si128(carried, sum))
    }

    /// [`super::Powers::each`] with one instruction a product: in groups of four blocks
    /// `x0..x3` after `acc`, the value after `xi` is `acc * r^(i+1) + x0 * r^i + ... + xi`.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn each(
        desc: &[u64; MAX_FOLD + 1],
        mut acc: u64,
        mut locals: impl Iterator<Item = LocalHash>,
        mut emit: impl FnMut(u64),
    ) -> u64 {
        let power = |k: usize| word(desc[MAX_FOLD - k]);
        let (r1, r2, r3, r4) = (power(1), power(2), power(3), power(4));
        let product = |a: u64, r: __m128i| _mm_clmulepi64_si128::<0x00>(word(a), r);
        loop {
            let group: [Option<LocalHash>; 4] = std::array::from_fn(|_| locals.next());
            let [Some(x0), Some(x1), Some(x2), Some(x3)] = group else {
                // Fewer than four left: one step each.
                for x in group.into_iter().flatten() {
                    acc = reduced(product(acc, r1)) ^ x.0;
                    emit(acc);
                }
                return acc;
            };
            let (x0, x1, x2, x3) = (x0.0, x1.0, x2.0, x3.0);
            let x0r = product(x0, r1);
            let x1r = product(x1, r1);
            let x0r2 = product(x0, r2);
            let in_three = _mm_xor_si128(
                _mm_xor_si128(product(x0, r3), product(x1, r2)),
                product(x2, r1),
            );
            emit(reduced(product(acc, r1)) ^ x0);
            emit(reduced(_mm_xor_si128(product(acc, r2), x0r)) ^ x1);
            emit(reduced(_mm_xor_si128(product(acc, r3), _mm_xor_si128(x0r2, x1r))) ^ x2);
            acc = reduced(_mm_xor_si128(product(acc, r4), in_three)) ^ x3;
            emit(acc);
        }
    }

    /// [`super::Powers::roll`] with one instruction for two products.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn roll(
        desc: &[u64; MAX_FOLD + 1],
        acc: u64,
        locals: &[LocalHash],
        every: usize,
        marks: &mut [u64],
    ) -> u64 {
        roll_with(desc, acc, locals, every, marks, |d, a, run| {
            finish(d, a, run.len(), pairs(run, &d[MAX_FOLD + 1 - run.len()..]))
        })
    }

    /// [`super::Powers::roll`] with one instruction for eight products.
    #[target_feature(enable = "pclmulqdq,avx512f,vpclmulqdq")]
    pub(super) fn roll_wide(
        desc: &[u64; MAX_FOLD + 1],
        acc: u64,
        locals: &[LocalHash],
        every: usize,
        marks: &mut [u64],
    ) -> u64 {
        roll_with(desc, acc, locals, every, marks, |d, a, run| {
            finish(d, a, run.len(), eights(run, &d[MAX_FOLD + 1 - run.len()..]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mix::SplitMix64;

    /// Polynomials over GF(2) of degree below 128.
    fn degree(p: u128) -> i32 {
        127 - p.leading_zeros() as i32
    }

    fn modulo(mut a: u128, m: u128) -> u128 {
        while a != 0 && degree(a) >= degree(m) {
            a ^= m << (degree(a) - degree(m));
        }
        a
    }

    fn gcd(a: u128, b: u128) -> u128 {
        if b == 0 { a } else { gcd(b, modulo(a, b)) }
    }

    /// The modulus `f = x^64 + x^4 + x^3 + x + 1`, which `reduce` applies.
    const F: u128 = 1 << 64 | 0b1_1011;

    #[test]
    fn the_modulus_is_irreducible() {
        // Rabin's test for degree 64 (whose only prime factor is 2): f is irreducible iff
        // x^(2^64) = x (mod f) and gcd(x^(2^32) - x, f) = 1.
        let x = 2u64;
        let mut power = x;
        for i in 1..=64 {
            power = reduce(clmul_portable(power, power)); // x^(2^i)
            if i == 32 {
                let difference = u128::from(power ^ x);
                assert_eq!(
                    gcd(F, difference),
                    1,
                    "f shares a factor of degree dividing 32"
                );
            }
        }
        assert_eq!(
            power, x,
            "x^(2^64) != x: f has a factor whose degree does not divide 64"
        );
    }

    #[test]
    fn reduce_agrees_with_long_division() {
        let mut rng = SplitMix64(5);
        for _ in 0..10_000 {
            let p = clmul_portable(rng.next_u64(), rng.next_u64());
            assert_eq!(u128::from(reduce(p)), modulo(p, F));
        }
        assert_eq!(reduce(u128::MAX >> 1), modulo(u128::MAX >> 1, F) as u64);
    }

    #[test]
    fn products_are_a_field_multiplication() {
        let mut rng = SplitMix64(7);
        let by = Multiplier::Portable;
        for _ in 0..2_000 {
            let (a, b, c) = (rng.next_u64(), rng.next_u64(), rng.next_u64());
            assert_eq!(by.mul(a, b), by.mul(b, a));
            assert_eq!(by.mul(by.mul(a, b), c), by.mul(a, by.mul(b, c)));
            assert_eq!(by.mul(a, b ^ c), by.mul(a, b) ^ by.mul(a, c));
            assert_eq!(by.mul(a, 1), a);
        }
    }

    /// Every multiplier this processor can run.
    fn runnable() -> Vec<Multiplier> {
        let mut all = vec![Multiplier::Portable];
        #[cfg(target_arch = "x86_64")]
        match Multiplier::detect() {
            Multiplier::Vpclmul => all.extend([Multiplier::Pclmul, Multiplier::Vpclmul]),
            Multiplier::Pclmul => all.push(Multiplier::Pclmul),
            Multiplier::Portable => {}
        }
        all
    }

    #[test]
    fn every_multiplier_agrees_with_the_portable_one() {
        let mut rng = SplitMix64(9);
        let slow = Multiplier::Portable;
        let r = rng.next_u64();
        let reference = Powers::new(r, slow);
        for by in runnable() {
            for _ in 0..1_000 {
                let (a, b) = (rng.next_u64(), rng.next_u64());
                assert_eq!(by.mul(a, b), slow.mul(a, b), "{by:?}");
            }
            let powers = Powers::new(r, by);
            for len in [0usize, 1, 2, 7, 8, 9, 15, 63, 64, 65, 100, 200] {
                let locals: Vec<LocalHash> = (0..len).map(|_| LocalHash(rng.next_u64())).collect();
                let from = rng.next_u64();
                let stepped = locals.iter().fold(from, |acc, &x| reference.step(acc, x));
                let mut each = Vec::new();
                let last = powers.each(from, locals.iter().copied(), |v| each.push(v));
                assert_eq!(last, stepped, "{by:?}: each over {len} blocks");
                let serial: Vec<u64> = locals
                    .iter()
                    .scan(from, |acc, &x| {
                        *acc = reference.step(*acc, x);
                        Some(*acc)
                    })
                    .collect();
                assert_eq!(each, serial, "{by:?}: each over {len} blocks");
                for every in [1usize, 2, 8, 33, 64] {
                    let mut marks = vec![0; len / every];
                    let rolled = powers.roll(from, &locals, every, &mut marks);
                    assert_eq!(rolled, stepped, "{by:?}: {len} blocks, every {every}");
                    for (g, mark) in marks.iter().enumerate() {
                        let upto = &locals[..(g + 1) * every];
                        let expected = upto.iter().fold(from, |acc, &x| reference.step(acc, x));
                        assert_eq!(*mark, expected, "{by:?}: mark {g} of {len}, every {every}");
                    }
                }
            }
        }
        assert!(runnable().contains(&Multiplier::detect()));
    }
}

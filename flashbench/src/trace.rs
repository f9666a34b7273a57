//! Request traces in Mooncake's format, read from a file or synthesized with Mooncake-like
//! statistics (for the default run, which must work with no file at hand).

use flash_indexer::testing::{GOLDEN, splitmix64};
use serde::{Deserialize, Serialize};
use std::io::BufRead;

/// Tokens each trace hash id stands for.
pub const TOKENS_PER_HASH_ID: usize = 512;

/// The longest prompt or output a request may claim (2^24 tokens, 128 times Mooncake's
/// longest): beyond it a trace is malformed, not merely unusual.
pub const MAX_TOKENS: usize = 1 << 24;

/// One request of a trace.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Request {
    /// Milliseconds since the trace started.
    pub timestamp: u64,
    pub input_length: usize,
    pub output_length: usize,
    /// Each id stands for one 512-token block and everything before it.
    pub hash_ids: Vec<u64>,
}

impl Request {
    /// Checks what no valid trace has. Everything else the format allows is accepted: prompts
    /// shorter than a block, no hash ids, no output, lengths that disagree with the hash ids,
    /// unsorted or equal timestamps.
    pub fn validate(&self) -> Result<(), String> {
        for (what, tokens) in [
            ("input_length", self.input_length),
            ("output_length", self.output_length),
        ] {
            if tokens > MAX_TOKENS {
                return Err(format!(
                    "{what} {tokens} is over the limit of {MAX_TOKENS} tokens"
                ));
            }
        }
        if self.hash_ids.len() > MAX_TOKENS / TOKENS_PER_HASH_ID {
            return Err(format!(
                "{} hash ids stand for more than {MAX_TOKENS} tokens",
                self.hash_ids.len()
            ));
        }
        Ok(())
    }
}

/// Reads a Mooncake-format trace (one JSON object a line), sorted by timestamp.
pub fn read(input: impl BufRead) -> Result<Vec<Request>, String> {
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Request =
            serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?;
        request
            .validate()
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        out.push(request);
    }
    out.sort_by_key(|r| r.timestamp);
    Ok(out)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        splitmix64(self.0)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-normal-ish: exp of a uniform spread, enough to get a long tail.
    fn heavy(&mut self, median: f64, spread: f64) -> f64 {
        let u = self.unit() * 2.0 - 1.0;
        median * (spread * u * u.abs()).exp()
    }
}

/// A synthetic trace with the shape of Mooncake's conversation trace (see its SOURCE.md):
/// arrivals in bursts every ~3 s, every request starting with block id 0 (a shared system
/// prompt), a small set of popular second blocks, multi-turn conversations that resend their
/// history, hash ids per request with median ~14 and a long tail, outputs of a few hundred
/// tokens.
pub fn synthetic(requests: usize, seed: u64) -> Vec<Request> {
    let mut rng = Rng(seed);
    let mut next_id = 1u64;
    let mut conversations: Vec<Vec<u64>> = Vec::new();
    let popular: Vec<u64> = (0..64)
        .map(|_| {
            next_id += 1;
            next_id - 1
        })
        .collect();
    let mut out = Vec::with_capacity(requests);
    let mut t_ms = 0u64;
    while out.len() < requests {
        t_ms += 2_500 + rng.next() % 1_000; // a burst every ~3 s
        let burst = 1 + (rng.next() % 20) as usize;
        for _ in 0..burst.min(requests - out.len()) {
            // Half the requests continue a conversation (its history is a shared prefix).
            let ids = if !conversations.is_empty() && rng.unit() < 0.5 {
                let c = (rng.next() % conversations.len() as u64) as usize;
                let grow = 1 + (rng.next() % 4) as usize;
                let history = &mut conversations[c];
                for _ in 0..grow {
                    history.push(next_id);
                    next_id += 1;
                }
                history.clone()
            } else {
                let len = (rng.heavy(14.0, 2.4).round() as usize).clamp(2, 240);
                let mut ids = vec![0];
                if rng.unit() < 0.6 {
                    ids.push(popular[(rng.next() % popular.len() as u64) as usize]);
                }
                while ids.len() < len {
                    ids.push(next_id);
                    next_id += 1;
                }
                if conversations.len() < 2_000 {
                    conversations.push(ids.clone());
                }
                ids
            };
            let input_length = (ids.len() - 1) * TOKENS_PER_HASH_ID
                + 1
                + (rng.next() % TOKENS_PER_HASH_ID as u64) as usize;
            let output_length = (rng.heavy(350.0, 1.5).round() as usize).clamp(1, 2_000);
            out.push(Request {
                timestamp: t_ms,
                input_length,
                output_length,
                hash_ids: ids,
            });
        }
    }
    out
}

/// A trace of many users sharing a few long system prompts, the shape of an assistant fleet:
/// 8 system prompts of 8 to 24 blocks (4k to 12k tokens), picked with Zipf-like popularity;
/// 2,000 users, each on one prompt, each request resending the user's conversation so far (a
/// private tail that grows by one or two blocks a turn and starts over after 16); arrivals about
/// 8 a second. A request's hash ids: its prompt's, then its user's.
pub fn shared_prompts(requests: usize, seed: u64) -> Vec<Request> {
    let mut rng = Rng(seed ^ 0x5a4e_d9e0);
    let mut next_id = 0u64;
    let mut fresh = |n: usize| -> Vec<u64> {
        let ids = (next_id..next_id + n as u64).collect();
        next_id += n as u64;
        ids
    };
    let prompts: Vec<Vec<u64>> = (0..8)
        .map(|_| fresh(8 + (rng.next() % 17) as usize))
        .collect();
    // Zipf-like: prompt k is picked with weight 1 / (k + 1).
    let weights: Vec<f64> = (0..prompts.len()).map(|k| 1.0 / (k + 1) as f64).collect();
    let total: f64 = weights.iter().sum();
    let users = 2_000usize;
    let mut user_prompt = Vec::with_capacity(users);
    for _ in 0..users {
        let mut pick = rng.unit() * total;
        let mut k = 0;
        while k + 1 < weights.len() && pick >= weights[k] {
            pick -= weights[k];
            k += 1;
        }
        user_prompt.push(k);
    }
    let mut histories: Vec<Vec<u64>> = vec![Vec::new(); users];
    let mut out = Vec::with_capacity(requests);
    let mut t_ms = 0u64;
    for _ in 0..requests {
        t_ms += rng.next() % 250;
        let user = (rng.next() % users as u64) as usize;
        let history = &mut histories[user];
        if history.len() >= 16 {
            history.clear();
        }
        history.extend(fresh(1 + (rng.next() % 2) as usize));
        let hash_ids: Vec<u64> = prompts[user_prompt[user]]
            .iter()
            .chain(history.iter())
            .copied()
            .collect();
        let input_length = (hash_ids.len() - 1) * TOKENS_PER_HASH_ID
            + 1
            + (rng.next() % TOKENS_PER_HASH_ID as u64) as usize;
        out.push(Request {
            timestamp: t_ms,
            input_length,
            output_length: 100 + (rng.next() % 400) as usize,
            hash_ids,
        });
    }
    out
}

/// Writes `trace` in Mooncake's format, one JSON object a line.
pub fn write(trace: &[Request], mut out: impl std::io::Write) -> std::io::Result<()> {
    for request in trace {
        serde_json::to_writer(&mut out, request)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// A request of any shape the format allows: prompts shorter than a block, no hash ids, no
/// output, lengths that disagree with the hash ids, any timestamps (equal, unsorted).
#[cfg(test)]
pub(crate) fn any_request() -> impl proptest::strategy::Strategy<Value = Request> {
    use proptest::prelude::*;
    (
        0u64..50,
        0usize..3_000,
        0usize..1_500,
        proptest::collection::vec(0u64..12, 0..8),
    )
        .prop_map(
            |(timestamp, input_length, output_length, hash_ids)| Request {
                timestamp,
                input_length,
                output_length,
                hash_ids,
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_mooncake_format() {
        let text = "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 9, \"hash_ids\": [0, 1]}\n";
        let t = read(text.as_bytes()).unwrap();
        assert_eq!((t[0].timestamp, t[0].hash_ids.len()), (5, 2));
        assert!(
            read("{\"timestamp\": 5}".as_bytes())
                .unwrap_err()
                .contains("line 1")
        );
        let huge = "{\"timestamp\": 5, \"input_length\": 9, \"output_length\": 99999999999, \"hash_ids\": [0]}";
        let error = read(huge.as_bytes()).unwrap_err();
        assert!(
            error.contains("line 1: output_length 99999999999"),
            "{error}"
        );
    }

    #[test]
    fn shared_prompts_trace_round_trips_and_shares_its_prompts() {
        let trace = shared_prompts(500, 3);
        let mut bytes = Vec::new();
        write(&trace, &mut bytes).unwrap();
        let back = read(bytes.as_slice()).unwrap();
        assert_eq!(back.len(), 500);
        assert!(
            back.iter()
                .zip(&trace)
                .all(|(a, b)| a.hash_ids == b.hash_ids)
        );
        let firsts: std::collections::HashSet<u64> = trace.iter().map(|r| r.hash_ids[0]).collect();
        assert!(firsts.len() <= 8, "{} distinct first blocks", firsts.len());
        assert!(trace.iter().all(|r| r.hash_ids.len() >= 9));
    }

    #[test]
    fn synthetic_trace_is_seeded_and_mooncake_shaped() {
        let a = synthetic(2_000, 7);
        let b = synthetic(2_000, 7);
        assert_eq!(a.len(), 2_000);
        assert!(a.iter().zip(&b).all(|(x, y)| x.hash_ids == y.hash_ids));
        assert!(a.iter().all(|r| r.hash_ids[0] == 0
            && r.hash_ids.len() == r.input_length.div_ceil(TOKENS_PER_HASH_ID)));
        let mut lens: Vec<usize> = a.iter().map(|r| r.hash_ids.len()).collect();
        lens.sort_unstable();
        let median = lens[lens.len() / 2];
        assert!(
            (8..=30).contains(&median),
            "median hash ids per request {median}"
        );
    }
}
